// `zkfence-bench --scale`: Apache Curator's side of the recipes measured at scale (bench/src/scale/),
// compiled at run time against Debian's jars: InterProcessMutex, InterProcessSemaphoreV2,
// InterProcessReadWriteLock, and LeaderLatch with observers that watch the latch's children.
//
// Usage: CuratorScaleBench <adminConnect> <connect> <observerConnect> <sessions> <sessionTimeoutMs>
//
// It opens <sessions> CuratorFrameworks on <connect> (the bench's counting proxy), one session
// each, prints `connected`, then reads one command per line on stdin and answers on stdout.
// The bench counts requests at its proxies between `go` and `done`; everything else a command
// does (queueing, clean-up) falls outside that window. <adminConnect> (the server itself, not
// counted) is for waiting on a queue to form.
//
//   mutex <path> <n> <holdNanos>    session 0 takes an InterProcessMutex; sessions 1 to <n> queue
//                                   behind it. Prints `started`; after `go` the holder releases,
//                                   and every later holder releases <holdNanos> after it holds
//                                   (0: at once): `done`.
//   semaphore <path> <permits> <n>  the first <n> sessions each acquire a lease of an
//                                   InterProcessSemaphoreV2 of <permits>; the holders keep
//                                   theirs until `go`. Prints
//                                   `started` once every thread has called acquire (the bench
//                                   waits for the nodes to queue), then, after `go`, `done`.
//   rwlock <path> <writers> <readers>
//                                   session 0 takes the write lock; writers 1.. queue behind it,
//                                   in order; then <readers> sessions queue for the read lock.
//                                   Prints `started`; after `go` the first writer releases, and
//                                   every later holder releases as soon as it holds: `done`.
//   election <path> <candidates> <observers> <changes>
//                                   <candidates> sessions join a LeaderLatch; <observers> new
//                                   sessions on <observerConnect> watch its children (a plain
//                                   getChildren watch and a getData of the first node: what a
//                                   Curator user who is not a participant writes; LeaderLatch's
//                                   listener only tells a participant about itself). Prints
//                                   `ready` once every observer knows the leader; after `go`,
//                                   <changes> times: the leader closes its latch, and the worker
//                                   waits until another latch leads and every observer has seen
//                                   it: `done`. Then `end` closes the rest: `ended`.
//   quit                            closes every session and exits.
//
// `done <drainNanos> <jvmCpuNanos> <errors>`: from `go` to the last release (or change), and this
// JVM's CPU time over it. Any failure prints `error <message>`. It exits when stdin closes.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.api.CuratorWatcher;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.WatchedEvent;
import org.apache.zookeeper.Watcher;

public class CuratorScaleBench {
    static String connect;
    static String observerConnect;
    static int sessionTimeoutMs;
    static CuratorFramework admin;
    static final List<CuratorFramework> sessions = new ArrayList<>();
    static final AtomicLong errors = new AtomicLong();

    static void say(String line) {
        synchronized (System.out) {
            System.out.println(line);
            System.out.flush();
        }
    }

    static CuratorFramework open(String where) {
        CuratorFramework client = CuratorFrameworkFactory.newClient(
                where, sessionTimeoutMs, Math.max(sessionTimeoutMs, 15_000), new ExponentialBackoffRetry(100, 3));
        client.start();
        return client;
    }

    /** `n` sessions on `where`, started together, then each awaited. */
    static List<CuratorFramework> openMany(String where, int n) throws InterruptedException {
        List<CuratorFramework> clients = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            clients.add(open(where));
        }
        for (CuratorFramework client : clients) {
            client.blockUntilConnected();
        }
        return clients;
    }

    /** This JVM's CPU time so far, every thread. */
    static long cpuNanos() {
        java.lang.management.OperatingSystemMXBean os =
                java.lang.management.ManagementFactory.getOperatingSystemMXBean();
        return ((com.sun.management.OperatingSystemMXBean) os).getProcessCpuTime();
    }

    public static void main(String[] args) throws Exception {
        connect = args[1];
        observerConnect = args[2];
        int n = Integer.parseInt(args[3]);
        sessionTimeoutMs = Integer.parseInt(args[4]);
        admin = open(args[0]);
        admin.blockUntilConnected();
        sessions.addAll(openMany(connect, n));
        say("connected");
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            String[] words = line.trim().split(" ");
            try {
                switch (words[0]) {
                    case "mutex" -> mutex(in, words[1], Integer.parseInt(words[2]), Long.parseLong(words[3]));
                    case "semaphore" -> semaphore(in, words[1], Integer.parseInt(words[2]), Integer.parseInt(words[3]));
                    case "rwlock" -> rwlock(in, words[1], Integer.parseInt(words[2]), Integer.parseInt(words[3]));
                    case "election" -> election(in, words[1], Integer.parseInt(words[2]),
                            Integer.parseInt(words[3]), Integer.parseInt(words[4]));
                    case "quit" -> {
                        quit();
                        return;
                    }
                    default -> say("error unknown command " + words[0]);
                }
            } catch (Exception e) {
                say("error " + e.toString().replace('\n', ' '));
            }
        }
        Runtime.getRuntime().halt(0);
    }

    static void quit() {
        for (CuratorFramework client : sessions) {
            client.close();
        }
        admin.close();
        say("bye");
        Runtime.getRuntime().halt(0);
    }

    /** Reads lines until `go` (anything else is an error the bench sent). */
    static void awaitGo(BufferedReader in) throws Exception {
        String line = in.readLine();
        if (line == null || !line.trim().equals("go")) {
            throw new IllegalStateException("expected go, got " + line);
        }
    }

    static void mutex(BufferedReader in, String path, int n, long holdNanos) throws Exception {
        errors.set(0);
        CountDownLatch finished = new CountDownLatch(n);
        InterProcessMutex first = new InterProcessMutex(sessions.get(0), path);
        first.acquire();
        for (CuratorFramework client : sessions.subList(1, n + 1)) {
            InterProcessMutex lock = new InterProcessMutex(client, path);
            Thread t = new Thread(() -> {
                try {
                    lock.acquire();
                    if (holdNanos > 0) {
                        java.util.concurrent.locks.LockSupport.parkNanos(holdNanos);
                    }
                    lock.release();
                } catch (Exception e) {
                    errors.incrementAndGet();
                } finally {
                    finished.countDown();
                }
            });
            t.setDaemon(true);
            t.start();
        }
        say("started");
        awaitGo(in);
        long from = System.nanoTime(), cpu = cpuNanos();
        first.release();
        finished.await();
        say("done " + (System.nanoTime() - from) + " " + (cpuNanos() - cpu) + " " + errors.get());
    }

    static void semaphore(BufferedReader in, String path, int permits, int n) throws Exception {
        errors.set(0);
        CountDownLatch gate = new CountDownLatch(1);
        CountDownLatch finished = new CountDownLatch(n);
        for (CuratorFramework client : sessions.subList(0, n)) {
            InterProcessSemaphoreV2 semaphore = new InterProcessSemaphoreV2(client, path, permits);
            Thread t = new Thread(() -> {
                try {
                    Lease lease = semaphore.acquire();
                    gate.await();
                    semaphore.returnLease(lease);
                } catch (Exception e) {
                    errors.incrementAndGet();
                } finally {
                    finished.countDown();
                }
            });
            t.setDaemon(true);
            t.start();
        }
        say("started");
        awaitGo(in);
        long from = System.nanoTime(), cpu = cpuNanos();
        gate.countDown();
        finished.await();
        say("done " + (System.nanoTime() - from) + " " + (cpuNanos() - cpu) + " " + errors.get());
    }

    /** Waits (polling, uncounted) until `path` has `n` children. */
    static void awaitChildren(String path, int n) throws Exception {
        long deadline = System.nanoTime() + 120_000_000_000L;
        while (admin.getChildren().forPath(path).size() < n) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException(path + " did not reach " + n + " children");
            }
            Thread.sleep(5);
        }
    }

    static void rwlock(BufferedReader in, String path, int writers, int readers) throws Exception {
        errors.set(0);
        CountDownLatch finished = new CountDownLatch(writers + readers - 1);
        InterProcessMutex first = new InterProcessReadWriteLock(sessions.get(0), path).writeLock();
        first.acquire();
        for (int i = 1; i < writers + readers; i++) {
            InterProcessReadWriteLock rw = new InterProcessReadWriteLock(sessions.get(i), path);
            InterProcessMutex lock = i < writers ? rw.writeLock() : rw.readLock();
            Thread t = new Thread(() -> {
                try {
                    lock.acquire();
                    lock.release();
                } catch (Exception e) {
                    errors.incrementAndGet();
                } finally {
                    finished.countDown();
                }
            });
            t.setDaemon(true);
            t.start();
            if (i < writers) {
                awaitChildren(path, i + 1); // writers queue in order, ahead of every reader
            }
        }
        say("started");
        awaitGo(in);
        long from = System.nanoTime(), cpu = cpuNanos();
        first.release();
        finished.await();
        say("done " + (System.nanoTime() - from) + " " + (cpuNanos() - cpu) + " " + errors.get());
    }

    /** An observer that is not a participant: a getChildren watch on the latch path, and the data of its first node. */
    static class Observer implements CuratorWatcher {
        final CuratorFramework client;
        final String path;
        final ExecutorService executor;
        volatile String leader = "";

        Observer(CuratorFramework client, String path, ExecutorService executor) {
            this.client = client;
            this.path = path;
            this.executor = executor;
        }

        void look() throws Exception {
            List<String> children = client.getChildren().usingWatcher(this).forPath(path);
            String first = null;
            for (String child : children) {
                if (first == null || sequence(child) < sequence(first)) {
                    first = child;
                }
            }
            if (first == null) {
                leader = "";
                return;
            }
            try {
                leader = new String(client.getData().forPath(path + "/" + first));
            } catch (org.apache.zookeeper.KeeperException.NoNodeException gone) {
                look();
            }
        }

        static long sequence(String node) {
            return Long.parseLong(node.substring(node.length() - 10));
        }

        @Override
        public void process(WatchedEvent event) {
            if (event.getType() == Watcher.Event.EventType.NodeChildrenChanged) {
                executor.submit(() -> {
                    try {
                        look();
                    } catch (Exception e) {
                        errors.incrementAndGet();
                    }
                });
            }
        }
    }

    static String leaderOf(List<LeaderLatch> latches) {
        for (LeaderLatch latch : latches) {
            if (latch.hasLeadership()) {
                return latch.getId();
            }
        }
        return null;
    }

    static void awaitLeader(List<LeaderLatch> latches, List<Observer> observers, String not) throws Exception {
        long deadline = System.nanoTime() + 60_000_000_000L;
        while (true) {
            String leader = leaderOf(latches);
            boolean seen = leader != null && !leader.equals(not);
            for (Observer o : observers) {
                seen &= leader != null && leader.equals(o.leader);
            }
            if (seen) {
                return;
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("no leader seen by every observer within 60 s");
            }
            Thread.sleep(1);
        }
    }

    static void election(BufferedReader in, String path, int candidates, int observers, int changes) throws Exception {
        errors.set(0);
        List<LeaderLatch> latches = new ArrayList<>();
        for (int i = 0; i < candidates; i++) {
            LeaderLatch latch = new LeaderLatch(sessions.get(i), path, "c" + i);
            latch.start();
            latches.add(latch);
        }
        awaitChildren(path, candidates);
        ExecutorService executor = Executors.newFixedThreadPool(4);
        List<CuratorFramework> watching = openMany(observerConnect, observers);
        List<Observer> all = new ArrayList<>();
        for (CuratorFramework client : watching) {
            Observer observer = new Observer(client, path, executor);
            observer.look();
            all.add(observer);
        }
        awaitLeader(latches, all, null);
        say("ready");
        awaitGo(in);
        long from = System.nanoTime(), cpu = cpuNanos();
        for (int k = 0; k < changes; k++) {
            String old = leaderOf(latches);
            for (LeaderLatch latch : new ArrayList<>(latches)) {
                if (latch.getId().equals(old)) {
                    latch.close();
                    latches.remove(latch);
                }
            }
            awaitLeader(latches, all, old);
        }
        say("done " + (System.nanoTime() - from) + " " + (cpuNanos() - cpu) + " " + errors.get());
        String line = in.readLine();
        for (LeaderLatch latch : latches) {
            latch.close();
        }
        for (CuratorFramework client : watching) {
            client.close();
        }
        executor.shutdownNow();
        say(line != null && line.trim().equals("end") ? "ended" : "error expected end, got " + line);
    }
}
