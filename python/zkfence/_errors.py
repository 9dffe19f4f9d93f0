"""The package's exceptions: one hierarchy under :class:`ZkfenceError`."""

from __future__ import annotations

from typing import Optional


class ZkfenceError(Exception):
    """Every error zkfence raises (besides ``ValueError`` for a bad argument)."""


class LockLost(ZkfenceError):
    """The hold has ended: stop writing under it.

    ``reason`` says why, as the library names it: ``session_expired``, ``lease_expired``
    (no reply proved the session alive in time: a pause, a partition), ``disconnected``,
    ``node_deleted``, ``session_changed``, ``release_unconfirmed`` or ``released``.
    """

    def __init__(self, message: str, reason: str = "released") -> None:
        super().__init__(message)
        self.reason = reason


class Refused(ZkfenceError):
    """A store's fence refused a write: a newer holder has claimed the scope.

    ``seen`` is the token the fence holds (newer than ``token``, ours); nothing of the
    refused transaction or write was committed.
    """

    def __init__(self, message: str, scope: str, token: int, seen: Optional[int]) -> None:
        super().__init__(message)
        self.scope = scope
        self.token = token
        self.seen = seen


class Timeout(ZkfenceError, TimeoutError):
    """No hold within the ``timeout`` given to ``acquire``."""
