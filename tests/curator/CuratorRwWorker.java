// Contends for a read/write lock with Apache Curator's InterProcessReadWriteLock, from several
// Curator clients (one session each), for the read/write interop test in tests/curator.rs.
//
// Usage: CuratorRwWorker <connect> <lockPath> <dir> <seconds> <clients>
// Readers create <dir>/r-<client>-<n> while they hold a read lock and check that <dir>/w does
// not exist; writers create <dir>/w exclusively while they hold the write lock and check that
// no r-* file exists. The Rust side does the same, so any overlap of a writer with anyone is
// seen by at least one side. Prints one line: "reads=<r> writes=<w> violations=<v>".
import java.io.IOException;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorRwWorker {
    static boolean readersPresent(Path dir) throws IOException {
        try (Stream<Path> files = Files.list(dir)) {
            return files.anyMatch(p -> p.getFileName().toString().startsWith("r-"));
        }
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0];
        String lockPath = args[1];
        Path dir = Paths.get(args[2]);
        long until = System.nanoTime() + Long.parseLong(args[3]) * 1_000_000_000L;
        int clients = Integer.parseInt(args[4]);
        AtomicLong reads = new AtomicLong();
        AtomicLong writes = new AtomicLong();
        AtomicLong violations = new AtomicLong();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < clients; i++) {
            final int id = i;
            Thread t = new Thread(() -> {
                Random random = new Random(id);
                try (CuratorFramework client = CuratorFrameworkFactory.newClient(
                        connect, 10_000, 5_000, new ExponentialBackoffRetry(100, 3))) {
                    client.start();
                    client.blockUntilConnected();
                    InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, lockPath);
                    long n = 0;
                    while (System.nanoTime() < until) {
                        n++;
                        if (random.nextInt(10) < 7) {
                            rw.readLock().acquire();
                            Path mine = dir.resolve("r-curator-" + id + "-" + n);
                            try {
                                Files.createFile(mine);
                                if (Files.exists(dir.resolve("w"))) {
                                    violations.incrementAndGet();
                                    System.err.println("VIOLATION: curator reader overlapped a writer");
                                }
                                Thread.sleep(2);
                                Files.deleteIfExists(mine);
                                reads.incrementAndGet();
                            } finally {
                                rw.readLock().release();
                            }
                        } else {
                            rw.writeLock().acquire();
                            try {
                                try {
                                    Files.createFile(dir.resolve("w"));
                                } catch (FileAlreadyExistsException e) {
                                    violations.incrementAndGet();
                                    System.err.println("VIOLATION: curator writer overlapped a writer");
                                }
                                if (readersPresent(dir)) {
                                    violations.incrementAndGet();
                                    System.err.println("VIOLATION: curator writer overlapped a reader");
                                }
                                Thread.sleep(2);
                                Files.deleteIfExists(dir.resolve("w"));
                                writes.incrementAndGet();
                            } finally {
                                rw.writeLock().release();
                            }
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
        System.out.println("reads=" + reads.get() + " writes=" + writes.get() + " violations=" + violations.get());
    }
}
