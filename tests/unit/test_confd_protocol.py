"""The confd wire protocol: Ganeti's numbers, HMAC-SHA1 signing, round trips, and
every kind of bad packet refused with the right error."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.confd import protocol as P
from corral.confd.protocol import (
    ForgedPacketError,
    MalformedPacketError,
    PacketError,
    Reply,
    Request,
    StalePacketError,
    decode_reply,
    decode_request,
    encode_reply,
    encode_request,
)

KEY = b"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
NOW = 1_700_000_000.0
GANETI_CONSTANTS = Path("/usr/share/ganeti/3.0/ganeti/_constants.py")


def _ganeti_constants() -> dict[str, Any]:
    values: dict[str, Any] = {}
    for line in GANETI_CONSTANTS.read_text().splitlines():
        match = re.match(r"^(CONFD_[A-Z_]+|DEFAULT_CONFD_PORT|MAX_UDP_DATA_SIZE) = (.+)$", line)
        if match and not match.group(2).startswith(("frozenset", "b'")):
            values[match.group(1)] = json.loads(match.group(2))
    return values


def test_numbers_are_ganetis() -> None:
    assert P.MAGIC == b"plj0" and P.PROTOCOL_VERSION == 1 and P.DEFAULT_PORT == 1814
    assert P.MAX_CLOCK_SKEW == 300 and P.MAX_ANSWER_SIZE == 61440
    assert [(t.name, t.value) for t in P.QueryType if t < 100] == [
        ("PING", 0), ("NODE_ROLE_BYNAME", 1), ("NODE_PIP_BY_INSTANCE_IP", 2),
        ("CLUSTER_MASTER", 3), ("NODE_PIP_LIST", 4), ("MC_PIP_LIST", 5),
        ("INSTANCES_IPS_LIST", 6), ("NODE_DRBD", 7), ("NODE_INSTANCES", 8),
        ("INSTANCE_DISKS", 9), ("CONFIG_QUERY", 10), ("DATA_COLLECTORS", 11)]
    assert [r.value for r in (P.NodeRole.MASTER, P.NodeRole.CANDIDATE, P.NodeRole.OFFLINE,
                              P.NodeRole.DRAINED, P.NodeRole.REGULAR)] == [0, 1, 2, 3, 4]
    assert [s.value for s in P.Status] == [0, 1, 2]
    assert [e.value for e in P.ErrorCode] == [0, 1, 2]
    assert [k.value for k in P.QueryKey] == ["0", "1", "2", "3"]


@pytest.mark.skipif(not GANETI_CONSTANTS.exists(), reason="Ganeti 3.0 is not installed")
def test_numbers_match_the_installed_ganeti() -> None:
    ganeti = _ganeti_constants()
    for qtype in P.GANETI_QUERY_TYPES:
        assert ganeti[f"CONFD_REQ_{qtype.name}"] == qtype.value
    for status in P.Status:
        assert ganeti[f"CONFD_REPL_STATUS_{status.name}"] == status.value
    for role in P.NodeRole:
        assert ganeti[f"CONFD_NODE_ROLE_{role.name}"] == role.value
    for code in P.ErrorCode:
        assert ganeti[f"CONFD_ERROR_{code.name}"] == code.value
    for key in P.QueryKey:
        assert ganeti[f"CONFD_REQQ_{key.name}"] == key.value
    for field in P.MasterField:
        assert ganeti[f"CONFD_REQFIELD_{field.name}"] == field.value
    assert ganeti["CONFD_MAX_CLOCK_SKEW"] == P.MAX_CLOCK_SKEW
    assert ganeti["CONFD_PROTOCOL_VERSION"] == P.PROTOCOL_VERSION
    assert ganeti["CONFD_MAGIC_FOURCC"] == P.MAGIC.decode()
    assert ganeti["DEFAULT_CONFD_PORT"] == P.DEFAULT_PORT
    assert ganeti["MAX_UDP_DATA_SIZE"] == P.MAX_ANSWER_SIZE


def test_packet_layout_and_signature() -> None:
    packet = encode_request(KEY, Request(1, 1, "r-salt", "node1.example.com"), NOW)
    assert packet[:4] == b"plj0"
    envelope = json.loads(packet[4:])
    assert set(envelope) == {"msg", "salt", "hmac"}
    assert envelope["salt"] == "1700000000"
    assert json.loads(envelope["msg"]) == {
        "protocol": 1, "type": 1, "query": "node1.example.com", "rsalt": "r-salt"}
    expected = hmac.new(KEY, (envelope["salt"] + envelope["msg"]).encode(),
                        hashlib.sha1).hexdigest()
    assert envelope["hmac"] == expected


def test_answers_are_salted_with_the_rsalt() -> None:
    packet = encode_reply(KEY, "r-salt", Reply(1, 0, ["192.0.2.1"], 42))
    envelope = json.loads(packet[4:])
    assert envelope["salt"] == "r-salt"
    assert json.loads(envelope["msg"]) == {
        "protocol": 1, "status": 0, "answer": ["192.0.2.1"], "serial": 42}
    assert decode_reply(packet, KEY, "r-salt") == Reply(1, 0, ["192.0.2.1"], 42)
    with pytest.raises(MalformedPacketError):
        decode_reply(packet, KEY, "other-salt")
    with pytest.raises(ForgedPacketError):
        decode_reply(packet, b"another key", "r-salt")


def test_upper_case_hmac_is_accepted() -> None:
    msg = json.dumps({"protocol": 1, "type": 0, "query": None, "rsalt": "x"})
    salt = "1700000000"
    digest = hmac.new(KEY, (salt + msg).encode(), hashlib.sha1).hexdigest().upper()
    packet = b"plj0" + json.dumps({"msg": msg, "salt": salt, "hmac": digest}).encode()
    assert decode_request(packet, KEY, NOW).rsalt == "x"


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(qtype=st.integers(0, 2**32), rsalt=st.text(min_size=1, max_size=40),
       query=_json_values, skew=st.integers(-300, 300))
def test_request_round_trip(qtype: int, rsalt: str, query: Any, skew: int) -> None:
    request = Request(1, qtype, rsalt, query)
    packet = encode_request(KEY, request, NOW + skew)
    if len(packet) <= P.MAX_REQUEST_SIZE:
        assert decode_request(packet, KEY, NOW) == request


@settings(max_examples=200, deadline=None)
@given(rsalt=st.text(max_size=40), answer=_json_values, status=st.integers(0, 2),
       serial=st.integers(0, 2**40))
def test_reply_round_trip(rsalt: str, answer: Any, status: int, serial: int) -> None:
    reply = Reply(1, status, answer, serial)
    assert decode_reply(encode_reply(KEY, rsalt, reply), KEY, rsalt) == reply


@pytest.mark.parametrize("skew", [-301, 301, 10**6])
def test_stale_requests_are_refused(skew: int) -> None:
    packet = encode_request(KEY, Request(1, 0, "x"), NOW + skew)
    with pytest.raises(StalePacketError):
        decode_request(packet, KEY, NOW)


def _signed(msg: str, salt: str = "1700000000") -> bytes:
    digest = hmac.new(KEY, (salt + msg).encode(), hashlib.sha1).hexdigest()
    return b"plj0" + json.dumps({"msg": msg, "salt": salt, "hmac": digest}).encode()


@pytest.mark.parametrize("packet", [
    b"", b"plj", b"plj1{}", b"plj0", b"plj0{", b"plj0[]", b"plj0{}",
    b'plj0{"msg": 1, "salt": "1", "hmac": "00"}',
    b"plj0\xff\xfe",
    b"plj0" + b" " * 5000,
    _signed("not json"),
    _signed('{"protocol": 1, "type": 0}'),  # no rsalt
    _signed('{"protocol": 1, "type": 0, "rsalt": ""}'),  # empty rsalt
    _signed('{"protocol": 1, "type": "0", "rsalt": "x"}'),  # type not a number
    _signed('{"protocol": 1, "type": true, "rsalt": "x"}'),
    _signed('{"type": 0, "rsalt": "x"}'),  # no protocol
    _signed('{"protocol": 1, "type": 0, "rsalt": "x"}', salt="now"),  # salt not a time
    _signed('{"protocol": 1, "type": 0, "rsalt": "x"}', salt=""),
    _signed('{"protocol": 1, "type": 0, "rsalt": "x"}', salt="1_700_000_000"),
])
def test_malformed_packets_are_refused(packet: bytes) -> None:
    with pytest.raises(MalformedPacketError):
        decode_request(packet, KEY, NOW)


def test_forged_packets_are_refused() -> None:
    packet = encode_request(KEY, Request(1, 0, "x"), NOW)
    with pytest.raises(ForgedPacketError):
        decode_request(packet, b"not the key", NOW)
    envelope = json.loads(packet[4:])
    envelope["msg"] = envelope["msg"].replace('"type":0', '"type":3')
    with pytest.raises(ForgedPacketError):
        decode_request(b"plj0" + json.dumps(envelope).encode(), KEY, NOW)
    envelope["hmac"] = "é" * 40
    with pytest.raises(ForgedPacketError):
        decode_request(b"plj0" + json.dumps(envelope).encode(), KEY, NOW)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300) | st.builds(lambda b: b"plj0" + b, st.binary(max_size=300)))
def test_random_bytes_only_raise_packet_errors(data: bytes) -> None:
    with pytest.raises(PacketError):
        decode_request(data, KEY, NOW)


@settings(max_examples=300, deadline=None)
@given(position=st.integers(0, 10_000), byte=st.integers(0, 255))
def test_mutated_packets_only_raise_packet_errors(position: int, byte: int) -> None:
    original = Request(1, 3, "abc", None)
    packet = bytearray(encode_request(KEY, original, NOW))
    position %= len(packet)
    packet[position] = byte
    try:
        decoded = decode_request(bytes(packet), KEY, NOW)
    except PacketError:
        return
    # Only a change without meaning (the hmac's hex digits in upper case) may pass.
    assert decoded == original


@pytest.mark.parametrize("depth", [1000, 3000])
def test_deeply_nested_json_is_malformed_not_a_crash(depth: int) -> None:
    msg = '{"protocol":1,"type":3,"rsalt":"x","query":' + "[" * depth + "]" * depth + "}"
    with pytest.raises(MalformedPacketError):
        decode_request(_signed(msg), KEY, NOW)
    with pytest.raises(MalformedPacketError):
        decode_request(b'plj0{"msg":' + b"[" * depth + b"]" * depth + b"}", KEY, NOW)
    answer = "[" * depth + "]" * depth
    packet = P.seal(KEY, "r", '{"protocol":1,"status":0,"serial":1,"answer":' + answer + "}")
    with pytest.raises(MalformedPacketError):
        decode_reply(packet, KEY, "r")
