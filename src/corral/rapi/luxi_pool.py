"""A pool of luxi connections to the master daemon, shared by all RAPI requests.

A luxi connection answers one call at a time, and some calls wait (``WaitForJobChange``
for up to ten seconds), so each call borrows an idle connection, or opens a new one,
and gives it back afterwards. Opening a Unix socket connection per request would work
too; reusing them saves a connect and an accept on every request.

A connection that failed, timed out or was abandoned mid-call (the request was
cancelled) is closed, never reused: its next answer could belong to the old call.
A call that only reads and failed on a reused connection (the master daemon was
restarted meanwhile) is retried once on a fresh one; a call that changes something is
never retried, since the master may have acted on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any, Final

from corral.errors import CorralError, MasterUnreachableError, ProtocolError
from corral.luxi import AsyncClient

__all__ = ["READ_ONLY_METHODS", "LuxiPool"]

log = logging.getLogger(__name__)

#: Methods that change nothing, so a failed attempt can be repeated.
READ_ONLY_METHODS: Final = frozenset({
    "QueryClusterInfo", "QueryConfigValues", "QueryTags", "QueryJobs", "Query",
    "QueryFields", "QueryFilters", "WaitForJobChange",
})

#: Longest any call may take, above WaitForJobChange's own timeout (seconds).
CALL_TIMEOUT: Final = 60.0


class LuxiPool:
    """Connections to the master daemon at ``path``, at most ``max_idle`` kept idle."""

    def __init__(self, path: Path, *, max_idle: int = 16,
                 timeout: float = CALL_TIMEOUT) -> None:
        self.path = path
        self.max_idle = max_idle
        self.timeout = timeout
        self._idle: list[AsyncClient] = []
        self._closed = False

    async def call(self, method: str, *args: Any, read_only: bool | None = None) -> Any:
        """Call ``method`` on the master daemon and return its result (or raise its error).

        ``read_only`` says whether this call changes nothing (so may be repeated);
        by default, whether ``method`` is in :data:`READ_ONLY_METHODS`.
        """
        reused = bool(self._idle)
        if read_only is None:
            read_only = method in READ_ONLY_METHODS
        try:
            return await self._call_once(method, args)
        except (ProtocolError, MasterUnreachableError):
            if not (reused and read_only):
                raise
            log.info("luxi connection lost; retrying %s on a new connection", method)
            return await self._call_once(method, args)

    async def _call_once(self, method: str, args: tuple[Any, ...]) -> Any:
        client = self._idle.pop() if self._idle else AsyncClient(self.path)
        healthy = False
        try:
            async with asyncio.timeout(self.timeout):
                result = await client.call(method, *args)
            healthy = True
            return result
        except TimeoutError:
            raise MasterUnreachableError(
                f"the master daemon did not answer {method} within {self.timeout:g} s"
            ) from None
        except (ProtocolError, MasterUnreachableError):
            raise
        except CorralError:
            # The master answered with an error: the connection is in step.
            healthy = True
            raise
        finally:
            if healthy and not self._closed and len(self._idle) < self.max_idle:
                self._idle.append(client)
            else:
                await _close_quietly(client)

    async def close(self) -> None:
        """Close every idle connection; later calls still work but are not pooled."""
        self._closed = True
        idle, self._idle = self._idle, []
        for client in idle:
            await _close_quietly(client)


async def _close_quietly(client: AsyncClient) -> None:
    # Closing must not hide the error being raised; the socket itself is closed before
    # the first suspension point, so even a cancelled close leaves nothing open.
    with contextlib.suppress(Exception):
        await client.close()
