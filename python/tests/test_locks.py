"""The locks from Python: exclusion and token order across processes, `with` and `async with`,
timeouts and try, cancellation, loss and `run`."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from typing import Any, List, Tuple

import pytest

import zkfence
from conftest import wait_until, worker


def test_exclusion_and_token_order_across_processes(servers: Any, lock_path: str) -> None:
    marker = os.path.join(tempfile.mkdtemp(), "held")
    procs = [worker("exclusion", servers["zookeeper"], lock_path, "6", marker) for _ in range(3)]
    holds: List[Tuple[float, int]] = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        for line in out.splitlines():
            _, token, at = line.split()
            holds.append((float(at), int(token)))
    assert len(holds) == 18
    # In the order the holds began, every token is greater than the one before.
    tokens = [token for _, token in sorted(holds)]
    assert tokens == sorted(tokens) and len(set(tokens)) == 18, tokens


def test_with_releases_on_exception_and_try_sees_it(zk: Any, lock_path: str) -> None:
    lock = zkfence.FencedLock(zk, lock_path)
    with pytest.raises(ValueError):
        with lock.acquire() as guard:
            assert guard.token > 0 and guard.ticket.scope == lock_path
            raise ValueError("the work failed")
    assert guard.lost.is_set() and guard.lost.reason == "released"
    other = zkfence.FencedLock(zkfence.connect(zk.hosts), lock_path)
    with other.try_acquire() as again:
        assert again is not None and again.token > guard.token


def test_try_and_timeout_while_another_holds(zk: Any, lock_path: str) -> None:
    holder = zkfence.FencedLock(zk, lock_path).acquire().wait()
    assert holder is not None
    other = zkfence.FencedLock(zkfence.connect(zk.hosts), lock_path)
    with other.try_acquire() as none:
        assert none is None
    started = time.monotonic()
    with pytest.raises(zkfence.Timeout) as raised:
        other.acquire(timeout=0.5).wait()
    assert isinstance(raised.value, TimeoutError)
    assert 0.4 < time.monotonic() - started < 10
    holder.release()
    holder.release()  # a second release does nothing
    with other.acquire(timeout=10) as guard:
        assert guard.token > holder.token


def test_bad_input_gets_a_clear_error(zk: Any) -> None:
    with pytest.raises(ValueError, match="path"):
        zkfence.FencedLock(zk, "no-slash")
    with pytest.raises(ValueError, match="session_timeout"):
        zkfence.connect("127.0.0.1:1", session_timeout=-1)
    with pytest.raises(zkfence.ZkfenceError, match="cannot open a ZooKeeper session"):
        zkfence.connect("127.0.0.1:1", connect_timeout=0.5)
    with pytest.raises(ValueError, match="timeout"):
        zkfence.FencedLock(zk, "/pytest/x").acquire(timeout=float("nan")).wait()


def test_asyncio_acquire_release_and_cancel_leaves_the_queue(zk: Any, kazoo: Any, lock_path: str) -> None:
    async def main() -> None:
        lock = zkfence.FencedLock(zk, lock_path)
        async with lock.acquire() as first:
            assert first.token > 0
            # A second contender queues, then is cancelled: its node goes.
            waiting = asyncio.ensure_future(zkfence.FencedLock(zkfence.connect(zk.hosts), lock_path).acquire())
            await asyncio.sleep(0)
            deadline = time.monotonic() + 10
            while len(kazoo.get_children(lock_path)) < 2:
                assert time.monotonic() < deadline, "the second contender never queued"
                await asyncio.sleep(0.05)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            while len(kazoo.get_children(lock_path)) > 1:
                assert time.monotonic() < deadline, "the cancelled contender's node stayed"
                await asyncio.sleep(0.05)
        assert first.lost.is_set()
        guard = await lock.acquire(timeout=5)
        assert guard is not None and guard.token > first.token
        await guard.arelease()

    asyncio.run(main())


def test_run_cancels_asyncio_work_when_the_node_is_deleted(zk: Any, kazoo: Any, lock_path: str) -> None:
    async def main() -> None:
        guard = await zkfence.FencedLock(zk, lock_path).acquire()
        assert guard is not None
        steps: List[int] = []

        async def work() -> None:
            for step in range(1000):
                steps.append(step)
                await asyncio.sleep(0.01)

        async def delete_soon() -> None:
            await asyncio.sleep(0.3)
            kazoo.delete(guard.node)

        deleter = asyncio.ensure_future(delete_soon())
        with pytest.raises(zkfence.LockLost) as lost:
            await guard.run(work)
        await deleter
        assert lost.value.reason == "node_deleted"
        assert 5 < len(steps) < 1000
        assert await guard.lost == "node_deleted"
        assert guard.lost.wait(0) and guard.lost.reason == "node_deleted"

    asyncio.run(main())


def test_run_checks_a_thread_s_work(zk: Any, kazoo: Any, lock_path: str) -> None:
    # A block that ends normally after its hold was lost reports it as it exits.
    with pytest.raises(zkfence.LockLost, match="deleted"):
        with zkfence.FencedLock(zk, lock_path).acquire() as guard:
            assert guard.run(lambda a, b: a + b, 2, 3) == 5

            def work() -> None:
                kazoo.delete(guard.node)
                assert guard.lost.wait(10)

            with pytest.raises(zkfence.LockLost):
                guard.run(work)


def test_every_kind(zk: Any, lock_path: str) -> None:
    rw = zkfence.FencedRwLock(zk, lock_path + "-rw")
    with rw.read.acquire() as r1, zkfence.FencedRwLock(zkfence.connect(zk.hosts), lock_path + "-rw").read.acquire() as r2:
        assert r1.token != r2.token
        with pytest.raises(zkfence.ZkfenceError, match="no ticket"):
            r1.ticket
    with rw.write.acquire(timeout=10) as w:
        assert w.ticket.token == w.token
    sem = zkfence.FencedSemaphore(zk, lock_path + "-sem", 2)
    with sem.acquire() as a, sem.acquire(timeout=10) as b:
        assert a is not None and b is not None
    election = zkfence.FencedElection(zk, lock_path + "-election", b"host-a")
    with election.campaign(timeout=10) as leader:
        assert leader.ticket.scope == lock_path + "-election"


def test_a_rust_holder_and_a_python_holder_exclude_each_other(zk: Any, servers: Any, lock_path: str) -> None:
    import subprocess

    rust = subprocess.Popen(
        [os.environ["ZKFENCE_BIN"], "run", "--connect", servers["zookeeper"], "--lock", lock_path, "--",
         "sh", "-c", 'echo "$ZKFENCE_TOKEN"; read line'],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    assert rust.stdout is not None and rust.stdin is not None
    rust_token = int(rust.stdout.readline())
    lock = zkfence.FencedLock(zk, lock_path)
    with lock.try_acquire() as none:
        assert none is None
    rust.stdin.write("done\n")
    rust.stdin.close()
    assert rust.wait(30) == 0
    with lock.acquire(timeout=10) as guard:
        assert guard.token > rust_token


def test_ctrl_c_stops_a_blocked_acquire_and_leaves_the_queue(zk: Any, kazoo: Any, lock_path: str) -> None:
    import signal

    holder = zkfence.FencedLock(zk, lock_path).acquire().wait()
    assert holder is not None
    blocked = worker("blocked", zk.hosts, lock_path, stdin=True)
    assert blocked.stdout is not None
    assert blocked.stdout.readline().strip() == "waiting"
    wait_until("the blocked contender queued", lambda: len(kazoo.get_children(lock_path)) == 2)
    blocked.send_signal(signal.SIGINT)
    assert blocked.stdout.readline().strip() == "interrupted"
    # The dropped acquire deleted its node, its session still open.
    wait_until("the interrupted contender's node is gone", lambda: len(kazoo.get_children(lock_path)) == 1, 5)
    blocked.communicate("\n", timeout=10)
    holder.release()


def test_a_guard_collected_unreleased_releases(zk: Any, kazoo: Any, lock_path: str) -> None:
    import gc

    guard = zkfence.FencedLock(zk, lock_path).acquire().wait()
    assert guard is not None and len(kazoo.get_children(lock_path)) == 1
    del guard
    gc.collect()
    wait_until("the collected guard's node is gone", lambda: kazoo.get_children(lock_path) == [], 5)


def test_a_curator_holder_and_a_python_holder_queue_on_one_path(zk: Any, servers: Any, kazoo: Any, lock_path: str) -> None:
    import re
    import subprocess

    here = os.path.dirname(os.path.abspath(__file__))
    classes = servers["curator_classes"]
    os.makedirs(classes, exist_ok=True)
    classpath = servers["curator_classpath"]
    subprocess.run(["javac", "-cp", classpath, "-d", classes, os.path.join(here, "CuratorHolder.java")], check=True)
    python = zkfence.FencedLock(zk, lock_path).acquire().wait()
    assert python is not None
    # Curator's node name: the same protocol, so each sees the other in the queue.
    assert re.fullmatch(r"_c_[0-9a-f-]{36}-lock-\d{10}", python.node.rsplit("/", 1)[1]), python.node
    curator = subprocess.Popen(
        ["java", "-cp", classpath, "CuratorHolder", zk.hosts, lock_path],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
    )
    assert curator.stdout is not None and curator.stdin is not None
    out = curator.stdout.fileno()

    def line() -> str:
        read = b""
        while not read.endswith(b"\n"):
            byte = os.read(out, 1)
            assert byte, f"Curator's holder ended after {read!r}"
            read += byte
        return read.decode().strip()

    assert line() == "started"
    wait_until("Curator queued behind the Python holder", lambda: len(kazoo.get_children(lock_path)) == 2)
    # While the Python holder holds, Curator's does not.
    import select

    assert select.select([out], [], [], 1.0)[0] == [], "Curator holds while the Python holder does"
    python.release()
    assert line() == "held"
    lock = zkfence.FencedLock(zk, lock_path)
    with lock.try_acquire() as none:
        assert none is None
    curator.stdin.write(b"release\n")
    assert line() == "released"
    assert curator.wait(30) == 0
    with lock.acquire(timeout=10) as again:
        assert again.token > python.token


def test_an_acl_refusal_says_so_and_the_credentials_that_pass(zk: Any, kazoo: Any, lock_path: str) -> None:
    from kazoo.security import make_digest_acl

    kazoo.add_auth("digest", "owner:secret")
    kazoo.create(lock_path, acl=[make_digest_acl("owner", "secret", all=True)], makepath=True)
    with pytest.raises(zkfence.ZkfenceError) as refused:
        zkfence.FencedLock(zk, lock_path + "/orders").acquire(timeout=5).wait()
    assert "denied create" in str(refused.value) and "auth=" in str(refused.value), refused.value
    owner = zkfence.connect(zk.hosts, auth=("digest", "owner:secret"))
    with zkfence.FencedLock(owner, lock_path + "/orders").acquire(timeout=10) as guard:
        assert guard.token > 0
