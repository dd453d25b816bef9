"""Pushing the configuration to the master candidates after every commit.

The master keeps a short log of its recent commits (the rows written and the UUIDs
deleted, by serial). After a commit it wakes one background task that brings every
online master candidate up to date in one round: a candidate whose replica serial is
known gets one *delta* covering all the commits since that serial, coalesced (an
object changed five times travels once, in its last state); a candidate whose serial
is older than the log, or whose replica refuses the delta, gets a *snapshot*; a
candidate the master has not heard from yet is first asked for its serial, so a
master that restarts does not resend everything. Candidates are called concurrently
and each keeps its own pace: a slow or dead candidate never delays the others or the
commit, and one that was down catches up when it answers again (retried every few
seconds). See :mod:`corral.noded.replication` for the node side.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Sequence
from typing import Any

from corral.cmdlib.base import NodeRpc
from corral.config import ConfigStore, Row
from corral.objects import Node

__all__ = ["ConfigReplicator"]

log = logging.getLogger(__name__)


def _rows(rows: Sequence[Row]) -> list[list[Any]]:
    return [[r.kind, r.uuid, r.serial, r.json.decode()] for r in rows]


class ConfigReplicator:
    """Keeps the master candidates' configuration replicas in step with the store."""

    def __init__(self, store: ConfigStore, rpc: NodeRpc, *, log_size: int = 1000,
                 retry_interval: float = 5.0, rpc_timeout: float = 30.0) -> None:
        self.store = store
        self.rpc = rpc
        self.retry_interval = retry_interval
        self.rpc_timeout = rpc_timeout
        self._log: deque[tuple[int, Sequence[Row], Sequence[str]]] = deque(maxlen=log_size)
        #: Node UUID -> the serial its replica confirmed.
        self._known: dict[str, int] = {}
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        store.add_listener(self._committed)

    # -- life cycle ----------------------------------------------------------------
    def start(self) -> None:
        """Start the background task (a first round runs at once)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="config-replication")
            self._wake.set()

    async def stop(self) -> None:
        """Stop the background task."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _committed(self, serial: int, rows: Sequence[Row], deletes: Sequence[str]) -> None:
        self._log.append((serial, rows, deletes))
        self._wake.set()

    # -- what is where ---------------------------------------------------------------
    def candidates(self) -> list[Node]:
        """The online master candidates other than the master itself."""
        master = self.store.cluster.master_node
        return [n for n in self.store.all("node")
                if n.master_candidate and not n.offline and n.uuid != master]

    def replica_serials(self) -> dict[str, int | None]:
        """Candidate name -> the serial its replica confirmed (None: not yet heard)."""
        return {n.name: self._known.get(n.uuid) for n in self.candidates()}

    def _behind(self) -> list[Node]:
        serial = self.store.serial
        return [n for n in self.candidates() if self._known.get(n.uuid) != serial]

    async def wait_replicated(self, timeout: float) -> bool:  # noqa: ASYNC109
        """Wait until every online candidate has the current serial; False on timeout."""
        try:
            async with asyncio.timeout(timeout):
                while self._behind():
                    self._idle.clear()
                    self._wake.set()
                    await self._idle.wait()
                    if self._behind():  # a candidate did not answer: let it breathe
                        await asyncio.sleep(0.05)
        except TimeoutError:
            return False
        return True

    # -- pushing ---------------------------------------------------------------------
    def _delta(self, base: int) -> dict[str, Any] | None:
        """The coalesced delta from ``base`` to now, or None if the log does not
        reach back to ``base``."""
        entries = [entry for entry in self._log if entry[0] > base]
        if not entries or entries[0][0] != base + 1:
            return None
        upserts: dict[str, Row] = {}
        deleted: set[str] = set()
        for _serial, rows, deletes in entries:
            for row in rows:
                upserts[row.uuid] = row
                deleted.discard(row.uuid)
            for uuid in deletes:
                upserts.pop(uuid, None)
                deleted.add(uuid)
        return {"base": base, "serial": entries[-1][0], "upserts": _rows(list(upserts.values())),
                "deletes": sorted(deleted)}

    def _payload(self, node: Node) -> dict[str, Any]:
        known = self._known.get(node.uuid)
        if known is None:
            return {"serial_only": True}
        delta = self._delta(known) if known < self.store.serial else None
        if delta is not None:
            return delta
        return {"snapshot": True, "serial": self.store.serial,
                "upserts": _rows(self.store.rows())}

    async def push_round(self) -> bool:
        """Bring every candidate that is behind one step forward; True when a
        candidate made progress (another round may finish the job at once)."""
        behind = self._behind()
        if not behind:
            return False
        payloads = {n.name: self._payload(n) for n in behind}
        results = await self.rpc.call(behind, "config_replicate",
                                      lambda node: payloads[node.name],
                                      timeout=self.rpc_timeout)
        progress = False
        for node in behind:
            result = results[node.name]
            if result.error is not None:
                log.warning("replicating the configuration to %s: %s", node.name,
                            result.error.message)
                continue
            answer = result.payload if isinstance(result.payload, dict) else {}
            serial = answer.get("serial")
            if isinstance(serial, int):
                before = self._known.get(node.uuid)
                self._known[node.uuid] = serial
                progress = progress or serial != before
                if not answer.get("applied", True):
                    log.info("replica of %s is at serial %d: sending a snapshot",
                             node.name, serial)
                    self._known[node.uuid] = -1  # below any log entry: snapshot next
                    progress = True
        return progress

    async def _run(self) -> None:
        while True:
            timeout = self.retry_interval if self._behind() else None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            self._wake.clear()
            try:
                while await self.push_round():
                    pass
            except Exception:  # a bug here must not stop replication for good
                log.exception("configuration replication round failed")
            self._idle.set()
