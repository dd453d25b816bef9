"""The serial console of a kvm instance, streamed by the node daemon over its mutual TLS.

``GET /stream/1/console?instance=NAME`` is upgraded to a WebSocket: binary messages
from the client are written to the guest's serial console (the unix socket qemu
listens on), and what the guest prints comes back as binary messages. A WebSocket
rather than a raw upgraded stream because aiohttp speaks it on both ends, frames the
bytes, and says when either side closes; the TLS and the client certificate are
those of every node RPC.

Attaching writes to the guest, so only the master's client certificate may do it,
like the procedures that change the node (:func:`corral.noded.server.check_caller`).
qemu serves one client at a time on the socket; a second console waits until the
first detaches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from aiohttp import WSMsgType, web

from corral.errors import NotFoundError, ParameterError
from corral.hypervisor.kvm.console import serial_socket_path
from corral.hypervisor.kvm.runtime import open_unix_connection
from corral.paths import Paths
from corral.rpc.protocol import CONSOLE_STREAM_PATH

__all__ = ["CONSOLE_CALLER", "CONSOLE_STREAM_PATH", "relay_console", "serial_socket"]

log = logging.getLogger("corral.noded")

#: The name the caller check gives the console stream (it is not an open procedure).
CONSOLE_CALLER = "console_attach"

#: How much one read of the serial socket takes at most.
CHUNK = 4096


def serial_socket(paths: Paths, instance: str) -> Path:
    """The serial console socket of ``instance`` running under kvm on this node.

    :raises ParameterError: no instance named.
    :raises NotFoundError: the instance does not run here under kvm, or has no serial
        console (``serial_console`` off).
    """
    if not instance:
        raise ParameterError("the console stream needs ?instance=<instance name>")
    socket_path = serial_socket_path(paths, instance)
    if socket_path is None:
        raise NotFoundError(
            f"instance {instance} has no serial console on this node: it does not run "
            "here under kvm, or its serial_console parameter is off")
    return socket_path


async def relay_console(request: web.Request, socket_path: Path, instance: str
                        ) -> web.StreamResponse:
    """Connect to the serial socket, upgrade ``request`` and relay both ways until
    either side closes."""
    try:
        reader, writer = await open_unix_connection(socket_path)
    except OSError as err:
        raise NotFoundError(
            f"cannot connect to the serial console of instance {instance}: {err}") from None
    ws = web.WebSocketResponse(heartbeat=30.0)
    try:
        await ws.prepare(request)
        log.info("console of %s attached by %s", instance, request.remote)
        await _pump(ws, reader, writer)
    finally:
        writer.close()
        with contextlib.suppress(OSError, ConnectionError):
            await writer.wait_closed()
        await ws.close()
        log.info("console of %s detached (%s)", instance, request.remote)
    return ws


async def _pump(ws: web.WebSocketResponse, reader: asyncio.StreamReader,
                writer: asyncio.StreamWriter) -> None:
    """Guest output to the client and client input to the guest; returns when one of
    the two directions ends, after stopping the other."""

    async def guest_to_client() -> None:
        while chunk := await reader.read(CHUNK):
            await ws.send_bytes(chunk)

    async def client_to_guest() -> None:
        async for msg in ws:
            if msg.type == WSMsgType.BINARY:
                writer.write(msg.data)
                await writer.drain()
            elif msg.type == WSMsgType.TEXT:
                writer.write(msg.data.encode())
                await writer.drain()
            else:
                break

    tasks = [asyncio.create_task(guest_to_client()), asyncio.create_task(client_to_guest())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    for result in results:
        if isinstance(result, Exception):
            log.debug("console relay ended: %s", result)
