// Contends for a lock with Apache Curator's InterProcessMutex, from several Curator clients
// (one session each), for the interop test in tests/curator.rs.
//
// Usage: CuratorMutexWorker <connect> <lockPath> <markerFile> <seconds> <clients>
// While holding the lock, each client creates <markerFile> exclusively and deletes it before
// releasing: if the create finds the file there, two holders overlapped. Prints one line:
// "acquisitions=<n> violations=<v>".
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorMutexWorker {
    public static void main(String[] args) throws Exception {
        String connect = args[0];
        String lockPath = args[1];
        Path marker = Paths.get(args[2]);
        long until = System.nanoTime() + Long.parseLong(args[3]) * 1_000_000_000L;
        int clients = Integer.parseInt(args[4]);
        AtomicLong acquisitions = new AtomicLong();
        AtomicLong violations = new AtomicLong();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < clients; i++) {
            Thread t = new Thread(() -> {
                try (CuratorFramework client = CuratorFrameworkFactory.newClient(
                        connect, 10_000, 5_000, new ExponentialBackoffRetry(100, 3))) {
                    client.start();
                    client.blockUntilConnected();
                    InterProcessMutex mutex = new InterProcessMutex(client, lockPath);
                    while (System.nanoTime() < until) {
                        mutex.acquire();
                        try {
                            try {
                                Files.createFile(marker);
                            } catch (FileAlreadyExistsException e) {
                                violations.incrementAndGet();
                                System.err.println("VIOLATION: curator acquired while another holder held");
                            }
                            Thread.sleep(2);
                            Files.deleteIfExists(marker);
                            acquisitions.incrementAndGet();
                        } finally {
                            mutex.release();
                        }
                    }
                } catch (Exception e) {
                    e.printStackTrace();
                    violations.addAndGet(1_000_000);
                }
            });
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) {
            t.join();
        }
        System.out.println("acquisitions=" + acquisitions.get() + " violations=" + violations.get());
    }
}
