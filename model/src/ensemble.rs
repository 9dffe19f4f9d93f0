//! The ensemble's faults and how it recovers: a leader cut off from its followers, a follower
//! cut off from the leader, noticing, elections (a new leader touches every session). A
//! partition lasts to the end of a schedule.

use crate::state::{Role, State, CLIENTS, SERVERS};

impl State {
    /// Fault: the leader loses its followers. They notice at once, drop their clients and
    /// look for a leader; the old leader notices at once too (`noticed`), or goes on answering
    /// its own clients' syncs (stale) to the end of the schedule.
    pub(crate) fn isolate_leader(&mut self, noticed: bool) {
        for server in 0..SERVERS {
            let s = &mut self.servers[server];
            s.pending = [false; CLIENTS];
            s.pending_since = None;
            match s.role {
                Role::Leader => {
                    s.isolated = true;
                    s.role = Role::Stale;
                    if noticed {
                        self.step_down(server);
                    }
                }
                Role::Follower => self.step_down(server),
                _ => {}
            }
        }
    }

    /// Fault: a follower loses its links to the others: its touch table never reaches the
    /// leader. It notices at once (`noticed`) and drops its clients, or keeps them to the end
    /// of the schedule, their writes and syncs going nowhere.
    pub(crate) fn cut_follower(&mut self, server: usize, noticed: bool) {
        let s = &mut self.servers[server];
        s.isolated = true;
        s.role = Role::Cut;
        s.pending = [false; CLIENTS];
        s.pending_since = None;
        if noticed {
            self.step_down(server);
        }
    }

    /// A stale leader or a cut follower notices (its leader's pings or its quorum's answers
    /// stopped) and drops its clients; it looks for a leader, and follows one if it can.
    pub(crate) fn step_down(&mut self, server: usize) {
        self.servers[server].role = Role::Looking;
        for client in 0..CLIENTS {
            if self.clients[client].server == Some(server) {
                self.disconnect(client);
            }
        }
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
