"""The Python examples of the READMEs (the project's and python/README.md's first), run as
written, with the ZooKeeper address swapped for the test's and `conn` a psycopg connection to
the test's PostgreSQL (with the `orders` table they update)."""

from __future__ import annotations

import os
import re
from typing import Any

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def blocks(path: str, after: str) -> list:
    text = open(os.path.join(ROOT, path), encoding="utf-8").read()
    section = text.split(after, 1)[1]
    return re.findall(r"```python\n(.*?)```", section, re.S)


@pytest.mark.parametrize(
    "path,after", [("README.md", "## From Python"), ("python/README.md", "## A lock")]
)
def test_the_readme_example_runs(stores: Any, path: str, after: str) -> None:
    import psycopg

    code = blocks(path, after)[0].replace("127.0.0.1:2181", stores["zookeeper"])
    with psycopg.connect(stores["postgres"], autocommit=True) as setup:
        setup.execute("CREATE TABLE IF NOT EXISTS orders (id int PRIMARY KEY, state text)")
        setup.execute("INSERT INTO orders VALUES (7, 'new') ON CONFLICT (id) DO UPDATE SET state = 'new'")
    with psycopg.connect(stores["postgres"]) as conn:
        exec(compile(code, path, "exec"), {"conn": conn})
    if "UPDATE orders" in code:
        with psycopg.connect(stores["postgres"]) as check:
            assert check.execute("SELECT state FROM orders WHERE id = 7").fetchone() == ("paid",)
