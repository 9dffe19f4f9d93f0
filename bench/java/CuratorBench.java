// `zkfence-bench --impl curator`: Apache Curator's InterProcessMutex under the workload the Rust
// drivers run (bench/src/workload.rs), compiled at run time against Debian's jars.
//
// Usage: CuratorBench <connect> <path> <uncontended|contended> <contenders> <warmupSeconds> <seconds> <holdNanos> <serverPid>
//
// Each contender has a CuratorFramework of its own (one 10 s session), on <path>/lock when
// contended and <path>/u<i> when not, and cycles acquire/release, holding for <holdNanos>
// (0: an empty critical section). Measured as the Rust drivers measure: a cycle from the acquire call to the release
// returning; a handoff from the holder's release call to the next holder's acquire returning; a
// second holder is a violation. The server's zxid is read (a setData on <path>/zxid, which
// the caller creates) when the measured window opens and when it closes, and so is the CPU time
// of this JVM and of the server (its /proc stat; <serverPid> 0: not measured). Prints, one per
// line: acquisitions N / violations N / errors N / zxids FIRST LAST / cpu JVM_NS SERVER_NS /
// cycles NS... / handoffs NS...
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorBench {
    static final AtomicInteger holders = new AtomicInteger();
    static final AtomicLong violations = new AtomicLong();
    static final AtomicLong errors = new AtomicLong();
    static final AtomicLong acquisitions = new AtomicLong();
    /** The current holder's release start (nanoTime), 0 when none is pending. */
    static final AtomicLong releaseStarted = new AtomicLong();
    static final List<Long> cycles = new ArrayList<>();
    static final List<Long> handoffs = new ArrayList<>();
    static volatile boolean measuring = false;

    static CuratorFramework connect(String connect) throws InterruptedException {
        CuratorFramework client = CuratorFrameworkFactory.newClient(
                connect, 10_000, 5_000, new ExponentialBackoffRetry(100, 3));
        client.start();
        client.blockUntilConnected();
        return client;
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0];
        String path = args[1];
        boolean contended = args[2].equals("contended");
        int contenders = Integer.parseInt(args[3]);
        long warmupNanos = (long) (Double.parseDouble(args[4]) * 1e9);
        long measuredNanos = (long) (Double.parseDouble(args[5]) * 1e9);
        long holdNanos = Long.parseLong(args[6]);
        int serverPid = Integer.parseInt(args[7]);

        CuratorFramework admin = connect(connect);
        String probe = path + "/zxid"; // created by zkfence-bench
        List<CuratorFramework> clients = new ArrayList<>();
        for (int i = 0; i < contenders; i++) {
            clients.add(connect(connect));
        }
        long start = System.nanoTime();
        long until = start + warmupNanos + measuredNanos;
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < contenders; i++) {
            String lockPath = contended ? path + "/lock" : path + "/u" + i;
            InterProcessMutex mutex = new InterProcessMutex(clients.get(i), lockPath);
            Thread t = new Thread(() -> cycle(mutex, contended, holdNanos, until));
            t.start();
            threads.add(t);
        }
        Thread.sleep(warmupNanos / 1_000_000);
        long first = admin.setData().forPath(probe, new byte[0]).getMzxid();
        long jvmFrom = jvmCpuNanos(), serverFrom = cpuNanos(serverPid);
        measuring = true;
        Thread.sleep(measuredNanos / 1_000_000);
        measuring = false;
        long jvmTo = jvmCpuNanos(), serverTo = cpuNanos(serverPid);
        long last = admin.setData().forPath(probe, new byte[0]).getMzxid();
        for (Thread t : threads) {
            t.join();
        }
        for (CuratorFramework client : clients) {
            client.close();
        }
        admin.close();
        StringBuilder out = new StringBuilder();
        out.append("acquisitions ").append(acquisitions.get()).append('\n');
        out.append("violations ").append(violations.get()).append('\n');
        out.append("errors ").append(errors.get()).append('\n');
        out.append("zxids ").append(first).append(' ').append(last).append('\n');
        out.append("cpu ").append(jvmTo - jvmFrom).append(' ').append(serverTo - serverFrom).append('\n');
        line(out, "cycles", cycles);
        line(out, "handoffs", handoffs);
        System.out.print(out);
    }

    /** This JVM's CPU time so far, every thread. */
    static long jvmCpuNanos() {
        java.lang.management.OperatingSystemMXBean os =
                java.lang.management.ManagementFactory.getOperatingSystemMXBean();
        return ((com.sun.management.OperatingSystemMXBean) os).getProcessCpuTime();
    }

    /** Process pid's CPU time so far (user plus system, from /proc); 0 for pid 0 or on failure. */
    static long cpuNanos(int pid) {
        if (pid == 0) {
            return 0;
        }
        try {
            String stat = new String(java.nio.file.Files.readAllBytes(java.nio.file.Paths.get("/proc/" + pid + "/stat")));
            String[] fields = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
            long ticks = Long.parseLong(fields[11]) + Long.parseLong(fields[12]);
            return ticks * 10_000_000L; // USER_HZ is 100 on Linux
        } catch (Exception e) {
            return 0;
        }
    }

    static void line(StringBuilder out, String name, List<Long> samples) {
        out.append(name);
        synchronized (samples) {
            for (long ns : samples) {
                out.append(' ').append(ns);
            }
        }
        out.append('\n');
    }

    static void record(List<Long> into, long nanos) {
        synchronized (into) {
            into.add(nanos);
        }
    }

    static void cycle(InterProcessMutex mutex, boolean contended, long holdNanos, long until) {
        while (System.nanoTime() < until) {
            long started = System.nanoTime();
            try {
                mutex.acquire();
            } catch (Exception e) {
                errors.incrementAndGet();
                continue;
            }
            long acquired = System.nanoTime();
            boolean measured = measuring;
            if (holders.getAndIncrement() != 0 && contended) {
                violations.incrementAndGet();
            }
            if (contended) {
                long from = releaseStarted.getAndSet(0);
                if (from != 0 && measured) {
                    record(handoffs, acquired - from);
                }
            }
            if (holdNanos > 0) {
                java.util.concurrent.locks.LockSupport.parkNanos(holdNanos);
            }
            holders.decrementAndGet();
            if (contended) {
                releaseStarted.set(System.nanoTime());
            }
            try {
                mutex.release();
            } catch (Exception e) {
                errors.incrementAndGet();
            }
            if (measured) {
                acquisitions.incrementAndGet();
                record(cycles, System.nanoTime() - started);
            }
        }
    }
}
