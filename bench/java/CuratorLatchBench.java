// `zkfence-bench --failover`: one candidate process of Apache Curator's LeaderLatch, speaking
// the protocol of `zkfence-bench candidate` (bench/src/failover/candidate.rs), compiled at
// run time against Debian's jars.
//
// Usage: CuratorLatchBench <connect> <electionPath> <sessionTimeoutMs>
//
// One CuratorFramework (one session of <sessionTimeoutMs>), one LeaderLatch on <electionPath>.
// Prints, one line each, flushed at once; times are unix nanoseconds (CLOCK_REALTIME, as the
// Rust side reads it, so that both compare on one host):
//   session <granted timeout ms>      once connected
//   lead <sequence> <unix-nanos>      the moment await() returns: the leader's first step
//                                     (LeaderLatch has no epoch; its node's sequence orders
//                                     the leaders of one path)
//   step <unix-nanos>                 about every 5 ms while hasLeadership() holds
//   deposed <unix-nanos>              when hasLeadership() turns false; then it exits
// A step's time is read before hasLeadership(): a step printed with time t means the latch
// still claimed leadership at some moment after t. It exits at once when its stdin closes (the
// bench is gone), so that a candidate never outlives the bench.
import java.io.IOException;
import java.io.PrintStream;
import java.time.Instant;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorLatchBench {
    /** Between two steps, unless the latch reports a loss first. */
    static final long STEP_MILLIS = 5;
    /** Woken by the latch's listener when leadership goes, so `deposed` is not a step late. */
    static final Object wake = new Object();

    /** Unix time in nanoseconds (microsecond resolution on Linux). */
    static long unixNanos() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1_000_000_000L + now.getNano();
    }

    static void say(PrintStream out, String line) {
        out.println(line);
        out.flush();
    }

    /** Halts the JVM when stdin reaches its end: the bench that started us has gone. */
    static void exitWithStdin() {
        Thread lifeline = new Thread(() -> {
            try {
                while (System.in.read() != -1) {
                    // Nothing is sent on stdin; it only closes.
                }
            } catch (IOException e) {
                // A broken stdin means the same.
            }
            Runtime.getRuntime().halt(0);
        });
        lifeline.setDaemon(true);
        lifeline.start();
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0];
        String path = args[1];
        int sessionTimeoutMs = Integer.parseInt(args[2]);
        PrintStream out = System.out;
        exitWithStdin();

        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(sessionTimeoutMs)
                .connectionTimeoutMs(Math.max(sessionTimeoutMs, 5_000))
                .retryPolicy(new ExponentialBackoffRetry(100, 3))
                .build();
        client.start();
        client.blockUntilConnected();
        say(out, "session " + client.getZookeeperClient().getZooKeeper().getSessionTimeout());

        LeaderLatch latch = new LeaderLatch(client, path, "bench-" + ProcessHandle.current().pid());
        latch.addListener(new LeaderLatchListener() {
            @Override
            public void isLeader() {
            }

            @Override
            public void notLeader() {
                synchronized (wake) {
                    wake.notifyAll();
                }
            }
        });
        latch.start();
        latch.await();
        long led = unixNanos();
        String node = latch.getOurPath();
        long sequence = Long.parseLong(node.substring(node.length() - 10));
        say(out, "lead " + sequence + " " + led);
        while (true) {
            long at = unixNanos();
            if (!latch.hasLeadership()) {
                say(out, "deposed " + at);
                Runtime.getRuntime().halt(0);
            }
            say(out, "step " + at);
            synchronized (wake) {
                if (latch.hasLeadership()) {
                    wake.wait(STEP_MILLIS);
                }
            }
        }
    }
}
