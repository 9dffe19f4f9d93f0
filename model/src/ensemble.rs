//! The servers' side: the ensemble as ZooKeeper runs it. Touches (a follower's touch table, the
//! leader's tracker), relays, what a server answers to a probe (a commit or a sync), the
//! tracker's expiry, a reconnect's revalidation, what a partition does to the servers' roles,
//! stepping down, and elections (a new leader touches every session). A partition lasts to the
//! end of a schedule.
//!
//! The bottom of the model's calls: these methods read and change the servers, the tracker and
//! the lock's nodes only, and call nothing of the clients' side (`client`) or the world's steps
//! (`step`). What a change means for the clients (a session's expiry heard, a server's clients
//! dropped) is returned to the caller, which is the steps' to pass on.

use zkfence::model_api::Reply;

use crate::config::{RELAY_TICKS, SESSION_TICKS};
use crate::state::{Role, State, CLIENTS, SERVERS};

/// Which servers dropped their clients (they stepped down): the clients connected to them are
/// disconnected by the caller.
pub(crate) type Dropped = [bool; SERVERS];

impl State {
    /// `server` heard from `client`'s session at this tick: the leader's tracker touches it,
    /// a follower notes it in its touch table for its next relay.
    pub(crate) fn touch(&mut self, server: usize, client: usize) {
        let now = self.now;
        match self.servers[server].role {
            Role::Leader => {
                if self.sessions[client].alive {
                    self.sessions[client].touched = now;
                }
            }
            Role::Follower => {
                let s = &mut self.servers[server];
                s.pending[client] = true;
                s.pending_since.get_or_insert(now);
            }
            // A cut or stale server's touches never reach the working leader.
            Role::Stale | Role::Cut | Role::Looking => {}
        }
    }

    /// Whether follower `server` must relay its touch table before time moves on (its oldest
    /// touch came a relay period ago).
    pub(crate) fn relay_due(&self, server: usize) -> bool {
        let s = &self.servers[server];
        s.role == Role::Follower && (s.pending_since).is_some_and(|t| t + RELAY_TICKS <= self.now)
    }

    /// The follower relays its touch table to the leader, which touches those sessions now.
    pub(crate) fn relay(&mut self, server: usize) {
        let pending = std::mem::take(&mut self.servers[server].pending);
        self.servers[server].pending_since = None;
        for (session, touched) in self.sessions.iter_mut().zip(pending) {
            if touched && session.alive {
                session.touched = self.now;
            }
        }
    }

    /// What `server` answers to a probe of `client`'s sent now, `None` if it cannot (it waits
    /// for a quorum that does not come); `Some(Err(()))` if the session is gone.
    pub(crate) fn answer(
        &self,
        server: usize,
        client: usize,
        sync: bool,
    ) -> Option<Result<Reply, ()>> {
        let role = self.servers[server].role;
        let committed = self.working(server);
        if sync {
            // A leader answers its own clients' syncs without a quorum round; a follower
            // forwards them to its leader. The read behind it is the server's own data.
            if !matches!(role, Role::Leader | Role::Stale | Role::Follower) {
                return None;
            }
            if committed && !self.sessions[client].alive {
                return Some(Err(()));
            }
            let seen = self.servers[server].sees[client];
            return Some(Ok(if seen {
                Reply::Synced
            } else {
                Reply::Refused(true)
            }));
        }
        if !committed {
            return None;
        }
        if !self.sessions[client].alive {
            return Some(Err(()));
        }
        Some(Ok(match self.nodes[client] {
            true => Reply::Committed,
            false => Reply::Refused(true),
        }))
    }

    /// Whether the leader's tracker expires `client`'s session at this tick: someone leads, and
    /// last touched it `T` ago or more.
    pub(crate) fn expires(&self, client: usize) -> bool {
        let session = self.sessions[client];
        self.leader().is_some() && session.alive && session.touched + SESSION_TICKS <= self.now
    }

    /// The leader expires `client`'s session: its node is deleted, and the working servers'
    /// data no longer has it. (Who hears of it is the clients' side.)
    pub(crate) fn expire(&mut self, client: usize) {
        self.sessions[client].alive = false;
        self.nodes[client] = false;
        for server in 0..SERVERS {
            if self.working(server) {
                self.servers[server].sees[client] = false;
            }
        }
    }

    /// A client reconnecting revalidates `client`'s session with the leader: a touch if it is
    /// alive. Whether it is.
    pub(crate) fn revalidate(&mut self, client: usize, server: usize) -> bool {
        if self.servers[server].role == Role::Stale {
            // A leader cut off from its quorum revalidates on its own (its tracker, as it was
            // when cut off), and touches nothing the working leader sees.
            return true;
        }
        if !self.sessions[client].alive {
            return false;
        }
        self.sessions[client].touched = self.now;
        true
    }

    /// Fault: the leader loses its followers. They notice at once, drop their clients and
    /// look for a leader; the old leader notices at once too (`noticed`), or goes on answering
    /// its own clients' syncs (stale) to the end of the schedule.
    pub(crate) fn isolate_leader(&mut self, noticed: bool) -> Dropped {
        let mut dropped = [false; SERVERS];
        for server in 0..SERVERS {
            let s = &mut self.servers[server];
            s.pending = [false; CLIENTS];
            s.pending_since = None;
            match s.role {
                Role::Leader => {
                    s.isolated = true;
                    s.role = Role::Stale;
                    if noticed {
                        self.step_down(server, &mut dropped);
                    }
                }
                Role::Follower => self.step_down(server, &mut dropped),
                _ => {}
            }
        }
        dropped
    }

    /// Fault: a follower loses its links to the others: its touch table never reaches the
    /// leader. It notices at once (`noticed`) and drops its clients, or keeps them to the end
    /// of the schedule, their writes and syncs going nowhere.
    pub(crate) fn cut_follower(&mut self, server: usize, noticed: bool) -> Dropped {
        let s = &mut self.servers[server];
        s.isolated = true;
        s.role = Role::Cut;
        s.pending = [false; CLIENTS];
        s.pending_since = None;
        let mut dropped = [false; SERVERS];
        if noticed {
            self.step_down(server, &mut dropped);
        }
        dropped
    }

    /// A stale leader or a cut follower notices (its leader's pings or its quorum's answers
    /// stopped): it stops serving, marked in `dropped` (its clients are dropped by the caller),
    /// and looks for a leader, and follows one if it can.
    fn step_down(&mut self, server: usize, dropped: &mut Dropped) {
        self.servers[server].role = Role::Looking;
        dropped[server] = true;
        self.join_leader();
    }

    /// Looking servers that can reach the leader follow it, with its data.
    fn join_leader(&mut self) {
        if self.leader().is_none() {
            return;
        }
        for server in &mut self.servers {
            if server.role == Role::Looking && !server.isolated {
                server.role = Role::Follower;
                server.sees = self.nodes;
            }
        }
    }

    /// `server` is elected by the looking servers it can reach (a quorum, two of three): it
    /// leads with the committed data, and its tracker starts by touching every live session.
    pub(crate) fn elect(&mut self, server: usize) {
        for s in &mut self.servers {
            if s.role == Role::Looking && !s.isolated {
                s.role = Role::Follower;
                s.sees = self.nodes;
                s.pending = [false; CLIENTS];
                s.pending_since = None;
            }
        }
        self.servers[server].role = Role::Leader;
        let now = self.now;
        for session in &mut self.sessions {
            if session.alive {
                session.touched = now;
            }
        }
    }

    /// Whether `server` can be elected now: nobody leads, and it and another server are
    /// looking and can reach each other.
    pub(crate) fn electable(&self, server: usize) -> bool {
        let looking = |s: usize| self.servers[s].role == Role::Looking && !self.servers[s].isolated;
        self.leader().is_none()
            && looking(server)
            && (0..SERVERS).filter(|&s| looking(s)).count() >= 2
    }
}
