"""JSON encoding and decoding for everything corral stores or sends (msgspec).

One encoder and one decoder are shared, so configuration rows, luxi messages and
command output all format the same way. Structs encode by field name.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from corral.errors import ParameterError

__all__ = ["DecodeError", "dumps", "dumps_pretty", "loads", "loads_as", "to_builtins"]

T = TypeVar("T")

DecodeError = msgspec.DecodeError

_encoder = msgspec.json.Encoder(order="deterministic")
_decoder = msgspec.json.Decoder()


def dumps(obj: Any) -> bytes:
    """Encode ``obj`` (builtins or msgspec Structs) as compact JSON bytes."""
    return _encoder.encode(obj)


def dumps_pretty(obj: Any) -> str:
    """Encode ``obj`` as indented JSON text, for people (``--json`` output)."""
    return msgspec.json.format(_encoder.encode(obj), indent=2).decode()


def loads(data: bytes | str) -> Any:
    """Decode JSON into builtins; raises :class:`DecodeError` on malformed input."""
    return _decoder.decode(data)


def loads_as(data: bytes | str, type_: type[T]) -> T:
    """Decode JSON into ``type_``, validating it; errors name the bad field."""
    try:
        return msgspec.json.decode(data, type=type_)
    except msgspec.ValidationError as err:
        raise ParameterError(f"invalid {type_.__name__}: {err}") from err


def to_builtins(obj: Any) -> Any:
    """Turn Structs (and nested ones) into dicts and lists."""
    return msgspec.to_builtins(obj)
