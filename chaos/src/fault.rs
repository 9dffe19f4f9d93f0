//! The faults: the kinds a schedule draws ([`FaultKind`], aimed at a [`Phase`] of a hold) and
//! the record of one injected fault ([`Fault`]), which the nemesis writes, the cluster keeps
//! and the checker and the report read.

use crate::clock::ms;
use crate::outage::Outage;
use serde_json::{json, Value};

/// Where a holder is in its critical section, as its last event says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Between the read and the lease check: a pause here is caught by `check()`.
    Think,
    /// After the check, before the write reaches the store: only the fence can stop it.
    Write,
    /// Any moment of the hold.
    Any,
    /// Early in a long critical section (so the hold outlasts the fault's detection).
    Long,
}

impl Phase {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Phase::Think => "think",
            Phase::Write => "write",
            Phase::Any => "any",
            Phase::Long => "long",
        }
    }
}

/// One kind of fault, with its parameters.
#[derive(Debug, Clone)]
pub(crate) enum FaultKind {
    PauseHolder {
        factor: f64,
        phase: Phase,
    },
    KillHolder,
    ExpireHolder,
    PartitionHolder,
    SlowHolder,
    /// SIGSTOP the leader for `factor` × T; when `aimed`, with a holder on a follower
    /// stretched through it (its session's touches reach the leader only through pings).
    PauseLeader {
        factor: f64,
        aimed: bool,
    },
    KillLeader {
        down_ms: u64,
    },
    PauseAll,
    KillAll,
    DeleteParent,
    SkewWorker {
        rate: f64,
    },
    /// The leader cut off from both followers while a holder is connected to it:
    /// asymmetric (the followers' packets to it reset, its packets to them dropped) or
    /// symmetric (dropped both ways: a majority/minority split).
    IsolateLeader {
        symmetric: bool,
    },
    /// A holder's follower can no longer send to the leader (the leader still reaches it).
    OneWayFollower,
    /// A holder's follower cut off from both other servers, both ways (a minority of one).
    IsolateFollower,
    /// The links between the leader and the followers lose 30% of their packets for 2T.
    LossyLeaderLink,
    /// A holder on a follower; the leader cut off from the followers as in
    /// `IsolateLeader { symmetric: false }`, and the holder from the followers too (a client
    /// on the minority side); it reaches the stale leader once its hold is in jeopardy (or
    /// over). The stale leader answers syncs and commits nothing: what a rule that ends
    /// jeopardy on a sync's answer gets wrong.
    StaleLeaderReconnect,
    /// The faults operators cause every week (the failover experiment). Each server restarted
    /// in turn (followers first, the leader last), each serving again before the next, under
    /// a holder stretched through it wherever it is.
    RollingRestart,
    /// A holder on a follower; the leader SIGKILLed, restarted once the followers elected
    /// another.
    KillLeaderFollowers,
    /// A holder on a follower; the leader's links to the followers drop packets both ways (a
    /// power loss, a dead NIC), so the followers wait `syncLimit · tickTime` before electing.
    LeaderSilent,
    /// A holder on a follower; the leader SIGSTOPped for `factor` × T (a long GC pause).
    LeaderGcPause {
        factor: f64,
    },
    /// The holder's commits become slow: the replies to its next writes held T/4 each (an
    /// fsync stall, as the client sees it), for 2T.
    FsyncStall,
    /// The holder SIGSTOPped for 1.5 T: what a suspended client machine looks like to the
    /// servers (the lease clock's half of a suspend is the library's time-namespace test).
    ClientSuspend,
    /// The scenario's own store (PostgreSQL) SIGSTOPped, postmaster and backends, for
    /// `factor` × T, with a holder in its write phase if one shows: a store that stalls past
    /// the lock's session timeout.
    StorePause {
        factor: f64,
    },
    /// The scenario's own store killed (`kill -9`, every process) with a holder in its write
    /// phase if one shows, and started again at once on its data: open transactions die
    /// unanswered, crash recovery keeps what committed.
    StoreRestart,
    /// A holder's write sent, then the store's replies dropped for 500 ms and every store
    /// connection cut: the commit may have happened, and the writer cannot know (outcome in
    /// doubt).
    StoreCut,
    /// An HTTP store's (the object store's) reply to a holder's write replaced with a server
    /// error (500): after the store applied it when `applied` (the writer is told it failed),
    /// before it reached the store otherwise. The store's own outage where a restart would
    /// lose what it acknowledged (moto keeps its objects in memory).
    StoreError {
        applied: bool,
    },
}

impl FaultKind {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            FaultKind::PauseHolder { .. } => "pause-holder",
            FaultKind::KillHolder => "kill-holder",
            FaultKind::ExpireHolder => "expire-holder",
            FaultKind::PartitionHolder => "partition-holder",
            FaultKind::SlowHolder => "slow-link",
            FaultKind::PauseLeader { aimed: false, .. } => "pause-leader",
            FaultKind::PauseLeader { aimed: true, .. } => "pause-leader-aimed",
            FaultKind::KillLeader { down_ms: 0 } => "restart-leader",
            FaultKind::KillLeader { .. } => "kill-leader",
            FaultKind::PauseAll => "pause-all-servers",
            FaultKind::KillAll => "kill-all-servers",
            FaultKind::DeleteParent => "delete-parent",
            FaultKind::SkewWorker { .. } => "clock-skew-worker",
            FaultKind::IsolateLeader { symmetric: false } => "isolate-leader-asym",
            FaultKind::IsolateLeader { symmetric: true } => "isolate-leader-sym",
            FaultKind::OneWayFollower => "one-way-follower",
            FaultKind::IsolateFollower => "isolate-follower",
            FaultKind::LossyLeaderLink => "lossy-leader-link",
            FaultKind::StaleLeaderReconnect => "stale-leader-reconnect",
            FaultKind::RollingRestart => "rolling-restart",
            FaultKind::KillLeaderFollowers => "kill-leader-followers",
            FaultKind::LeaderSilent => "leader-silent",
            FaultKind::LeaderGcPause { .. } => "leader-gc-pause",
            FaultKind::FsyncStall => "fsync-stall",
            FaultKind::ClientSuspend => "client-suspend",
            FaultKind::StorePause { .. } => "store-pause",
            FaultKind::StoreRestart => "store-restart",
            FaultKind::StoreCut => "store-cut-reply",
            FaultKind::StoreError { .. } => "store-500",
        }
    }
}

/// The names of the faults that cut links inside the ensemble.
pub(crate) const PARTITION_KINDS: [&str; 7] = [
    "isolate-leader-asym",
    "isolate-leader-sym",
    "one-way-follower",
    "isolate-follower",
    "lossy-leader-link",
    "stale-leader-reconnect",
    "leader-silent",
];

/// The names of the faults of the store itself (a scenario's store of its own).
pub(crate) const STORE_KINDS: [&str; 4] = [
    "store-pause",
    "store-restart",
    "store-cut-reply",
    "store-500",
];

/// The failover experiment's fault kinds, in the order its table lists them.
pub(crate) const FAILOVER_KINDS: [&str; 6] = [
    "rolling-restart",
    "kill-leader-followers",
    "leader-silent",
    "leader-gc-pause",
    "fsync-stall",
    "client-suspend",
];

/// The failover experiment's target: with a grace of T, these cost no needless cancel.
pub(crate) const FAILOVER_TARGET_KINDS: [&str; 3] =
    ["rolling-restart", "kill-leader-followers", "leader-silent"];

/// One injected fault, as the controller recorded it.
#[derive(Debug, Clone)]
pub(crate) struct Fault {
    pub kind: String,
    pub detail: String,
    pub start: i64,
    pub end: i64,
    /// From when the victim could notice: the SIGCONT for a pause, else the start.
    pub reference: i64,
    /// The holder the fault was aimed at: (worker, pid, token).
    pub victim: Option<(u32, u32, u64)>,
    /// When the server deleted the victim's lock node (its session expired), if observed.
    pub expired_at: Option<i64>,
    /// Whether it counts as a holder pause past the session timeout.
    pub pause_past_timeout: bool,
    /// The nodes an operator deleted (a parent deletion's multi), by full path.
    pub deleted: Vec<String>,
    /// The session an operator closed from outside (an expiry's victim's).
    pub closed_session: Option<i64>,
    /// The outage of a fault that disabled the ensemble's leader, as the nemesis watched it.
    pub outage: Option<Outage>,
}

impl Fault {
    pub(crate) fn to_json(&self, t0: i64) -> Value {
        json!({
            "kind": self.kind, "detail": self.detail,
            "start_ms": ms(t0, self.start), "end_ms": ms(t0, self.end),
            "victim": self.victim.map(|(w, pid, token)| json!({"worker": w, "pid": pid, "token": token})),
            "expired_at_ms": self.expired_at.map(|t| ms(t0, t)),
            "outage": self.outage.map(|o| json!({
                "down_ms": ms(t0, o.down), "back_after_ms": ms(t0, o.back_after),
                "back_by_ms": o.back_by.map(|t| ms(t0, t)),
            })),
        })
    }
}
