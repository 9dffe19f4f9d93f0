import java.io.BufferedReader;
import java.io.InputStreamReader;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryOneTime;

/** Holds a Curator InterProcessMutex on args[1] at args[0] until a line on stdin. */
public class CuratorHolder {
    public static void main(String[] args) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.newClient(args[0], new RetryOneTime(100));
        client.start();
        InterProcessMutex mutex = new InterProcessMutex(client, args[1]);
        System.out.println("started");
        mutex.acquire();
        System.out.println("held");
        new BufferedReader(new InputStreamReader(System.in)).readLine();
        mutex.release();
        System.out.println("released");
        client.close();
    }
}
