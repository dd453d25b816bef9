"""The luxi server: an asyncio Unix-socket listener that dispatches requests.

Each connection is one coroutine, so an idle or slow client costs a coroutine and
never a thread (design 2.2, "connection handling"). Requests on one connection are
answered in order; different connections are served concurrently.

A connection may stay idle between requests as long as its client likes (RAPI keeps
idle connections for reuse), but a request, once its first byte has arrived, must be
complete within :data:`REQUEST_TIMEOUT` seconds: a client that sends a byte now and
then is answered with a protocol error and disconnected, so that it holds nothing
(not even its buffer) for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from corral.errors import CorralError, ProtocolError, unexpected
from corral.luxi.protocol import (
    EOM,
    MAX_MESSAGE_BYTES,
    Request,
    decode_request,
    encode_error,
    encode_result,
)

__all__ = ["REQUEST_TIMEOUT", "Dispatcher", "LuxiServer"]

log = logging.getLogger(__name__)

#: Seconds a request may take to arrive once its first byte has (a gnt-* command or
#: RAPI writes a whole request at once; a large job takes milliseconds).
REQUEST_TIMEOUT = 60.0

#: Answers a request; raises :class:`CorralError` to report a failure to the client.
Dispatcher = Callable[[Request], Awaitable[Any]]


class LuxiServer:
    """Serve luxi on a Unix socket at ``path`` (mode 0660; group ``group`` if given, so
    that an unprivileged client in that group, RAPI, may connect); a request must arrive
    whole within ``request_timeout`` seconds of its first byte."""

    def __init__(self, path: Path, dispatch: Dispatcher, *, group: int | None = None,
                 request_timeout: float = REQUEST_TIMEOUT) -> None:
        self.path = path
        self.group = group
        self.request_timeout = request_timeout
        self._dispatch = dispatch
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Bind the socket (replacing a stale socket file) and start accepting."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        old_umask = os.umask(0o117)
        try:
            self._server = await asyncio.start_unix_server(
                self._serve, path=str(self.path), limit=MAX_MESSAGE_BYTES
            )
        finally:
            os.umask(old_umask)
        if self.group is not None:
            os.chown(self.path, -1, self.group)

    async def stop(self) -> None:
        """Stop accepting, end open connections and remove the socket file."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while True:
                try:
                    frame = await self._read_request(reader)
                except asyncio.IncompleteReadError:
                    return  # client went away (between requests, or in the middle of one)
                except asyncio.LimitOverrunError:
                    writer.write(encode_error(ProtocolError("luxi request too large")))
                    return
                except TimeoutError:
                    log.warning("dropped a luxi client whose request did not arrive within "
                                "%g s", self.request_timeout)
                    writer.write(encode_error(ProtocolError(
                        f"luxi request not complete within {self.request_timeout:g} s of its "
                        "first byte; the connection is closed")))
                    return
                writer.write(await self._answer(frame))
                await writer.drain()
        except ConnectionError:
            return
        finally:
            self._connections.discard(task)
            writer.close()

    async def _read_request(self, reader: asyncio.StreamReader) -> bytes:
        """The next request (without its EOM byte): the wait for its first byte is
        unbounded, the rest must follow within :attr:`request_timeout`."""
        first = await reader.readexactly(1)
        if first == EOM:
            return b""
        async with asyncio.timeout(self.request_timeout):
            rest = await reader.readuntil(EOM)
        return first + rest[:-1]

    async def _answer(self, frame: bytes) -> bytes:
        what = "luxi request"
        try:
            request = decode_request(frame)
            what = f"luxi method {request.method}"
            return encode_result(await self._dispatch(request))
        except CorralError as err:
            return encode_error(err)
        except Exception as err:  # a bug: log it, answer without its text, keep serving
            return encode_error(unexpected(err, log, what, "corral-masterd"))
