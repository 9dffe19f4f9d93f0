//! The session's states as the watchdog takes them from `zookeeper-client`'s state channel,
//! with the flaps the channel folded away put back.

use zookeeper_client as zk;

/// The session's states from `zookeeper-client`'s state channel, which keeps only the latest
/// one, with the Disconnected it folded away put back.
///
/// The client publishes a state only when it differs from the one before, and it moves from
/// one connected state to another (SyncConnected, ConnectedReadOnly) only through a
/// reconnect. So a connected state taken right after a connected one (the same again, or the
/// other) means that a Disconnected came and went unseen: a flap over before this task
/// looked. Such a change yields that Disconnected before the state (the lease must see the
/// break). Before, a persistent watch on a path nobody creates carried every transition, at
/// the cost of two server watches per session (ZooKeeper registers a persistent watch in its
/// data and child tables) and an `addWatch` per session.
pub(super) struct SessionStates {
    watcher: zk::StateWatcher,
    fold: LastTaken,
}

impl SessionStates {
    pub(super) fn new(client: &zk::Client) -> SessionStates {
        let mut watcher = client.state_watcher();
        let last = watcher.state();
        SessionStates {
            watcher,
            fold: LastTaken { last },
        }
    }

    /// The state as it was when the channel was opened.
    pub(super) fn first(&self) -> zk::SessionState {
        self.fold.last
    }
}

/// What [`SessionStates`] remembers to put a folded flap back: the state last taken.
#[derive(Debug)]
struct LastTaken {
    last: zk::SessionState,
}

impl LastTaken {
    /// What a change to `state` yields: the Disconnected folded into it, if the channel
    /// folded one (see [`SessionStates`]), then `state`.
    fn changed_to(
        &mut self,
        state: zk::SessionState,
    ) -> (Option<zk::SessionState>, zk::SessionState) {
        use zk::SessionState::{ConnectedReadOnly, SyncConnected};
        let connected = |s| matches!(s, SyncConnected | ConnectedReadOnly);
        // A connected state after the same one or the other: a reconnect came between.
        let folded = connected(state) && connected(self.last);
        self.last = state;
        (folded.then_some(zk::SessionState::Disconnected), state)
    }
}

/// The next session state, after a Disconnected folded into it (see [`SessionStates`]).
/// Cancel safe: a state taken from the channel is yielded in the same poll.
pub(super) async fn next_state(
    states: &mut Option<SessionStates>,
) -> (Option<zk::SessionState>, zk::SessionState) {
    let Some(states) = states else {
        return std::future::pending().await;
    };
    let state = states.watcher.changed().await;
    states.fold.changed_to(state)
}

#[cfg(test)]
mod tests {
    use super::LastTaken;
    use zookeeper_client::SessionState::{ConnectedReadOnly, Disconnected, Expired, SyncConnected};

    #[test]
    fn a_change_back_to_the_last_state_is_a_flap_put_back() {
        let mut fold = LastTaken {
            last: SyncConnected,
        };
        // Seen one by one: as they come.
        assert_eq!(fold.changed_to(Disconnected), (None, Disconnected));
        assert_eq!(fold.changed_to(SyncConnected), (None, SyncConnected));
        // Folded: the channel shows SyncConnected again.
        assert_eq!(
            fold.changed_to(SyncConnected),
            (Some(Disconnected), SyncConnected)
        );
        // From one connected state to the other: a reconnect in between.
        assert_eq!(
            fold.changed_to(ConnectedReadOnly),
            (Some(Disconnected), ConnectedReadOnly)
        );
        // Disconnected twice: a connected spell in between, nothing to put back.
        assert_eq!(fold.changed_to(Disconnected), (None, Disconnected));
        assert_eq!(fold.changed_to(Disconnected), (None, Disconnected));
        // A terminal state is never put back behind a Disconnected.
        assert_eq!(fold.changed_to(Expired), (None, Expired));
    }
}
