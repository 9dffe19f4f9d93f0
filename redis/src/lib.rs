//! A Redis fence for [`zkfence`]: the fence's compare and the caller's commands run in one
//! Lua script, so Redis refuses a stale lock holder's write atomically with the write itself.
//!
//! # How it is kept
//!
//! Each **scope** (a lock path) has a fence key, `zkfence:fence:{<scope>}`, holding the highest
//! token accepted as a **zero-padded 19-digit decimal string**. Lua's numbers are doubles: above
//! 2⁵³ two neighbouring tokens compare equal, so the scripts never call `tonumber` on a token;
//! equal-length decimal strings compare as the integers they spell. The scripts
//! ([`CLAIM_SCRIPT`], [`WRITE_SCRIPT`]) are published for users of other clients.
//!
//! - [`RedisFence::claim`] raises the fence (refusing a lower token);
//! - [`RedisFence::write`] runs your [`Commands`] in the same script, after the compare, and
//!   returns their replies: nothing of them runs for a refused token;
//! - a read-modify-write **claims before it reads** (as every fence here: see
//!   [`zkfence::fence`]); the write's script compares again.
//!
//! # Redis's own limits, said plainly
//!
//! - **Cluster**: a script may only touch keys of one hash slot. The fence key's hash tag is
//!   the scope (`{/locks/orders}`); put the same tag in every key you write under the fence
//!   (`{/locks/orders}:balance`). [`RedisFence::write`] refuses, before sending, a key of
//!   another slot.
//! - **A failover can take the fence backwards**: replication is asynchronous, so a fence
//!   raised on a primary that dies before replicating it is lost with it, and the promoted
//!   replica accepts an older token again. `WAIT` after the write (with enough replicas)
//!   narrows that window; only a store with synchronous replication closes it.
//! - **Scripts are not rolled back**: a command of yours that errors inside the script stops
//!   it, and the commands before it stay applied. Write commands that cannot fail (right key
//!   types) and check the replies.
//!
//! # Examples
//!
//! ```no_run
//! use zkfence::{Acquire, FencedLock, LockOptions};
//! use zkfence_redis::{Commands, RedisFence};
//!
//! # async fn demo(zk: zookeeper_client::Client, mut redis: redis::aio::MultiplexedConnection) -> Result<(), Box<dyn std::error::Error>> {
//! let lock = FencedLock::new(zk, "/locks/orders", LockOptions::default())?;
//! let fence = RedisFence::new();
//! let guard = lock.acquire().await?;
//! let ticket = guard.ticket();
//! fence.claim(&mut redis, &ticket).await?; // before the first read
//! let total: i64 = redis::cmd("GET").arg("{/locks/orders}:total").query_async(&mut redis).await.unwrap_or(0);
//! let commands = Commands::new().command(|c| c.arg("SET").key("{/locks/orders}:total").arg(total + 1));
//! fence.write(&mut redis, &ticket, &commands).await?;
//! guard.release().await?;
//! # Ok(()) }
//! ```

#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]

use std::time::Instant;

use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError, Script, Value};
use tracing::Instrument;
use zkfence::fence::{self, FenceError, FenceTicket};

/// The label of this store in the `zkfence_fence_*` metrics.
const STORE: &str = "redis";

/// The claim: `KEYS[1]` the fence key, `ARGV[1]` the token (19 digits, zero-padded). Replies
/// `{"refused", seen}` or `{"ok", previous or ""}`.
pub const CLAIM_SCRIPT: &str = r#"
local seen = redis.call('GET', KEYS[1])
if seen and seen > ARGV[1] then
  return {'refused', seen}
end
if not seen or seen < ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1])
end
return {'ok', seen or ''}
"#;

/// The fenced write: the claim's compare, then the caller's commands. `KEYS[1]` the fence key,
/// `KEYS[2..]` the commands' keys; `ARGV[1]` the token, `ARGV[2]` the number of commands,
/// then per command its argument count and arguments, each tagged by its first byte: `k` and
/// a key index (`k2` is `KEYS[2]`), or `v` and the value. Replies `{"refused", seen}` or
/// `{"ok", previous or "", {replies...}}`.
pub const WRITE_SCRIPT: &str = r#"
local seen = redis.call('GET', KEYS[1])
if seen and seen > ARGV[1] then
  return {'refused', seen}
end
if not seen or seen < ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1])
end
local replies = {}
local at = 3
for c = 1, tonumber(ARGV[2]) do
  local argc = tonumber(ARGV[at])
  at = at + 1
  local args = {}
  for a = 1, argc do
    local arg = ARGV[at]
    at = at + 1
    if string.sub(arg, 1, 1) == 'k' then
      args[a] = KEYS[tonumber(string.sub(arg, 2))]
    else
      args[a] = string.sub(arg, 2)
    end
  end
  replies[c] = redis.call(unpack(args))
end
return {'ok', seen or '', replies}
"#;

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
    flaw: Flaw,
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
            prefix: "zkfence:fence:".to_owned(),
            flaw: Flaw::None,
        }
    }

    /// Fence keys `<prefix>{<scope>}` (a test's namespace, an application's).
    ///
    /// # Examples
    ///
    /// ```
    /// let fence = zkfence_redis::RedisFence::new().with_prefix("orders:fence:");
    /// assert_eq!(fence.fence_key("/locks/a"), "orders:fence:{/locks/a}");
    /// ```
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// **For zkfence's own tests**: the fence with one of its rules broken.
    #[cfg(feature = "mutants")]
    #[doc(hidden)]
    pub fn with_mutant(mut self, mutant: zkfence::FenceMutant) -> Self {
        use zkfence::FenceMutant as M;
        self.flaw = match mutant {
            M::CheckOutsideTransaction => Flaw::CheckOutsideTransaction,
            M::DoubleCompare | M::StringCompare => Flaw::DoubleCompare,
            M::KeyOutsideSlot => Flaw::KeyOutsideSlot,
            M::StrictlyGreater => Flaw::StrictlyGreater,
            M::NoUpsert => Flaw::NoUpsert,
            _ => Flaw::None,
        };
        self
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
    /// ensemble); returns what it held. Only once no holder of the old ensemble can write.
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
        let old: Option<String> = redis::cmd("SET")
            .arg(self.fence_key(scope))
            .arg(padded(to))
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
        let started = Instant::now();
        let span = tracing::debug_span!(
            "fence",
            store = STORE,
            scope = ticket.scope(),
            fencing_token = %ticket.token(),
        );
        let outcome = self
            .attempt(conn, ticket, commands)
            .instrument(span.clone())
            .await;
        let _entered = span.enter();
        fence::record(STORE, started, &outcome);
        outcome
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
        let token = padded(ticket.token().as_i64());
        let script = match self.flaw {
            Flaw::None => match commands {
                Some(_) => WRITE_SCRIPT.to_owned(),
                None => CLAIM_SCRIPT.to_owned(),
            },
            flaw => mutant_script(flaw, commands.is_some()),
        };
        self.send(conn, ticket, &fence_key, &script, &token, commands)
            .await
    }

    /// Sends `script` with the fence key, the token and the commands; reads its reply.
    async fn send<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        ticket: &FenceTicket,
        fence_key: &str,
        script: &str,
        token: &str,
        commands: Option<&Commands>,
    ) -> Result<(Option<i64>, Vec<Value>), FenceError<RedisError>> {
        let script = Script::new(script);
        let mut invocation = script.key(fence_key);
        invocation.arg(token);
        if let Some(commands) = commands {
            for key in &commands.keys {
                invocation.key(key);
            }
            invocation.arg(commands.commands.len());
            for command in &commands.commands {
                invocation.arg(command.len());
                for arg in command {
                    invocation.arg(arg.as_slice());
                }
            }
        }
        let reply: Value = match invocation.invoke_async(conn).await {
            Ok(reply) => reply,
            Err(err) if err.is_io_error() || err.is_connection_dropped() || err.is_timeout() => {
                return Err(ticket.in_doubt(err));
            }
            Err(err) => return Err(FenceError::Store(err)),
        };
        read_reply(ticket, reply)
    }
}

/// A script's reply: `{"refused", seen}` or `{"ok", previous, replies}`.
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
fn hash_slot(key: &str) -> u16 {
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

/// A mutant's script: the sound one with its compare broken one way (zkfence's own tests).
fn mutant_script(flaw: Flaw, commands: bool) -> String {
    let sound = if commands { WRITE_SCRIPT } else { CLAIM_SCRIPT };
    let compare = "if seen and seen > ARGV[1] then";
    let raise = "if not seen or seen < ARGV[1] then";
    match flaw {
        // Lua numbers are doubles: 2^53 and 2^53 + 1 read as one number.
        Flaw::DoubleCompare => sound
            .replace(compare, "if seen and tonumber(seen) > tonumber(ARGV[1]) then")
            .replace(raise, "if not seen or tonumber(seen) < tonumber(ARGV[1]) then"),
        Flaw::StrictlyGreater => sound.replace(compare, "if seen and seen >= ARGV[1] then"),
        Flaw::NoUpsert => sound.replace(
            compare,
            "if not seen then return {'refused', '0000000000000000000'} end\nif seen > ARGV[1] then",
        ),
        // The write with no compare at all: it trusts the claim its caller made before reading,
        // which a newer holder may have overtaken since.
        Flaw::CheckOutsideTransaction => {
            let start = sound.find("local replies").unwrap_or(0);
            format!("local seen = nil\n{}", &sound[start..])
        }
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
