"""confd's UDP side: one datagram in, at most one signed answer out.

:class:`ConfdProtocol` is an asyncio ``DatagramProtocol``. For each datagram it
checks, in this order, the size, the magic, the envelope, the HMAC, the timestamp
salt and the request; anything wrong drops the packet silently and counts it in
:class:`Counters` (the protocol has no error answer for a packet it cannot trust).
A valid request of a type Ganeti does not know is dropped too, as Ganeti does; a
valid request gets an answer salted with its ``rsalt``, including the protocol's
error answers (unknown entry, bad argument, not implemented). Nothing raises out of
:meth:`ConfdProtocol.datagram_received`: an unexpected exception is counted under
``errors`` and logged (at most once a second), and the packet is dropped.

Replays: a request whose timestamp is more than five minutes off is dropped as
stale. A copy replayed within that window is answered again, to the address it
came from; it reveals nothing the original answer did not, and remembering every
rsalt of five minutes would make memory grow with the query rate.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, cast

from corral.confd.answers import Snapshot, answer
from corral.confd.protocol import (
    MAX_ANSWER_SIZE,
    MAX_REQUEST_SIZE,
    PROTOCOL_VERSION,
    ErrorCode,
    ForgedPacketError,
    MalformedPacketError,
    Reply,
    StalePacketError,
    Status,
    decode_request,
    encode_reply,
)

__all__ = ["ConfdProtocol", "Counters", "serve_socket"]

#: Datagrams read per wake-up of the event loop before others get a turn.
_BATCH = 256

log = logging.getLogger("corral.confd")


@dataclass
class Counters:
    """What happened to the datagrams confd received since it started."""

    received: int = 0
    answered: int = 0
    dropped_malformed: int = 0
    dropped_forged: int = 0
    dropped_stale: int = 0
    dropped_unknown_type: int = 0
    errors: int = 0

    def as_dict(self) -> dict[str, int]:
        """The counters by name (for the log line and the stats file)."""
        return asdict(self)


class ConfdProtocol(asyncio.DatagramProtocol):
    """Answers confd requests from the snapshot ``snapshot()`` returns (None while
    no configuration has been loaded: requests then get an internal-error answer)."""

    def __init__(
        self, key: bytes, snapshot: Callable[[], Snapshot | None], *,
        counters: Counters | None = None, clock: Callable[[], float] = time.time,
    ) -> None:
        self._key = key
        self._snapshot = snapshot
        self._clock = clock
        self.counters = counters if counters is not None else Counters()
        self._transport: asyncio.DatagramTransport | None = None
        self._last_error_log = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Remember the transport to answer through."""
        self._transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: Any) -> None:
        """Answer one datagram, or drop it; never raises."""
        try:
            reply = self.handle(data)
            if reply is not None and self._transport is not None:
                self._transport.sendto(reply, addr)
        except Exception:
            self.counters.errors += 1
            self.log_failure(addr)

    def log_failure(self, addr: Any) -> None:
        """Log the exception being handled, at most once a second."""
        now = time.monotonic()
        if now - self._last_error_log >= 1.0:
            self._last_error_log = now
            log.exception("unexpected failure handling a datagram from %s", addr)

    def error_received(self, exc: Exception) -> None:
        """A send failed (for example ICMP port unreachable): nothing to do for UDP."""
        log.debug("socket error: %s", exc)

    def handle(self, data: bytes) -> bytes | None:
        """The answer packet for ``data``, or None to drop it (counted)."""
        counters = self.counters
        counters.received += 1
        try:
            request = decode_request(data, self._key, self._clock())
        except MalformedPacketError:
            counters.dropped_malformed += 1
            return None
        except ForgedPacketError:
            counters.dropped_forged += 1
            return None
        except StalePacketError:
            counters.dropped_stale += 1
            return None
        snap = self._snapshot()
        status: int
        value: Any
        if snap is None:
            status, value, serial = Status.ERROR, ErrorCode.INTERNAL, 0
        else:
            result = answer(snap, request.type, request.query)
            if result is None:
                counters.dropped_unknown_type += 1
                return None
            (status, value), serial = result, snap.serial
        packet = encode_reply(self._key, request.rsalt,
                              Reply(PROTOCOL_VERSION, status, value, serial))
        if len(packet) > MAX_ANSWER_SIZE:
            packet = encode_reply(self._key, request.rsalt,
                                  Reply(PROTOCOL_VERSION, Status.ERROR, ErrorCode.INTERNAL, serial))
        counters.answered += 1
        return packet


def serve_socket(sock: socket.socket, protocol: ConfdProtocol) -> Callable[[], None]:
    """Answer the datagrams arriving on the non-blocking ``sock`` with ``protocol``
    from the running loop; returns the function that stops it.

    This is what the daemon uses instead of an asyncio datagram transport: one
    wake-up of the loop reads every queued datagram (up to a batch) and answers
    each with a direct ``sendto``, where the transport reads one datagram per
    wake-up. Under load that halves the system calls per query. A datagram longer
    than :data:`MAX_REQUEST_SIZE` arrives cut and is dropped as malformed.
    """
    loop = asyncio.get_running_loop()
    recvfrom = sock.recvfrom
    sendto = sock.sendto
    handle = protocol.handle
    counters = protocol.counters
    size = MAX_REQUEST_SIZE + 1

    def drain() -> None:
        for _ in range(_BATCH):
            try:
                data, addr = recvfrom(size)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:  # e.g. ICMP errors reported on the socket
                log.debug("receive error: %s", err)
                continue
            try:
                reply = handle(data)
                if reply is not None:
                    sendto(reply, addr)
            except (BlockingIOError, InterruptedError):
                counters.errors += 1  # send buffer full: the client will retry
            except Exception:
                counters.errors += 1
                protocol.log_failure(addr)

    loop.add_reader(sock.fileno(), drain)

    def stop() -> None:
        loop.remove_reader(sock.fileno())

    return stop
