"""Talking to a running qemu over QMP (with ``qemu.qmp``'s asyncio client).

One connection per operation: noded makes a hypervisor per procedure call and keeps
no connection between calls, and qemu's QMP server takes a new client whenever the
previous one has gone::

    async with monitor(runtime.qmp_socket) as qmp:
        status = await qmp.execute("query-status")

A qemu that is not there (no socket, connection refused) is a
:class:`~corral.errors.HypervisorError` naming the socket; qemu refusing a command is
``qemu.qmp.ExecuteError`` (:func:`qmp_command` turns it into a HypervisorError quoting
qemu).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from qemu.qmp import ExecuteError, QMPClient

from corral.errors import HypervisorError

__all__ = ["ExecuteError", "monitor", "qmp_command"]

#: How long connecting to a live qemu's QMP socket may take, in seconds.
CONNECT_TIMEOUT = 10.0

# qemu.qmp logs every connection and disconnection at INFO or WARNING; noded's log
# needs none of it.
logging.getLogger("qemu.qmp").setLevel(logging.ERROR)


@contextlib.asynccontextmanager
async def monitor(
    socket_path: Path | str,
    *,
    timeout: float = CONNECT_TIMEOUT,  # noqa: ASYNC109 - bounds the connection only
    name: str = "corral",
) -> AsyncIterator[QMPClient]:
    """A connected QMP client for the qemu listening on ``socket_path``, disconnected
    when the block ends."""
    client = QMPClient(name)
    try:
        async with asyncio.timeout(timeout):
            await client.connect(str(socket_path))
    except (OSError, TimeoutError, EOFError) as err:
        with contextlib.suppress(Exception):
            await client.disconnect()
        raise HypervisorError(
            f"cannot connect to qemu's monitor at {socket_path}: {err or type(err).__name__}"
        ) from err
    except Exception as err:  # qemu.qmp's ConnectError and negotiation errors
        with contextlib.suppress(Exception):
            await client.disconnect()
        raise HypervisorError(
            f"cannot connect to qemu's monitor at {socket_path}: {err}") from err
    try:
        yield client
    finally:
        with contextlib.suppress(Exception):
            await client.disconnect()


async def qmp_command(
    socket_path: Path | str, command: str, arguments: dict[str, Any] | None = None,
) -> Any:
    """Run one QMP command on a fresh connection; its result. qemu's refusal is a
    :class:`~corral.errors.HypervisorError` quoting qemu's message."""
    async with monitor(socket_path) as qmp:
        try:
            return await qmp.execute(command, arguments)
        except ExecuteError as err:
            raise HypervisorError(f"qemu refused {command}: {err.error.error.desc}") from err
