//! The fence itself: its configuration, its claims and fenced writes, its reads and rebase.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, RedisError, RedisResult, Script, ServerErrorKind, Value};
use zkfence::fence::{self, FenceError, FenceState, FenceTicket};

/// The label of this store in the `zkfence_fence_*` metrics.
pub(crate) const STORE: &str = "redis";

/// The fence keys' prefix unless [`RedisFence::with_prefix`] gives another.
const DEFAULT_PREFIX: &str = "zkfence:fence:";

/// The Lua both scripts and the function library start with: what a token is, and how two
/// compare. A token is any decimal text a client may send (`42`, `0042`, `+42`; never `-1`,
/// `4.2e1`, ` 42`, a number above `i64::MAX` or of more than 19 digits once its leading zeros
/// are gone); scripts never call `tonumber` on one (Lua's numbers are doubles, which merge
/// neighbouring tokens above 2⁵³). Canonical digit strings compare as the integers they spell:
/// the longer is greater, and equal lengths compare as text. `KEYS[1]` must be a fence key,
/// `PREFIX{<scope>}` (`PREFIX` is the fence's key prefix, written in at install): a claim on
/// any other key would overwrite the number it holds.
macro_rules! prelude {
    () => {
        r#"
local PREFIX = 'zkfence:fence:'
local OPEN = PREFIX .. '{'
local function fence_key(key)
  return type(key) == 'string' and #key > #OPEN + 1
    and string.byte(key, -1) == 125 and string.sub(key, 1, #OPEN) == OPEN
end
local function token(text)
  if type(text) ~= 'string' then return nil end
  local digits = string.match(text, '^%+?(%d+)$')
  if not digits then return nil end
  digits = string.match(digits, '^0*(%d+)$')
  if #digits > 19 or (#digits == 19 and digits > '9223372036854775807') then return nil end
  return digits
end
local function above(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end
local function bad(what)
  return redis.error_reply('ZF002 zkfence: ' .. what)
end
local function compare(key, text)
  if not fence_key(key) then
    return nil, nil, bad(tostring(key) .. ' is not a fence key: give ' .. PREFIX .. '{<scope>} as KEYS[1], the scope (the lock path) in braces')
  end
  local ours = token(text)
  if not ours then
    return nil, nil, bad('bad token ' .. tostring(text) .. ': give a fencing token, a decimal integer from 0 to 9223372036854775807 (as ZKFENCE_TOKEN holds it)')
  end
  local stored = redis.call('GET', key)
  local seen = nil
  if stored then
    seen = stored == string.rep('0', 19 - #ours) .. ours and ours or token(stored)
    if not seen then
      return nil, nil, bad(key .. ' holds ' .. stored .. ', not a fencing token: is it a zkfence fence key?')
    end
    if above(seen, ours) then
      return nil, nil, redis.error_reply('ZF001 zkfence: refused: a newer lock holder claimed ' .. key .. '; our token ' .. ours .. '; the fence holds ' .. seen)
    end
  end
  return ours, seen, nil
end
local function raise(key, ours, seen)
  if not seen or above(ours, seen) then
    redis.call('SET', key, string.rep('0', 19 - #ours) .. ours)
  end
end
local function claim(KEYS, ARGV)
  local ours, seen, err = compare(KEYS[1], ARGV[1])
  if err then return err end
  raise(KEYS[1], ours, seen)
  return {'ok', seen or ''}
end
local function key_at(KEYS, digits)
  local n = tonumber(digits)
  return n and n > 1 and KEYS[n]
end
local function tagged(KEYS, ARGV)
  local count = tonumber(string.match(ARGV[2] or '', '^%d+$'))
  if not count then return nil, bad('give the shape of one command, or the number of commands, after the token') end
  local commands = {}
  local at = 3
  for c = 1, count do
    local argc = tonumber(string.match(ARGV[at] or '', '^%d+$'))
    if not argc or argc == 0 then
      return nil, bad('command ' .. c .. ': give its number of arguments, then each tagged')
    end
    at = at + 1
    local args = {}
    for a = 1, argc do
      local arg = ARGV[at]
      if arg == nil then return nil, bad('command ' .. c .. ' has fewer arguments than it says') end
      local tag = string.byte(arg, 1)
      local key = tag == 107 and key_at(KEYS, string.match(arg, '^k(%d+)$'))
      if tag == 118 then
        args[a] = string.sub(arg, 2)
      elseif key then
        args[a] = key
      else
        return nil, bad('argument ' .. at .. ' (' .. arg .. '): tag each argument, v<value> for a value, k<n> for KEYS[n] with n from 2 (KEYS[1] is the fence key)')
      end
      at = at + 1
    end
    commands[c] = args
  end
  if ARGV[at] ~= nil then return nil, bad('arguments left over after the last command') end
  return commands
end
local function shaped(KEYS, ARGV)
  local shape = ARGV[2]
  if #ARGV ~= #shape + 2 then
    return nil, bad('the shape ' .. shape .. ' names ' .. #shape .. ' arguments; ' .. (#ARGV - 2) .. ' follow it')
  end
  local args = {}
  for a = 1, #shape do
    local arg = ARGV[a + 2]
    if string.byte(shape, a) == 118 then
      args[a] = arg
    else
      local key = key_at(KEYS, string.match(arg, '^%d+$'))
      if not key then
        return nil, bad('argument ' .. (a + 2) .. ' (' .. arg .. '): a key argument is n for KEYS[n], n from 2 (KEYS[1] is the fence key)')
      end
      args[a] = key
    end
  end
  return {args}
end
local function write(KEYS, ARGV)
  local commands, bad_commands
  if type(ARGV[2]) == 'string' and string.find(ARGV[2], '^[kv]+$') then
    commands, bad_commands = shaped(KEYS, ARGV)
  else
    commands, bad_commands = tagged(KEYS, ARGV)
  end
  if not commands then return bad_commands end
  local ours, seen, err = compare(KEYS[1], ARGV[1])
  if err then return err end
  raise(KEYS[1], ours, seen)
  local replies = {}
  for c = 1, #commands do
    replies[c] = redis.call(unpack(commands[c]))
  end
  return {'ok', seen or '', replies}
end
"#
    };
}

/// The claim, for `EVAL` from any client: `KEYS[1]` the fence key (`zkfence:fence:{<scope>}`;
/// any other key is refused), `ARGV[1]` the token (any decimal text: see [`FUNCTIONS`]).
/// Replies `{"ok", previous or ""}`; a refusal is an error reply `ZF001 … the fence holds
/// <seen>`, a bad token or key `ZF002 …`.
pub const CLAIM_SCRIPT: &str = concat!(prelude!(), "return claim(KEYS, ARGV)\n");

/// The fenced write, for `EVAL` from any client: the claim's compare, then the caller's
/// commands. `KEYS[1]` the fence key, `KEYS[2..]` the commands' keys; `ARGV[1]` the token,
/// then either
/// - one command: `ARGV[2]` its shape, a letter for each argument (`k` a key, `v` a value),
///   and its arguments as they are, a key as its index in `KEYS` (`SET` of `KEYS[2]` to 42:
///   `vkv SET 2 42`); the form that costs the server least, or
/// - several: `ARGV[2]` the number of commands, then per command its argument count and
///   arguments, each tagged by its first byte: `k` and a key index (`k2` is `KEYS[2]`), or `v`
///   and the value.
///
/// Every argument is checked before anything is written (a shape that does not match the
/// arguments, an untagged argument, a key index outside `KEYS[2..]` is a `ZF002` error reply).
/// Replies `{"ok", previous or "", {replies...}}`; errors as [`CLAIM_SCRIPT`]'s.
pub const WRITE_SCRIPT: &str = concat!(prelude!(), "return write(KEYS, ARGV)\n");

/// The same claim and write as a Redis 7 function library (`zkfence fence install
/// redis://…` loads it with `FUNCTION LOAD REPLACE`), called with `FCALL` and the arguments
/// of [`CLAIM_SCRIPT`] and [`WRITE_SCRIPT`]:
///
/// ```text
/// redis-cli FCALL zkfence_claim 1 'zkfence:fence:{/locks/orders}' "$ZKFENCE_TOKEN"
/// redis-cli FCALL zkfence_write 2 'zkfence:fence:{/locks/orders}' '{/locks/orders}:total' \
///   "$ZKFENCE_TOKEN" vkv SET 2 42
/// ```
///
/// A token is accepted in any decimal text form a client may send (`42`, `0042`, `+42`) and
/// compared as an integer; anything else (`-1`, `4.2e1`, more than 19 digits, above
/// `i64::MAX`) is a `ZF002` error reply, as is a `KEYS[1]` that is not a fence key
/// `zkfence:fence:{<scope>}` (nothing written), and a refusal a `ZF001` one: `redis-cli -e`
/// prints `(error) ZF001 …` and exits 1, and client libraries raise. Call `zkfence_write` for
/// the compare and the writes in one call: a `MULTI` or a pipeline runs the commands queued
/// after a refused `zkfence_claim` all the same.
pub const FUNCTIONS: &str = concat!(
    "#!lua name=zkfence\n",
    prelude!(),
    "redis.register_function('zkfence_claim', claim)\n",
    "redis.register_function('zkfence_write', write)\n"
);

/// Commands to run after the fence's compare, in one script: each built of arguments, its
/// keys marked as keys (so that they travel as `KEYS`, as Redis Cluster needs).
///
/// # Examples
///
/// ```
/// let commands = zkfence_redis::Commands::new()
///     .command(|c| c.arg("HSET").key("{/locks/a}:job").arg("state").arg("done"))
///     .command(|c| c.arg("RPUSH").key("{/locks/a}:log").arg("done"));
/// assert_eq!(commands.keys(), ["{/locks/a}:job", "{/locks/a}:log"]);
/// ```
#[derive(Debug, Clone, Default)]
pub struct Commands {
    keys: Vec<String>,
    commands: Vec<Vec<Vec<u8>>>,
}

/// The write script's counts of [`Commands`] (see [`Commands::counts`]).
enum Counts {
    /// One command's shape: `k` or `v` for each argument.
    Shape(String),
    /// The number of commands, and each one's number of arguments.
    Tagged(String, Vec<String>),
}

/// One command being built (see [`Commands::command`]).
#[derive(Debug)]
pub struct Command<'a> {
    keys: &'a mut Vec<String>,
    args: Vec<Vec<u8>>,
}

impl Command<'_> {
    /// A plain argument (the command's name first).
    ///
    /// # Examples
    ///
    /// ```
    /// let commands = zkfence_redis::Commands::new().command(|c| c.arg("INCRBY").key("{s}:n").arg(5));
    /// # let _ = commands;
    /// ```
    pub fn arg(mut self, arg: impl redis::ToRedisArgs) -> Self {
        for bytes in arg.to_redis_args() {
            let mut tagged = Vec::with_capacity(bytes.len() + 1);
            tagged.push(b'v');
            tagged.extend(bytes);
            self.args.push(tagged);
        }
        self
    }

    /// A key argument.
    ///
    /// # Examples
    ///
    /// ```
    /// let commands = zkfence_redis::Commands::new().command(|c| c.arg("DEL").key("{s}:gone"));
    /// assert_eq!(commands.keys(), ["{s}:gone"]);
    /// ```
    pub fn key(self, key: impl Into<String>) -> Self {
        let key = key.into();
        let index = match self.keys.iter().position(|k| *k == key) {
            Some(i) => i,
            None => {
                self.keys.push(key);
                self.keys.len() - 1
            }
        };
        // KEYS[1] is the fence key: the commands' keys start at KEYS[2].
        let mut this = self;
        this.args.push(format!("k{}", index + 2).into_bytes());
        this
    }
}

impl Commands {
    /// No commands yet.
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(zkfence_redis::Commands::new().keys().is_empty());
    /// ```
    pub fn new() -> Commands {
        Commands::default()
    }

    /// Adds a command, built by `build` from its arguments.
    ///
    /// # Examples
    ///
    /// ```
    /// let commands = zkfence_redis::Commands::new().command(|c| c.arg("SET").key("{s}:k").arg("v"));
    /// # let _ = commands;
    /// ```
    pub fn command(mut self, build: impl FnOnce(Command<'_>) -> Command<'_>) -> Commands {
        let command = build(Command {
            keys: &mut self.keys,
            args: Vec::new(),
        });
        let args = command.args;
        self.commands.push(args);
        self
    }

    /// What the write script reads before the arguments: for one command its shape (`k` or
    /// `v` for each argument: the script then takes them untagged, a key as its index), the
    /// form that costs the server least; for several, their number and each one's length
    /// (the arguments tagged).
    fn counts(&self) -> Counts {
        if let [command] = self.commands.as_slice() {
            let shape = command.iter().map(|arg| char::from(arg[0])).collect();
            return Counts::Shape(shape);
        }
        let lens = self.commands.iter().map(|c| c.len().to_string());
        Counts::Tagged(self.commands.len().to_string(), lens.collect())
    }

    /// The keys the commands write, in order of first use.
    ///
    /// # Examples
    ///
    /// ```
    /// let commands = zkfence_redis::Commands::new().command(|c| c.arg("GET").key("{s}:k"));
    /// assert_eq!(commands.keys(), ["{s}:k"]);
    /// ```
    pub fn keys(&self) -> &[String] {
        &self.keys
    }
}

/// A Redis fence: where its fence keys live (the prefix), and nothing else; it holds no
/// connection (every call takes yours: a `MultiplexedConnection`, a `ConnectionManager`, a
/// cluster connection).
///
/// # Examples
///
/// ```
/// let fence = zkfence_redis::RedisFence::new();
/// assert_eq!(fence.fence_key("/locks/orders"), "zkfence:fence:{/locks/orders}");
/// ```
#[derive(Debug, Clone)]
pub struct RedisFence {
    prefix: String,
    /// The function library's name: its functions are `<name>_claim` and `<name>_write`.
    library: String,
    /// How claims and writes reach the server.
    call: Call,
    /// The replicas each claim and write waits for (`WAIT`), and for how long.
    wait: Option<Wait>,
    flaw: Flaw,
    /// The claim and write scripts with their SHA1s, made on first use and shared by clones:
    /// a write hashed its script each time (about 3 KiB of Lua). Reset by every builder that
    /// changes the Lua (the prefix, a mutant).
    scripts: Arc<OnceLock<[Script; 2]>>,
}

/// `WAIT <replicas> <timeout>` after each claim and write ([`RedisFence::with_wait`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Wait {
    replicas: u32,
    timeout: Duration,
}

/// How a [`RedisFence`]'s claims and writes reach the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    /// The scripts, sent by this fence (`EVALSHA`, `EVAL`).
    Scripts,
    /// The function library the server has loaded (`FCALL`).
    Functions,
}

/// A deliberate flaw (zkfence's own tests only: set by `with_mutant`).
#[cfg_attr(not(feature = "mutants"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flaw {
    None,
    CheckOutsideTransaction,
    DoubleCompare,
    KeyOutsideSlot,
    StrictlyGreater,
    NoUpsert,
    NoFormCheck,
    AnyKeyClaim,
}

impl Default for RedisFence {
    fn default() -> Self {
        RedisFence::new()
    }
}

impl RedisFence {
    /// Fence keys `zkfence:fence:{<scope>}`.
    ///
    /// # Examples
    ///
    /// ```
    /// let fence = zkfence_redis::RedisFence::new();
    /// # let _ = fence;
    /// ```
    pub fn new() -> RedisFence {
        RedisFence {
            prefix: DEFAULT_PREFIX.to_owned(),
            library: "zkfence".to_owned(),
            call: Call::Scripts,
            wait: None,
            flaw: Flaw::None,
            scripts: Arc::default(),
        }
    }

    /// Fence keys `<prefix>{<scope>}` (a test's namespace, an application's). The prefix is
    /// written into the scripts and the function library ([`install`](Self::install)): they
    /// refuse (`ZF002`) a `KEYS[1]` that is not `<prefix>{<scope>}`, so install the library
    /// with the prefix its callers use.
    ///
    /// # Examples
    ///
    /// ```
    /// let fence = zkfence_redis::RedisFence::new().with_prefix("orders:fence:");
    /// assert_eq!(fence.fence_key("/locks/a"), "orders:fence:{/locks/a}");
    /// ```
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self.scripts = Arc::default();
        self
    }

    /// Names the function library [`install`](Self::install) loads `library`, its functions
    /// `<library>_claim` and `<library>_write` (`zkfence`, `zkfence_claim` and `zkfence_write`
    /// by default): for two fences that must not share one (a test's, a staging copy's).
    ///
    /// # Errors
    ///
    /// [`ConfigError`](zkfence::fence::ConfigError) for a name that is not 1 to 64 letters,
    /// digits or `_`.
    ///
    /// # Examples
    ///
    /// ```
    /// let fence = zkfence_redis::RedisFence::new().with_functions("orders_fence")?;
    /// assert_eq!(fence.functions(), ("orders_fence_claim".to_owned(), "orders_fence_write".to_owned()));
    /// # Ok::<(), zkfence::fence::ConfigError>(())
    /// ```
    pub fn with_functions(
        mut self,
        library: impl Into<String>,
    ) -> Result<Self, zkfence::fence::ConfigError> {
        let library = library.into();
        let plain = |c: char| c.is_ascii_alphanumeric() || c == '_';
        if library.is_empty() || library.len() > 64 || !library.chars().all(plain) {
            let instead = "1 to 64 letters, digits or `_`, e.g. \"zkfence\"";
            return Err(zkfence::fence::ConfigError::new(
                "function library name",
                library,
                instead,
            ));
        }
        self.library = library;
        Ok(self)
    }

    /// The claim and write scripts as this fence sends them (`EVALSHA`, then `EVAL`).
    #[cfg(feature = "conformance")]
    pub(crate) fn scripts(&self) -> [String; 2] {
        [self.lua(CLAIM_SCRIPT), self.lua(WRITE_SCRIPT)]
    }

    /// The fence keys' prefix.
    #[cfg(feature = "conformance")]
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The function library's name.
    #[cfg(feature = "conformance")]
    pub(crate) fn library_name(&self) -> &str {
        &self.library
    }

    /// The names of the claim and write functions [`install`](Self::install) loads, for
    /// `FCALL`.
    ///
    /// # Examples
    ///
    /// ```
    /// let (claim, write) = zkfence_redis::RedisFence::new().functions();
    /// assert_eq!((claim.as_str(), write.as_str()), ("zkfence_claim", "zkfence_write"));
    /// ```
    pub fn functions(&self) -> (String, String) {
        (
            format!("{}_claim", self.library),
            format!("{}_write", self.library),
        )
    }

    /// Claims and writes call the function library the server has loaded
    /// ([`install`](Self::install): `FCALL <library>_claim`, `FCALL <library>_write`) instead of sending
    /// this fence's scripts: the fence as other languages' clients run it, and as `zkfence
    /// fence verify` checks it. A server without the library answers every call with an error
    /// that says to install it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mut redis: redis::aio::MultiplexedConnection, ticket: zkfence::fence::FenceTicket) -> Result<(), Box<dyn std::error::Error>> {
    /// let fence = zkfence_redis::RedisFence::new().through_functions();
    /// fence.claim(&mut redis, &ticket).await?; // FCALL zkfence_claim 1 zkfence:fence:{…} <token>
    /// # Ok(()) }
    /// ```
    pub fn through_functions(mut self) -> Self {
        self.call = Call::Functions;
        self
    }

    /// Each claim and write sends `WAIT <replicas> <timeout>` right after the fenced call, in
    /// one pipeline on the connection that made it (on a cluster, to the primary of the fence
    /// key's slot), and succeeds only when at least `replicas` replicas acknowledged it within
    /// `timeout`. Fewer is [`FenceError::InDoubt`]: the call applied on the primary, but a
    /// failover now (`CLUSTER FAILOVER`, Sentinel's) may promote a replica without it, which
    /// then accepts an older token again: read the fence back, or claim again, before you
    /// rely on it. Redis replicates asynchronously: without this, a claim survives a
    /// failover only if it happened to reach the replica first. A `timeout` under 1 ms is
    /// taken as 1 ms (`WAIT`'s 0 would block for ever). Keep `timeout` under the connection's
    /// response timeout: a single server's connection from [`Link::open`](crate::Link::open)
    /// gives up on a reply after 500 ms (redis's default), a cluster's after 10 s.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mut redis: zkfence_redis::Link, ticket: zkfence::fence::FenceTicket) -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// let fence = zkfence_redis::RedisFence::new().with_wait(1, Duration::from_millis(200));
    /// match fence.claim(&mut redis, &ticket).await {
    ///     Err(err) if err.is_in_doubt() => println!("claimed, not yet on a replica: {err}"),
    ///     other => { other?; }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn with_wait(mut self, replicas: u32, timeout: Duration) -> Self {
        let timeout = timeout.max(Duration::from_millis(1));
        self.wait = Some(Wait { replicas, timeout });
        self
    }

    /// The function library [`install`](Self::install) loads: [`FUNCTIONS`] with this fence's
    /// library and function names and key prefix written in. `zkfence fence verify` compares
    /// the server's library with it.
    ///
    /// # Examples
    ///
    /// ```
    /// use zkfence_redis::{RedisFence, FUNCTIONS};
    /// assert_eq!(RedisFence::new().library(), FUNCTIONS);
    /// let other = RedisFence::new().with_prefix("orders:fence:").with_functions("orders")?;
    /// assert!(other.library().starts_with("#!lua name=orders\n"));
    /// assert!(other.library().contains("'orders_claim'"));
    /// # Ok::<(), zkfence::fence::ConfigError>(())
    /// ```
    pub fn library(&self) -> String {
        let (claim, write) = self.functions();
        (self.lua(FUNCTIONS))
            .replace(
                "#!lua name=zkfence\n",
                &format!("#!lua name={}\n", self.library),
            )
            .replace("'zkfence_claim'", &format!("'{claim}'"))
            .replace("'zkfence_write'", &format!("'{write}'"))
    }

    /// **For zkfence's own tests**: the fence with one of its rules broken.
    #[cfg(feature = "mutants")]
    #[doc(hidden)]
    pub fn with_mutant(mut self, mutant: zkfence::FenceMutant) -> Self {
        use zkfence::FenceMutant as M;
        self.scripts = Arc::default();
        self.flaw = match mutant {
            M::CheckOutsideTransaction => Flaw::CheckOutsideTransaction,
            M::DoubleCompare | M::StringCompare => Flaw::DoubleCompare,
            M::NoFormCheck => Flaw::NoFormCheck,
            M::KeyOutsideSlot => Flaw::KeyOutsideSlot,
            M::StrictlyGreater => Flaw::StrictlyGreater,
            M::NoUpsert => Flaw::NoUpsert,
            M::AnyKeyClaim => Flaw::AnyKeyClaim,
            _ => Flaw::None,
        };
        self
    }

    /// The write script (`write`) or the claim script, hashed once.
    fn script(&self, write: bool) -> &Script {
        let [claim, written] = self.scripts.get_or_init(|| {
            [CLAIM_SCRIPT, WRITE_SCRIPT].map(|sound| Script::new(&self.lua(sound)))
        });
        if write {
            written
        } else {
            claim
        }
    }

    /// `sound`, one of the published Lua texts, as this fence runs it: its key prefix written
    /// in, and a mutant's flaw.
    fn lua(&self, sound: &'static str) -> String {
        let text = match self.flaw {
            Flaw::None | Flaw::KeyOutsideSlot => sound.to_owned(),
            flaw => mutated(flaw, sound),
        };
        match self.prefix.as_str() {
            DEFAULT_PREFIX => text,
            prefix => text.replace(
                &format!("local PREFIX = '{DEFAULT_PREFIX}'\n"),
                &format!("local PREFIX = {}\n", lua_string(prefix)),
            ),
        }
    }

    /// The fence key of `scope`: its hash tag is the scope, so that keys tagged `{<scope>}`
    /// share its slot.
    ///
    /// # Examples
    ///
    /// ```
    /// let key = zkfence_redis::RedisFence::new().fence_key("/locks/a");
    /// assert!(key.ends_with("{/locks/a}"));
    /// ```
    pub fn fence_key(&self, scope: &str) -> String {
        format!("{}{{{scope}}}", self.prefix)
    }

    /// Raises the ticket's scope's fence to its token, refusing a lower one; returns the token
    /// it held before (`None` on the scope's first claim).
    ///
    /// # Errors
    ///
    /// [`FenceError::Refused`], [`FenceError::LockLost`] (before sending),
    /// [`FenceError::InDoubt`] (the connection broke with the script sent), and Redis's error.
    ///
    /// # Cancel safety
    ///
    /// A claim already sent may apply after the future is dropped; a claim only refuses older
    /// holders.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mut redis: redis::aio::MultiplexedConnection, ticket: zkfence::fence::FenceTicket) -> Result<(), Box<dyn std::error::Error>> {
    /// let before = zkfence_redis::RedisFence::new().claim(&mut redis, &ticket).await?;
    /// println!("raised from {before:?}");
    /// # Ok(()) }
    /// ```
    pub async fn claim<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        ticket: &FenceTicket,
    ) -> Result<Option<i64>, FenceError<RedisError>> {
        self.run(conn, ticket, None).await.map(|(before, _)| before)
    }

    /// Runs `commands` after the fence's compare, in one script: nothing of them runs for a
    /// token below the fence's. Returns their replies, in order.
    ///
    /// # Errors
    ///
    /// As [`claim`](Self::claim); a key outside the fence key's hash slot is refused before
    /// anything is sent (Redis's client error naming it).
    ///
    /// # Cancel safety
    ///
    /// As [`claim`](Self::claim): a script already sent may still run.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mut redis: redis::aio::MultiplexedConnection, ticket: zkfence::fence::FenceTicket) -> Result<(), Box<dyn std::error::Error>> {
    /// use zkfence_redis::{Commands, RedisFence};
    /// let commands = Commands::new().command(|c| c.arg("INCR").key("{/locks/a}:n"));
    /// let replies = RedisFence::new().write(&mut redis, &ticket, &commands).await?;
    /// println!("{replies:?}");
    /// # Ok(()) }
    /// ```
    pub async fn write<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        ticket: &FenceTicket,
        commands: &Commands,
    ) -> Result<Vec<Value>, FenceError<RedisError>> {
        self.run(conn, ticket, Some(commands))
            .await
            .map(|(_, replies)| replies)
    }

    /// Loads (or replaces: `FUNCTION LOAD REPLACE`) the function library
    /// [`library`](Self::library) on the server: `zkfence_claim` and `zkfence_write`, for
    /// `FCALL` from any client, refusing a `KEYS[1]` without this fence's key prefix.
    /// Idempotent; an older or edited library of the same name is replaced. In a cluster, it
    /// must be on every primary: on a cluster connection ([`Link`](crate::Link)) redis's
    /// cluster client sends `FUNCTION LOAD` to every primary it knows;
    /// [`Connected::install`](crate::Connected::install) loads it on each primary that
    /// `CLUSTER NODES` names and says which. The fence's own claims and writes need none of it (they send the
    /// scripts) unless it goes [`through_functions`](Self::through_functions).
    ///
    /// # Errors
    ///
    /// Redis's error: a server before Redis 7 (no functions: use [`CLAIM_SCRIPT`] and
    /// [`WRITE_SCRIPT`] with `EVAL`), no permission for `FUNCTION LOAD`, a proxy that passes
    /// no scripts.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one command.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mut redis: redis::aio::MultiplexedConnection) -> redis::RedisResult<()> {
    /// zkfence_redis::RedisFence::new().install(&mut redis).await?;
    /// # Ok(()) }
    /// ```
    pub async fn install<C: ConnectionLike + Send>(&self, conn: &mut C) -> Result<(), RedisError> {
        redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(self.library())
            .query_async::<String>(conn)
            .await
            .map(|_| ())
    }

    /// Every fence under this fence's key prefix (`SCAN`), by scope, on the server `conn`
    /// reaches: on a cluster connection, `SCAN` goes to one node, so list a cluster's fences
    /// with [`Connected`](crate::Connected)'s `fences` (the fence contract), which scans every
    /// primary.
    ///
    /// # Errors
    ///
    /// Redis's error; a fence key that holds no token.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mut redis: redis::aio::MultiplexedConnection) -> redis::RedisResult<()> {
    /// for state in zkfence_redis::RedisFence::new().fences(&mut redis).await? {
    ///     println!("{} {}", state.scope, state.token);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn fences<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
    ) -> Result<Vec<FenceState>, RedisError> {
        let pattern = format!("{}{{*}}", glob_escape(&self.prefix));
        let mut keys = scan(conn, &pattern).await?;
        keys.sort();
        let mut fences = Vec::new();
        for key in keys {
            let Some(scope) = (key.strip_prefix(self.prefix.as_str()))
                .and_then(|k| k.strip_prefix('{'))
                .and_then(|k| k.strip_suffix('}'))
            else {
                continue;
            };
            let value: Option<String> = redis::cmd("GET").arg(&key).query_async(conn).await?;
            if let Some(value) = value {
                fences.push(FenceState::new(scope, parse_token(&value)?));
            }
        }
        Ok(fences)
    }

    /// The token `scope`'s fence holds; `None` before its first claim.
    ///
    /// # Errors
    ///
    /// Redis's error; a fence key that does not hold a token.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mut redis: redis::aio::MultiplexedConnection) -> redis::RedisResult<()> {
    /// println!("{:?}", zkfence_redis::RedisFence::new().seen(&mut redis, "/locks/a").await?);
    /// # Ok(()) }
    /// ```
    pub async fn seen<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        scope: &str,
    ) -> Result<Option<i64>, RedisError> {
        let value: Option<String> = redis::cmd("GET")
            .arg(self.fence_key(scope))
            .query_async(conn)
            .await?;
        value.map(|v| parse_token(&v)).transpose()
    }

    /// Sets `scope`'s fence to `to` whatever it holds (the operator's way out of a reset
    /// ensemble); returns what it held, `None` (and sets nothing) for a scope with no fence.
    /// Only once no holder of the old ensemble can write.
    ///
    /// # Errors
    ///
    /// Redis's error; a negative `to`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one command.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(mut redis: redis::aio::MultiplexedConnection) -> redis::RedisResult<()> {
    /// zkfence_redis::RedisFence::new().rebase(&mut redis, "/locks/a", 0).await?;
    /// # Ok(()) }
    /// ```
    pub async fn rebase<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        scope: &str,
        to: i64,
    ) -> Result<Option<i64>, RedisError> {
        if to < 0 {
            let why = "a fence holds a token from 0".to_owned();
            return Err(RedisError::from((ErrorKind::Client, "bad rebase", why)));
        }
        // Only a fence that exists (XX): a rebase creates none.
        let old: Option<String> = redis::cmd("SET")
            .arg(self.fence_key(scope))
            .arg(padded(to))
            .arg("XX")
            .arg("GET")
            .query_async(conn)
            .await?;
        old.map(|v| parse_token(&v)).transpose()
    }

    /// One claim or write: the hold's check, the slot check, the script, its reply.
    async fn run<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        ticket: &FenceTicket,
        commands: Option<&Commands>,
    ) -> Result<(Option<i64>, Vec<Value>), FenceError<RedisError>> {
        let op = if commands.is_some() { "write" } else { "claim" };
        let work = self.attempt(conn, ticket, commands);
        fence::author::drive_once(STORE, op, ticket, work).await
    }

    async fn attempt<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        ticket: &FenceTicket,
        commands: Option<&Commands>,
    ) -> Result<(Option<i64>, Vec<Value>), FenceError<RedisError>> {
        let fence_key = self.fence_key(ticket.scope());
        if let Some(commands) = commands.filter(|_| self.flaw != Flaw::KeyOutsideSlot) {
            same_slot(&fence_key, commands.keys()).map_err(FenceError::Store)?;
        }
        ticket.check_before_commit()?;
        // Plain decimal, as ZKFENCE_TOKEN gives it to other languages' clients.
        let token = ticket.token().as_i64().to_string();
        self.send(conn, ticket, &fence_key, &token, commands).await
    }

    /// Sends the claim (the write, with `commands`) with the fence key and the token, as a
    /// script or an `FCALL`; reads its reply.
    async fn send<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        ticket: &FenceTicket,
        fence_key: &str,
        token: &str,
        commands: Option<&Commands>,
    ) -> Result<(Option<i64>, Vec<Value>), FenceError<RedisError>> {
        let mut args: Vec<&[u8]> = vec![token.as_bytes()];
        let counts = commands.map(|commands| (commands, commands.counts()));
        match &counts {
            Some((commands, Counts::Shape(shape))) => {
                // One command: its shape, then its arguments untagged (a key as its index).
                args.push(shape.as_bytes());
                args.extend(commands.commands[0].iter().map(|arg| &arg[1..]));
            }
            Some((commands, Counts::Tagged(count, lens))) => {
                args.push(count.as_bytes());
                for (command, len) in commands.commands.iter().zip(lens) {
                    args.push(len.as_bytes());
                    args.extend(command.iter().map(Vec::as_slice));
                }
            }
            None => {}
        }
        let mut keys = vec![fence_key];
        keys.extend(
            commands
                .iter()
                .flat_map(|c| c.keys.iter().map(String::as_str)),
        );
        if let Some(wait) = self.wait {
            let sent = self.call_and_wait(conn, &keys, &args, commands.is_some(), wait);
            return self.read_waited(ticket, sent.await, wait);
        }
        let sent = match self.call {
            Call::Scripts => {
                let mut invocation = self.script(commands.is_some()).prepare_invoke();
                for key in &keys {
                    invocation.key(*key);
                }
                for arg in &args {
                    invocation.arg(*arg);
                }
                invocation.invoke_async(conn).await
            }
            Call::Functions => {
                let (claim, write) = self.functions();
                let function = if commands.is_some() { write } else { claim };
                let mut call = redis::cmd("FCALL");
                call.arg(&function).arg(keys.len()).arg(&keys).arg(&args);
                (call.query_async(conn).await).map_err(|err| self.no_library(err))
            }
        };
        let reply: Value = match sent {
            Ok(reply) => reply,
            Err(err) if err.is_io_error() || err.is_connection_dropped() || err.is_timeout() => {
                return Err(ticket.in_doubt(err));
            }
            Err(err) => return Err(refusal(ticket, err)),
        };
        read_reply(ticket, reply)
    }
}

impl RedisFence {
    /// The fenced call as one command: `FCALL`, or `EVALSHA` with the `EVAL` to send instead
    /// to a server without the script cached.
    fn call_cmds(&self, keys: &[&str], args: &[&[u8]], write: bool) -> (Cmd, Option<Cmd>) {
        let with = |mut cmd: Cmd| {
            cmd.arg(keys.len()).arg(keys).arg(args);
            cmd
        };
        if self.call == Call::Functions {
            let (claim, write_fn) = self.functions();
            let mut fcall = redis::cmd("FCALL");
            fcall.arg(if write { write_fn } else { claim });
            return (with(fcall), None);
        }
        let lua = self.lua(if write { WRITE_SCRIPT } else { CLAIM_SCRIPT });
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha.arg(self.script(write).get_hash());
        let mut eval = redis::cmd("EVAL");
        eval.arg(lua);
        (with(evalsha), Some(with(eval)))
    }

    /// The fenced call and `WAIT` in one pipeline (again with `EVAL` for a server without
    /// the script cached): the call's reply, and how many replicas acknowledged it.
    async fn call_and_wait<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        keys: &[&str],
        args: &[&[u8]],
        write: bool,
        wait: Wait,
    ) -> RedisResult<(RedisResult<Value>, RedisResult<i64>)> {
        let (first, eval) = self.call_cmds(keys, args, write);
        let (reply, acked) = waited(conn, &first, wait).await?;
        match (reply, eval) {
            (Err(err), Some(eval))
                if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
            {
                waited(conn, &eval, wait).await
            }
            (reply, _) => Ok((reply, acked)),
        }
    }

    /// A call sent with `WAIT`: in doubt when the pipeline's reply was lost or fewer replicas
    /// than asked acknowledged an accepted call; else as a call alone.
    fn read_waited(
        &self,
        ticket: &FenceTicket,
        sent: RedisResult<(RedisResult<Value>, RedisResult<i64>)>,
        wait: Wait,
    ) -> Result<(Option<i64>, Vec<Value>), FenceError<RedisError>> {
        let (reply, acked) = match sent {
            Ok(sent) => sent,
            Err(err) if err.is_io_error() || err.is_connection_dropped() || err.is_timeout() => {
                return Err(ticket.in_doubt(err));
            }
            Err(err) => return Err(FenceError::Store(err)),
        };
        let reply = reply.map_err(|err| refusal(ticket, self.no_library(err)))?;
        let done = read_reply(ticket, reply)?;
        let seen = match acked {
            Ok(acked) if acked >= i64::from(wait.replicas) => return Ok(done),
            Ok(acked) => format!(
                "WAIT saw {acked} of the {} replicas asked for acknowledge it within {} ms",
                wait.replicas,
                wait.timeout.as_millis()
            ),
            Err(err) => format!("WAIT failed ({err})"),
        };
        let detail = format!(
            "the fence of {} took token {} on the primary, but {seen}: a failover now may lose it; read the fence back (or claim again) before relying on it, and check the replicas' links (INFO replication)",
            ticket.scope(),
            ticket.token().as_i64(),
        );
        tracing::warn!(scope = %ticket.scope(), "a fenced call not acknowledged by enough replicas: {seen}");
        let err = RedisError::from((ErrorKind::Client, "not replicated", detail));
        Err(ticket.in_doubt(err))
    }

    /// `err`, or, for a server without this fence's function library, an error that says to
    /// load it.
    fn no_library(&self, err: RedisError) -> RedisError {
        let missing = err.to_string().contains("Function not found");
        if !missing {
            return err;
        }
        let detail = format!(
            "the function library `{}` is not loaded on the server this call reached (in a Redis Cluster: the primary of the fence key's slot): run `zkfence fence install <URL>`, which loads it on every primary (or RedisFence::install)",
            self.library
        );
        RedisError::from((err.kind(), "no fence library", detail))
    }
}

/// `call`, then `WAIT`, in one pipeline on `conn` (on a cluster connection, both to the node of
/// the call's keys): the call's reply (its error reply as an error), and the replicas that
/// acknowledged the connection's writes.
async fn waited<C: ConnectionLike + Send>(
    conn: &mut C,
    call: &Cmd,
    wait: Wait,
) -> RedisResult<(RedisResult<Value>, RedisResult<i64>)> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors().add_command(call.clone());
    let millis = u64::try_from(wait.timeout.as_millis()).unwrap_or(u64::MAX);
    pipe.cmd("WAIT").arg(wait.replicas).arg(millis);
    let mut replies: Vec<Value> = pipe.query_async(conn).await?;
    let (acked, reply) = (replies.pop(), replies.pop());
    let (Some(acked), Some(reply)) = (acked, reply) else {
        let detail = "the pipeline of the call and WAIT did not reply twice".to_owned();
        return Err(RedisError::from((
            ErrorKind::Parse,
            "unexpected reply",
            detail,
        )));
    };
    let acked = acked.extract_error().and_then(|acked| match acked {
        Value::Int(n) => Ok(n),
        other => {
            let detail = format!("WAIT replied {other:?}");
            Err(RedisError::from((
                ErrorKind::Parse,
                "unexpected reply",
                detail,
            )))
        }
    });
    Ok((reply.extract_error(), acked))
}

/// `text` as a Lua string literal (every byte but plain printable ASCII as `\ddd`).
fn lua_string(text: &str) -> String {
    let mut out = String::from("'");
    for b in text.bytes() {
        match b {
            b' '..=b'~' if b != b'\'' && b != b'\\' => out.push(char::from(b)),
            _ => out.push_str(&format!("\\{b:03}")),
        }
    }
    out.push('\'');
    out
}

/// A script's error reply: the refusal (`ZF001 …`, ending with the token the fence holds) as
/// [`FenceError::Refused`], any other as Redis's error.
fn refusal(ticket: &FenceTicket, err: RedisError) -> FenceError<RedisError> {
    let seen = (err.code() == Some(zkfence::fence::REFUSED))
        .then(|| err.detail()?.rsplit(' ').next()?.parse::<i64>().ok())
        .flatten();
    match seen {
        Some(seen) => ticket.refused(seen),
        None => FenceError::Store(err),
    }
}

/// A script's reply: `{"ok", previous, replies}` (a refusal is an error reply).
fn read_reply(
    ticket: &FenceTicket,
    reply: Value,
) -> Result<(Option<i64>, Vec<Value>), FenceError<RedisError>> {
    let bad = |what: &str| {
        let detail = format!("the fence script replied {what}");
        FenceError::Store(RedisError::from((
            ErrorKind::Parse,
            "unexpected reply",
            detail,
        )))
    };
    let Value::Array(mut parts) = reply else {
        return Err(bad("something else than an array"));
    };
    let text = |v: &Value| match v {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let verdict = parts.first().and_then(text).unwrap_or_default();
    let seen = parts.get(1).and_then(text).unwrap_or_default();
    match verdict.as_str() {
        // An earlier version's mutant scripts replied so; none of this one's do.
        "refused" => {
            let seen = parse_token(&seen).map_err(FenceError::Store)?;
            Err(ticket.refused(seen))
        }
        "ok" => {
            let before = match seen.as_str() {
                "" => None,
                seen => Some(parse_token(seen).map_err(FenceError::Store)?),
            };
            let replies = match parts.len() > 2 {
                true => match parts.swap_remove(2) {
                    Value::Array(replies) => replies,
                    _ => return Err(bad("a non-array for the commands' replies")),
                },
                false => Vec::new(),
            };
            Ok((before, replies))
        }
        other => Err(bad(other)),
    }
}

/// Every key matching `pattern` (`SCAN`, whatever its cursor's steps return).
pub(crate) async fn scan<C: ConnectionLike + Send>(
    conn: &mut C,
    pattern: &str,
) -> Result<Vec<String>, RedisError> {
    let mut cursor: u64 = 0;
    let mut keys = Vec::new();
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await?;
        keys.extend(batch);
        if next == 0 {
            return Ok(keys);
        }
        cursor = next;
    }
}

/// `text` with Redis's glob characters escaped, for a `SCAN MATCH` pattern.
pub(crate) fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A token as the fence keeps it: 19 digits, zero-padded, so that equal-length strings compare
/// as the integers they spell.
fn padded(token: i64) -> String {
    format!("{token:019}")
}

/// A fence key's value back as a token.
fn parse_token(value: &str) -> Result<i64, RedisError> {
    let digits = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit());
    digits
        .then(|| value.parse::<i64>().ok())
        .flatten()
        .ok_or_else(|| {
            let detail = format!("{value:?} is not a token: is the key a zkfence fence key?");
            RedisError::from((ErrorKind::Parse, "not a fence", detail))
        })
}

/// Refuses a key whose hash slot is not the fence key's (Redis Cluster runs a script only on
/// keys of one slot).
fn same_slot(fence_key: &str, keys: &[String]) -> Result<(), RedisError> {
    let slot = hash_slot(fence_key);
    match keys.iter().find(|key| hash_slot(key) != slot) {
        None => Ok(()),
        Some(key) => {
            let detail = format!("{key:?} is not in the hash slot of the fence key {fence_key:?}: put the fence key's hash tag (its `{{...}}` part) in every key you write under the fence");
            Err(RedisError::from((
                ErrorKind::Client,
                "key outside the fence's slot",
                detail,
            )))
        }
    }
}

/// A key's Redis Cluster hash slot: CRC16 (XMODEM) of its hash tag (the part between the first
/// `{` and the next `}`, when not empty) or of the whole key, modulo 16384.
pub(crate) fn hash_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|&b| b == b'{').and_then(|open| {
        let close = bytes[open + 1..].iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &bytes[open + 1..open + 1 + close])
    });
    crc16(tagged.unwrap_or(bytes)) % 16384
}

/// CRC16-CCITT (XMODEM), as Redis Cluster computes it.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// `sound` (a script or the function library) with `flaw` written in (zkfence's own tests).
fn mutated(flaw: Flaw, sound: &str) -> String {
    let refuse = "if above(seen, ours) then";
    let raise = "if not seen or above(ours, seen) then";
    match flaw {
        // Lua numbers are doubles: 2^53 and 2^53 + 1 read as one number.
        Flaw::DoubleCompare => sound
            .replace(refuse, "if tonumber(seen) > tonumber(ours) then")
            .replace(raise, "if not seen or tonumber(ours) > tonumber(seen) then"),
        Flaw::StrictlyGreater => sound.replace(refuse, "if not above(ours, seen) then"),
        Flaw::NoUpsert => sound.replace(
            "  local seen = nil\n  if stored then",
            "  local seen = nil\n  if not stored then return nil, nil, redis.error_reply('ZF001 zkfence: refused: no fence yet; the fence holds 0') end\n  if stored then",
        ),
        // The write with no compare at all: it trusts the claim its caller made before reading,
        // which a newer holder may have overtaken since.
        Flaw::CheckOutsideTransaction => sound.replace(
            "  local ours, seen, err = compare(KEYS[1], ARGV[1])\n  if err then return err end\n  raise(KEYS[1], ours, seen)\n  local replies",
            "  local seen = nil\n  local replies",
        ),
        // The scripts before this one: a token's text compared as it came, padded or not.
        Flaw::NoFormCheck => sound
            .replace(
                "local function token(text)\n",
                "local function token(text)\n  if true then return text end\n",
            )
            .replace(
                "local function above(a, b)\n",
                "local function above(a, b)\n  if true then return a > b end\n",
            ),
        // Any key taken for a fence: a claim on a key of the application's that holds a
        // number overwrites it.
        Flaw::AnyKeyClaim => sound.replace("  if not fence_key(key) then\n", "  if false then\n"),
        Flaw::None | Flaw::KeyOutsideSlot => sound.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Redis Cluster's own examples: `CLUSTER KEYSLOT` of these keys.
    #[test]
    fn hash_slots_are_redis_clusters() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(hash_slot("foo"), 12182);
        assert_eq!(
            hash_slot("{user1000}.following"),
            hash_slot("{user1000}.followers")
        );
        assert_eq!(hash_slot("foo{}{bar}"), hash_slot("foo{}{bar}"));
        assert_eq!(hash_slot("foo{{bar}}zap"), hash_slot("{bar"));
        assert_eq!(
            hash_slot("{/locks/a}:n"),
            hash_slot("zkfence:fence:{/locks/a}")
        );
    }

    #[test]
    fn padded_tokens_compare_as_integers() {
        let tokens = [0, 9, 10, 99, 100, (1 << 53), (1 << 53) + 1, i64::MAX];
        for pair in tokens.windows(2) {
            assert!(padded(pair[0]) < padded(pair[1]), "{pair:?}");
        }
        assert_eq!(parse_token(&padded(i64::MAX)).unwrap(), i64::MAX);
        assert!(parse_token("-1").is_err());
        assert!(parse_token("").is_err());
    }

    #[test]
    fn the_key_prefix_is_written_into_the_lua_as_a_literal() {
        let fence = RedisFence::new().with_prefix("app's\\fence:\n");
        let library = fence.library();
        assert!(library.contains("local PREFIX = 'app\\039s\\092fence:\\010'\n"));
        assert!(!library.contains("'zkfence:fence:'"));
        for script in fence.scripts() {
            assert!(script.contains("local PREFIX = 'app\\039s"), "{script}");
        }
        assert_eq!(RedisFence::new().scripts()[0], CLAIM_SCRIPT);
    }

    #[test]
    fn commands_mark_their_keys() {
        let commands = Commands::new()
            .command(|c| c.arg("SET").key("{s}:a").arg(1))
            .command(|c| c.arg("MGET").key("{s}:b").key("{s}:a"));
        assert_eq!(commands.keys(), ["{s}:a", "{s}:b"]);
        assert_eq!(
            commands.commands[1],
            [b"vMGET".to_vec(), b"k3".to_vec(), b"k2".to_vec()]
        );
    }
}
