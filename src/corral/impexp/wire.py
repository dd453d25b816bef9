"""The byte protocol between an exporter and an importer, over one TLS connection.

1. The exporter opens with one line, ``CORRAL-IMPEXP/1 <magic> <compression>\\n``. The
   magic is a random string the master made for this one transfer and gave to both
   ends; the importer compares it (in constant time) with its own, and the compression
   with the one it decompresses, and answers ``OK\\n`` or ``ERR <why>\\n`` and closes.
   A stream thus never lands in the wrong importer, even when a port is reused.
2. The exporter sends the (compressed) data as frames: a 4-byte big-endian length and
   that many bytes. A zero length ends the data and is followed by the 8-byte count
   of data bytes sent, so a stream cut short is never taken for a complete one.
3. The importer answers ``DONE <bytes written>\\n`` once its destination has taken
   everything (the import script exited 0, the file is synced), or ``ERR <why>\\n``.

Why frames rather than the bare stream: TLS close-notify alone is not reliably sent by
every peer that dies, and a count at the end turns "the connection ended" into "all of
it arrived" only when it is true.
"""

from __future__ import annotations

import asyncio
import hmac
import re
import secrets
import struct

from corral.errors import ProtocolError

__all__ = [
    "FRAME_MAX",
    "PROTOCOL",
    "TransferRefused",
    "check_magic",
    "encode_frame",
    "encode_hello",
    "encode_trailer",
    "new_magic",
    "parse_hello",
    "read_frame",
    "read_reply",
]

#: The protocol name and version that opens every stream.
PROTOCOL = "CORRAL-IMPEXP/1"

#: The largest frame either side accepts (bytes of data in one frame).
FRAME_MAX = 4 << 20

_MAGIC = re.compile(r"[A-Za-z0-9_-]{16,128}")
_LINE_MAX = 512
_LENGTH = struct.Struct(">I")
_COUNT = struct.Struct(">Q")


class TransferRefused(ProtocolError):
    """The other end refused the transfer (wrong magic, compression, or its
    destination failed); the message is its reason."""


def new_magic() -> str:
    """A fresh random magic for one transfer (32 URL-safe characters)."""
    return secrets.token_urlsafe(24)


def check_magic(magic: str) -> str:
    """``magic`` if it is well-formed (16-128 of ``A-Z a-z 0-9 _ -``), else a
    :class:`~corral.errors.ProtocolError` saying what is accepted."""
    if not _MAGIC.fullmatch(magic):
        raise ProtocolError("a transfer magic must be 16 to 128 characters of A-Z, a-z, "
                            "0-9, '_' and '-'")
    return magic


def encode_hello(magic: str, compression: str) -> bytes:
    """The exporter's opening line."""
    return f"{PROTOCOL} {check_magic(magic)} {compression}\n".encode("ascii")


def parse_hello(line: bytes, magic: str, compression: str) -> None:
    """Check the exporter's opening line against what this importer expects; a
    :class:`TransferRefused` saying which check failed otherwise."""
    try:
        words = line.decode("ascii").rstrip("\n").split(" ")
    except UnicodeDecodeError:
        raise TransferRefused("the stream did not start with a transfer handshake") from None
    if len(words) != 3 or words[0] != PROTOCOL:
        raise TransferRefused(f"the stream did not start with a {PROTOCOL} handshake")
    if not hmac.compare_digest(words[1].encode(), magic.encode()):
        raise TransferRefused("wrong transfer magic: this importer waits for another "
                              "transfer")
    if words[2] != compression:
        raise TransferRefused(f"the exporter compresses with {words[2]!r} but this "
                              f"importer expects {compression!r}")


def encode_frame(data: bytes | memoryview) -> bytes:
    """The header of a data frame for ``data`` (non-empty); send ``data`` after it."""
    if not data or len(data) > FRAME_MAX:
        raise ValueError(f"a frame holds 1 to {FRAME_MAX} bytes, not {len(data)}")
    return _LENGTH.pack(len(data))


def encode_trailer(sent: int) -> bytes:
    """The end of the data: a zero-length frame and the count of data bytes sent."""
    return _LENGTH.pack(0) + _COUNT.pack(sent)


async def read_frame(reader: asyncio.StreamReader) -> bytes | int:
    """The next frame's data, or (at the end) the count of data bytes the exporter
    says it sent. A stream that ends before the end frame is a
    :class:`~corral.errors.ProtocolError`."""
    try:
        header = await reader.readexactly(_LENGTH.size)
        (length,) = _LENGTH.unpack(header)
        if length == 0:
            (sent,) = _COUNT.unpack(await reader.readexactly(_COUNT.size))
            return int(sent)
        if length > FRAME_MAX:
            raise ProtocolError(f"frame of {length} bytes; at most {FRAME_MAX} are accepted")
        return await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise ProtocolError("the stream ended before the exporter said it was done "
                            "(connection cut)") from None


async def read_reply(reader: asyncio.StreamReader, what: str) -> str:
    """One reply line (``OK``, ``DONE n``); ``ERR why`` becomes :class:`TransferRefused`,
    an empty or overlong answer a :class:`~corral.errors.ProtocolError`."""
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as err:
        raise ProtocolError(f"the importer closed the connection {what}"
                            + (f" after {err.partial!r}" if err.partial else "")) from None
    except asyncio.LimitOverrunError:
        raise ProtocolError(f"the importer's answer {what} is too long") from None
    text = line[:_LINE_MAX].decode("utf-8", "replace").rstrip("\n")
    if text.startswith("ERR "):
        raise TransferRefused(text[4:])
    return text
