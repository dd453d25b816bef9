"""Replication updates in bounded parts.

A node daemon refuses a request body larger than :func:`max_body` (64 MiB unless
``$CORRAL_RPC_MAX_BODY`` says otherwise), while a snapshot of a job queue grows with
its archive without limit. :func:`split_update` therefore cuts the arguments of a
``config_replicate`` or ``jobs_replicate`` call into parts whose rows add up to at
most :func:`part_bytes` each (a quarter of the body limit, at most 4 MiB), counted
as they will be encoded (rows are JSON strings inside JSON: quotes are escaped).

An update that fits is sent as one call, exactly as before. A larger one becomes a
*session*: every part carries the update's own fields (``serial``, ``base``,
``snapshot``) plus ``session`` (an id the sender picks), ``part`` (0, 1, ...) and
``last``. The node stages the parts and applies them all in one transaction when
the last one arrives; until then its replica is untouched, and a part that does not
follow the one before (a new session, a lost part, a node daemon that restarted)
discards what was staged, so the sender starts again from part 0.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Mapping, Sequence
from typing import Any

from corral.rpc.protocol import RpcResult

__all__ = [
    "DEFAULT_MAX_BODY",
    "MAX_BODY_ENV",
    "ROW_KEYS",
    "call_in_parts",
    "max_body",
    "part_bytes",
    "send_parts",
    "session_calls",
    "split_rows",
        "split_update",
]

#: Environment variable: the largest request body, in bytes, a node daemon accepts.
MAX_BODY_ENV = "CORRAL_RPC_MAX_BODY"
#: The body limit without that variable.
DEFAULT_MAX_BODY = 64 << 20
#: The largest part, whatever the body limit.
_MAX_PART = 4 << 20
#: The arguments that hold rows; everything else is the update's own fields.
ROW_KEYS = ("upserts", "deletes", "jobs", "archive", "meta")
#: What a row costs beyond its strings (brackets, commas, numbers).
_ROW_OVERHEAD = 32


def max_body() -> int:
    """The request body limit of node daemons started with this environment."""
    text = os.environ.get(MAX_BODY_ENV, "")
    try:
        value = int(text)
    except ValueError:
        return DEFAULT_MAX_BODY
    return value if value > 0 else DEFAULT_MAX_BODY


def part_bytes() -> int:
    """How many bytes of rows one part of an update carries at most."""
    return max(1, min(_MAX_PART, max_body() // 4))


def _size(value: Any) -> int:
    """About how many bytes ``value`` takes in a JSON request body: a string of JSON
    has its quotes and backslashes escaped, and non-ASCII text may become ``\\uXXXX``
    (twelve bytes for a character outside the basic plane)."""
    if isinstance(value, str):
        if not value.isascii():
            return 12 * len(value)
        return len(value) + value.count('"') + value.count("\\") + 2
    if isinstance(value, bytes):
        return 4 * len(value)
    if isinstance(value, list | tuple):
        return _ROW_OVERHEAD + sum(_size(item) for item in value)
    return 16


def split_rows(args: Mapping[str, Any], limit: int) -> list[dict[str, Any]]:
    """``args`` cut into pieces whose rows take at most ``limit`` bytes each (a row
    larger than that is a piece alone), each with the update's own fields."""
    header = {key: value for key, value in args.items() if key not in ROW_KEYS}
    pieces: list[dict[str, list[Any]]] = []
    current: dict[str, list[Any]] = {}
    size = 0
    for key in ROW_KEYS:
        for row in args.get(key) or ():
            cost = _size(row)
            if current and size + cost > limit:
                pieces.append(current)
                current, size = {}, 0
            current.setdefault(key, []).append(row)
            size += cost
    pieces.append(current)
    return [{**header, **piece} for piece in pieces]


def _numbered(session: str, piece: dict[str, Any], index: int, last: bool) -> dict[str, Any]:
    return {**piece, "session": session, "part": index, "last": last}


def split_update(args: Mapping[str, Any], limit: int) -> list[dict[str, Any]]:
    """The calls that carry ``args``: ``[args]`` when its rows fit in ``limit`` bytes,
    else the parts of one session (see the module doc)."""
    pieces = split_rows(args, limit)
    if len(pieces) == 1:
        return [dict(args)]
    session = secrets.token_hex(8)
    return [_numbered(session, piece, index, index == len(pieces) - 1)
            for index, piece in enumerate(pieces)]


async def session_calls(pieces: AsyncIterable[dict[str, Any]]
                        ) -> AsyncGenerator[dict[str, Any], None]:
    """The calls of an update produced piece by piece (see :func:`split_rows`): one
    call when there is one piece, else the parts of one session, ``last`` on the last
    (each piece is held back until the next one shows it was not the last)."""
    session = secrets.token_hex(8)
    index = 0
    held: dict[str, Any] | None = None
    async for piece in pieces:
        if held is not None:
            yield _numbered(session, held, index, False)
            index += 1
        held = piece
    if held is None:
        raise ValueError("an update needs at least one piece")
    yield held if index == 0 else _numbered(session, held, index, True)


async def send_parts(call: Callable[[dict[str, Any]], Awaitable[RpcResult]],
                     parts: Sequence[dict[str, Any]]) -> RpcResult:
    """Make the calls :func:`split_update` made, on one node, in order; the answer to
    the last one, or the first error (the node then drops the parts it staged)."""
    result: RpcResult | None = None
    for part in parts:
        result = await call(part)
        if result.error is not None:
            break
    if result is None:
        raise ValueError("no call to make")
    return result


async def call_in_parts(call: Callable[[dict[str, Any]], Awaitable[RpcResult]],
                        args: Mapping[str, Any], limit: int | None = None) -> RpcResult:
    """Send ``args`` to one node with ``call`` in as many calls as :func:`split_update`
    makes (``limit``: :func:`part_bytes` by default); see :func:`send_parts`."""
    return await send_parts(call, split_update(args, part_bytes() if limit is None else limit))
