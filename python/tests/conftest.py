"""The servers every test meets (started once per run by the harness's `zkfence-servers`:
ZooKeeper, PostgreSQL, MariaDB and Redis on loopback ports with temp dirs, stopped when the
run ends), a lock path of each test's own, and the stores' connections."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any, Callable, Dict, Iterator
from urllib.parse import urlparse

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="session")
def servers() -> Iterator[Dict[str, str]]:
    binary = os.environ.get("ZKFENCE_SERVERS")
    if not binary:
        pytest.fail("run the suite with scripts/pytest (ZKFENCE_SERVERS names the harness's zkfence-servers)")
    names = ["zookeeper", "postgres", "mysql", "redis", "curator"]
    proc = subprocess.Popen([binary, *names], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(10)
        pytest.fail(f"zkfence-servers started nothing (exit {proc.returncode})")
    try:
        yield json.loads(line)
    finally:
        proc.stdin.close()
        proc.wait(60)


@pytest.fixture
def lock_path(request: Any) -> str:
    return f"/pytest/{request.node.name[:60]}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def zk(servers: Dict[str, str]) -> Any:
    import zkfence

    return zkfence.connect(servers["zookeeper"], session_timeout=10.0)


@pytest.fixture
def kazoo(servers: Dict[str, str]) -> Iterator[Any]:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=servers["zookeeper"])
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def mysql_params(url: str, database: str) -> Dict[str, Any]:
    parsed = urlparse(url)
    return {
        "host": parsed.hostname,
        "port": parsed.port,
        "user": parsed.username,
        "password": parsed.password or "",
        "database": database,
    }


@pytest.fixture(scope="session")
def stores(servers: Dict[str, str]) -> Dict[str, Any]:
    """Each store with its fence installed (by the package's own install) and an `example`
    table (or nothing, for Redis); what a worker process needs to reach them."""
    import psycopg
    import pymysql
    import redis

    import zkfence

    with psycopg.connect(servers["postgres"], autocommit=True) as conn:
        zkfence.postgres.install(conn)
        conn.execute("CREATE TABLE IF NOT EXISTS example (seq bigserial PRIMARY KEY, scope text, token bigint, value text)")
    root = pymysql.connect(**mysql_params(servers["mysql"], "mysql"))
    with root.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS pytest")
    root.close()
    conn = pymysql.connect(**mysql_params(servers["mysql"], "pytest"))
    zkfence.mysql.install(conn)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS example (seq BIGINT AUTO_INCREMENT PRIMARY KEY, scope VARCHAR(200), token BIGINT, value VARCHAR(200))")
    conn.commit()
    conn.close()
    zkfence.redis.install(redis.Redis.from_url(servers["redis"]))
    return {
        "zookeeper": servers["zookeeper"],
        "postgres": servers["postgres"],
        "mysql": mysql_params(servers["mysql"], "pytest"),
        "redis": servers["redis"],
    }


def wait_until(what: str, condition: Callable[[], bool], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {seconds} s: {what}")
        time.sleep(0.05)


def worker(*args: str, stdin: bool = False) -> "subprocess.Popen[str]":
    """A Python process running tests/worker.py with `args`, its output (and with `stdin`, its
    input) piped."""
    return subprocess.Popen(
        [sys.executable, os.path.join(HERE, "worker.py"), *args],
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
