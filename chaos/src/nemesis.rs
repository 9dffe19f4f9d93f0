//! The nemesis: injects one fault into a scenario's cluster and heals it. Processes paused
//! (SIGSTOP/SIGCONT) or killed (`kill -9`), sessions expired from outside, workers cut off or
//! slowed at their proxies, links between servers cut with iptables, the lock's parent
//! deleted; and the final heal that undoes every fault.

use crate::clock::now_ns;
use crate::cluster::{Holder, Scenario};
use crate::fault::{Fault, FaultKind, Phase};
use crate::outage::OutageWatch;
use std::time::Duration;
use zkfence_testkit::LinkFault;
use zookeeper_client as zk;

/// A fault of `kind` from `start` to now, noticeable from `start`, aimed at nobody; the
/// injectors fill in what differs.
fn record(kind: &FaultKind, detail: String, start: i64) -> Fault {
    Fault {
        kind: kind.name().to_owned(),
        detail,
        start,
        end: now_ns(),
        reference: start,
        victim: None,
        expired_at: None,
        pause_past_timeout: false,
        deleted: Vec::new(),
        closed_session: None,
        outage: None,
    }
}

/// ", under w… token …'s write" for a store fault that found a writer.
fn during(writer: Option<&Holder>) -> String {
    writer.map_or(String::new(), |h| {
        format!(", under w{} token {}'s write", h.id, h.token)
    })
}

/// How long an outage's watch waits, after the fault healed, for a leader to serve.
const BACK_WAIT: Duration = Duration::from_secs(30);

/// How a restart of servers went, for a fault's detail.
fn restarted<E: std::fmt::Display>(
    outcome: Result<Result<(), E>, tokio::task::JoinError>,
) -> String {
    match outcome {
        Ok(Ok(())) => "restarted".to_string(),
        Ok(Err(e)) => format!("restart failed: {e}"),
        Err(e) => format!("restart failed: {e}"),
    }
}

impl Scenario {
    /// Injects one fault and heals it; returns `None` when no target showed up in time.
    pub(crate) async fn inject(&self, kind: &FaultKind) -> Option<Fault> {
        self.fault_started(kind.name());
        let fault = match *kind {
            FaultKind::PauseHolder { factor, phase } => {
                self.pause_holder(kind, factor, phase).await
            }
            FaultKind::KillHolder => self.kill_holder(kind).await,
            FaultKind::ExpireHolder => self.expire_holder(kind).await,
            FaultKind::PartitionHolder => self.partition_holder(kind).await,
            FaultKind::SlowHolder => self.slow_holder(kind).await,
            FaultKind::PauseLeader { factor, aimed } => {
                self.pause_leader(kind, factor, aimed).await
            }
            FaultKind::KillLeader { down_ms } => self.kill_leader(kind, down_ms).await,
            FaultKind::PauseAll => Some(self.pause_all(kind).await),
            FaultKind::KillAll => Some(self.kill_all(kind).await),
            FaultKind::DeleteParent => Some(self.delete_parent(kind).await),
            FaultKind::IsolateLeader { symmetric } => self.isolate_leader(kind, symmetric).await,
            FaultKind::OneWayFollower => self.cut_follower(kind, true).await,
            FaultKind::IsolateFollower => self.cut_follower(kind, false).await,
            FaultKind::LossyLeaderLink => self.lossy_leader_link(kind).await,
            FaultKind::StaleLeaderReconnect => self.stale_leader_reconnect(kind).await,
            FaultKind::SkewWorker { rate } => self.skew_worker(kind, rate).await,
            FaultKind::RollingRestart => self.rolling_restart(kind).await,
            FaultKind::KillLeaderFollowers => self.kill_leader_under_follower(kind).await,
            FaultKind::LeaderSilent => self.silence_leader(kind).await,
            FaultKind::LeaderGcPause { factor } => self.pause_leader(kind, factor, true).await,
            FaultKind::FsyncStall => self.fsync_stall(kind).await,
            FaultKind::ClientSuspend => self.pause_holder(kind, 1.5, Phase::Any).await,
            FaultKind::StorePause { factor } => self.pause_store(kind, factor).await,
            FaultKind::StoreRestart => self.restart_store(kind).await,
            FaultKind::StoreCut => self.cut_store_replies(kind).await,
            FaultKind::StoreError { applied } => self.error_store_reply(kind, applied).await,
        }?;
        self.fault_ended(fault.clone());
        Some(fault)
    }

    /// SIGSTOP the holder (in `phase` if one shows up, else any) for `factor` × T.
    async fn pause_holder(&self, kind: &FaultKind, factor: f64, phase: Phase) -> Option<Fault> {
        let t = self.timeout();
        let h = match self.holder(phase, Duration::from_secs(8)).await {
            Some(h) => h,
            None => self.holder(Phase::Any, Duration::from_secs(8)).await?,
        };
        let (id, token) = (h.id, h.token);
        let actual = self.phase_of(id).map_or("held", Phase::name);
        self.signal(id, libc::SIGSTOP);
        let start = now_ns();
        self.set_paused(id, true);
        tokio::time::sleep(t.mul_f64(factor)).await;
        self.signal(id, libc::SIGCONT);
        let end = now_ns();
        self.set_paused(id, false);
        let detail = format!(
            "w{id} token {token} SIGSTOP {:.1} s ({factor}×T) in its {actual} phase",
            t.as_secs_f64() * factor
        );
        Some(Fault {
            end,
            reference: end,
            victim: Some(h.victim()),
            pause_past_timeout: factor > 1.0,
            ..record(kind, detail, start)
        })
    }

    /// SIGKILL the holder, and restart the worker 1 s later.
    async fn kill_holder(&self, kind: &FaultKind) -> Option<Fault> {
        let h = self.holder(Phase::Any, Duration::from_secs(8)).await?;
        self.signal(h.id, libc::SIGKILL);
        let start = now_ns();
        tokio::time::sleep(Duration::from_secs(1)).await;
        self.respawn(h.id as u32, self.skew_of(h.id));
        let detail = format!("w{} token {} SIGKILL, restarted after 1 s", h.id, h.token);
        Some(Fault {
            victim: Some(h.victim()),
            ..record(kind, detail, start)
        })
    }

    /// A holder in its write phase, if one shows within 8 s: the store faults land under a
    /// write when they can. They name it in their detail, not as their victim: its hold is not
    /// what they attack, and no watchdog is to notice them.
    async fn writer(&self) -> Option<Holder> {
        self.holder(Phase::Write, Duration::from_secs(8)).await
    }

    /// SIGSTOP the scenario's own store, every process of it, for `factor` × T. `None`
    /// without a store of its own.
    async fn pause_store(&self, kind: &FaultKind, factor: f64) -> Option<Fault> {
        let store = self.own_store.as_ref()?;
        let t = self.timeout();
        let writer = self.writer().await;
        let start = now_ns();
        store.pause();
        tokio::time::sleep(t.mul_f64(factor)).await;
        store.resume();
        let detail = format!(
            "{} SIGSTOP (every process) {:.1} s ({factor}×T){}",
            store.kind.name(),
            t.as_secs_f64() * factor,
            during(writer.as_ref())
        );
        Some(record(kind, detail, start))
    }

    /// `kill -9` to every process of the scenario's own store, and the store started again at
    /// once on its data. `None` without a store of its own.
    async fn restart_store(&self, kind: &FaultKind) -> Option<Fault> {
        let store = self.own_store.as_ref()?;
        let writer = self.writer().await;
        let start = now_ns();
        let how = match store.crash_and_restart().await {
            Ok(took) => format!(
                "serving again after {} ms of crash recovery",
                took.as_millis()
            ),
            Err(err) => format!("restart failed: {err}"),
        };
        let detail = format!(
            "{} kill -9 (every process), {how}{}",
            store.kind.name(),
            during(writer.as_ref())
        );
        Some(record(kind, detail, start))
    }

    /// Under a holder's write: an HTTP store's reply to the next commit replaced with a server
    /// error (500), the commit applied first when `applied`, never sent otherwise. `None`
    /// without an HTTP store of its own or a writer.
    async fn error_store_reply(&self, kind: &FaultKind, applied: bool) -> Option<Fault> {
        let store = self.own_store.as_ref()?;
        let h = self.writer().await?;
        let start = now_ns();
        let answered =
            (store.answer_next_commit_with_error(applied, Duration::from_secs(3))).await?;
        let what = match (answered, applied) {
            (false, _) => "no write within 3 s to answer".to_owned(),
            (true, true) => {
                "the next write applied, then answered 500 in the store's stead".to_owned()
            }
            (true, false) => {
                "the next write answered 500 in the store's stead, never sent".to_owned()
            }
        };
        let detail = format!("{}: {what}{}", store.kind.name(), during(Some(&h)));
        Some(record(kind, detail, start))
    }

    /// Under a holder's write: the store's replies dropped from the next commit on (its
    /// `COMMIT`, or the fence's script on Redis), which still reaches the store; 500 ms later
    /// every store connection cut. The commit applied and its writer cannot know: in doubt.
    /// `None` without a store of its own or a writer.
    async fn cut_store_replies(&self, kind: &FaultKind) -> Option<Fault> {
        let store = self.own_store.as_ref()?;
        let h = self.writer().await?;
        let start = now_ns();
        let before = store.dropped();
        let sent = store
            .drop_replies_from_the_next_commit(Duration::from_secs(3))
            .await;
        if sent {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        store.cut();
        let dropped = store.dropped() - before;
        let what = match sent {
            true => format!("replies dropped from the next commit on for 500 ms ({dropped} bytes)"),
            false => "no commit came within 3 s".to_owned(),
        };
        let detail = format!(
            "w{} token {}'s write under way: {}'s {what}, then every store connection cut",
            h.id,
            h.token,
            store.kind.name()
        );
        Some(record(kind, detail, start))
    }

    /// Close the holder's session from outside, then wait until the server deleted its node.
    async fn expire_holder(&self, kind: &FaultKind) -> Option<Fault> {
        let h = self.long_holder().await?;
        let start = now_ns();
        let how = crate::hijack::expire_session(&self.hosts, zk::SessionId(h.session)).await;
        let expired = wait_gone(&self.admin, &h.node, Duration::from_secs(5)).await;
        let detail = format!(
            "w{} token {} session {:#x} closed from outside ({})",
            h.id,
            h.token,
            h.session,
            how.unwrap_or_else(|e| e)
        );
        Some(Fault {
            victim: Some(h.victim()),
            expired_at: expired,
            closed_session: Some(h.session),
            ..record(kind, detail, start)
        })
    }

    /// Blackhole the holder's three proxies until the server expired its session, plus 0.5 s.
    async fn partition_holder(&self, kind: &FaultKind) -> Option<Fault> {
        let h = self.long_holder().await?;
        let start = now_ns();
        for p in &self.proxies[h.id] {
            p.blackhole(true);
        }
        let expired = wait_gone(&self.admin, &h.node, self.timeout() * 3).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        for p in &self.proxies[h.id] {
            p.blackhole(false);
        }
        let detail = format!(
            "w{} token {} cut off from all three servers (it still reaches PostgreSQL)",
            h.id, h.token
        );
        Some(Fault {
            victim: Some(h.victim()),
            expired_at: expired,
            ..record(kind, detail, start)
        })
    }

    /// Delay every ZooKeeper frame of the holder by T/8 for 2T.
    async fn slow_holder(&self, kind: &FaultKind) -> Option<Fault> {
        let t = self.timeout();
        let h = self.long_holder().await?;
        let start = now_ns();
        let delay = t / 8;
        for p in &self.proxies[h.id] {
            p.delay(delay);
        }
        tokio::time::sleep(t * 2).await;
        for p in &self.proxies[h.id] {
            p.delay(Duration::ZERO);
        }
        let detail = format!(
            "w{} token {}: every ZooKeeper frame delayed {} ms for {:.1} s",
            h.id,
            h.token,
            delay.as_millis(),
            (t * 2).as_secs_f64()
        );
        Some(Fault {
            victim: Some(h.victim()),
            ..record(kind, detail, start)
        })
    }

    /// SIGSTOP the leader for `factor` × T; when `aimed`, with a holder stretched through it
    /// on a follower, and then long enough for its session to expire, or not, and be seen.
    async fn pause_leader(&self, kind: &FaultKind, factor: f64, aimed: bool) -> Option<Fault> {
        let t = self.timeout();
        let leader = self.leader().await?;
        let victim = if aimed {
            let (h, server) = self.placed_holder(|s| s != leader).await?;
            self.pin(h.id, server, &[]);
            Some((h, server))
        } else {
            None
        };
        let start = now_ns();
        self.ensemble.pause(leader);
        let watch = OutageWatch::start(&self.ensemble, &[leader], start);
        tokio::time::sleep(t.mul_f64(factor)).await;
        self.ensemble.resume(leader);
        watch.lift();
        let outage = watch.finish(BACK_WAIT).await;
        if let Some((h, _)) = &victim {
            tokio::time::sleep(self.timeout_of(h.id) + Duration::from_secs(2)).await;
            self.refuse_none();
        }
        let detail = format!(
            "server {leader} (leader) SIGSTOP {:.1} s ({factor}×T){}",
            t.as_secs_f64() * factor,
            victim.as_ref().map_or(String::new(), |(h, server)| format!(
                ", w{} token {} holding on follower {server}",
                h.id, h.token
            ))
        );
        Some(Fault {
            victim: victim.map(|(h, _)| h.victim()),
            outage: Some(outage),
            ..record(kind, detail, start)
        })
    }

    /// SIGKILL the leader, then restart it after `down_ms`.
    async fn kill_leader(&self, kind: &FaultKind, down_ms: u64) -> Option<Fault> {
        let leader = self.leader().await?;
        let start = now_ns();
        self.kill_servers(vec![leader]).await;
        let watch = OutageWatch::start(&self.ensemble, &[], start);
        let ensemble = self.ensemble.clone();
        let down = Duration::from_millis(down_ms);
        let outcome = tokio::task::spawn_blocking(move || {
            std::thread::sleep(down);
            ensemble.restart(leader)
        })
        .await;
        let outage = watch.finish(BACK_WAIT).await;
        let detail = format!(
            "server {leader} (leader) SIGKILL, down {} ms, {}",
            down.as_millis(),
            restarted(outcome)
        );
        Some(Fault {
            outage: Some(outage),
            ..record(kind, detail, start)
        })
    }

    /// SIGSTOP all three servers for T.
    async fn pause_all(&self, kind: &FaultKind) -> Fault {
        let t = self.timeout();
        let start = now_ns();
        for i in 0..3 {
            self.ensemble.pause(i);
        }
        let watch = OutageWatch::start(&self.ensemble, &[0, 1, 2], start);
        tokio::time::sleep(t).await;
        for i in 0..3 {
            self.ensemble.resume(i);
        }
        watch.lift();
        let outage = watch.finish(BACK_WAIT).await;
        let detail = format!("all three servers SIGSTOP {:.1} s", t.as_secs_f64());
        Fault {
            outage: Some(outage),
            ..record(kind, detail, start)
        }
    }

    /// SIGKILL all three servers, then restart them 1 s later.
    async fn kill_all(&self, kind: &FaultKind) -> Fault {
        let start = now_ns();
        self.kill_servers(vec![0, 1, 2]).await;
        let watch = OutageWatch::start(&self.ensemble, &[], start);
        let ensemble = self.ensemble.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            std::thread::sleep(Duration::from_secs(1));
            ensemble.restart_all()
        })
        .await;
        let outage = watch.finish(BACK_WAIT).await;
        let detail = format!(
            "all three servers SIGKILL, down 1 s, {}",
            restarted(outcome)
        );
        Fault {
            outage: Some(outage),
            ..record(kind, detail, start)
        }
    }

    /// Delete the lock node and its queue nodes in one multi, under a long hold if one shows.
    async fn delete_parent(&self, kind: &FaultKind) -> Fault {
        let victim = self.long_holder().await;
        let start = now_ns();
        let deleted = delete_tree(&self.admin, &self.lock).await;
        let detail = format!(
            "{} and the {} nodes under it deleted in one multi",
            self.lock,
            deleted.len().saturating_sub(1)
        );
        Fault {
            victim: victim.map(|h| h.victim()),
            expired_at: Some(start),
            deleted,
            ..record(kind, detail, start)
        }
    }

    /// A holder on the leader, the leader cut off from both followers: their packets to it
    /// reset (asymmetric) or dropped (symmetric), its packets to them dropped.
    async fn isolate_leader(&self, kind: &FaultKind, symmetric: bool) -> Option<Fault> {
        let leader = self.leader().await?;
        let (h, _) = self.placed_holder(|s| s == leader).await?;
        let followers: Vec<usize> = (0..3).filter(|&f| f != leader).collect();
        self.pin(h.id, leader, &[leader]);
        let at = self.where_things_are(h.id).await;
        let start = now_ns();
        let inbound = if symmetric {
            LinkFault::Drop
        } else {
            LinkFault::Reset
        };
        for &f in &followers {
            let _ = self.ensemble.cut(f, leader, inbound);
            let _ = self.ensemble.cut(leader, f, LinkFault::Drop);
        }
        let watch = OutageWatch::start(&self.ensemble, &[leader], start);
        let expired = self
            .hold_partition(h.id, &h.node, &followers, Some(&watch))
            .await;
        let outage = watch.finish(BACK_WAIT).await;
        let how = if symmetric {
            "dropped both ways"
        } else {
            "their packets reset, its packets dropped"
        };
        let detail = format!(
            "w{} token {} on server {leader} (leader), cut off from both followers: {how} {at}",
            h.id, h.token
        );
        Some(Fault {
            victim: Some(h.victim()),
            expired_at: expired,
            outage: Some(outage),
            ..record(kind, detail, start)
        })
    }

    /// A holder on a follower: its packets to the leader dropped (`one_way`), or the follower
    /// cut off from both other servers both ways.
    async fn cut_follower(&self, kind: &FaultKind, one_way: bool) -> Option<Fault> {
        let leader = self.leader().await?;
        let (h, server) = self.placed_holder(|s| s != leader).await?;
        let other = (0..3).find(|&o| o != leader && o != server)?;
        self.pin(h.id, server, &[server]);
        let at = self.where_things_are(h.id).await;
        let start = now_ns();
        let _ = self.ensemble.cut(server, leader, LinkFault::Drop);
        if !one_way {
            let _ = self.ensemble.cut(leader, server, LinkFault::Drop);
            let _ = self.ensemble.cut(server, other, LinkFault::Drop);
            let _ = self.ensemble.cut(other, server, LinkFault::Drop);
        }
        let expired = self
            .hold_partition(h.id, &h.node, &[leader, other], None)
            .await;
        let (id, token) = (h.id, h.token);
        let detail = if one_way {
            format!("w{id} token {token} on server {server} (follower): its packets to the leader {leader} dropped, the leader's still arrive {at}")
        } else {
            format!("w{id} token {token} on server {server} (follower), cut off from both other servers both ways {at}")
        };
        Some(Fault {
            victim: Some(h.victim()),
            expired_at: expired,
            ..record(kind, detail, start)
        })
    }

    /// A holder on a follower; the leader cut off from both followers as in
    /// isolate-leader-asym, and the holder from both followers (its connection to its
    /// follower goes silent, even when the follower drops it, as in a real partition), as a
    /// client on the leader's side of the split. It may reach the stale leader once its hold
    /// is in jeopardy (or over), and no sooner than T/2 after the cut (so that a lease it
    /// renews there would outlast the majority's grant; the stale leader itself expires the
    /// session about T after the cut): no write of its session is stuck there yet, so the
    /// leader answers its syncs at once, and it commits nothing. Held like the partitions.
    async fn stale_leader_reconnect(&self, kind: &FaultKind) -> Option<Fault> {
        let leader = self.leader().await?;
        // A worker with a grace if there is one: what the fault is about.
        let graced = (0..self.proxies.len()).any(|w| !self.grace_of(w).is_zero());
        let who = |w: usize| !graced || !self.grace_of(w).is_zero();
        let (h, server) = self
            .placed_holder_among(|s| s != leader, Some(&who))
            .await?;
        self.pin(h.id, server, &[leader]);
        // A hold that has run a while (stretched, it lasts through the fault): its watchdog
        // probes at its steady pace, not the burst of a fresh start.
        tokio::time::sleep(self.timeout_of(h.id) / 2).await;
        let at = self.where_things_are(h.id).await;
        let followers: Vec<usize> = (0..3).filter(|&f| f != leader).collect();
        let start = now_ns();
        for &f in &followers {
            let _ = self.ensemble.cut(f, leader, LinkFault::Reset);
            let _ = self.ensemble.cut(leader, f, LinkFault::Drop);
        }
        let watch = OutageWatch::start(&self.ensemble, &[leader], start);
        self.proxies[h.id][server].cut_off(true);
        self.proxies[h.id][server].refuse(true);
        let (expired, opened) = tokio::join!(
            self.hold_partition(h.id, &h.node, &followers, Some(&watch)),
            self.open_when_suspended(&h, leader, start),
        );
        let outage = watch.finish(BACK_WAIT).await;
        self.proxies[h.id][server].cut_off(false);
        let detail = format!(
            "w{} token {} on follower {server}, cut off from both followers as the leader {leader} is \
             (their packets to it reset, its packets to them dropped); let reach the leader {:.1} s in {at}",
            h.id,
            h.token,
            (opened - start) as f64 / 1e9
        );
        Some(Fault {
            victim: Some(h.victim()),
            expired_at: expired,
            outage: Some(outage),
            ..record(kind, detail, start)
        })
    }

    /// Lets `h`'s worker connect to server `to` once its hold is in jeopardy or over (or after
    /// its T and 1 s), and no sooner than T/2 after `since`; returns when.
    async fn open_when_suspended(&self, h: &Holder, to: usize, since: i64) -> i64 {
        let t = self.timeout_of(h.id);
        let deadline = since + (t + Duration::from_secs(1)).as_nanos() as i64;
        let earliest = since + t.mul_f64(0.5).as_nanos() as i64;
        while now_ns() < deadline && (now_ns() < earliest || !self.suspended(h.id, h.token)) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.proxies[h.id][to].refuse(false);
        now_ns()
    }

    /// 30% of the packets between the leader and the followers lost, both ways, for 2T.
    async fn lossy_leader_link(&self, kind: &FaultKind) -> Option<Fault> {
        let t = self.timeout();
        let leader = self.leader().await?;
        let holder = self.long_holder().await;
        let start = now_ns();
        for f in (0..3).filter(|&f| f != leader) {
            let _ = self.ensemble.cut(leader, f, LinkFault::Lossy(0.3));
            let _ = self.ensemble.cut(f, leader, LinkFault::Lossy(0.3));
        }
        tokio::time::sleep(t * 2).await;
        let _ = self.ensemble.heal();
        self.await_quorum().await;
        let detail = format!(
            "30% of the packets between the leader {leader} and the followers lost for {:.1} s",
            (t * 2).as_secs_f64()
        );
        Some(Fault {
            victim: holder.map(|h| h.victim()),
            ..record(kind, detail, start)
        })
    }

    /// Kill the holder and restart it under libfaketime with its clock at `rate`.
    async fn skew_worker(&self, kind: &FaultKind, rate: f64) -> Option<Fault> {
        let h = self.holder(Phase::Any, Duration::from_secs(8)).await?;
        self.signal(h.id, libc::SIGKILL);
        let start = now_ns();
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.respawn(h.id as u32, Some(rate));
        let detail = format!(
            "w{} (token {}) killed and restarted with its clock at {rate}× real time (libfaketime)",
            h.id, h.token
        );
        Some(Fault {
            victim: Some(h.victim()),
            ..record(kind, detail, start)
        })
    }

    /// Restart each server in turn, followers first and the leader last (as an operator's
    /// runbook does), each serving again, with all three in quorum, before the next; a
    /// holder, wherever it is, stretched through it.
    async fn rolling_restart(&self, kind: &FaultKind) -> Option<Fault> {
        let leader = self.leader().await?;
        let holder = self.placed_holder(|_| true).await;
        let start = now_ns();
        let order: Vec<usize> = (0..3).filter(|&s| s != leader).chain([leader]).collect();
        let mut steps = Vec::new();
        let mut outage = None;
        for &i in &order {
            let ensemble = self.ensemble.clone();
            let began = now_ns();
            // The followers' restarts leave a quorum; the leader's takes it away.
            let watch = if i == leader {
                self.kill_servers(vec![i]).await;
                Some(OutageWatch::start(&self.ensemble, &[], began))
            } else {
                None
            };
            let outcome = tokio::task::spawn_blocking(move || ensemble.restart(i)).await;
            self.await_quorum().await;
            if let Some(watch) = watch {
                outage = Some(watch.finish(BACK_WAIT).await);
            }
            steps.push(format!(
                "{i} {} after {:.1} s",
                restarted(outcome),
                (now_ns() - began) as f64 / 1e9
            ));
        }
        let detail = format!(
            "servers restarted in turn, the leader {leader} last: {}{}",
            steps.join(", "),
            holder.as_ref().map_or(String::new(), |(h, server)| format!(
                "; w{} token {} holding on server {server}",
                h.id, h.token
            ))
        );
        Some(Fault {
            victim: holder.map(|(h, _)| h.victim()),
            outage,
            ..record(kind, detail, start)
        })
    }

    /// A holder on a follower, stretched; SIGKILL the leader, restart it once the followers
    /// elected another (and 1 s more), and keep the fault until T + 2 s after the kill, when
    /// the holder's lease has lapsed or been proven again either way.
    async fn kill_leader_under_follower(&self, kind: &FaultKind) -> Option<Fault> {
        let leader = self.leader().await?;
        let (h, server) = self.placed_holder(|s| s != leader).await?;
        self.free_but_avoid(h.id, leader);
        let start = now_ns();
        self.kill_servers(vec![leader]).await;
        let watch = OutageWatch::start(&self.ensemble, &[], start);
        let elected = self.new_leader(leader).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let ensemble = self.ensemble.clone();
        let outcome = tokio::task::spawn_blocking(move || ensemble.restart(leader)).await;
        self.await_quorum().await;
        let outage = watch.finish(BACK_WAIT).await;
        let until = start + (self.timeout_of(h.id) + Duration::from_secs(2)).as_nanos() as i64;
        tokio::time::sleep(Duration::from_nanos((until - now_ns()).max(0) as u64)).await;
        self.refuse_none();
        let detail = format!(
            "w{} token {} holding on follower {server}; server {leader} (leader) SIGKILL, {}, {}",
            h.id,
            h.token,
            elected.map_or("no new leader within the wait".into(), |(l, at)| format!(
                "server {l} elected after {:.1} s",
                (at - start) as f64 / 1e9
            )),
            restarted(outcome)
        );
        Some(Fault {
            victim: Some(h.victim()),
            outage: Some(outage),
            ..record(kind, detail, start)
        })
    }

    /// A holder on a follower, stretched; the leader's links to both followers drop packets
    /// both ways, so the followers elect only after `syncLimit · tickTime`. Held, like the
    /// partitions, for `syncLimit` ticks + the holder's T + 2 s.
    async fn silence_leader(&self, kind: &FaultKind) -> Option<Fault> {
        let leader = self.leader().await?;
        let (h, server) = self.placed_holder(|s| s != leader).await?;
        self.free_but_avoid(h.id, leader);
        let at = self.where_things_are(h.id).await;
        let followers: Vec<usize> = (0..3).filter(|&f| f != leader).collect();
        let start = now_ns();
        for &f in &followers {
            let _ = self.ensemble.cut(leader, f, LinkFault::Drop);
            let _ = self.ensemble.cut(f, leader, LinkFault::Drop);
        }
        let watch = OutageWatch::start(&self.ensemble, &[leader], start);
        let expired = self
            .hold_partition(h.id, &h.node, &followers, Some(&watch))
            .await;
        let outage = watch.finish(BACK_WAIT).await;
        let detail = format!(
            "w{} token {} on follower {server}; the leader {leader}'s links to both followers drop packets both ways {at}",
            h.id, h.token
        );
        Some(Fault {
            victim: Some(h.victim()),
            expired_at: expired,
            outage: Some(outage),
            ..record(kind, detail, start)
        })
    }

    /// A holder, stretched; the replies to its next writes (the watchdog's probes) on all its
    /// proxies held T/4 after each was sent, as an fsync stall looks to the client, for 2T.
    /// A stand-in: this kernel has no `tc netem` and the servers' disks cannot be slowed.
    async fn fsync_stall(&self, kind: &FaultKind) -> Option<Fault> {
        const WRITES: u32 = 4;
        let (h, server) = self.placed_holder(|_| true).await?;
        let t = self.timeout_of(h.id);
        let start = now_ns();
        for p in &self.proxies[h.id] {
            p.delay_writes(t / 4, WRITES);
        }
        tokio::time::sleep(t * 2).await;
        for p in &self.proxies[h.id] {
            p.delay_writes(Duration::ZERO, 0);
        }
        let detail = format!(
            "w{} token {} on server {server}: the replies to its next {WRITES} writes held {} ms each, for {:.1} s",
            h.id,
            h.token,
            (t / 4).as_millis(),
            (t * 2).as_secs_f64()
        );
        Some(Fault {
            victim: Some(h.victim()),
            ..record(kind, detail, start)
        })
    }

    /// SIGKILLs `servers` (keeping their data) and waits until they refuse connections.
    async fn kill_servers(&self, servers: Vec<usize>) {
        let ensemble = self.ensemble.clone();
        let _ = tokio::task::spawn_blocking(move || {
            for i in servers {
                ensemble.kill(i);
            }
        })
        .await;
    }

    /// Once the victim is placed: every other worker may connect anywhere again, and worker
    /// `id` anywhere but server `avoid` (it stays off the server the fault strikes).
    fn free_but_avoid(&self, id: usize, avoid: usize) {
        self.refuse_none();
        self.proxies[id][avoid].refuse(true);
    }

    /// Waits (up to three times `syncLimit` ticks + 10 s) until a server other than `old`
    /// leads; which, and when.
    async fn new_leader(&self, old: usize) -> Option<(usize, i64)> {
        let wait = self.options.tick() * self.options.sync_limit() * 3 + Duration::from_secs(10);
        let deadline = now_ns() + wait.as_nanos() as i64;
        while now_ns() < deadline {
            let ensemble = self.ensemble.clone();
            if let Ok(Some(l)) = tokio::task::spawn_blocking(move || ensemble.leader()).await {
                if l != old {
                    return Some((l, now_ns()));
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    /// A holder early in a long critical section, else any holder.
    async fn long_holder(&self) -> Option<Holder> {
        match self.holder(Phase::Long, Duration::from_secs(10)).await {
            Some(h) => Some(h),
            None => self.holder(Phase::Any, Duration::from_secs(8)).await,
        }
    }

    /// Steers every other worker onto a server `on` accepts (the rest onto the others), then
    /// waits for a holder connected to such a server and stretches its hold (SIGUSR1) so that
    /// it lasts through the fault; returns it, with its server, once it acknowledged.
    async fn placed_holder(&self, on: impl Fn(usize) -> bool) -> Option<(Holder, usize)> {
        self.placed_holder_among(on, None).await
    }

    /// [`Scenario::placed_holder`], among the workers `who` accepts, if given (they are all
    /// steered onto the servers `on` accepts, whatever their number).
    async fn placed_holder_among(
        &self,
        on: impl Fn(usize) -> bool,
        who: Option<&dyn Fn(usize) -> bool>,
    ) -> Option<(Holder, usize)> {
        self.steer(&on, who).await;
        let deadline = now_ns() + 40_000_000_000;
        while now_ns() < deadline {
            let Some(h) = self.holder(Phase::Any, Duration::from_millis(500)).await else {
                continue;
            };
            if who.is_some_and(|who| !who(h.id)) {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            let servers: Vec<usize> = (0..3)
                .filter(|&s| self.proxies[h.id][s].connections() > 0)
                .collect();
            let [server] = servers[..] else {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            if !on(server) {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            self.signal(h.id, libc::SIGUSR1);
            let acked = now_ns() + 500_000_000;
            while now_ns() < acked {
                if self.extended(h.id) == Some(h.token) {
                    return Some((h, server));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        None
    }

    /// Puts even workers on the servers `on` accepts and odd ones on the others (all on the
    /// accepted ones if there are no others, and those `who` accepts): their proxies elsewhere
    /// refuse connections and reset the open ones. Waits (up to 3 s) for the resets to land.
    async fn steer(&self, on: &impl Fn(usize) -> bool, who: Option<&dyn Fn(usize) -> bool>) {
        let good: Vec<usize> = (0..3).filter(|&s| on(s)).collect();
        let bad: Vec<usize> = (0..3).filter(|&s| !on(s)).collect();
        let mut sides = Vec::new();
        for (w, proxies) in self.proxies.iter().enumerate() {
            let side = if w % 2 == 0 || bad.is_empty() || who.is_some_and(|who| who(w)) {
                good.clone()
            } else {
                bad.clone()
            };
            for (s, p) in proxies.iter().enumerate() {
                p.refuse(!side.contains(&s));
                if !side.contains(&s) {
                    p.reset();
                }
            }
            sides.push(side);
        }
        // Let the resets land: no worker keeps a connection where it is refused.
        let settled = now_ns() + 3_000_000_000;
        while now_ns() < settled
            && self.proxies.iter().zip(&sides).any(|(proxies, side)| {
                (0..3).any(|s| !side.contains(&s) && proxies[s].connections() > 0)
            })
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The servers' modes and worker `id`'s open connections per server, for a fault's detail.
    async fn where_things_are(&self, id: usize) -> String {
        let modes = self.server_modes().await;
        let conns: Vec<String> = (0..3)
            .map(|s| self.proxies[id][s].connections().to_string())
            .collect();
        format!("[servers {modes}; w{id} connections {}]", conns.join("/"))
    }

    /// Keeps worker `id` on `server` (its other proxies refuse connections) and moves every
    /// other worker off `away` (refused and reset there), so that the victim stays on the cut
    /// side and its successors queue on the other.
    fn pin(&self, id: usize, server: usize, away: &[usize]) {
        for (s, p) in self.proxies[id].iter().enumerate() {
            p.refuse(s != server);
        }
        for (_, proxies) in self.proxies.iter().enumerate().filter(|(w, _)| *w != id) {
            for &s in away {
                proxies[s].refuse(true);
                proxies[s].reset();
            }
        }
    }

    /// Every proxy accepts connections again.
    fn refuse_none(&self) {
        for proxies in &self.proxies {
            for p in proxies {
                p.refuse(false);
            }
        }
    }

    /// Holds a partition long enough for the victim's session to expire on the majority side
    /// and for a stale leader to notice it lost its quorum (`syncLimit` ticks), plus 2 s; then
    /// heals the links and the proxies (lifting the fault's outage `watch`, if any) and waits
    /// for the ensemble to serve again. Returns when the majority deleted the victim's node,
    /// if it did.
    async fn hold_partition(
        &self,
        id: usize,
        node: &str,
        majority: &[usize],
        watch: Option<&OutageWatch>,
    ) -> Option<i64> {
        let start = now_ns();
        let span = self.options.tick() * self.options.sync_limit()
            + self.timeout_of(id)
            + Duration::from_secs(2);
        let hosts: Vec<String> = majority
            .iter()
            .map(|&s| self.ensemble.server_addr(s))
            .collect();
        let expired = match zk::Client::connector()
            .with_session_timeout(Duration::from_secs(20))
            .connect(&hosts.join(","))
            .await
        {
            Ok(observer) => wait_gone(&observer, node, span).await,
            Err(_) => None,
        };
        let rest = span.saturating_sub(Duration::from_nanos((now_ns() - start).max(0) as u64));
        tokio::time::sleep(rest).await;
        let _ = self.ensemble.heal();
        if let Some(watch) = watch {
            watch.lift();
        }
        self.refuse_none();
        self.await_quorum().await;
        expired
    }

    /// The final heal: every worker running and reachable, every server serving.
    pub(crate) async fn heal(&self) {
        let _ = self.ensemble.heal();
        for (id, proxies) in self.proxies.iter().enumerate() {
            for p in proxies {
                p.blackhole(false);
                p.delay(Duration::ZERO);
                p.refuse(false);
            }
            self.signal(id, libc::SIGCONT);
            if !self.alive(id) || self.skew_of(id).is_some() {
                self.signal(id, libc::SIGKILL);
                self.respawn(id as u32, None);
            }
        }
        for i in 0..3 {
            self.revive_server(i).await;
        }
        if let Some(store) = &self.own_store {
            store.resume();
        }
    }
}

/// Polls until `node` is gone (its session expired or it was deleted); returns when.
async fn wait_gone(admin: &zk::Client, node: &str, wait: Duration) -> Option<i64> {
    let deadline = now_ns() + wait.as_nanos() as i64;
    while now_ns() < deadline {
        if let Ok(None) = admin.check_stat(node).await {
            return Some(now_ns());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// Deletes `path` and everything under it in one multi (retried when the tree changes under
/// us): a lock's queue, or the multi-lock scenario's three lock paths and their queues. The
/// paths it deleted (none if it never could).
async fn delete_tree(admin: &zk::Client, path: &str) -> Vec<String> {
    for _ in 0..50 {
        let nodes = match subtree(admin, path).await {
            Ok(nodes) => nodes,
            Err(zk::Error::NoNode) if tree_gone(admin, path).await => return Vec::new(),
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let mut multi = admin.new_multi_writer();
        // Children before their parents.
        for node in nodes.iter().rev() {
            let _ = multi.add_delete(node, None);
        }
        if multi.commit().await.is_ok() {
            return nodes;
        }
    }
    Vec::new()
}

/// Whether `path` itself is gone (not just a node under it).
async fn tree_gone(admin: &zk::Client, path: &str) -> bool {
    matches!(admin.check_stat(path).await, Ok(None))
}

/// `path` and the nodes under it, each after its parent.
async fn subtree(admin: &zk::Client, path: &str) -> Result<Vec<String>, zk::Error> {
    let mut nodes = vec![path.to_owned()];
    let mut i = 0;
    while i < nodes.len() {
        let children = admin.list_children(&nodes[i]).await?;
        let parent = nodes[i].clone();
        nodes.extend(children.iter().map(|c| format!("{parent}/{c}")));
        i += 1;
    }
    Ok(nodes)
}
