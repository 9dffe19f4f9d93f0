"""The fences from Python: a holder frozen (SIGSTOP) past its session timeout, a successor in
another process writes, and the frozen one, let go, finds its hold lost before it writes; its
late writes, sent with its bare ticket so that nothing of its own stops them, are refused by
PostgreSQL, MariaDB and Redis alike."""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import pytest

import zkfence
from conftest import wait_until, worker


def test_a_frozen_holder_is_lost_on_resume_and_refused_by_every_store(stores: Any, kazoo: Any, lock_path: str) -> None:
    first = worker("stale", json.dumps(stores), lock_path)
    assert first.stdout is not None
    line = first.stdout.readline()
    assert line.startswith("first "), line + (first.stderr.read() if first.stderr else "")
    assert json.loads(line[len("first "):]) == {"postgres": "wrote", "mysql": "wrote", "redis": "wrote"}
    _, pid, first_token = first.stdout.readline().split()
    wait_until("the holder stopped itself", lambda: open(f"/proc/{pid}/stat").read().split()[2] == "T")
    # The server expires the frozen holder's session: its lock node goes.
    wait_until("the frozen holder's session expired", lambda: kazoo.get_children(lock_path) == [])

    second = worker("successor", json.dumps(stores), lock_path)
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    _, second_token, said = out.split(" ", 2)
    assert int(second_token) > int(first_token)
    assert json.loads(said) == {"postgres": "wrote", "mysql": "wrote", "redis": "wrote"}

    os.kill(int(pid), signal.SIGCONT)
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    lines = out.splitlines()
    # The first thing it asked once resumed: its hold is already known lost.
    assert lines[0].startswith("resumed lost True"), lines
    assert lines[1].startswith("check raised"), lines
    late = json.loads(lines[2][len("late "):])
    assert late == {store: f"refused {second_token}" for store in ("postgres", "mysql", "redis")}, late
    assert_no_late_write(stores, lock_path)


def assert_no_late_write(stores: Any, scope: str) -> None:
    import psycopg
    import pymysql
    import redis

    with psycopg.connect(stores["postgres"]) as conn:
        rows = conn.execute("SELECT value FROM example WHERE scope = %s ORDER BY seq", (scope,)).fetchall()
    assert [r[0] for r in rows] == ["first", "second"]
    conn = pymysql.connect(**stores["mysql"])
    with conn.cursor() as cur:
        cur.execute("SELECT value FROM example WHERE scope = %s ORDER BY seq", (scope,))
        assert [r[0] for r in cur.fetchall()] == ["first", "second"]
    conn.close()
    values = redis.Redis.from_url(stores["redis"]).lrange("{%s}:example" % scope, 0, -1)
    assert [v.decode().split()[1] for v in values] == ["first", "second"]


def test_a_refused_claim_raises_refused_and_leaves_the_connection_usable(stores: Any, zk: Any, lock_path: str) -> None:
    import psycopg
    import pymysql
    import redis

    lock = zkfence.FencedLock(zk, lock_path)
    with lock.acquire() as old:
        old_ticket = old.ticket
    with lock.acquire() as new:
        with psycopg.connect(stores["postgres"]) as conn:
            assert zkfence.postgres.claim(conn, new) in (None, old_ticket.token)
            conn.commit()
            with pytest.raises(zkfence.Refused) as refused:
                with zkfence.postgres.transaction(conn, (old_ticket.scope, old_ticket.token)):
                    conn.execute("INSERT INTO example (scope, token, value) VALUES (%s, %s, 'stale')", (lock_path, old_ticket.token))
            assert refused.value.seen == new.token and refused.value.token == old_ticket.token
            assert conn.execute("SELECT count(*) FROM example WHERE value = 'stale'").fetchone() == (0,)
        my = pymysql.connect(**stores["mysql"])
        with zkfence.mysql.transaction(my, new) as cur:
            cur.execute("SELECT 1")
        with pytest.raises(zkfence.Refused) as refused:
            with zkfence.mysql.transaction(my, (old_ticket.scope, old_ticket.token)) as cur:
                cur.execute("INSERT INTO example (scope, token, value) VALUES (%s, %s, 'stale')", (lock_path, old_ticket.token))
        assert refused.value.seen == new.token
        with zkfence.mysql.transaction(my, new) as cur:
            cur.execute("SELECT count(*) FROM example WHERE value = 'stale'")
            assert cur.fetchone() == (0,)
        my.close()
        client = redis.Redis.from_url(stores["redis"])
        assert zkfence.redis.claim(client, new) is None
        with pytest.raises(zkfence.Refused) as refused:
            zkfence.redis.write(client, (old_ticket.scope, old_ticket.token), [("SET", zkfence.redis.Key("{%s}:k" % lock_path), "stale")])
        assert refused.value.seen == new.token
        assert client.get("{%s}:k" % lock_path) is None
        assert zkfence.redis.write(client, new, [("SET", zkfence.redis.Key("{%s}:k" % lock_path), "ok"), ("GET", zkfence.redis.Key("{%s}:k" % lock_path))]) == [b"OK", b"ok"]


def test_a_lost_guard_commits_nothing(stores: Any, zk: Any, kazoo: Any, lock_path: str) -> None:
    import psycopg

    guard = zkfence.FencedLock(zk, lock_path).acquire().wait()
    assert guard is not None
    with psycopg.connect(stores["postgres"]) as conn:
        with pytest.raises(zkfence.LockLost):
            with zkfence.postgres.transaction(conn, guard):
                conn.execute("INSERT INTO example (scope, token, value) VALUES (%s, %s, 'lost')", (lock_path, guard.token))
                kazoo.delete(guard.node)
                assert guard.lost.wait(10)
        assert conn.execute("SELECT count(*) FROM example WHERE value = 'lost'").fetchone() == (0,)
