"""Run on an event loop's thread by the native module: sets an asyncio future's outcome
unless the future was cancelled meanwhile."""

from __future__ import annotations

import asyncio
from typing import Any


def resolve(future: "asyncio.Future[Any]", ok: bool, value: Any) -> None:
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)
