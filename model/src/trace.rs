//! Counterexamples as readable traces: one line per step that matters, with what each client's
//! lease says at that moment.

use std::fmt::Write;

use crate::checker::LeaseModel;
use crate::state::{name, Message, Phase, Request, Role, State, CLIENTS};
use crate::step::Action;

/// A lease-clock instant of `client` as the real tick it falls on, to a tenth.
fn real(state: &State, client: usize, lease: i64) -> String {
    format!("{:.1}", lease as f64 / state.clients[client].rate as f64)
}

/// What `client` looks like now: its phase, its lease's deadline in real ticks, and whether
/// its `check()` passes.
fn client_line(model: &LeaseModel, state: &State, client: usize) -> String {
    let c = &state.clients[client];
    let mut line = format!("{}:", name(client));
    let phase = match c.phase {
        Phase::Creating => "creating",
        Phase::Waiting => "waiting",
        Phase::Proving => "granted, proving",
        Phase::Holding if c.watchdog.lost().is_some() => "lost",
        Phase::Holding if c.watchdog.jeopardy_since().is_some() => "in jeopardy",
        Phase::Holding => "holding",
        Phase::Failed => "failed",
    };
    let _ = write!(line, " {phase}");
    if matches!(c.phase, Phase::Holding | Phase::Proving) && c.watchdog.lost().is_none() {
        let deadline = c.watchdog.deadline(&model.config.settings);
        match deadline > -(1 << 50) {
            true => {
                let _ = write!(line, ", lease to {}", real(state, client, deadline));
            }
            false => line.push_str(", no lease"),
        }
    }
    if model.passes(state, client) {
        line.push_str(", check() passes");
    }
    if c.paused {
        line.push_str(", paused");
    }
    line
}

/// What a tick brought: sessions the leader expired, holds whose lease lapsed (jeopardy) or
/// that the watchdog gave up; empty if nothing.
fn tick_line(before: &State, after: &State) -> String {
    let mut events = Vec::new();
    for i in 0..CLIENTS {
        let touched = before.sessions[i].touched;
        if before.sessions[i].alive && !after.sessions[i].alive {
            events.push(format!(
                "{}'s session expires (last heard at {touched})",
                name(i)
            ));
        }
        let (was, is) = (&before.clients[i].watchdog, &after.clients[i].watchdog);
        if was.jeopardy_since().is_none() && is.jeopardy_since().is_some() {
            events.push(format!("{}'s lease lapses: jeopardy", name(i)));
        }
        if let (None, Some(reason)) = (was.lost(), is.lost()) {
            events.push(format!(
                "{}'s watchdog gives up the hold ({reason:?})",
                name(i)
            ));
        }
    }
    events.join("; ")
}

/// What `action` did, in words.
fn action_line(before: &State, after: &State, action: Action) -> String {
    let c = |client: usize| name(client);
    match action {
        Action::Tick => tick_line(before, after),
        Action::Deliver(client) => match before.clients[client].inbox.first() {
            Some((
                _,
                Message::Reply {
                    request,
                    sent,
                    answer,
                },
            )) => {
                let what = match request {
                    Request::Create => "create".to_string(),
                    Request::Probe { sync: true, .. } => "sync probe".to_string(),
                    Request::Probe { .. } => "probe".to_string(),
                };
                format!(
                    "{} gets its {what} reply ({answer:?}, sent at {sent})",
                    c(client)
                )
            }
            Some((_, Message::Deleted)) => format!("{} hears the node ahead is deleted", c(client)),
            Some((_, Message::Expired)) => format!("{} hears its session expired", c(client)),
            None => String::new(),
        },
        Action::Probe(client, late) => {
            let sync = before.clients[client].watchdog.probes_by_sync();
            let server = before.clients[client].server.unwrap_or(9);
            let kind = if sync { "sync probe" } else { "probe" };
            let when = if late { ", its reply late" } else { "" };
            format!("{} sends a {kind} to server {server}{when}", c(client))
        }
        Action::Reconnect(client, server) => format!("{} reconnects to server {server}", c(client)),
        Action::Relay(server) => format!("server {server} relays its touches to the leader"),
        Action::Elect(server) => format!("server {server} is elected; it touches every session"),
        Action::IsolateLeader(noticed) => {
            let leader = before.leader().unwrap_or(9);
            let how = if noticed {
                "and drops its clients"
            } else {
                "and goes on answering syncs"
            };
            format!("FAULT: leader {leader} is cut off from its followers {how}")
        }
        Action::CutFollower(server, noticed) => {
            let how = if noticed {
                "and drops its clients"
            } else {
                "and keeps its clients"
            };
            format!("FAULT: follower {server} is cut off {how}")
        }
        Action::CutClient(client) => format!("FAULT: {}'s connection breaks", c(client)),
        Action::Pause(client) => format!("FAULT: {}'s process pauses", c(client)),
        Action::Unpause(client) => format!("{}'s process runs again", c(client)),
    }
}

/// Where each client is connected and what role each server has, for the first line.
fn setup_line(state: &State) -> String {
    let roles: Vec<String> = (state.servers.iter().enumerate())
        .map(|(i, s)| {
            format!(
                "{i}:{}",
                if s.role == Role::Leader {
                    "leader"
                } else {
                    "follower"
                }
            )
        })
        .collect();
    let clients: Vec<String> = (0..CLIENTS)
        .map(|i| {
            let rate = state.clients[i].rate as f64 / 1e9;
            let server = state.clients[i].server.unwrap_or(9);
            let new = match state.clients[i].connected_new {
                true => ", its session created by its connect at 0",
                false => "",
            };
            format!("{} on server {server}, clock rate {rate}{new}", name(i))
        })
        .collect();
    format!("servers {}; {}", roles.join(" "), clients.join("; "))
}

/// The counterexample `steps` as lines: `t=<tick>  <what happened>  | A: … | B: …`, leaving out
/// ticks where nothing happened and relays.
pub fn render(model: &LeaseModel, steps: Vec<(State, Option<Action>)>) -> String {
    let mut out = String::new();
    if let Some((first, _)) = steps.first() {
        let _ = writeln!(out, "{}", setup_line(first));
    }
    for pair in steps.windows(2) {
        let ((before, action), (after, _)) = (&pair[0], &pair[1]);
        let Some(action) = *action else { continue };
        let what = action_line(before, after, action);
        if what.is_empty() || matches!(action, Action::Relay(_)) {
            continue;
        }
        let clients: Vec<String> = (0..CLIENTS).map(|i| client_line(model, after, i)).collect();
        let _ = writeln!(
            out,
            "t={:<2} {what:<58} | {}",
            after.now,
            clients.join(" | ")
        );
    }
    out
}
