//! A scenario's history as the checker's invariants and the figures read it: what the
//! scenario produced ([`Input`]), split per lock path ([`per_path`]), its events in time order
//! with the look-ups both use ([`Timeline`]), the holds found in them ([`Hold`]) and the applied
//! increments.

use crate::clock::ms;
use crate::event::{Ev, Event, OpKind};
use crate::fault::Fault;
use crate::probe::Commit;
use crate::store::Row;
use std::collections::{BTreeMap, HashMap};

/// Everything one scenario produced.
#[derive(Clone)]
pub(crate) struct Input {
    pub rows: Vec<Row>,
    /// Each store row's final counter (one row per lock path).
    pub counters: BTreeMap<i32, i64>,
    pub events: Vec<Event>,
    pub faults: Vec<Fault>,
    pub session_ms: u64,
    pub t0: i64,
    pub heal_at: i64,
    pub end_at: i64,
    /// The availability probe's quick commits, in the order they were sent (an election
    /// scenario's; empty otherwise: then a leader counts as possible at any time).
    pub available: Vec<Commit>,
    /// An election scenario's election time E (ms): a new leader must come within T + E of
    /// the old one's loss (see `crate::succession`). `None` for the lock scenarios.
    pub election_ms: Option<u64>,
}

impl Input {
    /// The final counters' sum: the one counter of a scenario of one lock path.
    pub(crate) fn counter(&self) -> i64 {
        self.counters.values().sum()
    }
}

/// The scenario's history per lock path (its store row): `(row, input)` with that row's store
/// rows and counter, and the events of that path's tokens (a token is a node's creation zxid,
/// so it names one path) besides those about no token (starts, sessions, acquires), which every
/// path gets. `events` must be in time order. A scenario of one path gets its whole history.
pub(crate) fn per_path(input: &Input, events: &[Event]) -> Vec<(i32, Input)> {
    let row_of: HashMap<u64, i32> = events
        .iter()
        .filter_map(|e| Some((e.token()?, e.row()? as i32)))
        .collect();
    let mut paths: Vec<i32> = input.counters.keys().copied().collect();
    paths.extend(row_of.values());
    paths.sort_unstable();
    paths.dedup();
    let alone = paths.len() <= 1;
    paths
        .into_iter()
        .map(|path| {
            let mine = |e: &&Event| match e.token() {
                None => true,
                Some(token) => row_of.get(&token).map_or(alone, |&r| r == path),
            };
            let sub = Input {
                rows: (input.rows.iter().filter(|r| r.row == path).cloned()).collect(),
                counters: (input.counters.iter())
                    .filter(|(&r, _)| r == path)
                    .map(|(&r, &c)| (r, c))
                    .collect(),
                events: events.iter().filter(mine).cloned().collect(),
                faults: input.faults.clone(),
                available: input.available.clone(),
                ..input.clone_empty()
            };
            (path, sub)
        })
        .collect()
}

impl Input {
    /// The same scenario's settings with no rows, counters, events or faults.
    fn clone_empty(&self) -> Input {
        Input {
            rows: Vec::new(),
            counters: BTreeMap::new(),
            events: Vec::new(),
            faults: Vec::new(),
            available: Vec::new(),
            ..*self
        }
    }
}

/// A worker's hold of the lock, from its grant to the first sign it ended.
#[derive(Debug, Clone)]
pub(crate) struct Hold {
    pub w: u32,
    pub pid: u32,
    pub token: u64,
    pub seq: i64,
    /// Its lock node's path, as the worker logged it.
    pub node: String,
    /// The session that holds it.
    pub session: i64,
    pub start: i64,
    pub end: i64,
    pub how: String,
    /// A read lock's hold.
    pub shared: bool,
}

/// The workers' events in time order, with the look-ups the invariants and the figures share.
pub(crate) struct Timeline<'a> {
    pub input: &'a Input,
    pub events: &'a [Event],
    /// Each op's invoke.
    pub invoked_at: HashMap<&'a str, &'a Event>,
    /// The valid grants, in time order.
    pub grants: Vec<&'a Event>,
    /// The watchdog's cancellations, in time order.
    pub cancels: Vec<&'a Event>,
}

impl<'a> Timeline<'a> {
    pub(crate) fn new(input: &'a Input, events: &'a [Event]) -> Timeline<'a> {
        Timeline {
            input,
            events,
            invoked_at: events
                .iter()
                .filter(|e| matches!(e.ev, Ev::Invoke { .. }))
                .filter_map(|e| Some((e.ev.op()?, e)))
                .collect(),
            grants: events.iter().filter(|e| e.valid_grant()).collect(),
            cancels: events
                .iter()
                .filter(|e| matches!(e.ev, Ev::Cancel { .. }))
                .collect(),
        }
    }

    /// When `op` was invoked (the end of the run if it never was).
    pub(crate) fn at_of(&self, op: &str) -> i64 {
        self.invoked_at.get(op).map_or(self.input.end_at, |e| e.t)
    }

    /// A counterexample: the timelines of `workers` for the 3 s before `at` (and 0.5 s after),
    /// then the faults that overlap that window.
    pub(crate) fn evidence(&self, workers: &[u32], at: i64) -> Vec<String> {
        let (t0, input) = (self.input.t0, self.input);
        let from = at - 3_000_000_000;
        let to = at + 500_000_000;
        let mut lines: Vec<String> = self
            .events
            .iter()
            .filter(|e| workers.contains(&e.w) && e.t >= from && e.t <= to)
            .filter(|e| !matches!(e.ev, Ev::Read { .. }))
            .map(|e| e.line(t0))
            .collect();
        if lines.len() > 40 {
            lines.drain(..lines.len() - 40);
        }
        let slack = 2 * input.session_ms as i64 * 1_000_000;
        lines.extend(
            input
                .faults
                .iter()
                .filter(|f| f.start <= to && f.end >= from - slack)
                .map(|f| {
                    format!(
                        "fault {} ({}) from {:.1} ms to {:.1} ms",
                        f.kind,
                        f.detail,
                        ms(t0, f.start),
                        ms(t0, f.end)
                    )
                }),
        );
        lines
    }
}

/// The applied increments (not the fence raises), in commit order.
pub(crate) fn increments(rows: &[Row]) -> Vec<&Row> {
    rows.iter()
        .filter(|r| r.kind == OpKind::Write.as_str())
        .collect()
}

/// The holds: from a valid grant to the first sign the hold ended (a cancel, a failed check, a
/// release, a refused or unknown write of its token, or the session's end), else to the
/// process's last event.
pub(crate) fn holds(tl: &Timeline<'_>) -> Vec<Hold> {
    let mut open: HashMap<u32, Hold> = HashMap::new();
    let mut holds = Vec::new();
    let mut last_seen: HashMap<u32, i64> = HashMap::new();
    for e in tl.events {
        last_seen.insert(e.pid, e.t);
        if let Ev::Granted {
            token,
            seq,
            ref node,
            session,
            valid: true,
            ..
        } = e.ev
        {
            let hold = Hold {
                w: e.w,
                pid: e.pid,
                token,
                seq,
                node: node.clone(),
                session,
                start: e.t,
                end: e.t,
                how: String::new(),
                shared: e.reader(),
            };
            open.insert(e.pid, hold);
        } else if ends_hold(&e.ev)
            && open.get(&e.pid).is_some_and(|h| {
                Some(h.token) == e.token() || matches!(e.ev, Ev::SessionEnded { .. })
            })
        {
            if let Some(mut hold) = open.remove(&e.pid) {
                hold.end = e.t;
                hold.how = e.ev.name().to_owned();
                holds.push(hold);
            }
        }
    }
    for (pid, mut hold) in open {
        hold.end = last_seen.get(&pid).copied().unwrap_or(hold.start);
        hold.how = "process ended".into();
        holds.push(hold);
    }
    holds.sort_by_key(|h| h.start);
    holds
}

/// The events that end a hold (of their token; a session's end, any hold).
fn ends_hold(ev: &Ev) -> bool {
    matches!(
        ev,
        Ev::Cancel { .. }
            | Ev::CheckFailed { .. }
            | Ev::Release { .. }
            | Ev::Fail { .. }
            | Ev::Unknown { .. }
            | Ev::NotApplied { .. }
            | Ev::SessionEnded { .. }
    )
}
