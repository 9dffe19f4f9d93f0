"""The Redis fence from redis-py: the compare of the token with the fence key and the
commands, in one script call (``EVALSHA``), all or nothing. A stale holder's write raises
:class:`zkfence.Refused` and none of its commands run.

>>> zkfence.redis.write(client, guard, [("SET", Key("{/locks/orders}:total"), "42")])
"""

from __future__ import annotations

import re
from typing import Any, Iterable, List, Optional, Sequence, Union

from . import _zkfence
from ._errors import Refused
from ._held import ticket_and_check

#: The fence keys' prefix: the fence of scope ``S`` is the key ``zkfence:fence:{S}``.
PREFIX = "zkfence:fence:"

_CLAIM, _WRITE = _zkfence.redis_scripts()


class Key(str):
    """A command argument that is a key (``Key("{/locks/orders}:total")``): passed as the
    script's ``KEYS``, as Redis Cluster routes them. Tag a key with its lock path in braces
    so that it shares the fence key's slot."""


def fence_key(scope: str) -> str:
    """The fence key of ``scope``."""
    return f"{PREFIX}{{{scope}}}"


def install(client: Any) -> None:
    """Loads (or replaces) the function library ``zkfence`` (``FCALL zkfence_claim`` and
    ``zkfence_write`` for other clients); this module's own calls need none of it."""
    client.function_load(_zkfence.install_text("redis"), replace=True)


def _raw(arg: Union[str, bytes, int, float]) -> bytes:
    if isinstance(arg, bytes):
        return arg
    if isinstance(arg, (str, int, float)) and not isinstance(arg, bool):
        return str(arg).encode()
    raise ValueError(f"a command argument must be str, bytes, int or float, not {type(arg).__name__}")


def _encode(commands: List[Sequence[Any]], keys: List[str]) -> List[Any]:
    """The write script's arguments after the token, the keys appended to ``keys``: for one
    command its shape (``k`` or ``v`` for each argument) and its arguments untagged, a key as
    its index in ``KEYS`` (what costs the server least); for several, their number, then each
    one's length and its arguments tagged (``v<value>``, ``k<n>``)."""
    if any(not command for command in commands):
        raise ValueError("an empty command")
    if len(commands) == 1:
        shape: List[str] = []
        untagged: List[Any] = []
        for arg in commands[0]:
            if isinstance(arg, Key):
                keys.append(str(arg))
                shape.append("k")
                untagged.append(str(len(keys)))
            else:
                shape.append("v")
                untagged.append(_raw(arg))
        return ["".join(shape)] + untagged
    tagged: List[Any] = [str(len(commands))]
    for command in commands:
        tagged.append(str(len(command)))
        for arg in command:
            if isinstance(arg, Key):
                keys.append(str(arg))
                tagged.append(f"k{len(keys)}")
            else:
                tagged.append(b"v" + _raw(arg))
    return tagged


def _call(client: Any, script: str, keys: List[str], args: List[Any], scope: str, token: int) -> Any:
    try:
        return client.register_script(script)(keys=keys, args=args)
    except Exception as err:  # redis.exceptions.ResponseError
        text = str(err)
        if text.startswith("ZF001"):
            match = re.search(r"the fence holds (\d+)", text)
            raise Refused(text, scope, token, int(match.group(1)) if match else None) from err
        raise


def claim(client: Any, held: Any) -> Optional[int]:
    """Raises the scope's fence to the guard's token; the token it held before (``None``
    on the first claim)."""
    scope, token, check = ticket_and_check(held)
    check()
    reply = _call(client, _CLAIM, [fence_key(scope)], [str(token)], scope, token)
    return int(reply[1]) if reply[1] else None


def write(client: Any, held: Any, commands: Iterable[Sequence[Any]]) -> List[Any]:
    """Runs ``commands`` (each a sequence: the command's name, then its arguments, keys
    marked with :class:`Key`) if the guard's token is not older than the fence's, and raises
    the fence to it; their replies, in order."""
    scope, token, check = ticket_and_check(held)
    keys = [fence_key(scope)]
    args: List[Any] = [str(token)] + _encode(list(commands), keys)
    check()
    reply = _call(client, _WRITE, keys, args, scope, token)
    return list(reply[2])
