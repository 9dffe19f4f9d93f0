//! The queue model's steps: the server's side (each request processed in its contender's
//! order, watches fired in the transaction's order), the contenders' side (each message taken
//! as the library's acquire takes it, every decision the library's: where a node stands, what
//! it watches, what an event means, whether a release is marked, whether a grant needs a
//! proof), and the faults.

use zkfence::model_api::queue::{self, Change, LockKind, Sense, Verdict, Waiter};
use zkfence::model_api::{Reply, Settings, Watchdog};
use zkfence::Mutant;

use super::state::{
    Contender, End, Ghost, Message, Node, Phase, Request, State, Watch, CONTENDERS,
};
use crate::config::{settings, EXACT, SESSION_TICKS};

/// A contender's lease clock soon after its create (nanoseconds).
const SOON: i64 = 0;
/// A contender's lease clock after a wait longer than the lease: three session timeouts.
pub const LONG: i64 = 3 * SESSION_TICKS * EXACT;

/// What the queue model is run with.
#[derive(Debug, Clone)]
pub struct QueueConfig {
    /// What each contender takes.
    pub kinds: [LockKind; CONTENDERS],
    /// Lock-delay on: every release is marked, a failed holder's successor waits.
    pub lock_delay: bool,
    /// The most faults in one schedule (give-ups, expiries, closes, revocation requests).
    pub faults: u8,
    /// A and B are two acquires on one session (it holds and waits): its expiry deletes both
    /// their nodes in one transaction, and so may a close it is not told of
    /// ([`Action::Close`]).
    pub shared: bool,
    /// The mutant under test.
    pub mutant: Option<Mutant>,
    /// The lease settings (the lease model's).
    pub settings: Settings,
}

impl QueueConfig {
    /// Three contenders taking `kinds`, with lock-delay on or off, under `mutant`, one fault
    /// per schedule.
    pub fn new(kinds: [LockKind; CONTENDERS], lock_delay: bool, mutant: Option<Mutant>) -> Self {
        QueueConfig {
            kinds,
            lock_delay,
            faults: 1,
            shared: false,
            mutant,
            settings: settings(mutant),
        }
    }

    /// The same, with A and B acquiring on one session.
    pub fn sharing(self) -> Self {
        QueueConfig {
            shared: true,
            ..self
        }
    }

    /// The contenders whose acquires run on `c`'s session.
    fn session_of(&self, c: usize) -> &'static [usize] {
        static ALONE: [[usize; 1]; CONTENDERS] = [[0], [1], [2]];
        match (self.shared, c) {
            (true, 0 | 1) => &[0, 1],
            _ => &ALONE[c],
        }
    }
}

/// One step of the queue model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// The server processes the contender's next request.
    Serve(usize),
    /// The contender takes the next message its connection brings.
    Deliver(usize),
    /// The waiter's wait runs longer than its lease (once; whether it runs long before or
    /// after its watches were set makes no difference to what it proves).
    WaitLong(usize),
    /// The holder releases.
    Release(usize),
    /// Fault: a waiter (or a grant waiting for its proof) gives up: its deadline passed, or it
    /// was cancelled.
    GiveUp(usize),
    /// Fault: the contender's session expires; the server deletes its nodes (A's and B's in
    /// one transaction when they share it).
    Expire(usize),
    /// Fault, with A and B on one session: the server deletes both their nodes in one
    /// transaction, this contender's first, and the session goes on unaware (an
    /// administrator's `multi`; a session closed from outside, before its client hears of
    /// it). Each learns of it only from what the server sends after.
    Close(usize),
    /// Fault: someone writes into the contender's node (a revocation request).
    Revoke(usize),
}

impl Action {
    fn is_fault(self) -> bool {
        matches!(
            self,
            Action::GiveUp(_) | Action::Expire(_) | Action::Close(_) | Action::Revoke(_)
        )
    }
}

/// The initial state: every contender about to send its create (the server takes them in any
/// order), its process having run a session timeout before.
pub fn initial(config: &QueueConfig) -> State {
    let contender = |c: usize| {
        let mut watchdog = Watchdog::start(&config.settings, SOON);
        watchdog.ran(-SESSION_TICKS * EXACT, SOON);
        Contender {
            kind: config.kinds[c],
            phase: Phase::Creating,
            seq: None,
            // The listing is pipelined behind the create.
            outbox: vec![Request::Create, Request::List],
            inbox: vec![],
            waiter: None,
            blocking: 0,
            targets: vec![],
            generation: 0,
            arming: 0,
            gone: false,
            early: vec![],
            crowded: false,
            long: false,
            probes: 0,
            after_vanish: false,
            delayed: false,
            watchdog,
        }
    };
    State {
        nodes: vec![],
        next_seq: 1,
        zxid: 0,
        watches: vec![],
        contenders: [0, 1, 2].map(contender),
        faults: 0,
        ghost: Ghost::default(),
    }
}

impl State {
    /// The actions this state enables.
    pub fn actions(&self, config: &QueueConfig, actions: &mut Vec<Action>) {
        let faults_left = self.faults < config.faults;
        for c in 0..CONTENDERS {
            let k = &self.contenders[c];
            if !k.outbox.is_empty() {
                actions.push(Action::Serve(c));
            }
            if !k.inbox.is_empty() {
                actions.push(Action::Deliver(c));
            }
            let waiting = matches!(k.phase, Phase::Listing | Phase::Arming | Phase::Waiting);
            if k.phase == Phase::Waiting && !k.long {
                actions.push(Action::WaitLong(c));
            }
            if k.phase == Phase::Holding {
                actions.push(Action::Release(c));
            }
            if !faults_left {
                continue;
            }
            // A grant's proof can outlast the acquire's deadline too.
            if (waiting || k.phase == Phase::Proving) && k.seq.is_some() {
                actions.push(Action::GiveUp(c));
            }
            if self.node_of(c).is_some() && !matches!(k.phase, Phase::Done(_)) {
                actions.push(Action::Expire(c));
                actions.push(Action::Revoke(c));
                if config.shared && c < 2 {
                    actions.push(Action::Close(c));
                }
            }
        }
    }

    /// Applies `action`.
    pub fn apply(&mut self, action: Action, config: &QueueConfig) {
        match action {
            Action::Serve(c) => {
                let request = self.contenders[c].outbox.remove(0);
                self.serve(c, request);
            }
            Action::Deliver(c) => {
                let message = self.contenders[c].inbox.remove(0);
                match &mut self.ghost.before_close[c] {
                    Some(0) => self.ghost.past_close[c] = true,
                    Some(sent) => *sent -= 1,
                    None => {}
                }
                self.take(c, message, config);
            }
            Action::WaitLong(c) => {
                let k = &mut self.contenders[c];
                k.long = true;
                k.watchdog.ran(SOON, LONG);
            }
            Action::Release(c) => {
                let k = &mut self.contenders[c];
                let marked = queue::release_marked(k.kind, config.lock_delay, k.crowded);
                k.outbox.push(Request::Delete { marked });
                k.phase = Phase::Done(End::Released);
            }
            Action::GiveUp(c) => {
                let k = &mut self.contenders[c];
                let marked = queue::withdrawal_marked(k.kind, config.lock_delay, config.mutant);
                k.outbox.push(Request::Delete { marked });
                k.phase = Phase::Done(End::GaveUp);
                k.inbox.clear();
            }
            Action::Expire(c) => {
                self.zxid += 1; // one transaction for all the session's nodes
                for &member in config.session_of(c) {
                    self.expire(member);
                }
            }
            Action::Close(first) => {
                self.zxid += 1;
                for &member in config.session_of(first) {
                    if self.node_of(member).is_some() {
                        let sent = self.contenders[member].inbox.len() as u8;
                        self.ghost.before_close[member] = Some(sent);
                    }
                }
                for member in [first, 1 - first] {
                    if let Some(node) = self.node_of(member) {
                        self.delete(node.seq);
                    }
                }
            }
            Action::Revoke(c) => {
                let seq = self.node_of(c).map(|n| n.seq);
                if let Some(seq) = seq {
                    self.zxid += 1;
                    self.fire(seq, false);
                }
            }
        }
        if action.is_fault() {
            self.faults += 1;
        }
    }

    // The server's side.

    /// The server processes `request` of contender `c`.
    fn serve(&mut self, c: usize, request: Request) {
        let reply = match request {
            Request::Create => {
                let seq = self.next_seq;
                self.next_seq += 1;
                self.zxid += 1;
                self.nodes.push(Node { owner: c, seq });
                Message::Created(seq)
            }
            Request::List => {
                Message::Listing(self.nodes.iter().map(|n| (n.owner, n.seq)).collect())
            }
            Request::Watch {
                generation,
                target,
                seq,
                sense,
            } => {
                let set = self.nodes.iter().any(|n| n.seq == seq);
                if set {
                    self.watches.push(Watch {
                        owner: c,
                        generation,
                        target,
                        seq,
                        sense,
                    });
                }
                Message::Armed { generation, set }
            }
            Request::Probe => Message::Probed(self.node_of(c).is_some()),
            Request::Reread => Message::Reread(self.node_of(c).is_some()),
            Request::Delete { marked } => {
                if let Some(node) = self.node_of(c) {
                    self.zxid += 1;
                    if marked {
                        self.fire(node.seq, false);
                    }
                    self.delete(node.seq);
                }
                return;
            }
        };
        self.contenders[c].inbox.push(reply);
    }

    /// The node `seq` is deleted in the current transaction: its remaining watches fire.
    fn delete(&mut self, seq: i32) {
        self.fire(seq, true);
        self.nodes.retain(|n| n.seq != seq);
    }

    /// The watches on `seq` that a deletion (or a data change) fires, each contender's in one
    /// notification per listing, in the transaction's order.
    fn fire(&mut self, seq: i32, deleted: bool) {
        let fires = |w: &Watch| w.seq == seq && (deleted || w.sense == Sense::Data);
        let fired: Vec<Watch> = self.watches.iter().copied().filter(fires).collect();
        self.watches.retain(|w| !fires(w));
        let mut notified: Vec<(usize, u8, usize)> = Vec::new();
        for w in &fired {
            if !notified.contains(&(w.owner, w.generation, w.target)) {
                notified.push((w.owner, w.generation, w.target));
            }
        }
        for (owner, generation, target) in notified {
            let sensed = |sense| {
                (fired.iter()).any(|w| {
                    (w.owner, w.generation, w.target, w.sense) == (owner, generation, target, sense)
                })
            };
            let event = Message::Event {
                generation,
                target,
                data: sensed(Sense::Data),
                child: sensed(Sense::Deletion),
                deleted,
                zxid: self.zxid,
            };
            if !matches!(self.contenders[owner].phase, Phase::Done(_)) {
                self.contenders[owner].inbox.push(event);
            }
        }
    }

    /// Contender `c`'s session expires, in the current transaction: the server deletes its
    /// node (no marker) and its watches; its acquire fails, or its hold is lost.
    fn expire(&mut self, c: usize) {
        if let Some(node) = self.node_of(c) {
            self.watches.retain(|w| w.owner != c);
            self.delete(node.seq);
        }
        let k = &mut self.contenders[c];
        let end = match k.phase {
            Phase::Done(end) => end, // a session member that was done already
            Phase::Holding => End::Lost,
            _ => End::Failed,
        };
        k.phase = Phase::Done(end);
        k.outbox.clear();
        k.inbox.clear();
    }

    // The contenders' side.

    /// Contender `c`'s lease clock.
    fn clock(&self, c: usize) -> i64 {
        match self.contenders[c].long {
            true => LONG,
            false => SOON,
        }
    }

    /// Contender `c` takes `message`, as the library's acquire does.
    fn take(&mut self, c: usize, message: Message, config: &QueueConfig) {
        if matches!(self.contenders[c].phase, Phase::Done(_)) {
            return;
        }
        let now = self.clock(c);
        match message {
            Message::Created(seq) => {
                let k = &mut self.contenders[c];
                k.seq = Some(seq);
                k.watchdog.committed(SOON, SOON);
                k.phase = Phase::Listing;
            }
            Message::Listing(children) => self.listed(c, &children, config),
            Message::Reread(found) => {
                if self.contenders[c].phase != Phase::Rereading {
                    return;
                }
                match found {
                    true => self.grant(c, config),
                    false => {
                        self.ghost.reread_found_gone = true;
                        self.contenders[c].phase = Phase::Done(End::Failed);
                    }
                }
            }
            Message::Armed { generation, set } => {
                let k = &mut self.contenders[c];
                if generation != k.generation || k.phase != Phase::Arming {
                    return;
                }
                k.arming -= 1;
                k.gone |= !set;
                if k.arming > 0 {
                    return;
                }
                if k.gone {
                    let verdict = k.waiter.as_ref().map(Waiter::on_gone);
                    if let Some(verdict) = verdict {
                        self.decide(c, verdict, false, config);
                    }
                    return;
                }
                k.phase = Phase::Waiting;
                for early in std::mem::take(&mut k.early) {
                    if self.contenders[c].phase != Phase::Waiting {
                        break;
                    }
                    self.take(c, early, config);
                }
            }
            Message::Event { generation, .. } => {
                let k = &mut self.contenders[c];
                if generation != k.generation {
                    return; // a parked watch of an older listing
                }
                match k.phase {
                    Phase::Arming => k.early.push(message),
                    Phase::Waiting => self.on_event(c, &message, config),
                    _ => {}
                }
            }
            Message::Probed(found) => {
                let k = &mut self.contenders[c];
                let reply = match found {
                    true => Reply::Committed,
                    false => Reply::Refused(true),
                };
                k.watchdog.probed(reply, now, false, now);
                if !found {
                    k.phase = Phase::Done(End::Failed);
                } else if k.watchdog.proven(&config.settings, now) {
                    self.ghost.proved_grant = true;
                    self.hold(c, config);
                } else if k.probes < 2 {
                    k.probes += 1;
                    k.outbox.push(Request::Probe);
                }
            }
        }
    }

    /// A listing arrived: where our node stands (the library's `Kind::position`); proceed, or
    /// set the watches the library's waiter asks for.
    fn listed(&mut self, c: usize, children: &[(usize, i32)], config: &QueueConfig) {
        let names: Vec<String> = (children.iter())
            .map(|&(owner, seq)| config.kinds[owner].node_name(owner as u8, seq))
            .collect();
        let k = &mut self.contenders[c];
        let Some(seq) = k.seq else { return };
        let own = k.kind.node_name(c as u8, seq);
        let Some(position) = queue::position(k.kind, &names, &own) else {
            return;
        };
        if !position.present {
            k.phase = Phase::Done(End::Failed);
            return;
        }
        k.crowded |= position.crowded;
        if position.blocking == 0 {
            let vanished = k.after_vanish && config.lock_delay;
            self.proceed(c, false, vanished, config);
            return;
        }
        let waiter = Waiter::new(k.kind, &position, config.lock_delay, config.mutant);
        k.targets = (position.watch.iter())
            .map(|watched| {
                let at = names.iter().position(|n| n == watched).expect("listed");
                children[at].1
            })
            .collect();
        k.generation += 1;
        k.arming = 0;
        k.gone = false;
        k.early.clear();
        k.blocking = position.blocking;
        for (target, &seq) in k.targets.iter().enumerate() {
            for sense in waiter.senses(target) {
                k.outbox.push(Request::Watch {
                    generation: k.generation,
                    target,
                    seq,
                    sense,
                });
                k.arming += 1;
            }
        }
        k.waiter = Some(waiter);
        k.phase = Phase::Arming;
    }

    /// An event on a watched node: the library's waiter decides (a notification that fired
    /// both watches is taken data watch first, as the library takes them).
    fn on_event(&mut self, c: usize, event: &Message, config: &QueueConfig) {
        let &Message::Event {
            target,
            data,
            child,
            deleted,
            zxid,
            ..
        } = event
        else {
            return;
        };
        let change = match deleted {
            true => Change::Deleted,
            false => Change::DataChanged,
        };
        let k = &mut self.contenders[c];
        let Some(waiter) = k.waiter.as_mut() else {
            return;
        };
        let mut verdict = Verdict::Wait;
        for (fired, sense) in [(data, Sense::Data), (child, Sense::Deletion)] {
            if fired && verdict == Verdict::Wait {
                verdict = waiter.on_event(target, sense, change, zxid);
            }
        }
        self.decide(c, verdict, true, config);
    }

    /// Acts on the waiter's verdict; `evented`: an event decided it (not a watch that found
    /// its node gone).
    fn decide(&mut self, c: usize, verdict: Verdict, evented: bool, config: &QueueConfig) {
        let k = &mut self.contenders[c];
        match verdict {
            Verdict::Wait => {}
            // Whether it vanished unmarked decides lock-delay's wait, time the model does not
            // count.
            Verdict::Proceed { vanished } => {
                let past_many = evented && k.blocking > 1;
                self.proceed(c, past_many, vanished, config);
            }
            Verdict::Relist { after_vanish } => {
                self.ghost.relisted_after_vanish |= after_vanish;
                k.after_vanish = after_vanish;
                k.generation += 1; // the older watches stay set, parked
                k.waiter = None;
                k.outbox.push(Request::List);
                k.phase = Phase::Listing;
            }
        }
    }

    /// Nothing ahead blocks contender `c` any more: lock-delay (time the model does not
    /// count) if a node ahead went without a release (`vanished`) and then, as the library
    /// decides (`rereads_after_delay`), a read of our own node; then the grant.
    fn proceed(&mut self, c: usize, past_many: bool, vanished: bool, config: &QueueConfig) {
        self.ghost.marker_handoff |= past_many;
        let k = &mut self.contenders[c];
        // A wait long enough for others to queue behind us counts as crowded.
        k.crowded |= k.long;
        k.waiter = None;
        k.delayed = vanished;
        if queue::rereads_after_delay(vanished, config.mutant) {
            k.outbox.push(Request::Reread);
            k.phase = Phase::Rereading;
            return;
        }
        self.grant(c, config);
    }

    /// Contender `c` is granted: at once if the library's lease vouches for it, else after a
    /// committed probe of our node.
    fn grant(&mut self, c: usize, config: &QueueConfig) {
        let now = self.clock(c);
        let k = &mut self.contenders[c];
        match k.watchdog.grant(&config.settings, false, now) {
            true => self.hold(c, config),
            false => {
                k.phase = Phase::Proving;
                k.probes = 1;
                k.outbox.push(Request::Probe);
            }
        }
    }

    /// Contender `c` holds: its guard is handed out. The ghost records whether the lease held
    /// and whether its token follows the earlier grants'.
    fn hold(&mut self, c: usize, config: &QueueConfig) {
        let now = self.clock(c);
        let gone = self.node_of(c).is_none();
        let k = &mut self.contenders[c];
        k.phase = Phase::Holding;
        if !k.watchdog.proven(&config.settings, now) {
            self.ghost.unproven.get_or_insert(c);
        }
        if gone {
            // A grant on a node a close deleted holds nothing (no holder property counts it),
            // and the watchdog cancels it when the deletion's notification comes. A grant may
            // rest on replies sent before the close; one after a lock-delay must not rest on
            // one sent after it: the library reads its node again. Any other grant promises
            // no more than the zero-request handoff does: a node of ours deleted in a
            // transaction before the event we proceeded on is the watchdog's to find (or the
            // waiter's own-node watch, which this model leaves out), one round trip after the
            // grant at most.
            if self.contenders[c].delayed && self.ghost.past_close[c] {
                self.ghost.granted_gone.get_or_insert(c);
            }
            return;
        }
        let token = k.seq.unwrap_or_default();
        let exclusive = k.kind != LockKind::Read;
        let ghost = &mut self.ghost;
        let above = match exclusive {
            true => ghost.last_any,
            false => ghost.last_exclusive,
        };
        if token <= above {
            ghost.token_regressed = true;
        }
        ghost.last_any = ghost.last_any.max(token);
        if exclusive {
            ghost.last_exclusive = ghost.last_exclusive.max(token);
        }
    }
}
