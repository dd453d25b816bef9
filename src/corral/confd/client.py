"""The confd client library: ask several master candidates, keep the newest answer.

Configuration is only replicated to master candidates, and one of them may be
behind or in the middle of an update; so a query goes to several of them at once
(seed 002), the client waits until enough have answered or a time limit passes,
and keeps the answer computed from the highest configuration serial. An answer
counts only if its HMAC verifies with the cluster key, it is salted with this
request's ``rsalt`` and it comes from an address that was asked; anything else is
counted as rejected and ignored.

    client = ConfdClient(key, ["192.0.2.1", "192.0.2.2"], timeout=2.0)
    result = await client.query(QueryType.CLUSTER_MASTER)
    if result.best is not None and result.best.status == Status.OK:
        print(result.best.answer)

:func:`query_sync` does the same for code without an event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from corral.confd.protocol import (
    DEFAULT_PORT,
    MAX_REQUEST_SIZE,
    PROTOCOL_VERSION,
    PacketError,
    Request,
    decode_reply,
    encode_request,
)
from corral.errors import ParameterError

__all__ = ["ConfdAnswer", "ConfdClient", "QueryResult", "Server", "needed_answers", "query_sync"]

#: A server as given: a host (the client's default port) or ``(host, port)``.
Server = str | tuple[str, int]


@dataclass(frozen=True)
class ConfdAnswer:
    """One server's verified answer."""

    server: tuple[str, int]
    status: int
    answer: Any
    serial: int


@dataclass(frozen=True)
class QueryResult:
    """What came back for one query."""

    #: The answer with the highest serial (the first received among equals), or None.
    best: ConfdAnswer | None
    #: Every verified answer, one per server, in the order they arrived.
    answers: list[ConfdAnswer]
    #: How many servers were asked.
    asked: int
    #: Packets that failed the HMAC, rsalt or sender check.
    rejected: int = 0


def needed_answers(asked: int) -> int:
    """How many answers make a safe majority, as Ganeti's client counts: all of one
    or two servers, all but one of three or four, else half plus one."""
    if asked < 3:
        return asked
    if asked < 5:
        return asked - 1
    return asked // 2 + 1


@dataclass
class _Collector(asyncio.DatagramProtocol):
    key: bytes
    rsalt: str
    asked: set[tuple[str, int]]
    wanted: int
    answers: list[ConfdAnswer] = field(default_factory=list)
    rejected: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def datagram_received(self, data: bytes, addr: Any) -> None:
        sender = (str(addr[0]), int(addr[1]))
        if sender not in self.asked or any(a.server == sender for a in self.answers):
            self.rejected += 1
            return
        try:
            reply = decode_reply(data, self.key, self.rsalt)
        except PacketError:
            self.rejected += 1
            return
        self.answers.append(ConfdAnswer(sender, reply.status, reply.answer, reply.serial))
        if len(self.answers) >= self.wanted:
            self.done.set()

    def error_received(self, exc: Exception) -> None:
        pass  # an unreachable server simply does not answer


class ConfdClient:
    """Queries a set of confd servers with the cluster's HMAC ``key``.

    ``timeout`` bounds each query (seconds); ``port`` applies to servers given
    without one.
    """

    def __init__(self, key: bytes, servers: Sequence[Server], *, port: int = DEFAULT_PORT,
                 timeout: float = 2.0, clock: Callable[[], float] = time.time) -> None:
        if not servers:
            raise ParameterError("no confd servers to ask")
        self.key = key
        self.servers = [(s, port) if isinstance(s, str) else (s[0], int(s[1])) for s in servers]
        self.timeout = timeout
        self._clock = clock

    async def _resolve(self) -> list[tuple[int, tuple[str, int]]]:
        loop = asyncio.get_running_loop()
        found: list[tuple[int, tuple[str, int]]] = []
        for host, port in self.servers:
            try:
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
            except OSError as err:
                raise ParameterError(f"cannot resolve confd server {host}: {err}") from None
            family, _, _, _, sockaddr = infos[0]
            found.append((int(family), (str(sockaddr[0]), int(sockaddr[1]))))
        return found

    async def query(self, qtype: int, query: Any = None, *,
                    answers: int | None = None) -> QueryResult:
        """Send one query to every server; wait for ``answers`` verified answers
        (default: :func:`needed_answers`) or the timeout, whichever comes first."""
        targets = await self._resolve()
        asked = {addr for _, addr in targets}
        wanted = needed_answers(len(asked)) if answers is None else max(1, answers)
        request = Request(PROTOCOL_VERSION, int(qtype), str(uuid.uuid4()), query)
        packet = encode_request(self.key, request, self._clock())
        if len(packet) > MAX_REQUEST_SIZE:
            raise ParameterError(
                f"the query is too long ({len(packet)} bytes signed; at most "
                f"{MAX_REQUEST_SIZE})")
        collector = _Collector(self.key, request.rsalt, asked, min(wanted, len(asked)))
        loop = asyncio.get_running_loop()
        transports: list[asyncio.DatagramTransport] = []
        try:
            for family in sorted({family for family, _ in targets}):
                local = ("::", 0) if family == socket.AF_INET6 else ("0.0.0.0", 0)
                transport, _ = await loop.create_datagram_endpoint(
                    lambda: collector, local_addr=local, family=family)
                transports.append(transport)
                for fam, addr in targets:
                    if fam == family:
                        transport.sendto(packet, addr)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.timeout):
                    await collector.done.wait()
        finally:
            for transport in transports:
                transport.close()
        received = list(collector.answers)
        best = max(received, key=lambda a: a.serial) if received else None
        return QueryResult(best, received, len(asked), collector.rejected)


def query_sync(key: bytes, servers: Sequence[Server], qtype: int, query: Any = None, *,
               port: int = DEFAULT_PORT, answers: int | None = None,
               timeout: float = 2.0) -> QueryResult:
    """:meth:`ConfdClient.query` for code without an event loop."""
    client = ConfdClient(key, servers, port=port, timeout=timeout)
    return asyncio.run(client.query(qtype, query, answers=answers))
