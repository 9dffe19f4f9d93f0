//! The Redis lock many users pick instead of a ZooKeeper lock, as the bench's peer (the demo has
//! its own, smaller, in `cli/src/demo/redis_lock.rs`). One Redis server, a key per lock:
//!
//! - acquire: `SET key <random value> NX PX <ttl>`; taken when it answers `OK`;
//! - release: a script that deletes the key only if it still holds our value (the
//!   compare-and-delete every Redis lock library uses), awaited;
//! - a waiter either retries after a random 50–250 ms (go-redsync's defaults, `retry`), or
//!   subscribes to a channel the release publishes on and retries when told (Redisson's way,
//!   `pubsub`), with the key's TTL as its longest wait.
//!
//! No fencing token, no watchdog: a holder that stalls past the TTL is not told that its lock
//! has passed on (`zkfence demo --redis` shows it). The client is a few lines of RESP over one
//! TCP connection per contender (two with `pubsub`), each contender's own, as each ZooKeeper
//! contender has its own session.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;

/// The bench's TTL: a holder that stalls longer loses the lock without being told.
pub(crate) const TTL: Duration = Duration::from_secs(10);

/// Deletes the key if it holds our value: 1 if it did, 0 if someone else's value is there.
const RELEASE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/// As [`RELEASE`], and tells the waiters subscribed to `KEYS[2]`.
const RELEASE_AND_PUBLISH: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], '1'); return 1 else return 0 end";

/// A reply, as RESP 2 has them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    Status(String),
    Error(String),
    Integer(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

/// One connection to a Redis server.
#[derive(Debug)]
pub(crate) struct Resp {
    stream: BufReader<TcpStream>,
}

impl Resp {
    pub(crate) async fn connect(addr: &str) -> io::Result<Resp> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Resp {
            stream: BufReader::new(stream),
        })
    }

    /// Sends one command and reads its reply.
    pub(crate) async fn call(&mut self, args: &[&[u8]]) -> io::Result<Reply> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            out.extend_from_slice(arg);
            out.extend_from_slice(b"\r\n");
        }
        self.stream.get_mut().write_all(&out).await?;
        self.read().await
    }

    /// Reads the next reply (or, subscribed, the next message).
    pub(crate) async fn read(&mut self) -> io::Result<Reply> {
        let mut line = String::new();
        if self.stream.read_line(&mut line).await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "redis closed the connection",
            ));
        }
        let line = line.trim_end_matches("\r\n");
        let (kind, rest) = line.split_at(line.len().min(1));
        let number = || {
            rest.parse::<i64>().map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("bad RESP line {line:?}"),
                )
            })
        };
        Ok(match kind {
            "+" => Reply::Status(rest.to_owned()),
            "-" => Reply::Error(rest.to_owned()),
            ":" => Reply::Integer(number()?),
            "$" if number()? < 0 => Reply::Bulk(None),
            "$" => {
                let mut data = vec![0; number()? as usize + 2];
                self.stream.read_exact(&mut data).await?;
                data.truncate(data.len() - 2);
                Reply::Bulk(Some(data))
            }
            "*" if number()? < 0 => Reply::Array(None),
            "*" => {
                let mut items = Vec::new();
                for _ in 0..number()? {
                    items.push(Box::pin(self.read()).await?);
                }
                Reply::Array(Some(items))
            }
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("bad RESP line {line:?}"),
                ))
            }
        })
    }
}

/// The commands the server at `addr` has processed so far (`INFO stats`).
pub(crate) async fn commands_processed(addr: &str) -> io::Result<u64> {
    let mut conn = Resp::connect(addr).await?;
    let Reply::Bulk(Some(info)) = conn.call(&[b"INFO", b"stats"]).await? else {
        return Err(io::Error::other("INFO stats answered no text"));
    };
    String::from_utf8_lossy(&info)
        .lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| io::Error::other("INFO stats has no total_commands_processed"))
}

/// How a waiter waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waiting {
    /// Retries after a random 50–250 ms (go-redsync).
    Retry,
    /// Retries when the release's message arrives, or after the TTL (Redisson).
    Pubsub,
}

/// One contender's connections to the lock.
#[derive(Debug)]
pub(crate) struct Contender {
    commands: Resp,
    /// Subscribed to the lock's channel (`Pubsub`).
    messages: Option<Resp>,
    key: String,
    channel: String,
    waiting: Waiting,
    /// The key's expiry, set with each acquire.
    ttl: Duration,
    /// A counter for our values, unique with the contender's random base.
    count: u64,
    base: u64,
}

impl Contender {
    /// Connects (and subscribes, for `Pubsub`) for the lock `key`, whose acquires expire after
    /// `ttl`.
    pub(crate) async fn connect(
        addr: &str,
        key: &str,
        waiting: Waiting,
        ttl: Duration,
    ) -> io::Result<Contender> {
        let commands = Resp::connect(addr).await?;
        let channel = format!("{key}:released");
        let messages = match waiting {
            Waiting::Retry => None,
            Waiting::Pubsub => {
                let mut messages = Resp::connect(addr).await?;
                messages.call(&[b"SUBSCRIBE", channel.as_bytes()]).await?;
                Some(messages)
            }
        };
        Ok(Contender {
            commands,
            messages,
            key: key.to_owned(),
            channel,
            waiting,
            ttl,
            count: 0,
            base: std::process::id() as u64 ^ (uuid::Uuid::new_v4().as_u128() as u64),
        })
    }

    /// Waits until the lock is ours; the value that proves it.
    pub(crate) async fn acquire(&mut self) -> io::Result<Vec<u8>> {
        self.count += 1;
        let value = format!("{:x}-{}", self.base, self.count).into_bytes();
        let ttl = self.ttl.as_millis().to_string();
        loop {
            let set = [
                b"SET" as &[u8],
                self.key.as_bytes(),
                &value,
                b"NX",
                b"PX",
                ttl.as_bytes(),
            ];
            match self.commands.call(&set).await? {
                Reply::Status(ok) if ok == "OK" => return Ok(value),
                Reply::Bulk(None) => self.wait().await?,
                other => return Err(io::Error::other(format!("SET answered {other:?}"))),
            }
        }
    }

    /// Until it is worth trying again.
    async fn wait(&mut self) -> io::Result<()> {
        match (&mut self.messages, self.waiting) {
            (Some(messages), Waiting::Pubsub) => {
                // A message published before our SET failed is still in the socket: at worst
                // one try too many.
                let _ = tokio::time::timeout(self.ttl, messages.read()).await;
            }
            _ => {
                let jitter = uuid::Uuid::new_v4().as_u128() % 200;
                tokio::time::sleep(Duration::from_millis(50 + jitter as u64)).await;
            }
        }
        Ok(())
    }

    /// Gives the lock back if it still holds `value`; whether it did.
    pub(crate) async fn release(&mut self, value: &[u8]) -> io::Result<bool> {
        let reply = match self.waiting {
            Waiting::Retry => {
                let script = [
                    b"EVAL" as &[u8],
                    RELEASE.as_bytes(),
                    b"1",
                    self.key.as_bytes(),
                    value,
                ];
                self.commands.call(&script).await?
            }
            Waiting::Pubsub => {
                let (key, channel) = (self.key.as_bytes(), self.channel.as_bytes());
                let script = [
                    b"EVAL" as &[u8],
                    RELEASE_AND_PUBLISH.as_bytes(),
                    b"2",
                    key,
                    channel,
                    value,
                ];
                self.commands.call(&script).await?
            }
        };
        Ok(reply == Reply::Integer(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_value_holds_the_lock_until_its_own_release() {
        let redis = zkfence_harness::LocalRedis::start().unwrap_or_else(|err| panic!("{err}"));
        for waiting in [Waiting::Retry, Waiting::Pubsub] {
            let key = format!("lock-{waiting:?}");
            let mut a = Contender::connect(&redis.addr(), &key, waiting, TTL)
                .await
                .unwrap();
            let mut b = Contender::connect(&redis.addr(), &key, waiting, TTL)
                .await
                .unwrap();
            let held = a.acquire().await.unwrap();
            let waiter = tokio::spawn(async move {
                let value = b.acquire().await.unwrap();
                (b, value)
            });
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(!waiter.is_finished(), "{waiting:?}: two holders");
            assert!(
                !a.release(b"not ours").await.unwrap(),
                "a foreign value released it"
            );
            assert!(a.release(&held).await.unwrap());
            let (mut b, value) = tokio::time::timeout(Duration::from_secs(2), waiter)
                .await
                .unwrap()
                .unwrap();
            assert!(b.release(&value).await.unwrap());
        }
    }

    #[tokio::test]
    async fn replies_of_every_kind_parse() {
        let redis = zkfence_harness::LocalRedis::start().unwrap_or_else(|err| panic!("{err}"));
        let mut r = Resp::connect(&redis.addr()).await.unwrap();
        assert_eq!(
            r.call(&[b"SET", b"k", b"v"]).await.unwrap(),
            Reply::Status("OK".into())
        );
        assert_eq!(
            r.call(&[b"GET", b"k"]).await.unwrap(),
            Reply::Bulk(Some(b"v".to_vec()))
        );
        assert_eq!(r.call(&[b"GET", b"none"]).await.unwrap(), Reply::Bulk(None));
        assert_eq!(r.call(&[b"INCR", b"n"]).await.unwrap(), Reply::Integer(1));
        assert!(matches!(
            r.call(&[b"NOSUCH"]).await.unwrap(),
            Reply::Error(_)
        ));
        let listed = r.call(&[b"KEYS", b"*"]).await.unwrap();
        assert!(matches!(listed, Reply::Array(Some(items)) if items.len() == 2));
    }
}
