"""zkfence: ZooKeeper locks whose holder carries a fencing token and is stopped by a lease
watchdog when the hold may be gone.

>>> import zkfence
>>> zk = zkfence.connect("127.0.0.1:2181", session_timeout=10.0)
>>> lock = zkfence.FencedLock(zk, "/locks/orders")
>>> with lock.acquire(timeout=30) as guard:           # blocks, the GIL released
...     with zkfence.postgres.transaction(conn, guard):
...         conn.execute("UPDATE orders SET state = 'paid' WHERE id = 7")

The same with asyncio: ``async with lock.acquire() as guard:``. The guard's ``token`` only
grows from holder to holder; its ``lost`` flag is set by the watchdog the moment the hold
may be gone (the session expired or cut off, the lease lapsed, the node deleted), before any
other process can hold; ``guard.run(work)`` cancels asyncio work on loss; the fences
(``zkfence.postgres``, ``zkfence.mysql``, ``zkfence.redis``) make the store refuse a stale
holder's late write.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import (
    Any,
    Awaitable,
    Generator,
    Mapping,
    NamedTuple,
    Optional,
    Tuple,
    TypeVar,
    Union,
)

from . import _zkfence, mysql, postgres, redis
from ._errors import LockLost, Refused, Timeout, ZkfenceError

__all__ = [
    "Client",
    "FencedElection",
    "FencedLock",
    "FencedRwLock",
    "FencedSemaphore",
    "Guard",
    "LockLost",
    "Lost",
    "Refused",
    "Ticket",
    "Timeout",
    "ZkfenceError",
    "connect",
]

__version__: str = _zkfence.__version__

T = TypeVar("T")

Client = _zkfence.Client


def connect(
    hosts: str,
    session_timeout: float = 10.0,
    *,
    connect_timeout: float = 10.0,
    auth: Optional[Tuple[str, Union[str, bytes]]] = None,
    tls: Optional[Mapping[str, str]] = None,
) -> "_zkfence.Client":
    """Opens a ZooKeeper session.

    ``hosts``: ``host:port[,host:port...][/chroot]``. Times in seconds. ``auth``: a
    ``(scheme, credentials)`` pair, e.g. ``("digest", "user:password")``. ``tls``: PEM file
    paths ``{"ca": ..., "cert": ..., "key": ...}`` (``cert`` and ``key`` when the servers ask
    for a client certificate). Raises :class:`ZkfenceError` when no server answers within
    ``connect_timeout``.
    """
    credentials = None
    if auth is not None:
        scheme, secret = auth
        credentials = (scheme, secret.encode() if isinstance(secret, str) else bytes(secret))
    pems = None
    if tls is not None:
        unknown = set(tls) - {"ca", "cert", "key"}
        if "ca" not in tls or unknown:
            raise ValueError("tls takes PEM file paths: {'ca': ..., 'cert': ..., 'key': ...}")

        def read(name: str) -> Optional[str]:
            path = tls.get(name)
            if path is None:
                return None
            with open(path, encoding="ascii") as pem:
                return pem.read()

        pems = (read("ca"), read("cert"), read("key"))
    return _zkfence.connect(hosts, session_timeout, connect_timeout, credentials, pems)


class Ticket(NamedTuple):
    """What a fence takes: the scope (the lock path) and the token. ``str(ticket)`` is the
    text form ``zkfence run`` exports as ``ZKFENCE_TICKET``."""

    scope: str
    token: int
    text: str

    def __str__(self) -> str:
        return self.text


class Lost:
    """The hold's loss flag, set by the watchdog: like a ``threading.Event`` (``is_set``,
    ``wait``), and awaitable (``reason = await guard.lost``)."""

    def __init__(self, hold: "_zkfence.Hold") -> None:
        self._hold = hold

    def is_set(self) -> bool:
        """Whether the hold has ended (lost or released)."""
        return self._hold.is_lost()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Blocks until the hold ends or ``timeout`` seconds pass; whether it ended."""
        return self._hold.wait_lost(timeout)

    @property
    def reason(self) -> Optional[str]:
        """Why the hold ended (``session_expired``, ``lease_expired``, ...); ``None`` while held."""
        return self._hold.reason()

    def __bool__(self) -> bool:
        return self.is_set()

    def __await__(self) -> Generator[Any, None, str]:
        return self._hold.lost_async().__await__()

    def __repr__(self) -> str:
        return f"<zkfence.Lost {self.reason or 'not set'}>"


class Guard:
    """A hold of a lock (or a permit, or leadership). Release it by leaving its ``with``
    block, or with :meth:`release` / :meth:`arelease`."""

    def __init__(self, hold: "_zkfence.Hold") -> None:
        self._hold = hold
        self.lost = Lost(hold)

    @property
    def token(self) -> int:
        """The fencing token: greater than every earlier holder's."""
        return self._hold.token

    @property
    def ticket(self) -> Ticket:
        """The scope and token as the fences take them. A read lock or a semaphore's permit
        has none (its token is shared): ``ZkfenceError``."""
        ticket = self._hold.ticket
        if ticket is None:
            raise ZkfenceError(
                f"a {self._hold.kind} hold has no ticket: its token is shared with other "
                "holders, so no fence can tell them apart; fence writes under an exclusive lock"
            )
        return Ticket(*ticket)

    @property
    def scope(self) -> str:
        """The lock path."""
        return self._hold.scope

    @property
    def node(self) -> str:
        """The hold's node."""
        return self._hold.node

    @property
    def session_id(self) -> str:
        """The session holding it, as ZooKeeper's logs write it."""
        return self._hold.session_id

    @property
    def lease_remaining(self) -> float:
        """Seconds until the lease lapses unless the session proves itself alive meanwhile."""
        return self._hold.lease_remaining

    def check(self) -> None:
        """Raises :class:`LockLost` (with its ``reason``) if the hold has ended."""
        self._hold.check()

    def release(self) -> None:
        """Releases the hold (blocking). Raises :class:`LockLost` if the hold was lost before
        it (its work may have overlapped another holder's). A second release does nothing."""
        self._hold.release()

    async def arelease(self) -> None:
        """Releases the hold from asyncio."""
        await self._hold.release_async()

    def run(self, work: Any, *args: Any, **kwargs: Any) -> Any:
        """Runs ``work`` under the hold.

        A coroutine (or coroutine function) runs as an asyncio task that is cancelled the
        moment the hold is lost; ``await guard.run(coro)`` then raises :class:`LockLost`. A
        plain function runs in this thread (Python cannot stop a thread from outside): the
        hold is checked before and after it, and the function itself should call
        ``guard.check()`` between side effects (or pass ``guard.lost`` along).
        """
        if inspect.iscoroutinefunction(work):
            work = work(*args, **kwargs)
        if inspect.isawaitable(work):
            return self._run_async(work)
        self.check()
        result = work(*args, **kwargs)
        self.check()
        return result

    async def _run_async(self, work: Awaitable[T]) -> T:
        self.check()
        task = asyncio.ensure_future(work)
        lost = asyncio.ensure_future(self.lost)
        try:
            await asyncio.wait({task, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not lost.done():
                lost.cancel()
        if not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            self.check()
        return task.result()

    def __repr__(self) -> str:
        return repr(self._hold)


class Acquisition:
    """An acquire, not started yet: ``with`` it (blocking), ``async with`` it (asyncio), or
    ``await`` it for a guard to release yourself; :meth:`wait` blocks for one."""

    def __init__(self, lock: "_zkfence.Lock", timeout: Optional[float], try_only: bool) -> None:
        self._lock = lock
        self._timeout = timeout
        self._try = try_only
        self._guard: Optional[Guard] = None

    def wait(self) -> Optional[Guard]:
        """Acquires, blocking with the GIL released (Ctrl-C stops the wait). A guard; ``None``
        from ``try_acquire`` when another holds it; :class:`Timeout` after ``timeout``."""
        hold = self._lock.acquire(self._timeout, self._try)
        return None if hold is None else Guard(hold)

    async def _wait_async(self) -> Optional[Guard]:
        hold = await self._lock.acquire_async(self._timeout, self._try)
        return None if hold is None else Guard(hold)

    def __await__(self) -> Generator[Any, None, Optional[Guard]]:
        return self._wait_async().__await__()

    def __enter__(self) -> Any:
        self._guard = self.wait()
        return self._guard

    def __exit__(self, kind: Any, *exc: Any) -> None:
        if self._guard is None:
            return
        if kind is None:
            # The block ended normally: a hold lost meanwhile is reported (LockLost).
            self._guard.release()
            return
        # The block raised: that error is the one to see, not the release's.
        try:
            self._guard.release()
        except ZkfenceError:
            pass

    async def __aenter__(self) -> Any:
        self._guard = await self._wait_async()
        return self._guard

    async def __aexit__(self, kind: Any, *exc: Any) -> None:
        if self._guard is None:
            return
        if kind is None:
            await self._guard.arelease()
            return
        try:
            await self._guard.arelease()
        except ZkfenceError:
            pass


class _Acquirable:
    _lock: "_zkfence.Lock"

    @property
    def path(self) -> str:
        """The lock path."""
        return self._lock.path

    def acquire(self, timeout: Optional[float] = None) -> Acquisition:
        """Waits in the queue for the hold (at most ``timeout`` seconds, then
        :class:`Timeout`): use with ``with``, ``async with`` or ``await``."""
        return Acquisition(self._lock, timeout, False)

    def try_acquire(self) -> Acquisition:
        """Takes the hold only if it is free now: the guard is ``None`` otherwise."""
        return Acquisition(self._lock, None, True)

    def __repr__(self) -> str:
        return repr(self._lock)


class FencedLock(_Acquirable):
    """A fair (FIFO) lock at ``path``: its nodes are Curator-compatible, so Curator's
    ``InterProcessMutex`` and the Rust library's ``FencedLock`` queue with it."""

    def __init__(self, zk: "_zkfence.Client", path: str) -> None:
        self._lock = _zkfence.Lock.mutex(zk, path)


class _Side(_Acquirable):
    def __init__(self, lock: "_zkfence.Lock") -> None:
        self._lock = lock


class FencedRwLock:
    """A read/write lock at ``path``: ``rw.read.acquire()`` shares the hold with other
    readers (and has no ticket); ``rw.write.acquire()`` holds alone, with a ticket."""

    def __init__(self, zk: "_zkfence.Client", path: str) -> None:
        reader, writer = _zkfence.Lock.rwlock(zk, path)
        self.read = _Side(reader)
        self.write = _Side(writer)


class FencedSemaphore(_Acquirable):
    """Up to ``permits`` holders at ``path`` at once (a permit has no ticket)."""

    def __init__(self, zk: "_zkfence.Client", path: str, permits: int) -> None:
        self._lock = _zkfence.Lock.semaphore(zk, path, permits)


class FencedElection(_Acquirable):
    """An election at ``path``: ``acquire()`` (or ``campaign()``) waits to lead; the guard's
    token is the leader's epoch, greater than every earlier leader's, and ``data`` is what
    observers read as the leader's value."""

    def __init__(self, zk: "_zkfence.Client", path: str, data: bytes = b"") -> None:
        self._lock = _zkfence.Lock.election(zk, path, bytes(data))

    def campaign(self, timeout: Optional[float] = None) -> Acquisition:
        """The same as :meth:`acquire`."""
        return self.acquire(timeout)

