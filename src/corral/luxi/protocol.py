"""The luxi wire format: one JSON message per request or answer, ended by byte 0x03.

A request is ``{"method": str, "args": list, "version": int}``; an answer is
``{"success": bool, "result": ..., "version": int}``. On failure ``result`` is the
error as :func:`corral.errors.to_wire` encodes it, so the client raises the same
error class the master raised.
"""

from __future__ import annotations

from typing import Any

import msgspec

from corral import LUXI_VERSION, serializer
from corral.errors import CorralError, ProtocolError, from_wire, to_wire
from corral.luxi.framing import EOM, MAX_MESSAGE_BYTES

__all__ = [
    "EOM",
    "HANDOVER_METHOD",
    "MAX_MESSAGE_BYTES",
    "Request",
    "decode_request",
    "decode_response",
    "encode_error",
    "encode_request",
    "encode_result",
]

#: corral's own method (Ganeti has none): the old master's node daemon asks its master
#: daemon to hand the job queue over in a planned master failover.
HANDOVER_METHOD = "PrepareMasterHandover"


class Request(msgspec.Struct):
    """A decoded luxi request."""

    method: str
    args: list[Any] = msgspec.field(default_factory=list)
    version: int | None = None


class _Response(msgspec.Struct):
    success: bool
    result: Any = None
    version: int | None = None


_request_decoder = msgspec.json.Decoder(Request)
_response_decoder = msgspec.json.Decoder(_Response)


def encode_request(method: str, args: list[Any]) -> bytes:
    """Frame a request for ``method`` with positional ``args``."""
    return serializer.dumps(Request(method, args, LUXI_VERSION)) + EOM


def decode_request(frame: bytes) -> Request:
    """Parse one request frame (without the EOM byte)."""
    try:
        request = _request_decoder.decode(frame)
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        raise ProtocolError(f"malformed luxi request: {err}") from None
    if request.version is not None and request.version != LUXI_VERSION:
        raise ProtocolError(
            f"luxi version mismatch: client speaks {request.version}, "
            f"master daemon speaks {LUXI_VERSION}"
        )
    return request


def encode_result(result: Any) -> bytes:
    """Frame a successful answer."""
    return serializer.dumps(_Response(True, result, LUXI_VERSION)) + EOM


def encode_error(err: CorralError) -> bytes:
    """Frame a failed answer carrying ``err``."""
    return serializer.dumps(_Response(False, to_wire(err), LUXI_VERSION)) + EOM


def decode_response(frame: bytes) -> Any:
    """Return the result of an answer frame, or raise the error it carries."""
    try:
        response = _response_decoder.decode(frame)
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        raise ProtocolError(f"malformed luxi answer: {err}") from None
    if not response.success:
        raise from_wire(response.result)
    return response.result
