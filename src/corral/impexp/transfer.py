"""Running one transfer: an importer that listens, or an exporter that connects.

A :class:`Transfer` is started by the node daemon (:func:`start_import`,
:func:`start_export`) and followed by a task of its event loop; the processes of its
pipeline (:mod:`corral.impexp.pipeline`) do the disk I/O and the compression. The
connection itself (TLS, handshake, frames) runs in a worker thread with a blocking
socket: the ``ssl`` module then encrypts whole megabytes in C with the GIL released,
where asyncio's TLS transport moves every record through Python code and reached
less than half the speed on the same machine (see docs/backup.md). The event loop
is never blocked; aborting a transfer shuts its sockets down, which ends the thread.
Its :meth:`Transfer.status` (state, bytes, rate, ETA) is what the master polls to
follow it and write progress to the job log.

An importer listens on the first free port of a range, accepts connections until one
passes the handshake (:mod:`corral.impexp.wire`), then stops listening. The TLS
contexts come from the caller: the cluster's certificates for a transfer inside a
cluster, per-move certificates for one between clusters.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Literal

from corral.errors import CorralError, NodeUnreachableError, ParameterError, ProtocolError
from corral.impexp import wire
from corral.impexp.compression import NO_COMPRESSION, compress_argv, decompress_argv
from corral.impexp.pipeline import Endpoint, Stage, kill_stages, sink_stages, source_stages

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
        #: The sockets of the data thread, shut down to stop it.
        self.sockets: list[socket.socket] = []
        self.stopping = threading.Event()
        #: Set by an importer once all data went to its destination processes.
        self.input_complete = threading.Event()
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
        self.stop_sockets()
        if self.task is not None and not self.task.done():
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        self._drop_partial()

    def stop_sockets(self) -> None:
        """Shut the data thread's sockets down: its blocking calls return at once."""
        self.stopping.set()
        for sock in list(self.sockets):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

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


async def _in_own_thread(name: str, function: Callable[..., None], *args: Any) -> None:
    """Run ``function(*args)`` in a thread of its own (not the loop's default executor:
    a transfer holds its thread for minutes, and the node daemon's short file
    operations must not queue behind it); its exception is raised here."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if future.done():
            return
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)

    def run() -> None:
        try:
            function(*args)
        except BaseException as err:  # handed to the awaiting task, raised there
            loop.call_soon_threadsafe(settle, err)
        else:
            loop.call_soon_threadsafe(settle, None)

    threading.Thread(target=run, name=name, daemon=True).start()
    await future


def _message(err: BaseException) -> str:
    return getattr(err, "message", None) or str(err) or type(err).__name__


class _Lines:
    """Reading ``\n``-ended lines from a blocking socket, at most ``limit`` bytes."""

    def __init__(self, sock: ssl.SSLSocket) -> None:
        self.sock = sock

    def line(self, what: str, limit: int = 512) -> str:
        data = b""
        while not data.endswith(b"\n"):
            chunk = self.sock.recv(1)
            if not chunk:
                raise ProtocolError(f"the peer closed the connection {what}"
                                    + (f" after {data!r}" if data else ""))
            data += chunk
            if len(data) > limit:
                raise ProtocolError(f"the peer's line {what} is too long")
        return data.decode("utf-8", "replace").rstrip("\n")


def _recv_exactly(sock: ssl.SSLSocket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ProtocolError("the stream ended before the exporter said it was done "
                                "(connection cut)")
        got += n


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        written = os.write(fd, data)
        data = data[written:]


# -- importer -------------------------------------------------------------------------
async def start_import(transfer: Transfer, host: str, ports: tuple[int, int],
                       context: ssl.SSLContext, *, accept_timeout: float) -> int:
    """Listen on the first free port of ``ports`` (inclusive) and run ``transfer``
    for the first connection that passes the handshake; the port."""
    _codec(transfer.compression, "import")  # an unknown tool fails before listening
    listener = None
    for port in range(ports[0], ports[1] + 1):
        candidate = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        try:
            candidate.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            candidate.bind((host, port))
            candidate.listen(4)
        except OSError:
            candidate.close()
            continue
        listener, transfer.port = candidate, port
        break
    if listener is None:
        raise ParameterError(f"no free port in {ports[0]}-{ports[1]} on {host} to import "
                             "into")
    transfer.sockets.append(listener)
    transfer.task = asyncio.create_task(_import(transfer, listener, context, accept_timeout),
                                        name=f"impexp-{transfer.name}")
    if transfer._on_change is not None:
        transfer._on_change(transfer)
    return transfer.port or 0


async def _import(transfer: Transfer, listener: socket.socket, context: ssl.SSLContext,
                  accept_timeout: float) -> None:
    loop = asyncio.get_running_loop()
    stages: list[Stage] = []
    watcher: asyncio.Task[None] | None = None
    sink = -1

    def start_sink() -> int:
        """Called by the thread once the right exporter is there."""
        nonlocal sink, watcher

        async def start() -> int:
            nonlocal watcher
            found, fd = await sink_stages(transfer.end,
                                          _codec(transfer.compression, "import"), log_file)
            stages.extend(found)
            transfer.pids = [stage.proc.pid for stage in stages]
            watcher = asyncio.create_task(_watch_early_exit(transfer, stages))
            transfer.data_started = time.time()
            transfer._set("running")
            return fd
        sink = asyncio.run_coroutine_threadsafe(start(), loop).result()
        return sink

    def finish_sink() -> list[str]:
        """Called by the thread after the last byte: close the input, wait."""
        nonlocal sink
        transfer.input_complete.set()  # the processes may end now: not an early exit
        os.close(sink)
        sink = -1

        async def wait() -> list[str]:
            if watcher is not None:
                watcher.cancel()
            return [f for f in await asyncio.gather(*(s.wait() for s in stages)) if f]
        return asyncio.run_coroutine_threadsafe(wait(), loop).result()

    with transfer._open_log() as log_file:
        try:
            await _in_own_thread(f"impexp-{transfer.name}", _import_thread, transfer,
                                 listener, context, accept_timeout, start_sink, finish_sink)
            transfer._set("done")
        except (CorralError, OSError, ssl.SSLError, TimeoutError) as err:
            if transfer.state not in FINAL_STATES:
                transfer._set("failed", f"{_message(err)} after {transfer.wire_bytes} bytes")
            await kill_stages(stages)
            transfer._drop_partial()
        except BaseException:
            transfer.stop_sockets()
            await kill_stages(stages)
            transfer._drop_partial()
            raise
        finally:
            if watcher is not None:
                watcher.cancel()
            if sink >= 0:
                os.close(sink)
            listener.close()


def _import_thread(transfer: Transfer, listener: socket.socket, context: ssl.SSLContext,
                   accept_timeout: float, start_sink: Callable[[], int],
                   finish_sink: Callable[[], list[str]]) -> None:
    """Accept until the right exporter arrives, then receive its frames into the
    sink (runs in a worker thread)."""
    deadline = time.monotonic() + accept_timeout
    while True:
        if transfer.stopping.is_set():
            raise CorralError("stopped")
        left = deadline - time.monotonic()
        if left <= 0:
            raise CorralError(f"no exporter connected within {accept_timeout:g} s")
        listener.settimeout(left)
        try:
            raw, peer = listener.accept()
        except TimeoutError:
            continue
        raw.settimeout(CONNECT_TIMEOUT)
        try:
            conn = context.wrap_socket(raw, server_side=True)
            wire.parse_hello(_Lines(conn).line("during the handshake").encode() + b"\n",
                             transfer.magic, transfer.compression)
        except (wire.TransferRefused, ProtocolError) as err:
            log.warning("transfer %s: refused a connection from %s: %s", transfer.name,
                        peer, err)
            with contextlib.suppress(OSError):
                conn.sendall(f"ERR {err}\n".encode())
                conn.close()
            continue
        except (OSError, ssl.SSLError):
            raw.close()
            continue
        break
    listener.close()
    transfer.peer = str(peer[0])
    transfer.sockets.append(conn)
    try:
        try:
            sink = start_sink()
            conn.sendall(b"OK\n")
            conn.settimeout(None)
            _receive_frames(transfer, conn, sink)
            failures = finish_sink()
            if failures:
                raise CorralError("; ".join(failures) + f" (log {transfer.log_path})")
        except (CorralError, OSError, ssl.SSLError) as err:
            if transfer.state in FINAL_STATES:  # the watcher or an abort said why
                raise
            with contextlib.suppress(OSError, ssl.SSLError):
                conn.settimeout(5)
                conn.sendall(f"ERR {_message(err)}\n".encode())
            raise
        conn.settimeout(30)
        conn.sendall(f"DONE {transfer.wire_bytes}\n".encode())
    finally:
        conn.close()


_LENGTH = struct.Struct(">I")
_COUNT = struct.Struct(">Q")


def _receive_frames(transfer: Transfer, conn: ssl.SSLSocket, sink: int) -> None:
    header = bytearray(_LENGTH.size)
    buffer = bytearray(wire.FRAME_MAX)
    while True:
        _recv_exactly(conn, memoryview(header))
        (length,) = _LENGTH.unpack(header)
        if length == 0:
            count = bytearray(_COUNT.size)
            _recv_exactly(conn, memoryview(count))
            (sent,) = _COUNT.unpack(count)
            if sent != transfer.wire_bytes:
                raise ProtocolError(f"the exporter says it sent {sent} bytes but "
                                    f"{transfer.wire_bytes} arrived")
            return
        if length > wire.FRAME_MAX:
            raise ProtocolError(f"frame of {length} bytes; at most {wire.FRAME_MAX} are "
                                "accepted")
        view = memoryview(buffer)[:length]
        _recv_exactly(conn, view)
        _write_all(sink, view)
        transfer._count(length, length)


async def _watch_early_exit(transfer: Transfer, stages: list[Stage]) -> None:
    """A destination process that ends while data still flows (the import script
    failed, the writer was killed) fails the transfer at once, rather than when the
    exporter next sends: the connection is shut down."""
    await asyncio.wait([asyncio.ensure_future(s.proc.wait()) for s in stages],
                       return_when=asyncio.FIRST_COMPLETED)
    if transfer.input_complete.is_set():
        return
    stage = next(s for s in stages if s.proc.returncode is not None)
    failure = await stage.wait() or f"{stage.what} ended before the data did"
    transfer._set("failed", f"{failure} after {transfer.wire_bytes} bytes (log "
                  f"{transfer.log_path})")
    transfer.stop_sockets()


# -- exporter -------------------------------------------------------------------------
async def start_export(transfer: Transfer, host: str, port: int, context: ssl.SSLContext,
                       *, bandwidth: float = 0.0) -> None:
    """Start sending ``transfer`` to the importer at ``host``:``port``;
    ``bandwidth`` (bytes per second, 0 for no limit) caps the bytes on the wire."""
    _codec(transfer.compression, "export")
    transfer.peer = host
    transfer.task = asyncio.create_task(
        _export(transfer, host, port, context, bandwidth), name=f"impexp-{transfer.name}")
    if transfer._on_change is not None:
        transfer._on_change(transfer)


async def _export(transfer: Transfer, host: str, port: int, context: ssl.SSLContext,
                  bandwidth: float) -> None:
    loop = asyncio.get_running_loop()
    stages: list[Stage] = []
    source = -1

    def start_source() -> int:
        """Called by the thread once the importer said OK."""
        nonlocal source

        async def start() -> int:
            compress = _codec(transfer.compression, "export")
            found, fd = await source_stages(transfer.end, compress, log_file)
            stages.extend(found)
            transfer.pids = [stage.proc.pid for stage in stages]
            transfer.data_started = time.time()
            transfer._set("running")
            return fd
        source = asyncio.run_coroutine_threadsafe(start(), loop).result()
        return source

    def wait_source() -> list[str]:
        async def wait() -> list[str]:
            return [f for f in await asyncio.gather(*(s.wait() for s in stages)) if f]
        return asyncio.run_coroutine_threadsafe(wait(), loop).result()

    with transfer._open_log() as log_file:
        try:
            await _in_own_thread(f"impexp-{transfer.name}", _export_thread, transfer, host,
                                 port, context, bandwidth, start_source, wait_source)
            transfer._set("done")
        except (CorralError, OSError, ssl.SSLError, TimeoutError) as err:
            message = _message(err)
            if isinstance(err, (OSError, ssl.SSLError)) and not isinstance(err, TimeoutError):
                message = f"connection to the importer lost: {message}"
            transfer._set("failed", f"{message} after {transfer.data_bytes} bytes")
            await kill_stages(stages)
        except BaseException:
            transfer.stop_sockets()
            await kill_stages(stages)
            raise
        finally:
            if source >= 0:
                os.close(source)


def _export_thread(transfer: Transfer, host: str, port: int, context: ssl.SSLContext,
                   bandwidth: float, start_source: Callable[[], int],
                   wait_source: Callable[[], list[str]]) -> None:
    """Connect, shake hands, send the source's output as frames, wait for DONE (runs
    in a worker thread)."""
    try:
        raw = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT)
    except OSError as err:
        raise NodeUnreachableError(f"cannot reach the importer at {host} port {port}: "
                                   f"{err.strerror or err}") from None
    transfer.sockets.append(raw)
    conn: ssl.SSLSocket | None = None
    try:
        try:
            conn = context.wrap_socket(raw, server_hostname=host)
            transfer.sockets.append(conn)
            conn.sendall(wire.encode_hello(transfer.magic, transfer.compression))
            answer = _Lines(conn).line("after the handshake")
        except (OSError, ssl.SSLError) as err:
            raise NodeUnreachableError(f"cannot reach the importer at {host} port {port}: "
                                       f"{_message(err)}") from None
        if answer.startswith("ERR "):
            raise wire.TransferRefused(answer[4:])
        if answer != "OK":
            raise ProtocolError(f"the importer answered {answer!r} to the handshake")
        source = start_source()
        conn.settimeout(None)
        try:
            _send_frames(transfer, conn, source, bandwidth)
        except (OSError, ssl.SSLError):
            # The importer may have said why before closing.
            with contextlib.suppress(OSError, ssl.SSLError, ProtocolError):
                conn.settimeout(2)
                reason = _Lines(conn).line("after an error")
                if reason.startswith("ERR "):
                    raise wire.TransferRefused(reason[4:]) from None
            raise
        failures = wait_source()
        if failures:
            raise CorralError("; ".join(failures) + f" (log {transfer.log_path})")
        conn.sendall(wire.encode_trailer(transfer.wire_bytes))
        done = _Lines(conn).line("before confirming the data")
        if done.startswith("ERR "):
            raise wire.TransferRefused(done[4:])
        if done != f"DONE {transfer.wire_bytes}":
            raise ProtocolError(f"the importer answered {done!r} at the end")
    finally:
        (conn or raw).close()


def _send_frames(transfer: Transfer, conn: ssl.SSLSocket, source: int,
                 bandwidth: float) -> None:
    begin = time.monotonic()
    # A compressor reading a file or device itself: its stdin position is the count.
    first = transfer.pids[0] if transfer.pids else None
    by_position = transfer.end.kind != "command" and transfer.compression != NO_COMPRESSION
    by_wchar = transfer.end.kind == "command" and transfer.compression != NO_COMPRESSION
    last_probe = 0.0
    while True:
        chunk = os.read(source, CHUNK)
        if not chunk:
            break
        conn.sendall(wire.encode_frame(chunk) + chunk)
        data = len(chunk)
        if by_position or by_wchar:
            data = 0
            now = time.monotonic()
            if first is not None and now - last_probe >= 0.25:
                last_probe = now
                done = _read_position(transfer.pids[-1]) if by_position else \
                    _read_wchar(first)
                data = max(0, done - transfer.data_bytes)
        transfer._count(data, len(chunk))
        if bandwidth > 0:
            ahead = transfer.wire_bytes / bandwidth - (time.monotonic() - begin)
            if ahead > 0:
                time.sleep(ahead)
    if by_position and transfer.end.kind == "file":
        size = Path(transfer.end.path).stat().st_size
        transfer._count(max(0, size - transfer.data_bytes), 0)


def _read_position(pid: int) -> int:
    """How far process ``pid`` has read its stdin (a file), from ``/proc``; 0 when
    that cannot be read (the process has ended)."""
    try:
        with open(f"/proc/{pid}/fdinfo/0") as info:
            for line in info:
                if line.startswith("pos:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _read_wchar(pid: int) -> int:
    """The bytes process ``pid`` has written in all (``wchar`` of ``/proc/<pid>/io``):
    what an export script produced; 0 when that cannot be read."""
    try:
        with open(f"/proc/{pid}/io") as info:
            for line in info:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0
