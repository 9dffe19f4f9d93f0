// Apache Curator's revocation, for the interop tests in tests/revocation.rs.
//
// Usage:
//   CuratorRevokeWorker hold <connect> <lockPath> <seconds>
//     holds an InterProcessMutex made revocable; prints "HOLDING <node>" once it holds,
//     "REVOKED" when its revocation listener fires, then releases and prints "RELEASED"
//     (or "TIMEOUT" after <seconds> without a revocation).
//   CuratorRevokeWorker revoke <connect> <nodePath>
//     Revoker.attemptRevoke on the node; prints "ASKED".
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.Revoker;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorRevokeWorker {
    public static void main(String[] args) throws Exception {
        try (CuratorFramework client = CuratorFrameworkFactory.newClient(
                args[1], 10_000, 5_000, new ExponentialBackoffRetry(100, 3))) {
            client.start();
            client.blockUntilConnected();
            if (args[0].equals("hold")) {
                hold(client, args[2], Long.parseLong(args[3]));
            } else {
                Revoker.attemptRevoke(client, args[2]);
                System.out.println("ASKED");
            }
        }
    }

    static void hold(CuratorFramework client, String lockPath, long seconds) throws Exception {
        InterProcessMutex mutex = new InterProcessMutex(client, lockPath);
        CountDownLatch revoked = new CountDownLatch(1);
        // The listener runs on a Curator thread; the release must come from the owner.
        mutex.makeRevocable(lock -> revoked.countDown());
        mutex.acquire();
        String node = mutex.getParticipantNodes().iterator().next();
        System.out.println("HOLDING " + node);
        System.out.flush();
        if (revoked.await(seconds, TimeUnit.SECONDS)) {
            System.out.println("REVOKED");
        } else {
            System.out.println("TIMEOUT");
        }
        mutex.release();
        System.out.println("RELEASED");
        System.out.flush();
    }
}
