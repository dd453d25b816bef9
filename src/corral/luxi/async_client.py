"""The asyncio client of the master daemon's luxi socket, for daemons, the testbed and
benchmarks (the command line uses the blocking :class:`~corral.luxi.client.Client`)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from corral.errors import ProtocolError
from corral.luxi.calls import LuxiArgs, encode_args
from corral.luxi.client import unreachable
from corral.luxi.protocol import EOM, MAX_MESSAGE_BYTES, decode_response, encode_request

__all__ = ["AsyncClient"]


class AsyncClient:
    """An asyncio luxi client; calls on one client are serialised."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()

    async def call(self, method: str, *args: Any) -> Any:
        """Call ``method`` on the master daemon and return its result."""
        async with self._lock:
            if self._writer is None:
                try:
                    self._reader, self._writer = await asyncio.open_unix_connection(
                        str(self.path), limit=MAX_MESSAGE_BYTES
                    )
                except OSError as err:
                    raise unreachable(self.path, err) from None
            assert self._reader is not None
            self._writer.write(encode_request(method, list(args)))
            try:
                await self._writer.drain()
                frame = await self._reader.readuntil(EOM)
            except (asyncio.IncompleteReadError, ConnectionError) as err:
                await self._close_locked()
                raise ProtocolError(f"the master daemon closed the connection: {err}") from None
            return decode_response(frame[:-1])

    async def send(self, args: LuxiArgs) -> Any:
        """Call the method ``args`` is the arguments of (its class names it)."""
        return await self.call(type(args).__name__, *encode_args(args))

    async def _close_locked(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(ConnectionError):
                await self._writer.wait_closed()
            self._writer = self._reader = None

    async def close(self) -> None:
        """Close the connection."""
        async with self._lock:
            await self._close_locked()
