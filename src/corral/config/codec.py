"""Encoding configuration objects for their rows, and private copies of them.

Rows are the objects' JSON as :func:`corral.serializer.dumps` writes it. Decoding
validates every field against the object's class, so a value of the wrong type
set by a caller is refused at commit instead of being stored.
"""

from __future__ import annotations

import msgspec

from corral.errors import ConfigurationError
from corral.objects import KINDS, ConfigObject
from corral.serializer import dumps

__all__ = ["clone", "decode", "encode"]

_DECODERS: dict[str, msgspec.json.Decoder[ConfigObject]] = {
    kind: msgspec.json.Decoder(cls) for kind, cls in KINDS.items()
}


def encode(obj: ConfigObject) -> bytes:
    """The object's row JSON."""
    try:
        return dumps(obj)
    except (TypeError, msgspec.EncodeError) as err:
        raise ConfigurationError(
            f"{type(obj).__name__} {obj.uuid}: cannot be stored: {err}"
        ) from None


def decode(kind: str, data: bytes | str) -> ConfigObject:
    """Decode a row of ``kind``, validating it (raises msgspec errors)."""
    return _DECODERS[kind].decode(data)


def clone(kind: str, obj: ConfigObject) -> ConfigObject:
    """A deep, private copy of a stored (hence valid) object."""
    return _DECODERS[kind].decode(dumps(obj))
