"""The luxi frame, and the command line's codec for it.

A message is one JSON document ended by byte 0x03 (:data:`EOM`). The master daemon
and the asyncio client decode messages with msgspec into typed Structs
(:mod:`corral.luxi.protocol`). A gnt-* command sends one to a few small messages in
its whole life, and importing msgspec costs it about 10 ms, more than decoding any
answer it gets; so the blocking client (:mod:`corral.luxi.client`) reads and writes
the same documents with the standard library's ``json`` instead: UTF-8 text, the
same keys and values (only the order of keys inside arguments may differ, which JSON
leaves free).
"""

from __future__ import annotations

import json
from typing import Any

from corral import LUXI_VERSION
from corral.errors import ProtocolError, from_wire

__all__ = ["EOM", "MAX_MESSAGE_BYTES", "decode_answer", "encode_call"]

#: End-of-message marker (Ganeti's luxi uses the same byte).
EOM = b"\x03"

#: Messages larger than this are refused instead of buffered without bound.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


def _plain(value: Any) -> Any:
    """What ``json`` cannot encode itself (a msgspec Struct given as an argument)."""
    from corral import serializer  # loads msgspec, only for such an argument

    plain = serializer.to_builtins(value)
    if plain is value:
        raise TypeError(f"cannot send a {type(value).__name__} over luxi")
    return plain


def encode_call(method: str, args: list[Any]) -> bytes:
    """Frame a request for ``method`` with positional ``args``."""
    body = {"method": method, "args": args, "version": LUXI_VERSION}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"),
                      default=_plain).encode() + EOM


def decode_answer(frame: bytes) -> Any:
    """Return the result of an answer frame (without the EOM byte), or raise the
    error it carries."""
    try:
        answer = json.loads(frame)
    except ValueError as err:  # also a frame that is not UTF-8
        raise ProtocolError(f"malformed luxi answer: {err}") from None
    if not isinstance(answer, dict) or not isinstance(answer.get("success"), bool):
        raise ProtocolError("malformed luxi answer: expected an object with a boolean "
                            "'success'")
    if not answer["success"]:
        raise from_wire(answer.get("result"))
    return answer.get("result")
