"""Running one transfer: an importer that listens, or an exporter that connects.

A :class:`Transfer` is started by the node daemon (:func:`start_import`,
:func:`start_export`) and runs as a task of its event loop; the processes of its
pipeline (:mod:`corral.impexp.pipeline`) do the disk I/O and the compression, the
task only moves the compressed bytes between them and the TLS connection. Its
:meth:`Transfer.status` (state, bytes, rate, ETA) is what the master polls to follow
it and write progress to the job log.

An importer listens on the first free port of a range, accepts connections until one
passes the handshake (:mod:`corral.impexp.wire`), then stops listening. The TLS
contexts come from the caller: the cluster's certificates for a transfer inside a
cluster, per-move certificates for one between clusters.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Literal

from corral.errors import CorralError, NodeUnreachableError, ParameterError, ProtocolError
from corral.impexp import wire
from corral.impexp.compression import NO_COMPRESSION, compress_argv, decompress_argv
from corral.impexp.pipeline import (
    Endpoint,
    Stage,
    filter_stage,
    kill_stages,
    sink_stages,
    source_stages,
)

__all__ = ["CHUNK", "Direction", "State", "Transfer", "start_export", "start_import"]

log = logging.getLogger(__name__)

Direction = Literal["import", "export"]
State = Literal["listening", "connecting", "running", "done", "failed", "aborted"]

#: The most the exporter reads and sends at once.
CHUNK = 1 << 20

#: How long an exporter waits for the connection and the importer's answer.
CONNECT_TIMEOUT = 30.0

#: The span over which the rate is measured (seconds).
RATE_WINDOW = 5.0

FINAL_STATES = frozenset({"done", "failed", "aborted"})


class Transfer:
    """One import or export on this node and what is known of its progress."""

    def __init__(self, name: str, direction: Direction, compression: str, magic: str,
                 end: Endpoint, log_path: Path, *, expected: int | None = None,
                 on_change: Callable[[Transfer], None] | None = None) -> None:
        self.name = name
        self.direction = direction
        self.compression = compression
        self.magic = wire.check_magic(magic)
        self.end = end
        self.log_path = log_path
        self.expected = expected
        self.state: State = "connecting" if direction == "export" else "listening"
        self.port: int | None = None
        self.peer = ""
        self.data_bytes = 0
        self.wire_bytes = 0
        self.error = ""
        self.started = time.time()
        self.data_started: float | None = None
        self.finished: float | None = None
        self.pids: list[int] = []
        self.task: asyncio.Task[None] | None = None
        #: The task serving the exporter's connection (an importer's), if any.
        self.connection_task: asyncio.Task[Any] | None = None
        self._samples: list[tuple[float, int]] = []
        self._on_change = on_change

    # -- progress ---------------------------------------------------------------
    def _count(self, data: int, wire_bytes: int) -> None:
        self.data_bytes += data
        self.wire_bytes += wire_bytes
        now = time.monotonic()
        if not self._samples or now - self._samples[-1][0] >= 0.5:
            self._samples.append((now, self.data_bytes))
            while len(self._samples) > 2 and now - self._samples[1][0] > RATE_WINDOW:
                self._samples.pop(0)

    def rate(self) -> float:
        """Bytes of data per second over the last few seconds (0 before there are two
        samples)."""
        if self.state in FINAL_STATES and self.data_started and self.finished:
            span = self.finished - self.data_started
            return self.data_bytes / span if span > 0 else 0.0
        if len(self._samples) < 2:
            return 0.0
        (t0, b0), (t1, b1) = self._samples[0], (time.monotonic(), self.data_bytes)
        return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0

    def status(self) -> dict[str, Any]:
        """The transfer as the master and ``list`` see it (never the magic)."""
        rate = self.rate()
        eta = None
        if self.expected and rate > 0 and self.state == "running":
            eta = max(0.0, (self.expected - self.data_bytes) / rate)
        return {
            "name": self.name, "direction": self.direction, "state": self.state,
            "compression": self.compression, "port": self.port, "peer": self.peer,
            "bytes": self.data_bytes, "wire_bytes": self.wire_bytes,
            "expected": self.expected, "rate": round(rate, 1),
            "eta": None if eta is None else round(eta, 1), "error": self.error,
            "started": self.started, "finished": self.finished, "pids": list(self.pids),
            "destination": self.end.path if self.end.kind == "file" else "",
        }

    def _set(self, state: State, error: str = "") -> None:
        if self.state in FINAL_STATES:
            return
        self.state = state
        if error:
            self.error = error
        if state in FINAL_STATES:
            self.finished = time.time()
        if self._on_change is not None:
            self._on_change(self)

    # -- life cycle -------------------------------------------------------------
    async def abort(self, why: str = "aborted") -> None:
        """Stop the transfer (its task and processes); a file being written is
        removed."""
        self._set("aborted", why)
        for task in (self.connection_task, self.task):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._drop_partial()

    def _open_log(self) -> IO[bytes]:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        return self.log_path.open("ab")

    def _drop_partial(self) -> None:
        if self.direction == "import" and self.end.kind == "file":
            with contextlib.suppress(FileNotFoundError):
                Path(self.end.path).unlink()


def _codec(compression: str, direction: Direction) -> list[str] | None:
    if compression == NO_COMPRESSION:
        return None
    return compress_argv(compression) if direction == "export" else \
        decompress_argv(compression)


# -- importer -------------------------------------------------------------------------
async def start_import(transfer: Transfer, host: str, ports: tuple[int, int],
                       context: ssl.SSLContext, *, accept_timeout: float) -> int:
    """Listen on the first free port of ``ports`` (inclusive) and run ``transfer``
    for the first connection that passes the handshake; the port."""
    _codec(transfer.compression, "import")  # an unknown tool fails before listening
    done = asyncio.get_running_loop().create_future()
    accepted = asyncio.Event()

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        try:
            if accepted.is_set():
                raise wire.TransferRefused("this importer already has its exporter")
            async with asyncio.timeout(CONNECT_TIMEOUT):
                hello = await reader.readuntil(b"\n")
            wire.parse_hello(hello, transfer.magic, transfer.compression)
        except (wire.TransferRefused, ProtocolError) as err:
            log.warning("transfer %s: refused a connection from %s: %s", transfer.name,
                        peer, err)
            await _answer(writer, f"ERR {err}\n")
            return
        except (OSError, TimeoutError, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError, ssl.SSLError):
            await _close(writer)
            return
        accepted.set()
        transfer.connection_task = asyncio.current_task()
        transfer.peer = str(peer[0]) if peer else ""
        try:
            await _receive(transfer, reader, writer)
        finally:
            if not done.done():
                done.set_result(None)

    server = None
    for port in range(ports[0], ports[1] + 1):
        try:
            server = await asyncio.start_server(connected, host, port, ssl=context,
                                                reuse_address=True)
        except OSError:
            continue
        transfer.port = port
        break
    if server is None:
        raise ParameterError(f"no free port in {ports[0]}-{ports[1]} on {host} to import "
                             "into")

    async def run() -> None:
        try:
            async with asyncio.timeout(accept_timeout):
                await accepted.wait()
        except TimeoutError:
            transfer._set("failed", f"no exporter connected within {accept_timeout:g} s")
            transfer._drop_partial()
            return
        finally:
            server.close()
        await done

    transfer.task = asyncio.create_task(run(), name=f"impexp-{transfer.name}")
    transfer.task.add_done_callback(lambda _: server.close())
    if transfer._on_change is not None:
        transfer._on_change(transfer)
    return transfer.port or 0


async def _answer(writer: asyncio.StreamWriter, line: str) -> None:
    with contextlib.suppress(OSError, ssl.SSLError, ConnectionError, TimeoutError):
        async with asyncio.timeout(5):
            writer.write(line.encode("utf-8", "replace"))
            await writer.drain()
    await _close(writer)


async def _close(writer: asyncio.StreamWriter, *, hard: bool = False) -> None:
    """Close the connection: gracefully (TLS close-notify) unless ``hard`` or the peer
    does not answer within a few seconds, then the connection is reset, so a peer that
    is still sending learns at once that nobody reads."""
    if hard:
        writer.transport.abort()
        return
    writer.close()
    try:
        async with asyncio.timeout(5):
            await writer.wait_closed()
    except (OSError, ssl.SSLError, ConnectionError, TimeoutError):
        writer.transport.abort()


async def _receive(transfer: Transfer, reader: asyncio.StreamReader,
                   writer: asyncio.StreamWriter) -> None:
    stages: list[Stage] = []
    with transfer._open_log() as log_file:
        try:
            stages, sink = await sink_stages(transfer.end, _codec(transfer.compression,
                                                                  "import"), log_file)
            transfer.pids = [stage.proc.pid for stage in stages]
            writer.write(b"OK\n")
            await writer.drain()
            transfer.data_started = time.time()
            transfer._set("running")
            while True:
                frame = await wire.read_frame(reader)
                if isinstance(frame, int):
                    if frame != transfer.wire_bytes:
                        raise ProtocolError(f"the exporter says it sent {frame} bytes but "
                                            f"{transfer.wire_bytes} arrived")
                    break
                sink.write(frame)
                transfer._count(len(frame), len(frame))
                await sink.drain()
            sink.close()
            failures = [f for f in await asyncio.gather(*(s.wait() for s in stages)) if f]
            if failures:
                raise CorralError("; ".join(failures) + f" (log {transfer.log_path})")
            transfer._set("done")
            await _answer(writer, f"DONE {transfer.wire_bytes}\n")
        except (CorralError, OSError, ConnectionError, ssl.SSLError) as err:
            message = getattr(err, "message", None) or str(err) or type(err).__name__
            transfer._set("failed", f"{message} after {transfer.wire_bytes} bytes")
            await kill_stages(stages)
            transfer._drop_partial()
            await _answer(writer, f"ERR {message}\n")
        except BaseException:
            await _close(writer, hard=True)
            await kill_stages(stages)
            transfer._drop_partial()
            raise


# -- exporter -------------------------------------------------------------------------
async def start_export(transfer: Transfer, host: str, port: int, context: ssl.SSLContext,
                       *, bandwidth: float = 0.0) -> None:
    """Start sending ``transfer`` to the importer at ``host``:``port``;
    ``bandwidth`` (bytes per second, 0 for no limit) caps the bytes on the wire."""
    _codec(transfer.compression, "export")
    transfer.peer = host
    transfer.task = asyncio.create_task(
        _send(transfer, host, port, context, bandwidth), name=f"impexp-{transfer.name}")
    if transfer._on_change is not None:
        transfer._on_change(transfer)


async def _send(transfer: Transfer, host: str, port: int, context: ssl.SSLContext,
                bandwidth: float) -> None:
    stages: list[Stage] = []
    writer: asyncio.StreamWriter | None = None
    with transfer._open_log() as log_file:
        try:
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT):
                    reader, writer = await asyncio.open_connection(
                        host, port, ssl=context, server_hostname=host, limit=1 << 16)
                    writer.write(wire.encode_hello(transfer.magic, transfer.compression))
                    await writer.drain()
                    answer = await wire.read_reply(reader, "after the handshake")
            except (OSError, TimeoutError, ssl.SSLError) as err:
                raise NodeUnreachableError(
                    f"cannot reach the importer at {host} port {port}: "
                    f"{err or type(err).__name__}") from None
            if answer != "OK":
                raise ProtocolError(f"the importer answered {answer!r} to the handshake")
            first, source = await source_stages(transfer.end, log_file)
            stages.append(first)
            compress = _codec(transfer.compression, "export")
            if compress is not None:
                stages.append(await filter_stage(f"compressor {compress[0]}", compress,
                                                 log_file))
            transfer.pids = [stage.proc.pid for stage in stages]
            transfer.data_started = time.time()
            transfer._set("running")
            # The importer speaks again only at the end, or to say it gave up.
            reply = asyncio.create_task(wire.read_reply(reader, "before confirming the data"))
            try:
                pump = asyncio.create_task(_pump(transfer, stages, source, writer, bandwidth))
                await asyncio.wait({pump, reply}, return_when=asyncio.FIRST_COMPLETED)
                if not pump.done():
                    pump.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await pump
                    reply.result()  # the importer's refusal, or its early close
                    raise ProtocolError(f"the importer answered {reply.result()!r} before "
                                        "the end of the data")
                pump.result()
            except BaseException:
                reply.cancel()
                raise
            failures = [f for f in await asyncio.gather(*(s.wait() for s in stages)) if f]
            if failures:
                raise CorralError("; ".join(failures) + f" (log {transfer.log_path})")
            writer.write(wire.encode_trailer(transfer.wire_bytes))
            await writer.drain()
            done = await reply
            if done != f"DONE {transfer.wire_bytes}":
                raise ProtocolError(f"the importer answered {done!r} at the end")
            transfer._set("done")
        except (CorralError, OSError, ConnectionError, ssl.SSLError) as err:
            message = getattr(err, "message", None) or str(err) or type(err).__name__
            if isinstance(err, (OSError, ConnectionError, ssl.SSLError)):
                message = f"connection to the importer lost: {message}"
            transfer._set("failed", f"{message} after {transfer.data_bytes} bytes")
            await kill_stages(stages)
        except BaseException:
            if writer is not None:
                await _close(writer, hard=True)
                writer = None
            await kill_stages(stages)
            raise
        finally:
            if writer is not None:
                await _close(writer)


async def _pump(transfer: Transfer, stages: list[Stage], source: asyncio.StreamReader,
                writer: asyncio.StreamWriter, bandwidth: float) -> None:
    """Send the data as frames, through the compressor when there is one (then a
    second task feeds it, so the data count is the disk's bytes and the ETA holds),
    pacing the wire to ``bandwidth`` bytes per second."""
    begin = time.monotonic()
    wire_source = source
    feeder: asyncio.Task[None] | None = None
    if len(stages) > 1:
        compressor = stages[1].proc
        if compressor.stdin is None or compressor.stdout is None:
            raise CorralError("the compressor has no pipes")
        wire_source = compressor.stdout
        feeder = asyncio.create_task(_feed(transfer, source, compressor.stdin))
    try:
        while True:
            chunk = await wire_source.read(CHUNK)
            if not chunk:
                break
            writer.write(wire.encode_frame(chunk))
            writer.write(chunk)
            transfer._count(0 if feeder is not None else len(chunk), len(chunk))
            await writer.drain()
            if bandwidth > 0:
                ahead = transfer.wire_bytes / bandwidth - (time.monotonic() - begin)
                if ahead > 0:
                    await asyncio.sleep(ahead)
        if feeder is not None:
            await feeder
    finally:
        if feeder is not None and not feeder.done():
            feeder.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await feeder


async def _feed(transfer: Transfer, source: asyncio.StreamReader,
                sink: asyncio.StreamWriter) -> None:
    """Copy the source's output into the compressor, counting it; close its input at
    the end so it finishes."""
    try:
        while True:
            chunk = await source.read(CHUNK)
            if not chunk:
                break
            sink.write(chunk)
            transfer._count(len(chunk), 0)
            await sink.drain()
    finally:
        sink.close()
