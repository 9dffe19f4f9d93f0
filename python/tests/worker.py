"""A zkfence holder in a process of its own, for the tests that need another process (or one
to freeze): `python worker.py MODE ARGS...`, one line per event on stdout."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any, Dict

import zkfence


def say(*words: Any) -> None:
    print(*words, flush=True)


def exclusion(hosts: str, path: str, rounds: str, marker: str) -> None:
    """Holds `path` `rounds` times; inside each hold, a marker file that no other holder may
    have made (O_EXCL), for 20 ms."""
    zk = zkfence.connect(hosts, session_timeout=10.0)
    lock = zkfence.FencedLock(zk, path)
    for _ in range(int(rounds)):
        with lock.acquire(timeout=60) as guard:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            say("held", guard.token, time.monotonic())
            time.sleep(0.02)
            os.close(fd)
            os.unlink(marker)


def write_all(stores: Dict[str, Any], held: Any, value: str) -> Dict[str, str]:
    """One fenced write to each store with `held` (a guard, or a bare ticket so that only the
    store's fence stands); what each store said."""
    import psycopg
    import pymysql
    import redis

    scope = held.scope if isinstance(held, zkfence.Guard) else held[0]
    token = held.token if isinstance(held, zkfence.Guard) else held[1]
    said = {}
    try:
        with psycopg.connect(stores["postgres"]) as conn:
            with zkfence.postgres.transaction(conn, held):
                conn.execute(
                    "INSERT INTO example (scope, token, value) VALUES (%s, %s, %s)",
                    (scope, token, value),
                )
        said["postgres"] = "wrote"
    except zkfence.Refused as err:
        said["postgres"] = f"refused {err.seen}"
    conn = pymysql.connect(**stores["mysql"])
    try:
        with zkfence.mysql.transaction(conn, held) as cur:
            cur.execute(
                "INSERT INTO example (scope, token, value) VALUES (%s, %s, %s)",
                (scope, token, value),
            )
        said["mysql"] = "wrote"
    except zkfence.Refused as err:
        said["mysql"] = f"refused {err.seen}"
    finally:
        conn.close()
    client = redis.Redis.from_url(stores["redis"])
    try:
        zkfence.redis.write(
            client, held, [("RPUSH", zkfence.redis.Key("{%s}:example" % scope), f"{token} {value}")]
        )
        said["redis"] = "wrote"
    except zkfence.Refused as err:
        said["redis"] = f"refused {err.seen}"
    return said


def stale(stores_json: str, path: str) -> None:
    """Holds `path` with a 2 s session, writes to every store, stops itself (SIGSTOP); once
    let go, reports whether its guard says the hold is lost, then writes late with its bare
    ticket: every store must refuse it."""
    stores = json.loads(stores_json)
    zk = zkfence.connect(stores["zookeeper"], session_timeout=2.0)
    guard = zkfence.FencedLock(zk, path).acquire(timeout=30).wait()
    assert guard is not None
    say("first", json.dumps(write_all(stores, guard, "first")))
    ticket = guard.ticket
    say("paused", os.getpid(), guard.token)
    os.kill(os.getpid(), signal.SIGSTOP)
    # Resumed, far past the session timeout: the first thing the holder asks.
    say("resumed lost", guard.lost.is_set(), guard.lost.reason)
    try:
        guard.check()
        say("check passed")
    except zkfence.LockLost as err:
        say("check raised", err.reason)
    say("late", json.dumps(write_all(stores, (ticket.scope, ticket.token), "late")))


def blocked(hosts: str, path: str) -> None:
    """Waits for `path` (held by the test) until a SIGINT: the wait must stop with
    KeyboardInterrupt, as Ctrl-C stops it."""
    zk = zkfence.connect(hosts, session_timeout=10.0)
    lock = zkfence.FencedLock(zk, path)
    say("waiting")
    try:
        lock.acquire().wait()
        say("acquired")
    except KeyboardInterrupt:
        say("interrupted")
        # Alive (its session open) until the test has looked at the queue.
        sys.stdin.readline()


def successor(stores_json: str, path: str) -> None:
    """Holds `path` and writes to every store once."""
    stores = json.loads(stores_json)
    zk = zkfence.connect(stores["zookeeper"], session_timeout=10.0)
    with zkfence.FencedLock(zk, path).acquire(timeout=30) as guard:
        say("second", guard.token, json.dumps(write_all(stores, guard, "second")))


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    {"exclusion": exclusion, "stale": stale, "successor": successor, "blocked": blocked}[mode](*args)
