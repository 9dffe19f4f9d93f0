"""What the fences take: a guard (checked again before each commit) or a bare ticket."""

from __future__ import annotations

from typing import Any, Callable, Tuple


def ticket_and_check(held: Any) -> Tuple[str, int, Callable[[], None]]:
    """The scope, the token, and the check to run before committing, from a
    :class:`zkfence.Guard` or a ticket ``(scope, token, ...)`` (a ticket alone has no check:
    the store's fence is then all that stands)."""
    check = getattr(held, "check", None)
    if callable(check):
        ticket = held.ticket
        return ticket.scope, ticket.token, check
    try:
        scope, token = held[0], held[1]
    except (TypeError, IndexError, KeyError):
        scope, token = None, None
    if not isinstance(scope, str) or not isinstance(token, int) or isinstance(token, bool) or token < 0:
        raise ValueError("give a zkfence Guard, or a ticket (scope: str, token: int from 0)")
    return scope, token, lambda: None
