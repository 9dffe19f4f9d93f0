//! The other lock kinds on the same queue, against a real ZooKeeper server: the read/write
//! lock, the semaphore, the in-process queue of a shared `FencedLock`, and the lock-delay.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use zkfence::Acquire;

use tokio::time::Instant;
use zkfence::{Error, FencedLock, FencedRwLock, FencedSemaphore, LockOptions};
use zkfence_harness::{children, chroot, connect, expire_session, shared, wait_until};
use zkfence_testkit::CountingProxy;

const T: Duration = Duration::from_secs(10);
const PATH: &str = "/locks/kinds";

async fn rw_on(hosts: &str) -> FencedRwLock {
    FencedRwLock::new(connect(hosts, T).await, PATH, LockOptions::default()).unwrap()
}

async fn queued(hosts: &str, n: usize) {
    wait_until(
        Duration::from_secs(10),
        &format!("{n} queue nodes"),
        || async { children(hosts, PATH).await.len() == n },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_writers_exclude_and_queue_order_holds() {
    let hosts = chroot(shared(), "rw-order").await;
    let (a, b, c, d) = (
        rw_on(&hosts).await,
        rw_on(&hosts).await,
        rw_on(&hosts).await,
        rw_on(&hosts).await,
    );

    // R1 and R2 hold at once.
    let r1 = a.read().await.unwrap();
    let r2 = tokio::time::timeout(Duration::from_secs(5), b.read())
        .await
        .expect("a second reader is not blocked by the first")
        .unwrap();

    let probe = rw_on(&hosts).await;
    assert!(
        probe.writer().try_acquire().await.unwrap().is_none(),
        "a writer got in while readers held"
    );
    let r = probe
        .reader()
        .try_acquire()
        .await
        .unwrap()
        .expect("a third reader shares too");
    r.release().await.unwrap();

    // W3 queues behind them; R4, arriving after W3, queues behind W3 (no writer starvation).
    let w3 = tokio::spawn(async move { c.write().await.unwrap() });
    queued(&hosts, 3).await;
    assert!(
        probe.reader().try_acquire().await.unwrap().is_none(),
        "a reader overtook a waiting writer"
    );
    let r4 = tokio::spawn(async move { d.read().await.unwrap() });
    queued(&hosts, 4).await;
    assert!(!w3.is_finished(), "the writer got in while readers held");
    assert!(!r4.is_finished(), "a reader overtook a waiting writer");

    let (t1, t2) = (r1.token(), r2.token());
    r1.release().await.unwrap();
    queued(&hosts, 3).await;
    assert!(!w3.is_finished(), "the writer got in while a reader held");
    r2.release().await.unwrap();
    let w3 = tokio::time::timeout(Duration::from_secs(5), w3)
        .await
        .expect("the writer gets the lock once the readers are gone")
        .unwrap();
    assert!(
        w3.token() > t1 && w3.token() > t2,
        "a writer's token exceeds earlier readers'"
    );
    queued(&hosts, 2).await;
    assert!(!r4.is_finished(), "a reader got in while the writer held");
    let t3 = w3.token();
    w3.release().await.unwrap();
    let r4 = tokio::time::timeout(Duration::from_secs(5), r4)
        .await
        .expect("the reader gets in after the writer")
        .unwrap();
    assert!(r4.token() > t3, "a reader's token exceeds earlier writers'");
    r4.release().await.unwrap();
    queued(&hosts, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_of_readers_does_not_starve_a_writer() {
    let hosts = chroot(shared(), "rw-starve").await;
    let stop = Arc::new(AtomicBool::new(false));
    let writer_in = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let readers_in = Arc::new(AtomicUsize::new(0));
    let mut readers = Vec::new();
    for _ in 0..4 {
        let rw = rw_on(&hosts).await;
        let (stop, writer_in, overlaps, readers_in) = (
            stop.clone(),
            writer_in.clone(),
            overlaps.clone(),
            readers_in.clone(),
        );
        readers.push(tokio::spawn(async move {
            let mut reads = 0;
            while !stop.load(Ordering::SeqCst) {
                let guard = rw.read().await.unwrap();
                readers_in.fetch_add(1, Ordering::SeqCst);
                if writer_in.load(Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(15)).await;
                readers_in.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.unwrap();
                reads += 1;
            }
            reads
        }));
    }
    // Let the readers overlap each other for a while, then a writer arrives.
    wait_until(Duration::from_secs(10), "two readers at once", || async {
        readers_in.load(Ordering::SeqCst) >= 2
    })
    .await;
    let writer = rw_on(&hosts).await;
    let started = Instant::now();
    for _ in 0..5 {
        let guard = tokio::time::timeout(Duration::from_secs(5), writer.write())
            .await
            .expect("a writer waits at most for the readers ahead of it")
            .unwrap();
        writer_in.store(true, Ordering::SeqCst);
        if readers_in.load(Ordering::SeqCst) > 0 {
            overlaps.fetch_add(1, Ordering::SeqCst);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        writer_in.store(false, Ordering::SeqCst);
        guard.release().await.unwrap();
    }
    let writes_took = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    let mut reads = 0;
    for r in readers {
        reads += r.await.unwrap();
    }
    eprintln!("5 writes among {reads} reads took {writes_took:?}");
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "a writer overlapped a reader"
    );
    assert!(reads >= 8, "the readers made progress ({reads})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_never_admits_more_than_its_permits() {
    let hosts = chroot(shared(), "semaphore").await;
    let holders = Arc::new(AtomicUsize::new(0));
    let max_seen = Arc::new(AtomicUsize::new(0));
    let tokens: Arc<Mutex<Vec<(usize, zkfence::FencingToken)>>> = Arc::default();
    let until = Instant::now() + Duration::from_secs(4);
    let mut tasks = Vec::new();
    for session in 0..8 {
        let pool = FencedSemaphore::new(connect(&hosts, T).await, PATH, 3, LockOptions::default())
            .unwrap();
        let (holders, max_seen, tokens) = (holders.clone(), max_seen.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            let mut leases = 0;
            while Instant::now() < until {
                let lease = pool.acquire().await.unwrap();
                let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                max_seen.fetch_max(now, Ordering::SeqCst);
                tokens.lock().unwrap().push((session, lease.token()));
                tokio::time::sleep(Duration::from_millis(10)).await;
                holders.fetch_sub(1, Ordering::SeqCst);
                lease.release().await.unwrap();
                leases += 1;
            }
            leases
        }));
    }
    let mut total = 0;
    for task in tasks {
        let leases = task.await.unwrap();
        assert!(leases > 0, "a session starved");
        total += leases;
    }
    let tokens = tokens.lock().unwrap().clone();
    eprintln!(
        "{total} leases, at most {} at once",
        max_seen.load(Ordering::SeqCst)
    );
    assert!(
        max_seen.load(Ordering::SeqCst) <= 3,
        "more holders than permits"
    );
    assert_eq!(
        max_seen.load(Ordering::SeqCst),
        3,
        "the permits were never all used"
    );
    let mut unique: Vec<_> = tokens.iter().map(|(_, t)| *t).collect();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), tokens.len(), "two leases shared a token");
    for session in 0..8 {
        let mine: Vec<_> = tokens
            .iter()
            .filter(|(s, _)| *s == session)
            .map(|(_, t)| *t)
            .collect();
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "tokens of one session decreased"
        );
    }
    queued(&hosts, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_waiter_is_woken_by_any_holder_ahead() {
    let hosts = chroot(shared(), "semaphore-wake").await;
    let pool = || async {
        FencedSemaphore::new(connect(&hosts, T).await, PATH, 2, LockOptions::default()).unwrap()
    };
    let (a, b, c) = (pool().await, pool().await, pool().await);
    let first = a.acquire().await.unwrap();
    let second = b.acquire().await.unwrap();
    let third = tokio::spawn(async move { c.acquire().await.unwrap() });
    queued(&hosts, 3).await;
    assert!(!third.is_finished(), "a third holder with two permits");
    // The holder furthest ahead leaves (not the waiter's immediate predecessor).
    first.release().await.unwrap();
    let third = tokio::time::timeout(Duration::from_secs(5), third)
        .await
        .expect("the waiter is admitted when any of the two holders leaves")
        .unwrap();
    assert_eq!(a.holders().await.unwrap().len(), 2);
    second.release().await.unwrap();
    third.release().await.unwrap();
}

/// A semaphore of `permits` on a fresh chroot: `permits` holders, then `waiters` waiters each
/// on a session of its own through a counting proxy of its own, queued in turn, each watching
/// what "The semaphore's gate" says (the head the lock path's children, every other waiter its
/// predecessor's data).
struct Gated {
    hosts: String,
    holders: Vec<zkfence::LockGuard<zkfence::Shared>>,
    waiting: Vec<tokio::task::JoinHandle<zkfence::LockGuard<zkfence::Shared>>>,
    /// The waiters' proxies and clients, in queue order.
    proxies: Vec<CountingProxy>,
    clients: Vec<zookeeper_client::Client>,
}

impl Gated {
    async fn new(name: &str, permits: u32, waiters: usize, options: LockOptions) -> Gated {
        let hosts = chroot(shared(), name).await;
        let (server, root) = hosts.split_at(hosts.find('/').unwrap_or(hosts.len()));
        let pool = |client| FencedSemaphore::new(client, PATH, permits, options.clone()).unwrap();
        let mut holders = Vec::new();
        for _ in 0..permits {
            holders.push(pool(connect(&hosts, T).await).acquire().await.unwrap());
        }
        let (mut waiting, mut proxies, mut clients) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..waiters {
            let proxy = CountingProxy::start(server).await;
            let client = connect(&format!("{}{root}", proxy.addr), T).await;
            let pool = pool(client.clone());
            waiting.push(tokio::spawn(async move { pool.acquire().await.unwrap() }));
            proxies.push(proxy);
            clients.push(client);
            queued(&hosts, permits as usize + i + 1).await;
        }
        let gated = Gated {
            hosts,
            holders,
            waiting,
            proxies,
            clients,
        };
        gated.settle_head().await;
        let nodes = in_order(&gated.hosts).await;
        for (i, client) in gated.clients.iter().enumerate().skip(1) {
            let predecessor = &nodes[permits as usize + i - 1];
            wait_until(
                Duration::from_secs(10),
                &format!("waiter {i} to watch its predecessor"),
                || async { watches(&gated.hosts, client.session_id(), predecessor) },
            )
            .await;
        }
        gated
    }

    /// How many listings waiter `i` has sent.
    fn lists(&self, i: usize) -> u64 {
        let counts = self.proxies[i].counts();
        [8, 12].iter().filter_map(|op| counts.get(op)).sum()
    }

    /// Waits until waiter `i` has set its gate, the child watch on the lock path that it sets
    /// with its second listing (the server's watch lists show data watches only), and the
    /// server has processed it.
    async fn await_gate(&self, i: usize) {
        wait_until(
            Duration::from_secs(10),
            &format!("waiter {i} to list again, watching the lock path"),
            || async { self.lists(i) >= 2 },
        )
        .await;
        self.clients[i].sync(PATH).await.unwrap();
    }

    /// Waits until the head has set its gate again after every arrival behind it: each that
    /// came after its gate was set notified it once, and it then listed twice (a plain listing,
    /// and the one that sets the gate), after the two it made when it queued.
    async fn settle_head(&self) {
        // Every arrival's notification is ahead of this reply on the head's connection.
        self.clients[0].sync(PATH).await.unwrap();
        wait_until(
            Duration::from_secs(10),
            "the head to list again after each arrival",
            || async { self.lists(0) == 2 + 2 * self.proxies[0].notifications() },
        )
        .await;
        self.clients[0].sync(PATH).await.unwrap();
    }

    /// The notifications each waiter has received so far.
    fn notifications(&self) -> Vec<u64> {
        self.proxies.iter().map(|p| p.notifications()).collect()
    }

    /// The next waiter's lease, once it is admitted within `within`.
    async fn admitted(&mut self, within: Duration) -> Option<zkfence::LockGuard<zkfence::Shared>> {
        let next = self.waiting.first_mut()?;
        let lease = tokio::time::timeout(within, next).await.ok()?.unwrap();
        self.waiting.remove(0);
        Some(lease)
    }

    /// Releases everything, the waiters as they are admitted.
    async fn end(mut self, leases: Vec<zkfence::LockGuard<zkfence::Shared>>) {
        for lease in self.holders.drain(..).chain(leases) {
            lease.release().await.unwrap();
        }
        while !self.waiting.is_empty() {
            let lease = self.admitted(Duration::from_secs(10)).await;
            lease.expect("a waiter admitted").release().await.unwrap();
        }
        queued(&self.hosts, 0).await;
    }
}

/// A release wakes the head of the waiters alone, and its admission the waiter behind it
/// alone: two notifications however many permits and waiters. The newest holder's release is
/// the one that woke every waiter within `n` of it when each watched its `n` nearest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_release_notifies_the_head_and_the_next_waiter_alone() {
    let mut gated = Gated::new("semaphore-gate", 4, 4, LockOptions::default()).await;
    let before = gated.notifications();
    gated.holders.pop().unwrap().release().await.unwrap();
    let lease = (gated.admitted(Duration::from_secs(5)).await)
        .expect("the head admitted when a holder leaves");
    gated.await_gate(1).await;
    for client in &gated.clients {
        client.sync(PATH).await.unwrap(); // anything sent to them is counted by now
    }
    let after = gated.notifications();
    let woken: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_eq!(
        woken,
        vec![1, 1, 0, 0],
        "notifications to each waiter, in queue order, for one release"
    );
    gated.end(vec![lease]).await;
}

/// Whether the waiter behind the head takes a permit freed while the head, admitted before
/// it, still holds: it must learn of the head's admission to watch the holders.
async fn the_next_waiter_takes_the_next_permit(name: &str, options: LockOptions) -> bool {
    let mut gated = Gated::new(name, 2, 2, options).await;
    gated.holders.pop().unwrap().release().await.unwrap();
    let head = (gated.admitted(Duration::from_secs(5)).await)
        .expect("the head admitted when a holder leaves");
    gated.holders.pop().unwrap().release().await.unwrap();
    let next = gated.admitted(Duration::from_secs(3)).await;
    let taken = next.is_some();
    gated
        .end(vec![head].into_iter().chain(next).collect())
        .await;
    taken
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_waiter_takes_a_permit_freed_after_the_head_was_admitted() {
    assert!(
        the_next_waiter_takes_the_next_permit("semaphore-next", LockOptions::default()).await,
        "the waiter behind the head sat out a free permit"
    );
}

/// Whether a waiter that lists before the head's announcement, and sets its watch on the head
/// after it (its replies are late), still takes the next permit: the version its watch finds
/// tells it that it missed a write. `None` when it set no watch on the head after all.
async fn a_late_follower_takes_the_next_permit(name: &str, options: LockOptions) -> Option<bool> {
    const GET_DATA: i32 = 4; // the create's pipelined read of the count, then the watch
    let mut gated = Gated::new(name, 2, 1, options.clone()).await;
    let (server, root) = gated.hosts.split_at(gated.hosts.find('/').unwrap());
    let slow = CountingProxy::start(server).await;
    let client = connect(&format!("{}{root}", slow.addr), T).await;
    let session = client.session_id();
    // The create's reply, and the listing's behind it, come back three seconds late, so the
    // watch on the head is set after its announcement.
    slow.delay_writes(Duration::from_secs(3), 1);
    let pool = FencedSemaphore::new(client, PATH, 2, options).unwrap();
    gated
        .waiting
        .push(tokio::spawn(async move { pool.acquire().await.unwrap() }));
    queued(&gated.hosts, 4).await;
    // The server has listed the queue for it (its last request is no longer the create): then
    // the head's admission may come.
    wait_until(
        Duration::from_secs(10),
        "the server to list the queue for the late waiter",
        || async {
            let op = last_op(server, session);
            !op.is_empty() && !op.starts_with("CRE")
        },
    )
    .await;
    gated.holders.pop().unwrap().release().await.unwrap();
    let head = (gated.admitted(Duration::from_secs(5)).await)
        .expect("the head admitted when a holder leaves");
    gated.holders.pop().unwrap().release().await.unwrap();
    let next = gated.admitted(Duration::from_secs(8)).await;
    let taken = next.is_some();
    let watched = slow.counts().get(&GET_DATA).copied().unwrap_or(0) >= 2;
    gated
        .end(vec![head].into_iter().chain(next).collect())
        .await;
    watched.then_some(taken)
}

/// The last operation the server at `server` processed for `session` (its `cons` line's
/// `lop`, e.g. `CRE2`, `GETC`), empty while it shows none.
fn last_op(server: &str, session: zookeeper_client::SessionId) -> String {
    let cons = zkfence_testkit::four_letter(server, "cons").unwrap_or_default();
    let sid = format!("sid={:#x},", session.0);
    let line = cons.lines().find(|l| l.contains(&sid)).unwrap_or_default();
    let op = line.split("lop=").nth(1).unwrap_or_default();
    op.split(',').next().unwrap_or_default().to_owned()
}

/// [`a_late_follower_takes_the_next_permit`], tried again should the late waiter have set no
/// watch on the head (a ping, say, processed between its create and its listing).
async fn late_follower(name: &str, options: LockOptions) -> bool {
    for attempt in 0..3 {
        let name = format!("{name}-{attempt}");
        if let Some(taken) = a_late_follower_takes_the_next_permit(&name, options.clone()).await {
            return taken;
        }
    }
    panic!("the late waiter never listed the queue before the head's admission");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_waiter_watching_after_the_announcement_is_not_left_behind() {
    assert!(
        late_follower("semaphore-late", LockOptions::default()).await,
        "the waiter whose watch came after the head's announcement sat out a free permit"
    );
}

/// The mutant in which a follower ignores the version its watch finds: the suite must see it
/// wait for an announcement that already happened.
#[cfg(feature = "mutants")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unseen_announcement_mutant_is_caught() {
    let options = LockOptions::default().with_mutant(zkfence::Mutant::UnseenAnnouncement);
    assert!(
        !late_follower("semaphore-unseen", options).await,
        "the late waiter took the permit: the mutant went unnoticed"
    );
}

/// The mutant in which an admitted head announces nothing: the suite must see the waiter
/// behind it sit out the free permit.
#[cfg(feature = "mutants")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_silent_admission_mutant_is_caught() {
    let options = LockOptions::default().with_mutant(zkfence::Mutant::SilentAdmission);
    assert!(
        !the_next_waiter_takes_the_next_permit("semaphore-silent", options).await,
        "the waiter behind a silent head took the permit: the mutant went unnoticed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_clients_must_agree_on_the_count() {
    let hosts = chroot(shared(), "semaphore-count").await;
    let three =
        FencedSemaphore::new(connect(&hosts, T).await, PATH, 3, LockOptions::default()).unwrap();
    let five =
        FencedSemaphore::new(connect(&hosts, T).await, PATH, 5, LockOptions::default()).unwrap();
    let lease = three.acquire().await.unwrap();
    match five.acquire().await {
        Err(Error::PermitsMismatch {
            stored: 3,
            requested: 5,
            ..
        }) => {}
        other => panic!("expected PermitsMismatch, got {other:?}"),
    }
    queued(&hosts, 1).await; // the refused client left nothing behind
    five.set_permits(5).await.unwrap();
    five.acquire().await.unwrap().release().await.unwrap();
    assert!(matches!(
        three.try_acquire().await,
        Err(Error::PermitsMismatch {
            stored: 5,
            requested: 3,
            ..
        })
    ));
    lease.release().await.unwrap();
    assert!(matches!(
        FencedSemaphore::new(connect(&hosts, T).await, PATH, 0, LockOptions::default()),
        Err(Error::InvalidOptions(_))
    ));
    // The count outlives the leases: the node is persistent, not a reapable container.
    queued(&hosts, 0).await;
    let (data, stat) = connect(&hosts, T).await.get_data(PATH).await.unwrap();
    assert_eq!(data, b"5");
    assert_eq!(stat.ephemeral_owner, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn clones_of_one_lock_queue_in_process_fairly_with_one_node() {
    let hosts = chroot(shared(), "in-process").await;
    let server = hosts.split('/').next().unwrap().to_owned();
    let chroot_path = &hosts[server.len()..];
    let proxy = CountingProxy::start(&server).await;
    let client = connect(&format!("{}{chroot_path}", proxy.addr), T).await;
    let lock = FencedLock::new(client, PATH, LockOptions::default()).unwrap();
    let first = lock.acquire().await.unwrap();
    let creates_before = proxy.counts().get(&15).copied().unwrap_or(0);

    // 16 tasks queue in spawn order (each is polled once, and so queued, before the next).
    let order: Arc<Mutex<Vec<usize>>> = Arc::default();
    let inside = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (lock, order, inside) = (lock.clone(), order.clone(), inside.clone());
        tasks.push(tokio::spawn(async move {
            let guard = lock.acquire().await.unwrap();
            assert!(
                !inside.swap(true, Ordering::SeqCst),
                "two tasks held the lock"
            );
            order.lock().unwrap().push(i);
            tokio::task::yield_now().await;
            inside.store(false, Ordering::SeqCst);
            guard.release().await.unwrap();
        }));
        tokio::task::yield_now().await;
    }
    // While the first guard is held, the 16 waiters have no node of their own.
    assert_eq!(
        children(&hosts, PATH).await.len(),
        1,
        "waiting tasks created nodes"
    );
    // Another task finds it busy; the holder itself is told it would wait for itself.
    let other = lock.clone();
    let busy = tokio::spawn(async move { other.try_acquire().await.unwrap().is_none() });
    assert!(busy.await.unwrap(), "try_acquire while the process holds");
    assert!(matches!(
        lock.try_acquire().await,
        Err(zkfence::Error::WouldDeadlock { .. })
    ));
    first.release().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(
        *order.lock().unwrap(),
        (0..16).collect::<Vec<_>>(),
        "in-process order is FIFO"
    );
    let creates = proxy.counts().get(&15).copied().unwrap_or(0) - creates_before;
    assert_eq!(creates, 16, "one node per acquisition");
    queued(&hosts, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_delay_follows_a_failed_holder_but_never_a_release() {
    let hosts = chroot(shared(), "lock-delay").await;
    let delay = Duration::from_millis(1500);
    let options = LockOptions::default().with_lock_delay(delay);
    let lock_for = |client| FencedLock::new(client, PATH, options.clone()).unwrap();

    // A release: the successor gets the lock at once.
    let a = lock_for(connect(&hosts, T).await);
    let b = lock_for(connect(&hosts, T).await);
    let held = a.acquire().await.unwrap();
    let waiter = tokio::spawn(async move { (b.acquire().await.unwrap(), Instant::now()) });
    queued(&hosts, 2).await;
    let released_at = Instant::now();
    held.release().await.unwrap();
    let (next, granted_at) = waiter.await.unwrap();
    let handoff = granted_at - released_at;
    assert!(
        handoff < delay / 2,
        "a released lock was delayed {handoff:?}"
    );
    next.release().await.unwrap();

    // A holder whose session ends: the successor waits out the delay.
    let victim = connect(&hosts, T).await;
    let c = lock_for(victim.clone());
    let d = lock_for(connect(&hosts, T).await);
    let d_session = d.client().session_id();
    let held = c.acquire().await.unwrap();
    let waiter = tokio::spawn(async move { (d.acquire().await.unwrap(), Instant::now()) });
    queued(&hosts, 2).await;
    // Expire only once the successor watches the holder (see `with_lock_delay` on a node
    // that vanishes between a listing and its watch).
    let holder_node = in_order(&hosts).await[0].clone();
    wait_until(
        Duration::from_secs(10),
        "the successor to watch",
        || async { watches(&hosts, d_session, &holder_node) },
    )
    .await;
    let expired_from = Instant::now();
    expire_session(&hosts, &victim).await;
    let (next, granted_at) = waiter.await.unwrap();
    let waited = granted_at - expired_from;
    eprintln!("release handoff {handoff:?}; after expiry the successor waited {waited:?}");
    assert!(
        waited >= delay,
        "the successor of a failed holder waited only {waited:?}"
    );
    assert!(held.check().is_err());
    drop(held);
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_inherits_the_lock_delay_when_the_delayed_one_gives_up() {
    let setting = Delayed::new("lock-delay-inherit", Duration::from_secs(5)).await;
    let (hosts, delay) = (&setting.hosts, setting.delay);
    let victim = connect(hosts, T).await;
    let a = setting.lock_on(victim.clone());
    let (b, c) = (setting.lock().await, setting.lock().await);
    let held = a.acquire().await.unwrap();
    // B queues behind A, and C behind B (so C watches B, not A).
    let b_waits = tokio::spawn(async move { b.acquire().await });
    queued(hosts, 2).await;
    let c_waits = tokio::spawn(async move { (c.acquire().await.unwrap(), Instant::now()) });
    queued(hosts, 3).await;
    // A fails: its node goes without a release, and B, whose only blocker it was, starts its
    // delay (the notification takes milliseconds on loopback; a second is ample). The server's
    // word that the session is gone is what counts here, not A's client noticing it (which
    // can take longer than the delay on a loaded machine: B then rightly holds by the check).
    zkfence_testkit::expire_session(&victim, hosts)
        .await
        .expect("the server expires A's session");
    queued(hosts, 2).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!b_waits.is_finished(), "B got the lock without its delay");
    // B gives up inside its delay.
    b_waits.abort();
    let gave_up = Instant::now();
    let (guard, granted_at) = c_waits.await.unwrap();
    let after_b = granted_at - gave_up;
    eprintln!("C got the lock {after_b:?} after B gave up");
    assert!(
        after_b >= delay,
        "C walked in {after_b:?} after B gave up inside its delay"
    );
    drop(held);
    guard.release().await.unwrap();
}

/// Whether `session` watches `node`, a queue node under `PATH` on `hosts`.
fn watches(hosts: &str, session: zookeeper_client::SessionId, node: &str) -> bool {
    zkfence_harness::watches(hosts, session, &format!("{PATH}/{node}"))
}

/// The queue's node names in queue order (no sequence wrap in these tests).
async fn in_order(hosts: &str) -> Vec<String> {
    let mut nodes = children(hosts, PATH).await;
    nodes.sort_by_key(|n| n[n.len() - 10..].to_owned());
    nodes
}

/// R1 and R2 read; a writer queues behind both and watches R2. With lock-delay on every
/// release is marked, and R2's marked release must not let the writer past R1 (a reader holds
/// with others ahead of it). Whether the writer got past.
async fn writer_behind_two_readers(name: &str, options: LockOptions) -> bool {
    let hosts = chroot(shared(), name).await;
    let rw = || async {
        let client = connect(&hosts, T).await;
        let session = client.session_id();
        (
            FencedRwLock::new(client, PATH, options.clone()).unwrap(),
            session,
        )
    };
    let ((r1, _), (r2, _), (w, writer)) = (rw().await, rw().await, rw().await);
    let first = r1.read().await.unwrap();
    let second = r2.read().await.unwrap();
    let writing = tokio::spawn(async move { w.write().await.unwrap() });
    queued(&hosts, 3).await;
    let nodes = in_order(&hosts).await;
    wait_until(
        Duration::from_secs(10),
        "the writer to watch R2",
        || async { watches(&hosts, writer, &nodes[1]) },
    )
    .await;
    second.release().await.unwrap();
    wait_until(
        Duration::from_secs(10),
        "the writer to watch R1",
        || async { writing.is_finished() || watches(&hosts, writer, &nodes[0]) },
    )
    .await;
    if writing.is_finished() {
        return true;
    }
    first.release().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(10), writing)
        .await
        .unwrap()
        .unwrap();
    guard.release().await.unwrap();
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readers_release_does_not_let_a_writer_past_another_reader() {
    let options = LockOptions::default().with_lock_delay(Duration::from_secs(1));
    assert!(
        !writer_behind_two_readers("reader-release", options).await,
        "the writer took the lock while a reader held it"
    );
}

/// The mutant in which any marked release admits the successor: the suite must see the
/// writer walk past the reader still holding.
#[cfg(feature = "mutants")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_any_release_admits_mutant_is_caught() {
    let options = LockOptions::default()
        .with_lock_delay(Duration::from_secs(1))
        .with_mutant(zkfence::Mutant::AnyReleaseAdmits);
    assert!(
        writer_behind_two_readers("reader-release-mutant", options).await,
        "a reader's marked release let nobody past: the mutant went unnoticed"
    );
}

/// A lock-delay test's setting: a fresh chroot, and locks with `delay` on it.
struct Delayed {
    hosts: String,
    delay: Duration,
    options: LockOptions,
}

impl Delayed {
    async fn new(name: &str, delay: Duration) -> Delayed {
        Delayed {
            hosts: chroot(shared(), name).await,
            delay,
            options: LockOptions::default().with_lock_delay(delay),
        }
    }

    /// A lock on `client`'s session.
    fn lock_on(&self, client: zookeeper_client::Client) -> FencedLock {
        FencedLock::new(client, PATH, self.options.clone()).unwrap()
    }

    /// A lock with a session of its own.
    async fn lock(&self) -> FencedLock {
        self.lock_on(connect(&self.hosts, T).await)
    }
}

/// A, B, C queue; A's session expires; B waits out the delay and releases. C, who had queued
/// behind both, takes B's release at once: one failure costs one delay, not one per waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_successor_hands_on_without_a_second_delay() {
    let setting = Delayed::new("lock-delay-once", Duration::from_millis(1500)).await;
    let (hosts, delay) = (&setting.hosts, setting.delay);
    let victim = connect(hosts, T).await;
    let a = setting.lock_on(victim.clone());
    let (b, c) = (setting.lock().await, setting.lock().await);
    let held = a.acquire().await.unwrap();
    let b_waits = tokio::spawn(async move { (b.acquire().await.unwrap(), Instant::now()) });
    queued(hosts, 2).await;
    let c_waits = tokio::spawn(async move { (c.acquire().await.unwrap(), Instant::now()) });
    queued(hosts, 3).await;
    let expired_from = Instant::now();
    expire_session(hosts, &victim).await;
    let (b_guard, b_at) = b_waits.await.unwrap();
    assert!(b_at - expired_from >= delay, "B did not wait out the delay");
    let released = Instant::now();
    b_guard.release().await.unwrap();
    let (c_guard, c_at) = c_waits.await.unwrap();
    let handoff = c_at - released;
    eprintln!("after the delayed holder's release, C waited {handoff:?}");
    assert!(
        handoff < delay / 2,
        "C was delayed {handoff:?} after a release"
    );
    drop(held);
    c_guard.release().await.unwrap();
}

/// One session holds and waits on the lock, and expires: the successor, which watched the
/// waiter's node rather than the holder's, still waits out the delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_failing_as_holder_and_waiter_delays_the_successor() {
    let setting = Delayed::new("lock-delay-two-nodes", Duration::from_millis(1500)).await;
    let (hosts, delay) = (&setting.hosts, setting.delay);
    let victim = connect(hosts, T).await;
    let holding = setting.lock_on(victim.clone());
    let waiting = setting.lock_on(victim.clone());
    let successor = setting.lock().await;
    let successor_session = successor.client().session_id();
    let held = holding.acquire().await.unwrap();
    let victim_waits = tokio::spawn(async move { waiting.acquire().await });
    queued(hosts, 2).await;
    let waits = tokio::spawn(async move { (successor.acquire().await.unwrap(), Instant::now()) });
    queued(hosts, 3).await;
    // Expire only once the successor watches the waiter's node: a node that vanishes between
    // a listing and its watch is not delayed (see `with_lock_delay`).
    let waiter_node = in_order(hosts).await[1].clone();
    wait_until(
        Duration::from_secs(10),
        "the successor to watch",
        || async { watches(hosts, successor_session, &waiter_node) },
    )
    .await;
    let expired_from = Instant::now();
    expire_session(hosts, &victim).await;
    let (guard, at) = waits.await.unwrap();
    let waited = at - expired_from;
    eprintln!("the successor of a failed holder-and-waiter session waited {waited:?}");
    assert!(waited >= delay, "the successor waited only {waited:?}");
    assert!(victim_waits.await.unwrap().is_err());
    drop(held);
    guard.release().await.unwrap();
}

/// One session holds and waits; an administrator deletes both its nodes in one transaction,
/// the holder's first, as a session closed from outside does, but the session lives on and
/// stays connected. The waiter hears its predecessor vanish without a release, and its own
/// node's deletion may come in a read behind that (or never, for a semaphore's waiter, which
/// does not watch its own node). Rounds in which the waiter's acquire returned a lock rather
/// than [`Error::NodeDeletedWhileWaiting`], as text (empty: none did). `settle`: how long the
/// waiter waits before the deletion (past 10 ms, a mutex waiter watches its own node).
async fn grants_to_a_node_deleted_with_its_holder<L>(
    name: &str,
    make: impl Fn(zookeeper_client::Client) -> L,
    settle: Duration,
) -> Vec<String>
where
    L: Acquire + 'static,
    L::Guard: std::fmt::Debug + 'static,
{
    let hosts = chroot(shared(), name).await;
    let admin = connect(&hosts, T).await;
    let mut granted = Vec::new();
    // Whether the two deletions reach the waiter in one read or two is up to the network:
    // several rounds, so that both happen.
    for round in 0..6 {
        let client = connect(&hosts, T).await;
        let (holding, waiting) = (make(client.clone()), make(client));
        let _held = holding.acquire().await.unwrap();
        let waits = tokio::spawn(async move { waiting.acquire().await });
        queued(&hosts, 2).await;
        let nodes = in_order(&hosts).await;
        tokio::time::sleep(settle).await;
        let mut both = admin.new_multi_writer();
        for node in &nodes {
            both.add_delete(&format!("{PATH}/{node}"), None).unwrap();
        }
        both.commit().await.unwrap();
        let outcome = tokio::time::timeout(Duration::from_secs(20), waits)
            .await
            .expect("the waiter to finish")
            .unwrap();
        match outcome {
            Err(Error::NodeDeletedWhileWaiting { .. }) => {}
            Err(other) => panic!("round {round}: the waiter's error is {other:?}"),
            Ok(guard) => granted.push(format!("round {round}: {guard:?}")),
        }
    }
    granted
}

/// A mutex waiter, past its 10 ms: its own node is watched, but the grant must not rest on
/// the lease its holder proved before the deletion, nor miss its own node's deletion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutex_waiter_deleted_with_its_sessions_holder_is_never_granted() {
    let options = LockOptions::default().with_lock_delay(Duration::from_millis(300));
    let make = |client| FencedLock::new(client, PATH, options.clone()).unwrap();
    let granted =
        grants_to_a_node_deleted_with_its_holder("one-txn-mutex", make, Duration::from_millis(100))
            .await;
    assert!(granted.is_empty(), "granted: {granted:?}");
}

/// A semaphore's waiter watches nothing of its own: only a read after the lock-delay finds
/// its node gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_waiter_deleted_with_its_sessions_holder_is_never_granted() {
    let options = LockOptions::default().with_lock_delay(Duration::from_millis(300));
    let make = |client| FencedSemaphore::new(client, PATH, 1, options.clone()).unwrap();
    let granted =
        grants_to_a_node_deleted_with_its_holder("one-txn-semaphore", make, Duration::ZERO).await;
    assert!(granted.is_empty(), "granted: {granted:?}");
}

/// The mutant whose grant after a lock-delay does not read its node again: the suite must see
/// a semaphore's waiter granted a node deleted with its holder's.
#[cfg(feature = "mutants")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unread_after_lock_delay_mutant_is_caught() {
    let options = LockOptions::default()
        .with_lock_delay(Duration::from_millis(300))
        .with_mutant(zkfence::Mutant::UnreadAfterLockDelay);
    let make = |client| FencedSemaphore::new(client, PATH, 1, options.clone()).unwrap();
    let granted =
        grants_to_a_node_deleted_with_its_holder("one-txn-mutant", make, Duration::ZERO).await;
    assert!(
        !granted.is_empty(),
        "no round granted: the mutant went unnoticed"
    );
}

/// Holder, waiter, successor with lock-delay on: the waiter gives up (its node goes without a
/// marker, so that it can never pass for a release), and the holder then releases. The
/// successor takes the release at once: a waiter giving up is not a failed holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_giving_up_under_lock_delay_delays_nobody() {
    let setting = Delayed::new("lock-delay-give-up", Duration::from_millis(1500)).await;
    let (hosts, delay) = (&setting.hosts, setting.delay);
    let (holder, leaving) = (setting.lock().await, setting.lock().await);
    let client = connect(hosts, T).await;
    let last_session = client.session_id();
    let last = setting.lock_on(client);
    let held = holder.acquire().await.unwrap();
    let gives_up = tokio::spawn(async move { leaving.acquire().await });
    queued(hosts, 2).await;
    let waits = tokio::spawn(async move { (last.acquire().await.unwrap(), Instant::now()) });
    queued(hosts, 3).await;
    let nodes = in_order(hosts).await;
    wait_until(
        Duration::from_secs(10),
        "the last waiter to watch the middle one",
        || async { watches(hosts, last_session, &nodes[1]) },
    )
    .await;
    gives_up.abort();
    wait_until(
        Duration::from_secs(10),
        "the last waiter to watch the holder",
        || async { watches(hosts, last_session, &nodes[0]) },
    )
    .await;
    let released = Instant::now();
    held.release().await.unwrap();
    let (guard, at) = waits.await.unwrap();
    let handoff = at - released;
    eprintln!("after a waiter gave up and the holder released, the handoff took {handoff:?}");
    assert!(handoff < delay / 2, "the successor was delayed {handoff:?}");
    guard.release().await.unwrap();
}
