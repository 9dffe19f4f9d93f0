//! The queue model's counterexamples as readable traces: one line per step, with the lock
//! path's children and what each contender is doing.

use std::fmt::Write;

use zkfence::model_api::queue::LockKind;

use super::checker::QueueModel;
use super::state::{name, End, Message, Phase, Request, State, CONTENDERS};
use super::world::Action;

/// A node's name in traces: its owner, kind and sequence (`A:lock-1`).
fn node(state: &State, owner: usize, seq: i32) -> String {
    let kind = match state.contenders[owner].kind {
        LockKind::Mutex => "lock",
        LockKind::Read => "read",
        LockKind::Write => "write",
    };
    format!("{}:{kind}-{seq}", name(owner))
}

fn phase(state: &State, c: usize) -> String {
    let k = &state.contenders[c];
    let text = match k.phase {
        Phase::Creating => "creating",
        Phase::Listing => "listing",
        Phase::Arming => "setting watches",
        Phase::Waiting => "waiting",
        Phase::Rereading => "past a lock-delay, reading its node",
        Phase::Proving => "granted, proving",
        Phase::Holding if state.holds(c) => "HOLDING",
        Phase::Holding => "holding, node gone",
        Phase::Done(End::Released) => "released",
        Phase::Done(End::GaveUp) => "gave up",
        Phase::Done(End::Failed) => "failed",
        Phase::Done(End::Lost) => "lost",
    };
    let long = if k.long { ", waited long" } else { "" };
    format!("{}: {text}{long}", name(c))
}

/// What `action` did, in words.
fn action_line(before: &State, action: Action) -> String {
    let who = |c: usize| name(c);
    match action {
        Action::Serve(c) => match before.contenders[c].outbox.first() {
            Some(Request::Create) => format!("server creates {}'s node", who(c)),
            Some(Request::List) => format!("server lists the children for {}", who(c)),
            Some(Request::Watch { seq, sense, .. }) => {
                let owner = before.nodes.iter().find(|n| n.seq == *seq).map(|n| n.owner);
                let target = owner.map_or(format!("node {seq} (gone)"), |o| node(before, o, *seq));
                format!("server sets {}'s {sense:?} watch on {target}", who(c))
            }
            Some(Request::Probe) => format!("server answers {}'s proof", who(c)),
            Some(Request::Reread) => format!("server answers {}'s read of its node", who(c)),
            Some(Request::Delete { marked: true }) => {
                format!(
                    "server deletes {}'s node, marked (set data + delete)",
                    who(c)
                )
            }
            Some(Request::Delete { marked: false }) => {
                format!("server deletes {}'s node, unmarked", who(c))
            }
            None => String::new(),
        },
        Action::Deliver(c) => match before.contenders[c].inbox.first() {
            Some(Message::Created(seq)) => format!("{} learns its node is {seq}", who(c)),
            Some(Message::Listing(children)) => {
                let names: Vec<String> = (children.iter())
                    .map(|&(o, s)| node(before, o, s))
                    .collect();
                format!("{} reads the listing [{}]", who(c), names.join(", "))
            }
            Some(Message::Armed { set, .. }) => match set {
                true => format!("{} gets a watch reply: set", who(c)),
                false => format!("{} gets a watch reply: node gone", who(c)),
            },
            Some(Message::Probed(found)) => {
                format!("{} gets its proof's reply (node there: {found})", who(c))
            }
            Some(Message::Reread(found)) => {
                format!("{} gets its read's reply (node there: {found})", who(c))
            }
            Some(Message::Event {
                data,
                child,
                deleted,
                zxid,
                ..
            }) => {
                let what = if *deleted { "deleted" } else { "data changed" };
                let watches = match (data, child) {
                    (true, true) => "data and child watches",
                    (true, false) => "data watch",
                    _ => "child watch",
                };
                format!(
                    "{} gets an event: {what} (zxid {zxid}, its {watches})",
                    who(c)
                )
            }
            None => String::new(),
        },
        Action::WaitLong(c) => format!("{}'s wait runs longer than its lease", who(c)),
        Action::Release(c) => format!("{} releases", who(c)),
        Action::GiveUp(c) => format!("FAULT: {} gives up waiting", who(c)),
        Action::Expire(c) => format!("FAULT: {}'s session expires", who(c)),
        Action::Close(c) => format!(
            "FAULT: A's and B's nodes deleted in one transaction, {}'s first",
            who(c)
        ),
        Action::Revoke(c) => format!(
            "FAULT: a revocation request is written into {}'s node",
            who(c)
        ),
    }
}

/// The trace of `steps`: one line per step, with the children and the contenders after it.
pub fn render(_model: &QueueModel, steps: Vec<(State, Option<Action>)>) -> String {
    let mut out = String::new();
    for pair in steps.windows(2) {
        let ((before, action), (after, _)) = (&pair[0], &pair[1]);
        let Some(action) = *action else { continue };
        let children: Vec<String> = (after.nodes.iter())
            .map(|n| node(after, n.owner, n.seq))
            .collect();
        let phases: Vec<String> = (0..CONTENDERS).map(|c| phase(after, c)).collect();
        let _ = writeln!(
            out,
            "{:<62} | [{}] | {}",
            action_line(before, action),
            children.join(", "),
            phases.join(" | ")
        );
    }
    out
}
