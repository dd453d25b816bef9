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

:meth:`ConfdClient.query_blocking` and :func:`query_sync` do the same without an event
loop, on plain sockets: ``corral-confd-query`` and the command line's master lookup
then start without asyncio, which is loaded only by :meth:`ConfdClient.query`.
"""

from __future__ import annotations

import contextlib
import select
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
class _Tally:
    """The verified answers to one request so far."""

    key: bytes
    rsalt: str
    asked: set[tuple[str, int]]
    wanted: int
    answers: list[ConfdAnswer] = field(default_factory=list)
    rejected: int = 0

    @property
    def enough(self) -> bool:
        """Whether ``wanted`` answers are in."""
        return len(self.answers) >= self.wanted

    def datagram_received(self, data: bytes, addr: Any) -> None:
        """Keep ``data`` from ``addr`` if it is a verified answer to this request."""
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

    def result(self) -> QueryResult:
        """What came back: the answer with the highest serial, and all of them."""
        received = list(self.answers)
        best = max(received, key=lambda a: a.serial) if received else None
        return QueryResult(best, received, len(self.asked), self.rejected)


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

    def _resolve(self) -> list[tuple[int, tuple[str, int]]]:
        """Each server's address family and address (a blocking DNS lookup)."""
        found: list[tuple[int, tuple[str, int]]] = []
        for host, port in self.servers:
            try:
                infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
            except OSError as err:
                raise ParameterError(f"cannot resolve confd server {host}: {err}") from None
            family, _, _, _, sockaddr = infos[0]
            found.append((int(family), (str(sockaddr[0]), int(sockaddr[1]))))
        return found

    def _prepare(self, targets: list[tuple[int, tuple[str, int]]], qtype: int, query: Any,
                 answers: int | None) -> tuple[_Tally, bytes]:
        """The tally of a new request to ``targets`` and its signed packet."""
        asked = {addr for _, addr in targets}
        wanted = needed_answers(len(asked)) if answers is None else max(1, answers)
        request = Request(PROTOCOL_VERSION, int(qtype), str(uuid.uuid4()), query)
        packet = encode_request(self.key, request, self._clock())
        if len(packet) > MAX_REQUEST_SIZE:
            raise ParameterError(
                f"the query is too long ({len(packet)} bytes signed; at most "
                f"{MAX_REQUEST_SIZE})")
        return _Tally(self.key, request.rsalt, asked, min(wanted, len(asked))), packet

    async def query(self, qtype: int, query: Any = None, *,
                    answers: int | None = None) -> QueryResult:
        """Send one query to every server; wait for ``answers`` verified answers
        (default: :func:`needed_answers`) or the timeout, whichever comes first."""
        import asyncio

        loop = asyncio.get_running_loop()
        targets = await loop.run_in_executor(None, self._resolve)
        tally, packet = self._prepare(targets, qtype, query, answers)
        done = asyncio.Event()

        class Receiver(asyncio.DatagramProtocol):
            # an unreachable server simply does not answer: error_received ignores it
            def datagram_received(self, data: bytes, addr: Any) -> None:
                tally.datagram_received(data, addr)
                if tally.enough:
                    done.set()

        transports: list[asyncio.DatagramTransport] = []
        try:
            for family in sorted({family for family, _ in targets}):
                transport, _ = await loop.create_datagram_endpoint(
                    Receiver, local_addr=_any_address(family), family=family)
                transports.append(transport)
                for fam, addr in targets:
                    if fam == family:
                        transport.sendto(packet, addr)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.timeout):
                    await done.wait()
        finally:
            for transport in transports:
                transport.close()
        return tally.result()

    def query_blocking(self, qtype: int, query: Any = None, *,
                       answers: int | None = None) -> QueryResult:
        """:meth:`query` on plain sockets, for code without an event loop."""
        targets = self._resolve()
        tally, packet = self._prepare(targets, qtype, query, answers)
        sockets: list[socket.socket] = []
        try:
            for family in sorted({family for family, _ in targets}):
                sock = socket.socket(family, socket.SOCK_DGRAM)
                sockets.append(sock)
                sock.setblocking(False)
                sock.bind(_any_address(family))
                for fam, addr in targets:
                    if fam == family:
                        with contextlib.suppress(OSError):  # a server that is not there
                            sock.sendto(packet, addr)      # does not answer
            deadline = time.monotonic() + self.timeout
            while not tally.enough and (left := deadline - time.monotonic()) > 0:
                ready, _, _ = select.select(sockets, [], [], left)
                for sock in ready:
                    try:
                        data, addr = sock.recvfrom(65536)
                    except OSError:
                        continue
                    tally.datagram_received(data, addr)
        finally:
            for sock in sockets:
                sock.close()
        return tally.result()


def _any_address(family: int) -> tuple[str, int]:
    """The local address to send from: any address, any port."""
    return ("::", 0) if family == socket.AF_INET6 else ("0.0.0.0", 0)


def query_sync(key: bytes, servers: Sequence[Server], qtype: int, query: Any = None, *,
               port: int = DEFAULT_PORT, answers: int | None = None,
               timeout: float = 2.0) -> QueryResult:
    """Ask ``servers`` once, without an event loop (:meth:`ConfdClient.query_blocking`)."""
    client = ConfdClient(key, servers, port=port, timeout=timeout)
    return client.query_blocking(qtype, query, answers=answers)
