"""Attaching the terminal to a kvm instance's serial console over the node daemon.

The node daemon of the instance's primary node serves the console as a WebSocket
(:data:`corral.noded.console.CONSOLE_STREAM_PATH`) under the cluster's mutual TLS,
for the master's client certificate only; this module connects with that certificate
from the machine's :class:`~corral.paths.Paths` and relays standard input to the guest
and the guest's output to standard output, without SSH.

On a terminal, standard input is put in raw mode (every key goes to the guest,
Ctrl-C included) and restored however the session ends; ``Ctrl-]`` (byte 0x1d)
detaches, as in telnet and virsh. Standard input may also be a pipe: its bytes go to
the guest, a 0x1d in them detaches, and its end finishes the session once the
guest's output has had :data:`EOF_GRACE` seconds to arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import ssl
import sys
import termios
import threading
import tty
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import aiohttp

from corral.errors import NodeUnreachableError, OpExecError, ProtocolError
from corral.paths import Paths
from corral.rpc.client import decode_answer, node_client_context
from corral.rpc.protocol import CONSOLE_STREAM_PATH

__all__ = ["DETACH_BYTE", "EOF_GRACE", "ConsoleEndpoint", "Ending", "attach", "connect",
           "relay", "split_at_detach"]

#: ``Ctrl-]``: detaches from the console instead of going to the guest.
DETACH_BYTE = 0x1D

#: After standard input ends, how long the guest's output is still shown (seconds).
EOF_GRACE = 1.0

#: How a console session ended: the user detached, standard input ended, or the node
#: closed the console (the instance stopped, the node daemon went away).
Ending = Literal["detached", "eof", "closed"]


@dataclass(frozen=True)
class ConsoleEndpoint:
    """Where an instance's serial console is served: its primary node's daemon."""

    instance: str
    node: str
    ip: str
    port: int

    @property
    def url(self) -> str:
        """The WebSocket URL of the console stream."""
        host = f"[{self.ip}]" if ":" in self.ip else self.ip
        return f"https://{host}:{self.port}{CONSOLE_STREAM_PATH}?instance={self.instance}"


def split_at_detach(data: bytes) -> tuple[bytes, bool]:
    """The part of ``data`` to send to the guest, and whether it held ``Ctrl-]``
    (everything from that byte on is dropped)."""
    index = data.find(DETACH_BYTE)
    if index < 0:
        return data, False
    return data[:index], True


async def relay(ws: aiohttp.ClientWebSocketResponse, keys: asyncio.Queue[bytes | None],
                write: Callable[[bytes], None], *, eof_grace: float = EOF_GRACE) -> Ending:
    """Send ``keys`` (``None`` = end of input) to the console and ``write`` what it
    prints, until the user detaches, the input ends or the node closes the stream."""
    output_done = asyncio.Event()

    async def show() -> None:
        try:
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.BINARY:
                    write(msg.data)
                elif msg.type == aiohttp.WSMsgType.TEXT:
                    write(msg.data.encode())
                else:
                    break
        finally:
            output_done.set()

    async def send() -> Ending:
        while True:
            chunk = await keys.get()
            if chunk is None:
                return "eof"
            data, detach = split_at_detach(chunk)
            if data:
                await ws.send_bytes(data)
            if detach:
                return "detached"

    shower = asyncio.create_task(show())
    sender = asyncio.create_task(send())
    try:
        await asyncio.wait([shower, sender], return_when=asyncio.FIRST_COMPLETED)
        if not sender.done():
            return "closed"
        ending = sender.result()
        if ending == "eof":
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(output_done.wait(), eof_grace)
        return ending
    finally:
        for task in (shower, sender):
            task.cancel()
        await asyncio.gather(shower, sender, return_exceptions=True)
        await ws.close()


def _read_input(fd: int, loop: asyncio.AbstractEventLoop,
                keys: asyncio.Queue[bytes | None]) -> None:
    """Read ``fd`` until its end into ``keys`` (a daemon thread: works for terminals,
    pipes and files alike, and never holds up the exit)."""
    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:
            data = b""
        loop.call_soon_threadsafe(keys.put_nowait, data or None)
        if not data:
            return


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


async def connect(session: aiohttp.ClientSession, endpoint: ConsoleEndpoint,
                   ctx: ssl.SSLContext) -> aiohttp.ClientWebSocketResponse:
    """The console WebSocket; the node's own error when it refuses the upgrade."""
    try:
        return await session.ws_connect(endpoint.url, ssl=ctx, heartbeat=30.0)
    except aiohttp.WSServerHandshakeError:
        pass  # the node refused: ask again without the upgrade to read its error
    except (aiohttp.ClientError, OSError) as err:
        raise NodeUnreachableError(
            f"cannot reach the node daemon of {endpoint.node} ({endpoint.ip} port "
            f"{endpoint.port}) for the console of instance {endpoint.instance}: "
            f"{err}") from None
    async with session.get(endpoint.url, ssl=ctx) as response:
        await decode_answer(endpoint.node, response)
    raise ProtocolError(f"node {endpoint.node} refused the console WebSocket of instance "
                        f"{endpoint.instance} without saying why")


async def _session(endpoint: ConsoleEndpoint, ctx: ssl.SSLContext, stdin: int,
                   stdout: int, on_attached: Callable[[], None]) -> Ending:
    async with aiohttp.ClientSession() as session:
        ws = await connect(session, endpoint, ctx)
        on_attached()
        keys: asyncio.Queue[bytes | None] = asyncio.Queue()
        threading.Thread(target=_read_input, args=(stdin, asyncio.get_running_loop(), keys),
                         name="console-input", daemon=True).start()
        return await relay(ws, keys, lambda data: _write_all(stdout, data))


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def attach(paths: Paths, endpoint: ConsoleEndpoint, *, stdin: int | None = None,
           stdout: int | None = None) -> Ending:
    """Attach standard input and output to the instance's serial console until the
    user detaches (``Ctrl-]``), standard input ends or the node closes the console.

    :raises OpExecError: this machine holds no master client certificate.
    :raises CorralError: the node refused or could not be reached.
    """
    if not paths.master_client_cert.exists():
        raise OpExecError(
            f"cannot attach to the console of instance {endpoint.instance}: this machine "
            f"has no master client certificate ({paths.master_client_cert}); run the "
            "command on the master or a master candidate")
    stdin = sys.stdin.fileno() if stdin is None else stdin
    stdout = sys.stdout.fileno() if stdout is None else stdout
    ctx = node_client_context(paths, as_master=True)
    saved = termios.tcgetattr(stdin) if os.isatty(stdin) else None
    newline = "\r\n" if saved is not None else "\n"

    def attached() -> None:
        sys.stderr.write(f"Connected to the console of instance {endpoint.instance} on "
                         f"{endpoint.node}. Escape character is '^]'.{newline}")
        sys.stderr.flush()
        if saved is not None:
            tty.setraw(stdin, termios.TCSANOW)

    # Being terminated or losing the terminal must still restore it: end by SystemExit.
    previous = {signum: signal.signal(signum, _exit_on_signal)
                for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        ending = asyncio.run(_session(endpoint, ctx, stdin, stdout, attached))
    finally:
        if saved is not None:
            with contextlib.suppress(termios.error):
                termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if ending == "detached":
        sys.stderr.write(f"{newline}Detached from the console of instance "
                         f"{endpoint.instance}.\n")
    return ending
