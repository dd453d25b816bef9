"""Fuzzing confd over UDP (issue 18, deliverable 4).

The fuzz testbed's confd on the master gets, in one burst each:

* random datagrams, with and without the ``plj0`` magic;
* forged packets: a well-formed envelope whose HMAC is not the cluster key's, or a
  valid packet with one byte changed;
* packets signed with the real key whose request is anything at all: every query
  type (Ganeti's, corral's and numbers that are none) with random queries, bad
  protocol numbers, stale and future timestamps, requests that are no request.

confd's protocol has no answer for a packet it cannot trust, so those must get
none; a signed request of a known type must get a signed answer salted with its
``rsalt``. Then a ping sent last is answered (the daemon keeps serving), and the
daemon's own counters (written on SIGUSR1) show no unexpected error.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.confd.protocol import (
    MAGIC,
    PROTOCOL_VERSION,
    QueryType,
    Request,
    decode_reply,
    encode_request,
    seal,
)
from corral.paths import Paths
from tests.conftest import TestbedHandle
from tests.fuzz.conftest import examples

pytestmark = pytest.mark.integration

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["0", "1", "2", "3", "x"]) | st.text(max_size=3), inner, max_size=3),
    max_leaves=8)
query_types = st.one_of(st.sampled_from(list(QueryType)), st.integers(-3, 130),
                        st.integers(2**31, 2**70))


class ConfdTarget:
    """The master's confd: its address, key, run directory and pid."""

    def __init__(self, testbed: TestbedHandle) -> None:
        master = next(n for n in testbed.state["nodes"] if n["master"])
        self.address = (master["ip"], testbed.state["ports"]["confd"])
        self.paths = Paths(Path(master["root"]))
        self.key = self.paths.confd_hmac_key.read_bytes()
        self.pid = int(master["daemons"]["confd"])
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(10)

    def counters(self) -> dict[str, Any]:
        """The daemon's counters, as it writes them on SIGUSR1."""
        stats = self.paths.run_dir / "confd.stats.json"
        before = stats.stat().st_mtime_ns if stats.exists() else 0
        os.kill(self.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while not stats.exists() or stats.stat().st_mtime_ns == before:
            assert time.monotonic() < deadline, "confd wrote no counters on SIGUSR1"
            time.sleep(0.02)
        counters: dict[str, Any] = json.loads(stats.read_text())
        return counters

    def burst(self, packets: list[bytes]) -> dict[str, bytes]:
        """Send ``packets``, then a ping; the answers that came before the ping's, by
        salt (the ping's included, under ``ping``)."""
        for packet in packets:
            self.sock.sendto(packet, self.address)
        rsalt = f"ping-{time.monotonic_ns()}"
        self.sock.sendto(encode_request(self.key, Request(PROTOCOL_VERSION, QueryType.PING,
                                                          rsalt), time.time()), self.address)
        answers: dict[str, bytes] = {}
        while True:
            data, _ = self.sock.recvfrom(65536)
            salt = json.loads(data[4:])["salt"]
            if salt == rsalt:
                decode_reply(data, self.key, rsalt)
                answers["ping"] = data
                return answers
            answers[salt] = data


@pytest.fixture
def confd(fuzz_testbed: TestbedHandle) -> Iterator[ConfdTarget]:
    """The fuzz testbed's master confd."""
    target = ConfdTarget(fuzz_testbed)
    yield target
    target.sock.close()


def _salt(index: int) -> str:
    return f"fuzz-{index}-{time.monotonic_ns()}"


def test_untrusted_packets_get_no_answer(confd: ConfdTarget) -> None:
    """Random bytes and forged packets are dropped without an answer, and confd
    answers the ping after them."""
    before = confd.counters()

    @examples(8)
    @given(packets=st.lists(st.one_of(
        st.binary(max_size=200),
        st.binary(max_size=200).map(lambda b: MAGIC + b),
        st.tuples(st.text(max_size=40), st.text(max_size=12)).map(
            lambda t: seal(b"not the cluster key", t[1], t[0])),
        st.tuples(st.integers(0, 120), st.integers(0, 255)).map(
            lambda t: _mutate(confd.key, *t)),
    ), min_size=1, max_size=25))
    def fuzz(packets: list[bytes]) -> None:
        answers = confd.burst(packets)
        # A mutation that only upper-cases a letter of the HMAC leaves a valid packet
        # (Ganeti accepts either case): its answer is salted "m".
        assert set(answers) <= {"ping", "m"}, sorted(answers)

    fuzz()
    after = confd.counters()
    assert after["errors"] == before["errors"], after
    assert after["dropped_malformed"] + after["dropped_forged"] > (
        before["dropped_malformed"] + before["dropped_forged"]), after


def _mutate(key: bytes, position: int, byte: int) -> bytes:
    packet = bytearray(encode_request(key, Request(PROTOCOL_VERSION, QueryType.PING, "m"),
                                      time.time()))
    position %= len(packet)
    if packet[position] == byte:
        byte ^= 0xFF
    packet[position] = byte
    return bytes(packet)


def test_signed_requests_of_every_kind(confd: ConfdTarget) -> None:
    """Requests signed with the cluster's key, with any type and query: a known type is
    answered (signed, salted with its rsalt, a status confd defines), anything else
    dropped; then the ping is answered and no unexpected error was counted."""
    before = confd.counters()

    @examples(12)
    @given(requests=st.lists(st.tuples(
        query_types, json_values,
        st.sampled_from([PROTOCOL_VERSION, PROTOCOL_VERSION, 0, 2, -1]),
        st.sampled_from([0, 0, 0, -400, 400, 10**12])), min_size=1, max_size=20),
        raw=st.lists(json_values.map(lambda v: json.dumps(v)), max_size=5))
    def fuzz(requests: list[tuple[int, Any, int, int]], raw: list[str]) -> None:
        now = time.time()
        packets, expected = [], {}
        for index, (qtype, query, protocol, skew) in enumerate(requests):
            rsalt = _salt(index)
            packets.append(encode_request(confd.key, Request(protocol, qtype, rsalt, query),
                                          now + skew))
            expected[rsalt] = (qtype, skew)
        # Signed, fresh, but not a request at all.
        packets += [seal(confd.key, str(int(now)), msg) for msg in raw]
        answers = confd.burst(packets)
        del answers["ping"]
        assert set(answers) <= set(expected), sorted(set(answers) - set(expected))
        for rsalt, data in answers.items():
            reply = decode_reply(data, confd.key, rsalt)
            assert reply.status in (0, 1, 2), reply
            assert abs(expected[rsalt][1]) < 300, f"a stale request was answered: {reply}"
        for rsalt, (qtype, skew) in expected.items():
            if abs(skew) < 300 and qtype in (QueryType.PING, QueryType.CLUSTER_MASTER):
                assert rsalt in answers, f"no answer to a fresh request of type {qtype}"

    fuzz()
    after = confd.counters()
    assert after["errors"] == before["errors"], after
    assert after["answered"] > before["answered"], after
