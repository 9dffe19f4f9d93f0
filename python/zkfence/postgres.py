"""The PostgreSQL fence from psycopg 3: the claim first in the transaction, then the block's
statements, then COMMIT. A stale holder's claim raises :class:`zkfence.Refused` and nothing of
the transaction commits; in a savepoint (a nested ``transaction()``) the refusal also ends the
session, so that no outer transaction can commit around it.

>>> with zkfence.postgres.transaction(conn, guard):
...     conn.execute("UPDATE orders SET state = 'paid' WHERE id = %s", (7,))
"""

from __future__ import annotations

import contextlib
import re
from typing import Any, Iterator, Optional

from . import _zkfence
from ._errors import Refused
from ._held import ticket_and_check

#: The SQLSTATE of a refusal.
REFUSED = "ZF001"


def _claim_function(schema: Optional[str]) -> str:
    if schema is None:
        return "zkfence_claim"
    return '"' + schema.replace('"', '""') + '".zkfence_claim'


def install_sql(schema: Optional[str] = None) -> str:
    """The script that creates (or updates) the fence table and ``zkfence_claim``."""
    return _zkfence.install_text("postgres", schema)


def install(conn: Any, schema: Optional[str] = None) -> None:
    """Installs the fence (idempotent) and commits."""
    with conn.transaction():
        conn.execute(install_sql(schema))


def claim(conn: Any, held: Any, schema: Optional[str] = None) -> Optional[int]:
    """Claims the fence for the guard (or ticket) in the connection's open transaction: the
    first statement of a transaction that writes under the lock. The token the fence held
    before (``None`` on the scope's first claim)."""
    scope, token, _ = ticket_and_check(held)
    try:
        row = conn.execute(
            f"SELECT {_claim_function(schema)}(%s, %s)", (scope, token)
        ).fetchone()
    except Exception as err:  # psycopg.Error: the package does not import psycopg
        refused = _refusal(err, scope, token)
        if refused is None:
            raise
        raise refused from err
    return None if row is None else row[0]


@contextlib.contextmanager
def transaction(conn: Any, held: Any, schema: Optional[str] = None) -> Iterator[Any]:
    """A fenced transaction (``conn.transaction()`` with the claim first): commits when the
    block ends, after a last check of the guard's hold; rolls back on any exception.

    Raises :class:`zkfence.Refused` when a newer holder has claimed the scope, and
    :class:`zkfence.LockLost` when the hold ended before the commit.
    """
    _, _, check = ticket_and_check(held)
    with conn.transaction():
        claim(conn, held, schema)
        yield conn
        # The last check before COMMIT: a hold lost meanwhile writes nothing.
        check()


def _refusal(err: BaseException, scope: str, token: int) -> Optional[Refused]:
    """``err`` as :class:`Refused` when it is the fence's refusal; else ``None``."""
    if getattr(err, "sqlstate", None) != REFUSED:
        return None
    detail = getattr(getattr(err, "diag", None), "message_detail", None) or ""
    seen = int(detail) if re.fullmatch(r"-?\d+", detail) else None
    return Refused(str(err).strip(), scope, token, seen)


