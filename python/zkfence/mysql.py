"""The MySQL/MariaDB fence from PyMySQL: the claim first (``CALL zkfence_claim``), the block's
statements, then the seal (``CALL zkfence_seal``, which catches a rollback under the work) and
COMMIT. A stale holder's claim raises :class:`zkfence.Refused`; the procedure has rolled the
transaction back and left the session read-only, which this module lifts again (``ROLLBACK;
SET SESSION TRANSACTION READ WRITE``) before it raises.

>>> with zkfence.mysql.transaction(conn, guard) as cur:
...     cur.execute("UPDATE orders SET state = 'paid' WHERE id = %s", (7,))
"""

from __future__ import annotations

import contextlib
import re
from typing import Any, Iterator, List, Optional, Tuple

from . import _zkfence
from ._errors import Refused
from ._held import ticket_and_check

#: The error number MySQL and MariaDB give a ``SIGNAL`` (the SQLSTATE is not passed on by
#: PyMySQL); a refusal's message starts with ``zkfence: refused``.
SIGNAL_ERRNO = 1644


def install_statements() -> List[str]:
    """The statements that create (or update) the fence table and its two procedures."""
    script = _zkfence.install_text("mysql")
    body = script.split("DELIMITER //\n", 1)[1].rsplit("DELIMITER ;", 1)[0]
    return [s.strip() for s in body.split("\n//\n") if s.strip()]


def install(conn: Any) -> None:
    """Installs the fence in the connection's database (idempotent)."""
    with conn.cursor() as cur:
        for statement in install_statements():
            cur.execute(statement)
    conn.commit()


def _drain(cur: Any) -> None:
    """Reads every result of the last call, so that an error in any is raised."""
    while cur.nextset():
        pass


@contextlib.contextmanager
def transaction(conn: Any, held: Any) -> Iterator[Any]:
    """A fenced transaction on a PyMySQL connection (autocommit off, as PyMySQL's default):
    yields a cursor; seals and commits when the block ends, after a last check of the
    guard's hold; rolls back on any exception.

    Raises :class:`zkfence.Refused` when a newer holder has claimed the scope,
    :class:`zkfence.LockLost` when the hold ended before the commit, and PyMySQL's error
    (1644, ``zkfence: this transaction holds no claim``) when the seal finds the transaction
    rolled back under the work.
    """
    scope, token, check = ticket_and_check(held)
    if conn.get_autocommit():
        raise ValueError(
            "zkfence.mysql.transaction needs autocommit off (PyMySQL's default: connect "
            "without autocommit=True, or call conn.autocommit(False))"
        )
    cur = conn.cursor()
    try:
        conn.begin()
        cur.execute("CALL zkfence_claim(%s, %s)", (scope, str(token)))
        _drain(cur)
        yield cur
        check()
        cur.execute("CALL zkfence_seal(%s)", (scope,))
        _drain(cur)
        conn.commit()
    except BaseException as err:
        _reset(conn)
        refused = _refusal(err, scope, token)
        if refused is None:
            raise
        raise refused from err
    finally:
        cur.close()


def _reset(conn: Any) -> None:
    """Ends what the transaction left open and lifts a failed claim's or seal's doom."""
    try:
        with conn.cursor() as cur:
            cur.execute("ROLLBACK")
            cur.execute("SET SESSION TRANSACTION READ WRITE")
    except Exception:
        pass  # a broken connection rolls back on its own


def _refusal(err: BaseException, scope: str, token: int) -> Optional[Refused]:
    """``err`` as :class:`Refused` when it is the fence's refusal; else ``None``."""
    args: Tuple[Any, ...] = tuple(getattr(err, "args", ()))
    if len(args) < 2 or args[0] != SIGNAL_ERRNO or not str(args[1]).startswith("zkfence: refused"):
        return None
    match = re.search(r"the fence holds (\d+)", str(args[1]))
    return Refused(str(args[1]), scope, token, int(match.group(1)) if match else None)
