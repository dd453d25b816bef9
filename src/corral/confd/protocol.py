"""The confd wire protocol: signed JSON in UDP datagrams (seed 002, "Ganeti Confd").

A datagram is the four bytes ``plj0`` followed by a JSON envelope
``{"msg": TEXT, "salt": TEXT, "hmac": HEX}``. ``msg`` is itself JSON text: a request
``{"protocol", "type", "query", "rsalt"}`` or an answer ``{"protocol", "status",
"answer", "serial"}``. ``hmac`` is the lower-case hex HMAC-SHA1 of ``salt + msg``
keyed with the cluster's confd key (the key file's bytes as they are, as Ganeti
uses them). A request's salt is the client's clock in whole seconds; the answer's
salt is the request's ``rsalt``, which is how a client recognises its answers.

Every number below is Ganeti's (``CONFD_*`` in Ganeti 3.0's constants), so Ganeti's
own confd client and corral's interoperate. Numbers of 100 and up are corral's
additions; Ganeti's client refuses to send them, corral's sends them.

This module is pure: no sockets, no clock except where a caller passes ``now``.
"""

from __future__ import annotations

import enum
import hmac
from typing import Any

import msgspec

__all__ = [
    "DEFAULT_PORT",
    "GANETI_QUERY_TYPES",
    "MAGIC",
    "MAX_ANSWER_SIZE",
    "MAX_CLOCK_SKEW",
    "MAX_REQUEST_SIZE",
    "PROTOCOL_VERSION",
    "ErrorCode",
    "ForgedPacketError",
    "MalformedPacketError",
    "MasterField",
    "NodeRole",
    "PacketError",
    "QueryKey",
    "QueryType",
    "Reply",
    "Request",
    "StalePacketError",
    "Status",
    "decode_reply",
    "decode_request",
    "encode_reply",
    "encode_request",
    "open_envelope",
    "seal",
    "sign",
    "timestamp_salt",
]

#: The fourcc that starts every packet ("plain json 0").
MAGIC = b"plj0"
#: ``protocol`` of requests and answers (Ganeti's CONFD_PROTOCOL_VERSION).
PROTOCOL_VERSION = 1
#: UDP port confd listens on (Ganeti's DEFAULT_CONFD_PORT).
DEFAULT_PORT = 1814
#: Largest accepted clock difference between a request's salt and the server, in
#: seconds (Ganeti's CONFD_MAX_CLOCK_SKEW: five minutes).
MAX_CLOCK_SKEW = 300
#: Largest request datagram confd reads; Ganeti's server reads 4096 bytes, so a
#: longer request would be cut (and refused) there too.
MAX_REQUEST_SIZE = 4096
#: Largest datagram confd sends (Ganeti's MAX_UDP_DATA_SIZE).
MAX_ANSWER_SIZE = 61440


class QueryType(enum.IntEnum):
    """Query types (Ganeti's CONFD_REQ_*; 100 and up are corral's additions)."""

    PING = 0
    NODE_ROLE_BYNAME = 1
    NODE_PIP_BY_INSTANCE_IP = 2
    CLUSTER_MASTER = 3
    NODE_PIP_LIST = 4
    MC_PIP_LIST = 5
    INSTANCES_IPS_LIST = 6
    NODE_DRBD = 7
    NODE_INSTANCES = 8
    INSTANCE_DISKS = 9
    CONFIG_QUERY = 10
    DATA_COLLECTORS = 11
    # corral's additions: what the seed lists and Ganeti never offered.
    INSTANCE_LIST = 100
    INSTANCE_PRIMARY_NODE = 101
    OFFLINE_NODES = 102


#: The types Ganeti's server knows (its client sends only these, minus 8).
GANETI_QUERY_TYPES = frozenset(t for t in QueryType if t < 100)


class Status(enum.IntEnum):
    """An answer's ``status`` (Ganeti's CONFD_REPL_STATUS_*)."""

    OK = 0
    ERROR = 1
    NOTIMPLEMENTED = 2


class ErrorCode(enum.IntEnum):
    """The ``answer`` of an error answer (Ganeti's CONFD_ERROR_*)."""

    UNKNOWN_ENTRY = 0
    INTERNAL = 1
    ARGUMENT = 2


class NodeRole(enum.IntEnum):
    """The answer to a node role query (Ganeti's CONFD_NODE_ROLE_*)."""

    MASTER = 0
    CANDIDATE = 1
    OFFLINE = 2
    DRAINED = 3
    REGULAR = 4


class QueryKey(enum.StrEnum):
    """Keys of a dictionary query (Ganeti's CONFD_REQQ_*; strings, as JSON keys are)."""

    LINK = "0"
    IP = "1"
    IPLIST = "2"
    FIELDS = "3"


class MasterField(enum.IntEnum):
    """Fields a cluster master query can ask for (Ganeti's CONFD_REQFIELD_*)."""

    NAME = 0
    IP = 1
    MNODE_PIP = 2


class PacketError(Exception):
    """A packet that is not a valid confd message; it gets no answer."""


class MalformedPacketError(PacketError):
    """Not a confd packet: no magic, not JSON, missing or mistyped fields."""


class ForgedPacketError(PacketError):
    """The HMAC does not match: not signed with the cluster's key."""


class StalePacketError(PacketError):
    """A request whose timestamp salt is too far from the server's clock (a replay)."""


class _Envelope(msgspec.Struct):
    msg: str
    salt: str
    hmac: str


class Request(msgspec.Struct, frozen=True):
    """A query: ``type`` is a :class:`QueryType` number, ``query`` a string, a
    dictionary (keys :class:`QueryKey`) or None; answers are salted with ``rsalt``."""

    protocol: int
    type: int
    rsalt: str
    query: Any = None


class Reply(msgspec.Struct, frozen=True):
    """An answer: ``status`` (:class:`Status`), ``answer`` and the configuration
    ``serial`` it was computed from."""

    protocol: int
    status: int
    answer: Any
    serial: int


_envelope_decoder = msgspec.json.Decoder(_Envelope)
_request_decoder = msgspec.json.Decoder(Request)
_reply_decoder = msgspec.json.Decoder(Reply)
_encode = msgspec.json.encode


def sign(key: bytes, salt: str, msg: str) -> str:
    """The lower-case hex HMAC-SHA1 of ``salt + msg`` under ``key``."""
    return hmac.digest(key, (salt + msg).encode(errors="surrogatepass"), "sha1").hex()


def seal(key: bytes, salt: str, msg: str) -> bytes:
    """A whole packet: magic, then the envelope carrying ``msg`` signed with ``salt``."""
    return MAGIC + _encode(_Envelope(msg, salt, sign(key, salt, msg)))


def open_envelope(packet: bytes, key: bytes) -> tuple[str, str]:
    """``(msg, salt)`` of a packet whose magic, envelope and HMAC are right.

    Raises :class:`MalformedPacketError` or :class:`ForgedPacketError`.
    """
    if packet[:4] != MAGIC:
        raise MalformedPacketError("no plj0 magic")
    try:
        envelope = _envelope_decoder.decode(packet[4:])
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as err:
        raise MalformedPacketError(f"bad envelope: {err}") from None
    given = envelope.hmac.lower()
    if not (given.isascii() and hmac.compare_digest(
            sign(key, envelope.salt, envelope.msg), given)):
        raise ForgedPacketError("HMAC mismatch")
    return envelope.msg, envelope.salt


def timestamp_salt(now: float) -> str:
    """A request's salt: the clock in whole seconds, as Ganeti's client writes it."""
    return str(int(now))


def _check_timestamp(salt: str, now: float) -> None:
    text = salt[1:] if salt[:1] == "-" else salt
    if not (0 < len(text) <= 20 and text.isascii() and text.isdigit()):
        raise MalformedPacketError("the salt is not a timestamp")
    if abs(int(salt) - now) > MAX_CLOCK_SKEW:
        raise StalePacketError(f"timestamp {salt} is more than {MAX_CLOCK_SKEW}s off")


def encode_request(key: bytes, request: Request, now: float) -> bytes:
    """A signed request packet with the timestamp ``now`` as its salt."""
    return seal(key, timestamp_salt(now), _encode(request).decode())


def decode_request(packet: bytes, key: bytes, now: float) -> Request:
    """Check and decode a request packet.

    Raises :class:`MalformedPacketError` (including an oversize packet or an empty
    ``rsalt``), :class:`ForgedPacketError` or :class:`StalePacketError`. The
    ``type`` is not checked here: a known number is the answers' business.
    """
    if len(packet) > MAX_REQUEST_SIZE:
        raise MalformedPacketError(f"longer than {MAX_REQUEST_SIZE} bytes")
    msg, salt = open_envelope(packet, key)
    _check_timestamp(salt, now)
    try:
        request = _request_decoder.decode(msg)
    except (msgspec.DecodeError, UnicodeEncodeError, RecursionError) as err:
        raise MalformedPacketError(f"bad request: {err}") from None
    if not request.rsalt:
        raise MalformedPacketError("the request has no rsalt")
    return request


def encode_reply(key: bytes, rsalt: str, reply: Reply) -> bytes:
    """A signed answer packet, salted with the request's ``rsalt``."""
    return seal(key, rsalt, _encode(reply).decode())


def decode_reply(packet: bytes, key: bytes, rsalt: str) -> Reply:
    """Check and decode an answer to the request whose salt was ``rsalt``.

    Raises :class:`MalformedPacketError` (also when it answers another request) or
    :class:`ForgedPacketError`.
    """
    msg, salt = open_envelope(packet, key)
    if salt != rsalt:
        raise MalformedPacketError("the answer is salted for another request")
    try:
        return _reply_decoder.decode(msg)
    except (msgspec.DecodeError, UnicodeEncodeError, RecursionError) as err:
        raise MalformedPacketError(f"bad answer: {err}") from None
