//! [`ConformanceStore`]: the fence under a scratch key prefix of a real server, as the
//! conformance kit ([`zkfence::conformance`]) drives it: zkfence's own tests, and
//! `zkfence fence verify redis://…` against a user's deployment.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use redis::aio::MultiplexedConnection;
use redis::RedisError;
use zkfence::conformance::{
    rescoped, scratch_name, BoxFuture, CarryOn, FenceStore, Hooks, ReplySwitch, Setup,
};
use zkfence::fence::{BoxError, FenceError, FenceTicket};

use crate::dial::{without_password, Dial};
use crate::{Commands, Link, RedisFence};

/// The fence under keys of its own, prefixed with [`scratch_name`](zkfence::conformance::scratch_name)`(name)` and `:`: for each key the kit names, a
/// counter `<ns>{<scope>}:counter:<key>` and a log list `<ns>{<scope>}:log:<key>` (in the
/// fence key's slot: tagged with the scope). [`Setup::Fresh`]: fence keys `<ns>fence:{<scope>}`,
/// a function library of the store's own loaded ([`RedisFence::install`]), claims and writes
/// sent as the fence's scripts. [`Setup::Deployed`]: the fence's own key prefix, scopes under
/// `/zkfence-verify/<scratch>`, and every claim and write through the library the server has
/// loaded (`FCALL`: [`RedisFence::through_functions`]), never a script of this version's; the
/// library compared with this version's ([`FenceStore::installed`]) and the server's
/// persistence, eviction and role checked ([`FenceStore::durable`]; see
/// [`accept_volatile`](ConformanceStore::accept_volatile)). The fence's connection may go
/// through a proxy, to lose a reply; reads go direct. [`ConformanceStore::clear`] deletes the
/// keys.
///
/// On a Redis Cluster (any node's URL: [`Link::open`]) the kit's scopes fall in many slots
/// across the primaries ([`placement`](ConformanceStore::placement) says where), claims and
/// writes go to each scope's primary, and what holds for a deployment is checked on every
/// node: the library on every primary, the persistence of every primary and replica (a
/// replica is promoted by a failover); the scratch keys are deleted from every primary.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), zkfence::fence::BoxError> {
/// use zkfence::conformance::{self, Setup};
/// use zkfence_redis::{ConformanceStore, RedisFence};
///
/// let store = ConformanceStore::create("redis://cache.internal/", RedisFence::new(), "check", Setup::Deployed, None).await?;
/// conformance::order(&store).await?;
/// store.clear().await?;
/// # Ok(()) }
/// ```
pub struct ConformanceStore {
    fence: RedisFence,
    ns: String,
    /// The server's URL without its password, for the advice in failures.
    shown: String,
    /// Whether [`FenceStore::durable`] lets a deployment that can lose fences pass.
    accept_volatile: bool,
    /// The prefix of the scopes the store claims (a deployed fence's), or "".
    scopes: String,
    /// Where the fence's connections go (through the proxy, if any); none on a cluster,
    /// whose connection is shared.
    fence_dial: Option<Dial>,
    /// The claims' connection, opened at the start (a claim is sent on one opened before its
    /// replies are dropped).
    fenced: tokio::sync::Mutex<Link>,
    reader: Link,
    switch: Option<ReplySwitch>,
    /// The scope each key was written under (the kit names keys and scopes apart).
    scopes_of: Mutex<HashMap<String, String>>,
    /// Every scope claimed or written, as the store claims it.
    touched: Mutex<BTreeSet<String>>,
}

impl std::fmt::Debug for ConformanceStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConformanceStore")
            .field("fence", &self.fence)
            .field("ns", &self.ns)
            .field("accept_volatile", &self.accept_volatile)
            .field("proxied", &self.switch.is_some())
            .finish()
    }
}

impl ConformanceStore {
    /// Keeps the store's keys under [`scratch_name`]`(name)` and `:` on the server at `url`
    /// (deleting any left there), fence keys among them: with `fence`'s function library
    /// loaded afresh under that name ([`Setup::Fresh`]), or the deployment's as loaded
    /// (`zkfence fence install`), claiming scopes under [`Setup::scopes`]
    /// ([`Setup::Deployed`]). The fence's connection goes to `through`'s URL (the same server
    /// behind a proxy, whose switch drops its replies) when given, else to `url`. A Redis
    /// Cluster node's URL reaches the whole cluster ([`Link::open`]), its library loaded
    /// afresh on every primary.
    ///
    /// # Errors
    ///
    /// Redis's error (e.g. `FUNCTION LOAD` refused: no permission, or a proxy that allows no
    /// scripts); `through` given for a cluster (a proxy in front of one node cannot follow
    /// the cluster's redirections).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    ///
    /// # Examples
    ///
    /// See the [type's](ConformanceStore).
    pub async fn create(
        url: &str,
        fence: RedisFence,
        name: &str,
        setup: Setup,
        through: Option<(String, ReplySwitch)>,
    ) -> Result<ConformanceStore, BoxError> {
        let scratch = scratch_name(name, 64);
        let ns = format!("{scratch}:");
        let reader = Link::open(url).await?;
        if reader.is_cluster() && through.is_some() {
            return Err("a proxy in front of one node of a Redis Cluster cannot follow its redirections: give the cluster's URL without one".into());
        }
        let fence = match setup {
            Setup::Fresh => fresh(&reader, fence, &ns, &scratch).await?,
            // The deployment's fence keys, so that its library takes them (it refuses any
            // other KEYS[1]); the scopes under /zkfence-verify/<scratch> keep them apart.
            Setup::Deployed => fence.through_functions(),
        };
        let (fence_url, switch) = match through {
            Some((via, switch)) => (via, Some(switch)),
            None => (url.to_owned(), None),
        };
        let (fence_dial, fenced) = match reader.is_cluster() {
            true => (None, reader.clone()),
            false => {
                let dial = Dial::parse(&fence_url)?;
                let conn = dial.open().await?;
                (Some(dial), Link::from(conn))
            }
        };
        let fenced = tokio::sync::Mutex::new(fenced);
        let store = ConformanceStore {
            fence,
            ns,
            shown: without_password(url),
            accept_volatile: false,
            scopes: setup.scopes(&scratch),
            fenced,
            fence_dial,
            reader,
            switch,
            scopes_of: Mutex::default(),
            touched: Mutex::default(),
        };
        store.delete_keys().await?;
        Ok(store)
    }

    /// Lets [`FenceStore::durable`] (the case `deployment_keeps_fences`) pass a server that can
    /// lose fences (no append-only file synced on every write, an `allkeys-*` eviction policy,
    /// `CONFIG GET` refused), logging what it found as a warning instead: for a store whose
    /// owner knows that a restart or an eviction forgets fences and accepts it (`zkfence fence
    /// verify --accept-volatile`). A replica fails all the same: fences are claimed on the
    /// primary. Off by default.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zkfence::fence::BoxError> {
    /// use zkfence::conformance::{self, Setup};
    /// use zkfence_redis::{ConformanceStore, RedisFence};
    ///
    /// let store = ConformanceStore::create("redis://cache.internal/", RedisFence::new(), "check", Setup::Deployed, None)
    ///     .await?
    ///     .accept_volatile(true);
    /// conformance::deployment_keeps_fences(&store).await?;
    /// store.clear().await?;
    /// # Ok(()) }
    /// ```
    pub fn accept_volatile(mut self, accept: bool) -> Self {
        self.accept_volatile = accept;
        self
    }

    /// The fence, with the store's key prefix.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(store: zkfence_redis::ConformanceStore) {
    /// println!("{}", store.fence().fence_key("/locks/a"));
    /// # }
    /// ```
    pub fn fence(&self) -> &RedisFence {
        &self.fence
    }

    /// A connection of the fence's (through the proxy, if any): a new one to a server, the
    /// store's shared one to a cluster.
    ///
    /// # Errors
    ///
    /// Redis's error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(store: zkfence_redis::ConformanceStore) -> redis::RedisResult<()> {
    /// let conn = store.connect().await?;
    /// # let _ = conn; Ok(()) }
    /// ```
    pub async fn connect(&self) -> Result<Link, RedisError> {
        match &self.fence_dial {
            Some(dial) => Ok(dial.open().await?.into()),
            None => Ok(self.reader.clone()),
        }
    }

    /// Where the scopes claimed so far live, for a cluster: how many slots on how many of its
    /// primaries, and how many scopes on each (`None` for a server alone).
    ///
    /// # Errors
    ///
    /// Redis's error (`CLUSTER NODES`), a primary that cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(store: zkfence_redis::ConformanceStore) -> Result<(), zkfence::fence::BoxError> {
    /// if let Some(placement) = store.placement().await? {
    ///     println!("{placement}"); // "41 scopes in 41 slots on 3 of 3 primaries: …"
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn placement(&self) -> Result<Option<String>, BoxError> {
        if !self.reader.is_cluster() {
            return Ok(None);
        }
        let primaries = self.reader.primaries().await?;
        let touched: Vec<String> = (self.touched.lock().unwrap_or_else(|e| e.into_inner()))
            .iter()
            .cloned()
            .collect();
        let slots: BTreeSet<u16> = (touched.iter())
            .map(|scope| crate::fence::hash_slot(&self.fence.fence_key(scope)))
            .collect();
        let mut on: BTreeMap<&str, usize> = BTreeMap::new();
        for slot in &slots {
            if let Some(primary) = primaries.iter().find(|p| p.serves(*slot)) {
                *on.entry(primary.addr.as_str()).or_default() += 1;
            }
        }
        let each: Vec<String> = on.iter().map(|(addr, n)| format!("{addr}: {n}")).collect();
        Ok(Some(format!(
            "{} scopes in {} slots on {} of {} primaries ({})",
            touched.len(),
            slots.len(),
            on.len(),
            primaries.len(),
            each.join(", ")
        )))
    }

    /// The counter and log keys of `key` under `scope`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn demo(store: zkfence_redis::ConformanceStore) {
    /// let (counter, log) = store.keys("/kit/a", "n");
    /// assert!(counter.contains("{/kit/a}") && log.contains("{/kit/a}"));
    /// # }
    /// ```
    pub fn keys(&self, scope: &str, key: &str) -> (String, String) {
        let (ns, tag) = (&self.ns, format!("{{{scope}}}"));
        (
            format!("{ns}{tag}:counter:{key}"),
            format!("{ns}{tag}:log:{key}"),
        )
    }

    /// Deletes every key of the store's.
    ///
    /// # Errors
    ///
    /// Redis's error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: whatever it deleted stays deleted.
    ///
    /// # Examples
    ///
    /// See the [type's](ConformanceStore).
    pub async fn clear(self) -> Result<(), BoxError> {
        self.delete_keys().await?;
        if !self.scopes.is_empty() {
            return Ok(());
        }
        // A library of its own, loaded afresh on every primary: unload it.
        let library = self.fence.library_name().to_owned();
        for mut primary in self.reader.primaries().await? {
            redis::cmd("FUNCTION")
                .arg("DELETE")
                .arg(&library)
                .query_async::<()>(&mut primary.conn)
                .await?;
        }
        Ok(())
    }

    /// Deletes the store's keys from every primary (`SCAN` on each), a slot's keys at a time.
    async fn delete_keys(&self) -> Result<(), BoxError> {
        let mut keys = Vec::new();
        for mut primary in self.reader.primaries().await? {
            let conn = &mut primary.conn;
            keys.extend(crate::fence::scan(conn, &format!("{}*", self.ns)).await?);
            if !self.scopes.is_empty() {
                // A deployed fence's keys, under the deployment's prefix: the scratch scopes
                // only.
                let scopes = format!("{}{{{}/", self.fence.prefix(), self.scopes);
                let pattern = format!("{}*", crate::fence::glob_escape(&scopes));
                keys.extend(crate::fence::scan(conn, &pattern).await?);
            }
        }
        // A cluster runs a command on the keys of one slot.
        let mut by_slot: BTreeMap<u16, Vec<String>> = BTreeMap::new();
        for key in keys {
            let slot = crate::fence::hash_slot(&key);
            by_slot.entry(slot).or_default().push(key);
        }
        let mut conn = self.reader.clone();
        for keys in by_slot.values() {
            for chunk in keys.chunks(100) {
                redis::cmd("DEL")
                    .arg(chunk)
                    .query_async::<()>(&mut conn)
                    .await?;
            }
        }
        Ok(())
    }

    /// Notes that `scope` (as the store claims it) was claimed or written.
    fn touch(&self, scope: &str) {
        let mut touched = self.touched.lock().unwrap_or_else(|e| e.into_inner());
        touched.insert(scope.to_owned());
    }

    /// Notes that `key` is written under `scope` (as the store claims it).
    fn note(&self, key: &str, scope: &str) {
        let mut scopes = self.scopes_of.lock().unwrap_or_else(|e| e.into_inner());
        scopes.insert(key.to_owned(), scope.to_owned());
    }

    fn scope_of(&self, key: &str) -> Option<String> {
        let scopes = self.scopes_of.lock().unwrap_or_else(|e| e.into_inner());
        scopes.get(key).cloned()
    }

    /// `scope` as this store claims it.
    fn scope(&self, scope: &str) -> String {
        format!("{}{scope}", self.scopes)
    }
}

impl FenceStore for ConformanceStore {
    type Error = RedisError;

    fn claim<'a>(
        &'a self,
        ticket: &'a FenceTicket,
    ) -> BoxFuture<'a, Result<(), FenceError<RedisError>>> {
        Box::pin(async move {
            let mut conn = self.fenced.lock().await;
            let ticket = rescoped(ticket, &self.scopes);
            self.touch(ticket.scope());
            self.fence.claim(&mut *conn, &ticket).await.map(|_| ())
        })
    }

    fn increment<'a>(
        &'a self,
        ticket: &'a FenceTicket,
        key: &'a str,
        mut hooks: Hooks,
    ) -> BoxFuture<'a, Result<i64, FenceError<RedisError>>> {
        Box::pin(async move {
            let ticket = &rescoped(ticket, &self.scopes);
            self.note(key, ticket.scope());
            self.touch(ticket.scope());
            let (counter, log) = self.keys(ticket.scope(), key);
            // A connection of its own: the kit runs a stale and a current writer at once.
            let mut conn = self.connect().await.map_err(FenceError::Store)?;
            self.fence.claim(&mut conn, ticket).await?; // before the read
            let value: Option<i64> = redis::cmd("GET")
                .arg(&counter)
                .query_async(&mut conn)
                .await
                .map_err(FenceError::Store)?;
            let value = value.unwrap_or(0) + 1;
            if let Some(between) = hooks.between.take() {
                between.await;
            }
            let token = ticket.token().as_i64();
            let commands = Commands::new()
                .command(|c| c.arg("SET").key(&counter).arg(value))
                .command(|c| c.arg("RPUSH").key(&log).arg(token));
            if let Some(hook) = hooks.before_commit.take() {
                hook();
            }
            self.fence.write(&mut conn, ticket, &commands).await?;
            Ok(value)
        })
    }

    fn value<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<i64, String>> {
        Box::pin(async move {
            let Some(scope) = self.scope_of(key) else {
                return Ok(0);
            };
            let (counter, _) = self.keys(&scope, key);
            let value: Option<i64> = (redis::cmd("GET").arg(counter))
                .query_async(&mut self.reader.clone())
                .await
                .map_err(|e| e.to_string())?;
            Ok(value.unwrap_or(0))
        })
    }

    fn log<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Vec<i64>, String>> {
        Box::pin(async move {
            let Some(scope) = self.scope_of(key) else {
                return Ok(Vec::new());
            };
            let (_, log) = self.keys(&scope, key);
            (redis::cmd("LRANGE").arg(log).arg(0).arg(-1))
                .query_async(&mut self.reader.clone())
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn seen<'a>(&'a self, scope: &'a str) -> BoxFuture<'a, Result<Option<i64>, String>> {
        Box::pin(async move {
            let scope = self.scope(scope);
            let outcome = self.fence.seen(&mut self.reader.clone(), &scope).await;
            outcome.map_err(|e| e.to_string())
        })
    }

    fn waiting(&self) -> BoxFuture<'_, Result<bool, String>> {
        // The fence takes no locks: a newer holder never waits for a stale one.
        Box::pin(async { Ok(false) })
    }

    fn reply_switch(&self) -> ReplySwitch {
        self.switch.clone().unwrap_or_else(|| Arc::new(|_| {}))
    }

    fn foreign_claim<'a>(
        &'a self,
        scope: &'a str,
        token: &'a str,
    ) -> Option<BoxFuture<'a, Result<bool, String>>> {
        Some(Box::pin(async move {
            // As redis-cli and redis-py call the installed function.
            self.touch(&self.scope(scope));
            let (claim, _) = self.fence.functions();
            let claim = redis::cmd("FCALL")
                .arg(claim)
                .arg(1)
                .arg(self.fence.fence_key(&self.scope(scope)))
                .arg(token)
                .query_async::<redis::Value>(&mut self.reader.clone())
                .await;
            match claim {
                Ok(redis::Value::Array(reply)) if reply.first() == Some(&ok()) => Ok(true),
                Ok(reply) => Err(format!(
                    "an ordinary reply that is no acceptance: {reply:?}"
                )),
                Err(err) if err.code() == Some(zkfence::fence::REFUSED) => Ok(false),
                Err(err) => Err(err.to_string()),
            }
        }))
    }

    fn installed(&self) -> Option<BoxFuture<'_, Result<(), String>>> {
        Some(Box::pin(self.check_installed()))
    }

    fn durable(&self) -> Option<BoxFuture<'_, Result<(), String>>> {
        Some(Box::pin(self.check_durable()))
    }

    fn carry_on<'a>(
        &'a self,
        scope: &'a str,
        token: &'a str,
        key: &'a str,
        how: CarryOn,
    ) -> Option<BoxFuture<'a, Result<bool, String>>> {
        if how != CarryOn::Ignoring {
            return None;
        }
        Some(Box::pin(async move {
            let scope = &self.scope(scope);
            self.note(key, scope);
            self.touch(scope);
            let before = self.log(key).await?.len();
            let (counter, log) = self.keys(scope, key);
            let mut conn = self.reader.clone();
            // The published recipe: the fenced write is one call, its error ignored.
            let (_, write) = self.fence.functions();
            let _ = redis::cmd("FCALL")
                .arg(write)
                .arg(3)
                .arg(self.fence.fence_key(scope))
                .arg(&counter)
                .arg(&log)
                .arg(token)
                .arg(2)
                .arg(2)
                .arg("vINCR")
                .arg("k2")
                .arg(3)
                .arg("vRPUSH")
                .arg("k3")
                .arg(format!("v{token}"))
                .query_async::<redis::Value>(&mut conn)
                .await;
            Ok(self.log(key).await?.len() > before)
        }))
    }
}

/// The fence of [`Setup::Fresh`]: its keys under `ns`, a function library of its own
/// (`scratch`) loaded on every primary, and its scripts in every primary's cache (a claim sent
/// with its replies dropped runs as its `EVALSHA` reaches the server: no `NOSCRIPT` answer it
/// would never read).
async fn fresh(
    reader: &Link,
    fence: RedisFence,
    ns: &str,
    scratch: &str,
) -> Result<RedisFence, BoxError> {
    let fence = (fence.with_prefix(format!("{ns}fence:"))).with_functions(scratch)?;
    for mut primary in reader.primaries().await? {
        fence.install(&mut primary.conn).await?;
        for script in fence.scripts() {
            (redis::cmd("SCRIPT").arg("LOAD").arg(script))
                .query_async::<String>(&mut primary.conn)
                .await?;
        }
    }
    Ok(fence)
}

impl ConformanceStore {
    /// [`FenceStore::installed`]: each primary's library of the fence's name (the server's,
    /// or every primary's of a cluster), compared with [`RedisFence::library`].
    async fn check_installed(&self) -> Result<(), String> {
        let primaries = (self.reader.primaries().await).map_err(|e| {
            format!("cannot reach the cluster's primaries to compare their function libraries: {e}")
        })?;
        let mut wrong = Vec::new();
        for primary in &primaries {
            if let Err(why) = self.installed_on(&mut primary.conn.clone()).await {
                wrong.push((primary.addr.as_str(), why));
            }
        }
        if !self.reader.is_cluster() || wrong.is_empty() {
            return wrong.pop().map_or(Ok(()), |(_, why)| Err(why));
        }
        let each: Vec<String> = (wrong.iter())
            .map(|(addr, why)| format!("on the primary {addr}: {why}"))
            .collect();
        Err(format!(
            "this version's library is not on {} of the cluster's {} primaries (every primary needs it: a call runs on the primary of its slot): {} (install loads it on every primary)",
            wrong.len(),
            primaries.len(),
            each.join("; ")
        ))
    }

    /// The library of the fence's name on the server `conn` reaches, compared with
    /// [`RedisFence::library`].
    async fn installed_on(&self, conn: &mut MultiplexedConnection) -> Result<(), String> {
        let name = self.fence.library_name();
        let install = format!("zkfence fence install {}", self.shown);
        let listed = redis::cmd("FUNCTION")
            .arg("LIST")
            .arg("LIBRARYNAME")
            .arg(name)
            .arg("WITHCODE")
            .query_async::<redis::Value>(conn)
            .await
            .map_err(|e| {
                format!(
                    "FUNCTION LIST is refused here ({e}): zkfence cannot compare the function library `{name}` with this version's; allow FUNCTION LIST to this user, or run `{install}` and verify as a user that may"
                )
            })?;
        let code = libraries(&listed).into_iter().find_map(|library| {
            let field = |key: &str| library.iter().find(|(k, _)| k == key).map(|(_, v)| v);
            (field("library_name").and_then(|v| text(v)).as_deref() == Some(name))
                .then(|| field("library_code").and_then(|v| text(v)))
                .flatten()
        });
        let Some(code) = code else {
            return Err(format!(
                "the function library `{name}` is not loaded: run `{install}`"
            ));
        };
        let ours = self.fence.library();
        if code == ours {
            return Ok(());
        }
        let line = (code.lines().zip(ours.lines()))
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| code.lines().count().min(ours.lines().count()))
            + 1;
        Err(format!(
            "the function library `{name}` differs from this version's (an older version's, or edited; first at line {line}): run `{install}` to replace it"
        ))
    }

    /// [`FenceStore::durable`]: the server's role, persistence and eviction policy; on a
    /// cluster, every primary's and every replica's (a failover promotes a replica).
    async fn check_durable(&self) -> Result<(), String> {
        let reach = |e: BoxError| format!("cannot reach the cluster's nodes to check them: {e}");
        let primaries = self.reader.primaries().await.map_err(reach)?;
        let mut lost = Vec::new();
        if self.reader.is_cluster() {
            let replicas = self.reader.replicas().await.map_err(reach)?;
            let nodes = (primaries.iter().map(|n| ("primary", n)))
                .chain(replicas.iter().map(|n| ("replica", n)));
            for (role, node) in nodes {
                for why in settings_lost(&node.conn).await {
                    lost.push(format!("on the {role} {}: {why}", node.addr));
                }
            }
        } else if let Some(server) = primaries.first() {
            self.primary(&mut server.conn.clone()).await?;
            lost = settings_lost(&server.conn).await;
        }
        if lost.is_empty() {
            return Ok(());
        }
        let lost = lost.join("; ");
        if self.accept_volatile {
            tracing::warn!(server = %self.shown, "accepted a volatile Redis: {lost}");
            return Ok(());
        }
        Err(format!(
            "this Redis can lose fences, and then accepts a stale holder's token: {lost} (or, knowing that, accept a volatile store: --accept-volatile)"
        ))
    }

    /// Fails a server that is a replica: fences are claimed on the primary.
    async fn primary(&self, conn: &mut MultiplexedConnection) -> Result<(), String> {
        let info: String = (redis::cmd("INFO").arg("replication"))
            .query_async(conn)
            .await
            .map_err(|e| {
                format!(
                    "INFO replication failed ({e}): cannot tell whether this server is a primary"
                )
            })?;
        if info.lines().any(|l| l.trim() == "role:slave") {
            return Err(format!(
                "{} is a replica (role:slave): fences live on the primary, and a replica's own writes are lost when it resyncs; claim, install and verify on the primary's URL",
                self.shown
            ));
        }
        Ok(())
    }
}

/// What can lose fences on the server `conn` reaches: its persistence and eviction policy, or
/// `CONFIG GET` refused.
async fn settings_lost(conn: &MultiplexedConnection) -> Vec<String> {
    let mut lost = Vec::new();
    let get = |param: &'static str| {
        let mut conn = conn.clone();
        async move {
            let pair: Vec<String> = (redis::cmd("CONFIG").arg("GET").arg(param))
                .query_async(&mut conn)
                .await
                .map_err(|e| (param, e.to_string()))?;
            Ok::<_, (&str, String)>(pair.get(1).cloned().unwrap_or_default())
        }
    };
    let settings = async {
        Ok::<_, (&str, String)>((
            get("appendonly").await?,
            get("appendfsync").await?,
            get("no-appendfsync-on-rewrite").await?,
            get("maxmemory-policy").await?,
        ))
    };
    match settings.await {
            Err((param, err)) => lost.push(format!(
                "CONFIG GET {param} is refused here ({err}: renamed, disabled or not allowed to this user), so zkfence cannot tell whether the server keeps its fences through a restart and under memory pressure; allow CONFIG GET to this user"
            )),
            Ok((appendonly, fsync, on_rewrite, policy)) => {
                if appendonly != "yes" {
                    lost.push(format!("appendonly is {appendonly}, so a restart comes back without its fences: set appendonly yes and appendfsync always"));
                } else if fsync != "always" {
                    lost.push(format!("appendfsync is {fsync}, so a crash loses the raises not yet synced: set appendfsync always"));
                }
                if appendonly == "yes" && on_rewrite == "yes" {
                    lost.push("no-appendfsync-on-rewrite is yes, so a crash during a rewrite loses raises: set it to no".to_owned());
                }
                if policy.starts_with("allkeys-") {
                    lost.push(format!("maxmemory-policy is {policy}, which evicts fence keys (they have no TTL) when memory runs short: set noeviction, or a volatile-* policy"));
                }
            }
        }
    lost
}

/// The libraries of a `FUNCTION LIST` reply, each as its fields.
fn libraries(reply: &redis::Value) -> Vec<Vec<(String, &redis::Value)>> {
    let redis::Value::Array(libraries) = reply else {
        return Vec::new();
    };
    (libraries.iter())
        .map(|library| match library {
            redis::Value::Array(flat) => (flat.chunks(2))
                .filter_map(|kv| Some((text(&kv[0])?, kv.get(1)?)))
                .collect(),
            redis::Value::Map(pairs) => (pairs.iter())
                .filter_map(|(k, v)| Some((text(k)?, v)))
                .collect(),
            _ => Vec::new(),
        })
        .collect()
}

/// A string reply's text.
fn text(value: &redis::Value) -> Option<String> {
    match value {
        redis::Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        redis::Value::SimpleString(s) => Some(s.clone()),
        redis::Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// The first element of an acceptance.
fn ok() -> redis::Value {
    redis::Value::BulkString(b"ok".to_vec())
}
