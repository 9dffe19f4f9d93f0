//! The conformance kit's stores in zkfence's own tests, written once for every fence package:
//! a proxy in front of a store whose replies a case can drop ([`through_reply_proxy`]), the
//! kit's store built through it ([`proxied_kit_store!`](crate::proxied_kit_store)) or on a
//! deployment ([`deployed_kit_store!`](crate::deployed_kit_store)), and each fence mutant
//! caught by the case that attacks it ([`mutants_caught!`](crate::mutants_caught)).

use std::sync::Arc;

use zkfence_testkit::conformance::ReplySwitch;
use zkfence_testkit::RawProxy;

/// The switch of a case that loses replies ([`FenceStore::reply_switch`]), on `proxy`: on, the
/// proxy drops every reply from then on; off, it cuts its links and passes replies again.
///
/// [`FenceStore::reply_switch`]: zkfence_testkit::conformance::FenceStore::reply_switch
///
/// # Examples
///
/// ```no_run
/// # async fn demo() {
/// let proxy = std::sync::Arc::new(zkfence_testkit::RawProxy::start("127.0.0.1:5432").await.unwrap());
/// let switch = zkfence_harness::reply_switch(proxy);
/// switch(true); // the next commit's reply is lost
/// # }
/// ```
pub fn reply_switch(proxy: Arc<RawProxy>) -> ReplySwitch {
    Arc::new(move |on| match on {
        true => proxy.drop_replies(true),
        false => proxy.reset(),
    })
}

/// A new proxy in front of the local server `url` names (on `127.0.0.1`, at the URL's port):
/// the same URL through the proxy, and the proxy's [`reply_switch`]; what the kit's stores
/// take as `through`. `url` is a URL (`mysql://root@127.0.0.1:3306/db`) or PostgreSQL's
/// `key=value` pairs (`host=127.0.0.1 port=5432 …`).
///
/// # Panics
///
/// A URL without a port, or a proxy that cannot listen.
///
/// # Cancel safety
///
/// Cancel safe: a proxy already started is dropped with the future.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() {
/// let (proxied, switch) = zkfence_harness::through_reply_proxy("redis://127.0.0.1:6379/").await;
/// assert!(proxied.starts_with("redis://127.0.0.1:"));
/// # let _ = switch; }
/// ```
pub async fn through_reply_proxy(url: &str) -> (String, ReplySwitch) {
    let port = port_of(url).unwrap_or_else(|| panic!("no port in {url}"));
    let proxy = RawProxy::start(&format!("127.0.0.1:{port}"))
        .await
        .unwrap_or_else(|e| panic!("a proxy in front of port {port}: {e}"));
    let proxied = with_port(url, port, proxy.port());
    (proxied, reply_switch(Arc::new(proxy)))
}

/// The port `url` names: a URL's (`scheme://user@host:port/…`), or PostgreSQL's `port=N`.
///
/// # Examples
///
/// ```
/// use zkfence_harness::port_of;
/// assert_eq!(port_of("mysql://root@127.0.0.1:3306/mysql"), Some(3306));
/// assert_eq!(port_of("host=127.0.0.1 port=5432 user=postgres"), Some(5432));
/// assert_eq!(port_of("redis://[::1]:6379/"), Some(6379));
/// assert_eq!(port_of("redis://cache/"), None);
/// ```
pub fn port_of(url: &str) -> Option<u16> {
    let Some((_, rest)) = url.split_once("://") else {
        let value = url
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix("port="));
        return value?.parse().ok();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = host_port.rsplit_once(':')?;
    match host.starts_with('[') && !host.ends_with(']') {
        true => None,
        false => port.parse().ok(),
    }
}

/// `url` with the port `port` replaced by `to`, wherever it is named: PostgreSQL's `port=N`
/// (a pair of its own) and a URL's `:N` before its path, query or end.
///
/// # Examples
///
/// ```
/// use zkfence_harness::with_port;
/// assert_eq!(with_port("host=127.0.0.1 port=5432 user=u", 5432, 7000), "host=127.0.0.1 port=7000 user=u");
/// assert_eq!(with_port("s3://127.0.0.1:9000/bucket", 9000, 7000), "s3://127.0.0.1:7000/bucket");
/// assert_eq!(with_port("redis://127.0.0.1:6379", 6379, 7000), "redis://127.0.0.1:7000");
/// assert_eq!(with_port("redis://127.0.0.1:63790/", 6379, 7000), "redis://127.0.0.1:63790/");
/// ```
pub fn with_port(url: &str, port: u16, to: u16) -> String {
    let (from, to) = (port.to_string(), to.to_string());
    let mut out = String::with_capacity(url.len());
    let mut rest = url;
    while let Some(at) = rest.find(&from) {
        let (before, after) = (&rest[..at], &rest[at + from.len()..]);
        let opens = before.ends_with("port=")
            && before[..before.len() - 5]
                .chars()
                .next_back()
                .is_none_or(char::is_whitespace);
        let named = match opens {
            true => after.is_empty() || after.starts_with(char::is_whitespace),
            false => {
                before.ends_with(':') && (after.is_empty() || after.starts_with(['/', '?', '#']))
            }
        };
        out.push_str(before);
        out.push_str(if named { &to } else { &from });
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Defines `async fn $build(name: &str, fence: $fence) -> $store`: the kit's store
/// (`$store::create`, as every SQL and Redis fence package has it) on the server at `$url` (an
/// expression, `.await` allowed), under a scratch name of the test's own (`name` and the
/// process's id), the fence installed afresh there ([`Setup::Fresh`]); the fence's connections
/// go [`through_reply_proxy`] (a case loses a commit's reply there), the kit's reads direct.
///
/// [`Setup::Fresh`]: zkfence_testkit::conformance::Setup::Fresh
///
/// # Examples
///
/// ```no_run
/// use zkfence_testkit::conformance::{ReplySwitch, Setup};
///
/// struct MyFence;
/// struct MyStore;
/// impl MyStore {
///     async fn create(
///         url: &str,
///         fence: MyFence,
///         name: &str,
///         setup: Setup,
///         through: Option<(String, ReplySwitch)>,
///     ) -> Result<MyStore, String> {
/// #       let _ = (url, fence, name, setup, through);
///         Ok(MyStore) // the store's tables or keys, the fence installed
///     }
/// }
///
/// async fn direct() -> String {
///     "mysql://root@127.0.0.1:3306/mysql".to_owned()
/// }
///
/// zkfence_harness::proxied_kit_store!(build: MyStore, MyFence, direct().await);
/// # async fn demo() {
/// let store = build("order", MyFence).await;
/// # let _ = store; }
/// ```
#[macro_export]
macro_rules! proxied_kit_store {
    ($build:ident: $store:ty, $fence:ty, $url:expr) => {
        /// The kit's store on the shared server, under a scratch name of the test's own; the
        /// fence's connections through a proxy (to lose a commit's reply), reads direct.
        async fn $build(name: &str, fence: $fence) -> $store {
            let url: ::std::string::String = $url;
            let through = $crate::through_reply_proxy(&url).await;
            let name = ::std::format!("{name}_{}", ::std::process::id());
            let fresh = ::zkfence::conformance::Setup::Fresh;
            <$store>::create(
                &url,
                fence,
                &name,
                fresh,
                ::std::option::Option::Some(through),
            )
            .await
            .unwrap_or_else(|e| ::std::panic!("the kit's store: {e}"))
        }
    };
}

/// Defines `async fn $deployed(url: &str, name: &str) -> $store`: the kit's store on the
/// deployment at `url`, as `zkfence fence verify` builds it: the fence `$fence` (an
/// expression) as installed there ([`Setup::Deployed`]), never a copy of its own, under a
/// scratch name of the test's own (`name` and the process's id), every connection direct.
///
/// [`Setup::Deployed`]: zkfence_testkit::conformance::Setup::Deployed
///
/// # Examples
///
/// ```no_run
/// use zkfence_testkit::conformance::{ReplySwitch, Setup};
///
/// struct MyFence;
/// struct MyStore;
/// impl MyStore {
///     async fn create(
///         url: &str,
///         fence: MyFence,
///         name: &str,
///         setup: Setup,
///         through: Option<(String, ReplySwitch)>,
///     ) -> Result<MyStore, String> {
/// #       let _ = (url, fence, name, setup, through);
///         Ok(MyStore) // the deployment's fence, on scopes of the store's own
///     }
/// }
///
/// zkfence_harness::deployed_kit_store!(deployed: MyStore, MyFence);
/// # async fn demo() {
/// let store = deployed("redis://127.0.0.1:6379/", "verify").await;
/// # let _ = store; }
/// ```
#[macro_export]
macro_rules! deployed_kit_store {
    ($deployed:ident: $store:ty, $fence:expr) => {
        /// The kit's store on the deployment at `url`, as `zkfence fence verify` builds it: the
        /// fence as installed there, never a copy of its own.
        async fn $deployed(url: &str, name: &str) -> $store {
            let name = ::std::format!("{name}_{}", ::std::process::id());
            let deployed = ::zkfence::conformance::Setup::Deployed;
            <$store>::create(url, $fence, &name, deployed, ::std::option::Option::None)
                .await
                .unwrap_or_else(|e| ::std::panic!("the kit's store on the deployment: {e}"))
        }
    };
}

/// The fence mutants' table, one `#[tokio::test]` per row: `test_name: Mutant by case` builds
/// the store with `$store(test_name, FenceMutant::Mutant).await` (an async fn of the test's
/// own) and expects the kit's `case` to catch it
/// ([`expect_caught`](zkfence_testkit::conformance::expect_caught)). Behind the tests'
/// `mutants` feature, as `zkfence::FenceMutant` is.
///
/// # Examples
///
/// ```no_run
/// #[cfg(feature = "mutants")]
/// mod mutants {
///     use zkfence_postgres::{ConformanceStore, PostgresFence};
///
///     async fn store(name: &str, mutant: zkfence::FenceMutant) -> ConformanceStore {
///         super::build(name, PostgresFence::new().with_mutant(mutant)).await
///     }
///
///     zkfence_harness::mutants_caught!(store;
///         strictly_greater_is_caught_by_order: StrictlyGreater by order,
///         a_string_compare_is_caught_by_the_edge_tokens: StringCompare by edge_tokens,
///     );
/// }
/// ```
#[macro_export]
macro_rules! mutants_caught {
    ($store:path; $($name:ident: $mutant:ident by $case:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let store = $store(::std::stringify!($name), ::zkfence::FenceMutant::$mutant).await;
            let outcome = ::zkfence::conformance::$case(&store).await;
            ::zkfence::conformance::expect_caught(::std::stringify!($mutant), outcome);
        }
    )*};
}
