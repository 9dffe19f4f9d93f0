//! The workers' events: one typed enum that a worker writes (one JSON line each on stdout) and
//! the controller and the checker read back, so that a misspelled event or field does not
//! compile.
//!
//! The JSON is the suite's log format: `{"t": …, "w": …, "pid": …, "ev": "granted", …fields}`,
//! with the event's name under `ev` in kebab case (`check-failed`, `session-ended`). Logs of
//! earlier runs read back unchanged.

use crate::clock::ms;
use serde::{Deserialize, Serialize};

/// One line of a worker's log: when, which worker, which process, and what happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Event {
    /// `CLOCK_MONOTONIC` in nanoseconds (see [`crate::clock`]).
    pub t: i64,
    /// The worker's number.
    pub w: u32,
    /// The worker's process (a restarted worker has a new one).
    pub pid: u32,
    /// What happened.
    #[serde(flatten)]
    pub ev: Ev,
}

/// Which side of a read/write lock a hold or an acquire is on (`write` for a plain lock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Role {
    Read,
    Write,
}

/// What a fenced statement does: raise the fence to the token, or increment the counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum OpKind {
    Fence,
    Write,
}

impl OpKind {
    /// The name the store's `log.kind` column uses.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            OpKind::Fence => "fence",
            OpKind::Write => "write",
        }
    }
}

/// The row of a grant in logs of runs before multi-locks: the only one.
fn first_row() -> u32 {
    1
}

/// What a worker logs, in the order a hold goes through them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "kebab-case")]
pub(crate) enum Ev {
    /// The process started.
    Start {
        mutant: String,
        ride_out: bool,
        session_ms: u64,
        /// The grace period (`LockOptions::with_grace`), 0 for none (and in earlier runs' logs).
        #[serde(default)]
        grace_ms: u64,
    },
    /// A ZooKeeper session was established.
    Session { session: i64, timeout_ms: u64 },
    /// A connection attempt failed (retried).
    ConnectFailed { error: String },
    /// The lock could not be made; the worker exits.
    Fatal { error: String },
    /// About to acquire the lock.
    Acquire { role: Role },
    /// `acquire_timeout` timed out or failed.
    AcquireFailed { error: String },
    /// `acquire` returned; `valid` if the lease check right after it passed (its `t` was taken
    /// before that check), or, when that check found the hold in `jeopardy`, if it was steady
    /// again and checked before the worker went on (not a passing check at `t`, then).
    Granted {
        token: u64,
        seq: i64,
        node: String,
        session: i64,
        valid: bool,
        long: bool,
        role: Role,
        #[serde(default)]
        jeopardy: bool,
        /// The store row this lock path's writes go to (1 in a scenario of one lock path; a
        /// multi-lock logs a grant per path), by which the checker splits its invariants.
        #[serde(default = "first_row")]
        row: u32,
    },
    /// A reentrant acquire by the task that holds `token` returned a nested hold with
    /// `inner`'s token (the same, if reentrancy works): no request, the same node.
    Nested { token: u64, inner: u64 },
    /// The nested hold of `token` was released; the outer hold goes on (its node stays).
    Unnested { token: u64 },
    /// The hold was stretched on the controller's SIGUSR1.
    Extended { token: u64 },
    /// About to read the counter (the think phase of an increment).
    Read { token: u64 },
    /// A fenced statement is about to be sent; `t` and `lease_left_ms` are the lease check's.
    Invoke {
        op: String,
        kind: OpKind,
        token: u64,
        value: Option<i64>,
        lease_left_ms: i64,
        checked: bool,
    },
    /// The store accepted the statement.
    Ok { op: String, token: u64 },
    /// The store refused the statement (its fence is above the token).
    Fail { op: String, token: u64, why: String },
    /// The statement's outcome is unknown (the connection failed).
    Unknown {
        op: String,
        token: u64,
        error: String,
    },
    /// The store's error before the commit (`FenceError::Store`), or no connection to send
    /// it on: by the fence's contract nothing of it applied (the checker holds it to that).
    NotApplied {
        op: String,
        token: u64,
        error: String,
    },
    /// A polled lease check passed (a stretched holder).
    Lease { token: u64, lease_left_ms: i64 },
    /// A reader's read of the store, `valid` if the lease checks around it passed.
    Observe {
        token: u64,
        counter: i64,
        fence: i64,
        valid: bool,
    },
    /// A lease check failed; the hold ends.
    CheckFailed { token: u64, error: String },
    /// A lease check found the hold in jeopardy (only with a grace): not lost, but no side
    /// effect until it is steady again. Not a passing check. The worker awaits `steady()`.
    Jeopardy { token: u64 },
    /// `steady()` returned after `waited_ms`: a committed probe found the node again. The
    /// worker checks its lease again (with a time of its own) before going on; this event is
    /// not a passing check either.
    Steady { token: u64, waited_ms: u64 },
    /// The watchdog cancelled the hold (logged by a task waiting on `Held::lost()`).
    Cancel { token: u64, reason: String },
    /// After a hold was lost (`reason`), before its release: whether its lock node was still
    /// there, asked on the worker's own session once it could answer (a `sync`, then
    /// `exists`). `false` also when the session was over (its ephemeral node went with it);
    /// `null` when no answer came within 3T. A node that survived makes the loss needless.
    LossVerdict {
        token: u64,
        reason: String,
        node_survived: Option<bool>,
        waited_ms: u64,
    },
    /// About to release the lock.
    Release { token: u64 },
    /// The release returned.
    Released { token: u64, error: Option<String> },
    /// The session is gone; the worker connects again.
    SessionEnded { state: String },
}

impl Ev {
    /// The event's name, as the log spells it.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Ev::Start { .. } => "start",
            Ev::Session { .. } => "session",
            Ev::ConnectFailed { .. } => "connect-failed",
            Ev::Fatal { .. } => "fatal",
            Ev::Acquire { .. } => "acquire",
            Ev::AcquireFailed { .. } => "acquire-failed",
            Ev::Granted { .. } => "granted",
            Ev::Nested { .. } => "nested",
            Ev::Unnested { .. } => "unnested",
            Ev::Extended { .. } => "extended",
            Ev::Read { .. } => "read",
            Ev::Invoke { .. } => "invoke",
            Ev::Ok { .. } => "ok",
            Ev::Fail { .. } => "fail",
            Ev::Unknown { .. } => "unknown",
            Ev::NotApplied { .. } => "not-applied",
            Ev::Lease { .. } => "lease",
            Ev::Observe { .. } => "observe",
            Ev::CheckFailed { .. } => "check-failed",
            Ev::Jeopardy { .. } => "jeopardy",
            Ev::Steady { .. } => "steady",
            Ev::Cancel { .. } => "cancel",
            Ev::LossVerdict { .. } => "loss-verdict",
            Ev::Release { .. } => "release",
            Ev::Released { .. } => "released",
            Ev::SessionEnded { .. } => "session-ended",
        }
    }

    /// The token the event is about, if it is about one.
    pub(crate) fn token(&self) -> Option<u64> {
        match self {
            Ev::Granted { token, .. }
            | Ev::Nested { token, .. }
            | Ev::Unnested { token }
            | Ev::Extended { token }
            | Ev::Read { token }
            | Ev::Invoke { token, .. }
            | Ev::Ok { token, .. }
            | Ev::Fail { token, .. }
            | Ev::Unknown { token, .. }
            | Ev::NotApplied { token, .. }
            | Ev::Lease { token, .. }
            | Ev::Observe { token, .. }
            | Ev::CheckFailed { token, .. }
            | Ev::Jeopardy { token }
            | Ev::Steady { token, .. }
            | Ev::Cancel { token, .. }
            | Ev::LossVerdict { token, .. }
            | Ev::Release { token }
            | Ev::Released { token, .. } => Some(*token),
            _ => None,
        }
    }

    /// The op id of a fenced statement's invoke or outcome.
    pub(crate) fn op(&self) -> Option<&str> {
        match self {
            Ev::Invoke { op, .. }
            | Ev::Ok { op, .. }
            | Ev::Fail { op, .. }
            | Ev::Unknown { op, .. }
            | Ev::NotApplied { op, .. } => Some(op),
            _ => None,
        }
    }
}

impl Event {
    /// The event's token, if it has one.
    pub(crate) fn token(&self) -> Option<u64> {
        self.ev.token()
    }

    /// A grant whose lease check passed right after `acquire` returned.
    pub(crate) fn valid_grant(&self) -> bool {
        matches!(self.ev, Ev::Granted { valid: true, .. })
    }

    /// A grant's store row (its lock path's), if the event is a grant.
    pub(crate) fn row(&self) -> Option<u32> {
        match self.ev {
            Ev::Granted { row, .. } => Some(row),
            _ => None,
        }
    }

    /// A read lock's grant (readers share the lock with each other).
    pub(crate) fn reader(&self) -> bool {
        matches!(
            self.ev,
            Ev::Granted {
                role: Role::Read,
                ..
            }
        )
    }

    /// The worker passed a lease check at `t` (taken just before the check): a valid grant, an
    /// invoke after a check, a polled check, a reader's checked read. `Some(is_reader)` if so.
    /// Jeopardy never is: a check in jeopardy failed, and after `steady()` returns the worker
    /// checks again, and that check (an invoke's, a poll's) is the one that counts.
    pub(crate) fn passed_check(&self) -> Option<bool> {
        match self.ev {
            Ev::Granted {
                valid: true,
                jeopardy: false,
                ..
            } => Some(self.reader()),
            Ev::Invoke { checked: true, .. } | Ev::Lease { .. } => Some(false),
            Ev::Observe { valid: true, .. } => Some(true),
            Ev::Jeopardy { .. } | Ev::Steady { .. } | Ev::Granted { .. } => None,
            _ => None,
        }
    }

    /// One line of a counterexample: the time since `t0`, who, the event and its fields.
    pub(crate) fn line(&self, t0: i64) -> String {
        let mut fields = serde_json::to_value(&self.ev).unwrap_or_default();
        if let Some(map) = fields.as_object_mut() {
            map.remove("ev");
        }
        format!(
            "{:>9.1} ms  w{} pid {} {} {}",
            ms(t0, self.t),
            self.w,
            self.pid,
            self.ev.name(),
            fields
        )
    }

    /// The event as one line of the worker's log (without the newline).
    pub(crate) fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One event of every kind.
    fn every_kind() -> Vec<Ev> {
        let s = || "x".to_string();
        vec![
            Ev::Start {
                mutant: s(),
                ride_out: true,
                session_ms: 2000,
                grace_ms: 2000,
            },
            Ev::Session {
                session: 7,
                timeout_ms: 2000,
            },
            Ev::ConnectFailed { error: s() },
            Ev::Fatal { error: s() },
            Ev::Acquire { role: Role::Read },
            Ev::AcquireFailed { error: s() },
            Ev::Granted {
                token: 1,
                seq: 2,
                node: s(),
                session: 3,
                valid: true,
                long: false,
                role: Role::Write,
                jeopardy: true,
                row: 2,
            },
            Ev::Nested { token: 1, inner: 1 },
            Ev::Unnested { token: 1 },
            Ev::Extended { token: 1 },
            Ev::Read { token: 1 },
            Ev::Invoke {
                op: s(),
                kind: OpKind::Write,
                token: 1,
                value: None,
                lease_left_ms: -3,
                checked: true,
            },
            Ev::Ok { op: s(), token: 1 },
            Ev::Fail {
                op: s(),
                token: 1,
                why: s(),
            },
            Ev::Unknown {
                op: s(),
                token: 1,
                error: s(),
            },
            Ev::NotApplied {
                op: s(),
                token: 1,
                error: s(),
            },
            Ev::Lease {
                token: 1,
                lease_left_ms: 5,
            },
            Ev::Observe {
                token: 1,
                counter: 2,
                fence: 3,
                valid: false,
            },
            Ev::CheckFailed {
                token: 1,
                error: s(),
            },
            Ev::Jeopardy { token: 1 },
            Ev::Steady {
                token: 1,
                waited_ms: 5,
            },
            Ev::Cancel {
                token: 1,
                reason: s(),
            },
            Ev::LossVerdict {
                token: 1,
                reason: s(),
                node_survived: Some(true),
                waited_ms: 5,
            },
            Ev::Release { token: 1 },
            Ev::Released {
                token: 1,
                error: None,
            },
            Ev::SessionEnded { state: s() },
        ]
    }

    #[test]
    fn every_event_round_trips_under_its_name() {
        for ev in every_kind() {
            let event = Event {
                t: 5,
                w: 1,
                pid: 42,
                ev,
            };
            let line = event.to_json_line();
            let json: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(json["ev"], event.ev.name(), "{line}");
            assert_eq!(serde_json::from_str::<Event>(&line).unwrap(), event);
        }
    }

    #[test]
    fn lines_of_earlier_runs_read_back() {
        // As the untyped worker wrote them: keys sorted, `null` for a missing value.
        let line = r#"{"checked":true,"ev":"invoke","kind":"write","lease_left_ms":1139,"op":"w1-20229-302","pid":20229,"t":28626700000,"token":21474836486,"value":516,"w":1}"#;
        let event: Event = serde_json::from_str(line).unwrap();
        assert_eq!(event.pid, 20229);
        assert_eq!(
            event.ev,
            Ev::Invoke {
                op: "w1-20229-302".into(),
                kind: OpKind::Write,
                token: 21474836486,
                value: Some(516),
                lease_left_ms: 1139,
                checked: true
            }
        );
        let line = r#"{"error":null,"ev":"released","pid":3,"t":1,"token":9,"w":0}"#;
        let event: Event = serde_json::from_str(line).unwrap();
        assert_eq!(
            event.ev,
            Ev::Released {
                token: 9,
                error: None
            }
        );
        let line = r#"{"ev":"start","mutant":"none","pid":3,"ride_out":false,"session_ms":2000,"t":1,"w":0}"#;
        assert_eq!(
            serde_json::from_str::<Event>(line).unwrap().ev,
            Ev::Start {
                mutant: "none".into(),
                ride_out: false,
                session_ms: 2000,
                grace_ms: 0
            },
            "a start of an earlier run has no grace"
        );
        let line = r#"{"ev":"granted","long":false,"node":"n","pid":3,"role":"write","seq":4,"session":5,"t":1,"token":9,"valid":true,"w":0}"#;
        assert_eq!(
            serde_json::from_str::<Event>(line).unwrap().row(),
            Some(1),
            "a grant of an earlier run is on the only row"
        );
        let line = r#"{"ev":"session-ended","pid":3,"state":"Closed","t":1,"w":0}"#;
        assert_eq!(
            serde_json::from_str::<Event>(line).unwrap().ev.name(),
            "session-ended"
        );
    }

    #[test]
    fn a_counterexample_line_lists_the_fields_but_not_the_envelope() {
        let event = Event {
            t: 2_500_000,
            w: 0,
            pid: 7,
            ev: Ev::Cancel {
                token: 12,
                reason: "disconnected".into(),
            },
        };
        assert_eq!(
            event.line(0),
            r#"      2.5 ms  w0 pid 7 cancel {"reason":"disconnected","token":12}"#
        );
    }
}
