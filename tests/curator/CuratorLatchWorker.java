// Apache Curator's LeaderLatch, for the interop test in tests/election.rs.
//
// Usage: CuratorLatchWorker <connect> <latchPath> <markerFile> <seconds> <holdMillis>
// Until <seconds> have passed: starts a LeaderLatch, waits to lead, creates <markerFile>
// exclusively (finding it there means two leaders at once), holds <holdMillis>, deletes it and
// closes the latch. Prints one line: "terms=<n> violations=<v>".
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorLatchWorker {
    public static void main(String[] args) throws Exception {
        Path marker = Paths.get(args[2]);
        long until = System.nanoTime() + Long.parseLong(args[3]) * 1_000_000_000L;
        long hold = Long.parseLong(args[4]);
        long terms = 0;
        long violations = 0;
        try (CuratorFramework client = CuratorFrameworkFactory.newClient(
                args[0], 10_000, 5_000, new ExponentialBackoffRetry(100, 3))) {
            client.start();
            client.blockUntilConnected();
            while (System.nanoTime() < until) {
                LeaderLatch latch = new LeaderLatch(client, args[1], "curator");
                latch.start();
                long left = (until - System.nanoTime()) / 1_000_000L;
                if (left > 0 && latch.await(left, TimeUnit.MILLISECONDS)) {
                    try {
                        Files.createFile(marker);
                    } catch (FileAlreadyExistsException e) {
                        violations++;
                        System.err.println("VIOLATION: curator led while another leader led");
                    }
                    Thread.sleep(hold);
                    Files.deleteIfExists(marker);
                    terms++;
                }
                latch.close();
            }
        }
        System.out.println("terms=" + terms + " violations=" + violations);
    }
}
