"""The confd client: several servers at once, the highest serial wins, and answers with
a bad HMAC, a foreign rsalt or from an unasked address are rejected."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from corral.cli.confd_query import build_query, parse_server, parse_type
from corral.confd.client import ConfdClient, needed_answers, query_sync
from corral.confd.protocol import (
    QueryType,
    Reply,
    Status,
    decode_request,
    encode_reply,
)
from corral.errors import ParameterError
from tests.unit.confd_helpers import KEY

Responder = Callable[[bytes], bytes | None]


@dataclass
class FakeServer(asyncio.DatagramProtocol):
    """A UDP server answering every request through ``respond``."""

    respond: Responder
    transport: asyncio.DatagramTransport | None = None
    seen: int = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.seen += 1
        reply = self.respond(data)
        if reply is not None and self.transport is not None:
            self.transport.sendto(reply, addr)

    @property
    def address(self) -> tuple[str, int]:
        assert self.transport is not None
        host, port = self.transport.get_extra_info("sockname")[:2]
        return str(host), int(port)


def answering(serial: int, answer: Any = "node1", *, key: bytes = KEY,
              salt: Callable[[str], str] = lambda rsalt: rsalt) -> Responder:
    def respond(data: bytes) -> bytes:
        request = decode_request(data, KEY, time.time())
        return encode_reply(key, salt(request.rsalt), Reply(1, Status.OK, answer, serial))
    return respond


@pytest.fixture
async def servers() -> AsyncIterator[Callable[[Responder], Any]]:
    loop = asyncio.get_running_loop()
    started: list[asyncio.DatagramTransport] = []

    async def start(respond: Responder) -> FakeServer:
        transport, proto = await loop.create_datagram_endpoint(
            lambda: FakeServer(respond), local_addr=("127.0.0.1", 0))
        started.append(transport)
        return proto

    yield start
    for transport in started:
        transport.close()


@pytest.fixture(params=["async", "blocking"])
def ask(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """Query through ConfdClient.query or, in a thread, through query_blocking (what
    corral-confd-query uses): both must keep the same answers."""
    async def run(client: ConfdClient, qtype: int, **kwargs: Any) -> Any:
        if request.param == "async":
            return await client.query(qtype, **kwargs)
        return await asyncio.to_thread(client.query_blocking, qtype, **kwargs)
    return run


async def test_the_highest_serial_wins(servers: Any, ask: Any) -> None:
    old = await servers(answering(5, "old-master"))
    new = await servers(answering(7, "new-master"))
    same = await servers(answering(7, "later-duplicate"))
    client = ConfdClient(KEY, [old.address, new.address, same.address], timeout=5)
    result = await ask(client, QueryType.CLUSTER_MASTER, answers=3)
    assert len(result.answers) == 3 and result.asked == 3
    assert result.best is not None and result.best.serial == 7
    assert result.best.answer in ("new-master", "later-duplicate")
    assert {a.answer for a in result.answers} == {"old-master", "new-master", "later-duplicate"}


async def test_bad_hmac_and_foreign_rsalt_are_rejected(servers: Any, ask: Any) -> None:
    forged = await servers(answering(99, "forged", key=b"another key"))
    replayed = await servers(answering(98, "other request", salt=lambda rsalt: "not-" + rsalt))
    honest = await servers(answering(3, "node1"))
    client = ConfdClient(KEY, [forged.address, replayed.address, honest.address], timeout=0.5)
    result = await ask(client, QueryType.CLUSTER_MASTER, answers=3)
    assert [a.answer for a in result.answers] == ["node1"]
    assert result.best is not None and result.best.serial == 3
    assert result.rejected == 2


async def test_answers_from_unasked_addresses_are_rejected(servers: Any) -> None:
    proxy = await servers(lambda data: None)

    @dataclass
    class Relaying(FakeServer):
        def datagram_received(self, data: bytes, addr: Any) -> None:
            # a valid answer (right key and rsalt) but sent from another address
            assert proxy.transport is not None
            proxy.transport.sendto(answering(50, "spoofed")(data) or b"", addr)
            super().datagram_received(data, addr)

    loop = asyncio.get_running_loop()
    transport, honest = await loop.create_datagram_endpoint(
        lambda: Relaying(answering(1)), local_addr=("127.0.0.1", 0))
    try:
        client = ConfdClient(KEY, [honest.address], timeout=0.3)
        result = await client.query(QueryType.PING)
        await asyncio.sleep(0.05)
    finally:
        transport.close()
    assert [a.serial for a in result.answers] == [1]
    assert result.rejected == 1


async def test_waits_for_n_answers_or_the_timeout(servers: Any, ask: Any) -> None:
    fast = await servers(answering(4))
    silent = await servers(lambda data: None)
    client = ConfdClient(KEY, [fast.address, silent.address], timeout=0.3)
    started = time.monotonic()
    result = await ask(client, QueryType.PING, answers=1)
    assert time.monotonic() - started < 0.25
    assert result.best is not None and result.best.serial == 4
    started = time.monotonic()
    result = await ask(client, QueryType.PING)  # default: both of two servers
    assert time.monotonic() - started >= 0.29
    assert [a.serial for a in result.answers] == [4]
    nobody = ConfdClient(KEY, [silent.address], timeout=0.1)
    assert (await ask(nobody, QueryType.PING)).best is None


def test_needed_answers_is_ganetis_rule() -> None:
    assert [needed_answers(n) for n in range(1, 9)] == [1, 2, 2, 3, 3, 4, 4, 5]


def test_the_blocking_wrapper() -> None:
    # no server listens on this port: the wrapper returns no answer after the timeout
    result = query_sync(KEY, [("127.0.0.1", 9)], QueryType.PING, timeout=0.1)
    assert result.best is None and result.asked == 1


def test_requests_are_well_formed() -> None:
    captured: list[bytes] = []

    async def run() -> None:
        loop = asyncio.get_running_loop()
        transport, proto = await loop.create_datagram_endpoint(
            lambda: FakeServer(lambda data: (captured.append(data), None)[1]),
            local_addr=("127.0.0.1", 0))
        try:
            client = ConfdClient(KEY, [proto.address], timeout=0.1)
            await client.query(QueryType.NODE_PIP_BY_INSTANCE_IP, {"1": "198.51.100.1"})
        finally:
            transport.close()

    asyncio.run(run())
    [packet] = captured
    request = decode_request(packet, KEY, time.time())
    assert request.type == 2 and request.query == {"1": "198.51.100.1"}
    assert request.protocol == 1 and len(request.rsalt) == 36
    assert json.loads(packet[4:])["salt"].isdigit()


def test_cli_types_servers_and_queries(tmp_path: Path) -> None:
    assert parse_type("ping") == QueryType.PING
    assert parse_type("5") == QueryType.MC_PIP_LIST
    assert parse_type("Instance-Primary-Node") == QueryType.INSTANCE_PRIMARY_NODE
    with pytest.raises(ParameterError, match="accepted: ping \\(0\\), node-role \\(1\\)"):
        parse_type("pong")
    with pytest.raises(ParameterError):
        parse_type("55")
    assert parse_server("192.0.2.1", 1814) == ("192.0.2.1", 1814)
    assert parse_server("192.0.2.1:2000", 1814) == ("192.0.2.1", 2000)
    assert parse_server("[2001:db8::1]:2000", 1814) == ("2001:db8::1", 2000)
    assert parse_server("2001:db8::1", 1814) == ("2001:db8::1", 1814)
    assert build_query(QueryType.NODE_PIP_BY_INSTANCE_IP, "10.0.0.1", None, ()) == {"1": "10.0.0.1"}
    assert build_query(QueryType.NODE_PIP_BY_INSTANCE_IP, "10.0.0.1,10.0.0.2", "br1", ()) == {
        "2": ["10.0.0.1", "10.0.0.2"], "0": "br1"}
    assert build_query(QueryType.CLUSTER_MASTER, None, None, ("name", "mnode-pip")) == {
        "3": [0, 2]}
    assert build_query(QueryType.INSTANCES_IPS_LIST, None, "br1", ()) == "br1"
    assert build_query(QueryType.NODE_ROLE_BYNAME, "node1", None, ()) == "node1"
    with pytest.raises(ParameterError):
        build_query(QueryType.CLUSTER_MASTER, None, None, ("bogus",))
