"""Pushing the configuration and the job queue to the master candidates.

Two streams follow the same rules: the configuration (one entry per commit, by the
cluster serial) and the job queue (one entry per group-commit batch, by the queue's
serial). The master keeps a short log of recent entries. After an entry it wakes one
background task per stream that brings every online master candidate up to date in
one round: a candidate whose replica serial is known gets one *delta* covering all
the entries since that serial, coalesced (a job updated five times travels once, in
its last state); a candidate further behind than the log, or whose replica refuses
the delta, gets a *snapshot*; a candidate the master has not heard from yet is first
asked for its serial, so a master that restarts does not resend everything.
An update larger than one request body goes in parts that the candidate applies
together (:mod:`corral.rpc.chunks`); a candidate that fails in the middle gets the
whole update again in a later round. Each candidate has a pusher task of its own
and keeps its own pace: a slow candidate, or a dead one whose calls hang until their
timeout, never delays the others, a commit or a job; one that was down is retried
every few seconds and catches up when it answers again. The node side is
:mod:`corral.noded.replication`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncGenerator, Sequence
from typing import Any, Generic, TypeVar

from corral.cmdlib.base import NodeRpc
from corral.config import ConfigStore, Row
from corral.config.replica import row_args, snapshot_args
from corral.jobs.store import JobRows, JobStore, job_row_args, job_snapshot_args
from corral.objects import Node
from corral.rpc import chunks
from corral.rpc.chunks import send_parts, session_calls, split_rows, split_update
from corral.rpc.protocol import RpcResult

__all__ = [
    "ConfigReplicator",
    "JobReplicator",
    "Replicator",
]

log = logging.getLogger(__name__)

_Entry = TypeVar("_Entry")


class Replicator(Generic[_Entry]):
    """One replicated stream; subclasses say what an entry is and how to send it."""

    #: The node procedure that applies this stream.
    PROCEDURE = ""
    #: What the stream is, for log messages.
    WHAT = ""

    def __init__(self, store: ConfigStore, rpc: NodeRpc, *, log_size: int = 1000,
                 retry_interval: float = 5.0, rpc_timeout: float = 30.0,
                 part_bytes: int | None = None) -> None:
        self.store = store
        self.rpc = rpc
        #: Rows per call at most; a larger update goes in parts (:mod:`corral.rpc.chunks`).
        self.part_bytes = chunks.part_bytes() if part_bytes is None else part_bytes
        self.retry_interval = retry_interval
        self.rpc_timeout = rpc_timeout
        self._log: deque[tuple[int, _Entry]] = deque(maxlen=log_size)
        #: Node UUID -> the serial its replica confirmed.
        self._known: dict[str, int] = {}
        #: Set after each entry (and by :meth:`wait_replicated`): wakes the pushers.
        self._wake = asyncio.Event()
        #: Set whenever a candidate's pusher finished a step, successful or not.
        self._stepped = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: Node UUID -> the task pushing to that candidate, and what wakes it.
        self._lanes: dict[str, asyncio.Task[None]] = {}
        self._lane_wake: dict[str, asyncio.Event] = {}

    # -- what subclasses provide -------------------------------------------------
    def serial(self) -> int:
        """The stream's current serial."""
        raise NotImplementedError

    def merge(self, base: int, serial: int, entries: Sequence[_Entry]) -> dict[str, Any]:
        """The arguments of one delta covering ``entries`` (coalesced)."""
        raise NotImplementedError

    async def snapshot(self) -> dict[str, Any]:
        """The arguments of a snapshot of the whole stream."""
        raise NotImplementedError

    async def snapshot_calls(self) -> AsyncGenerator[dict[str, Any], None]:
        """The calls that carry a snapshot (by default :meth:`snapshot`, in parts)."""
        for call in split_update(await self.snapshot(), self.part_bytes):
            yield call

    # -- life cycle ----------------------------------------------------------------
    def start(self) -> None:
        """Start the background task (a first round runs at once)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"{self.WHAT} replication")
            self._wake.set()

    async def stop(self) -> None:
        """Stop the background task and every candidate's pusher."""
        tasks = [task for task in (self._task, *self._lanes.values()) if task is not None]
        self._task = None
        self._lanes.clear()
        self._lane_wake.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def record(self, serial: int, entry: _Entry) -> None:
        """Remember a new entry and wake the pusher."""
        self._log.append((serial, entry))
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
        serial = self.serial()
        return [n for n in self.candidates() if self._known.get(n.uuid) != serial]

    async def wait_replicated(self, timeout: float) -> bool:  # noqa: ASYNC109
        """Wait until every online candidate has the current serial; False on timeout."""
        try:
            async with asyncio.timeout(timeout):
                while self._behind():
                    self._stepped.clear()
                    self._wake.set()
                    await self._stepped.wait()
                    if self._behind():  # a candidate did not answer: let it breathe
                        await asyncio.sleep(0.05)
        except TimeoutError:
            return False
        return True

    # -- pushing ---------------------------------------------------------------------
    def _delta(self, base: int) -> dict[str, Any] | None:
        entries = [entry for entry in self._log if entry[0] > base]
        if not entries or entries[0][0] != base + 1:
            return None
        return self.merge(base, entries[-1][0], [entry for _serial, entry in entries])

    def _calls(self, node: Node) -> list[dict[str, Any]] | None:
        """The calls that bring ``node`` up to date; None when it needs a snapshot."""
        known = self._known.get(node.uuid)
        if known is None:
            return [{"serial_only": True}]
        delta = self._delta(known) if known < self.serial() else None
        if delta is not None:
            return split_update(delta, self.part_bytes)
        return None

    async def _send(self, node: Node, calls: list[dict[str, Any]] | None) -> RpcResult:
        """Make ``calls`` (None: a snapshot's) on ``node`` in order; the answer to the
        last one, or the first error (the node then drops the parts it staged, and the
        whole update is sent again in a later round)."""
        async def call(args: dict[str, Any]) -> RpcResult:
            return (await self.rpc.call([node], self.PROCEDURE, args,
                                        timeout=self.rpc_timeout))[node.name]
        if calls is not None:
            return await send_parts(call, calls)
        result: RpcResult | None = None
        async with contextlib.aclosing(self.snapshot_calls()) as snapshot:
            async for args in snapshot:
                result = await call(args)
                if result.error is not None:
                    break
        assert result is not None  # a snapshot is at least one call
        return result

    async def push(self, node: Node) -> bool:
        """Bring ``node`` one step forward if it is behind; True when it made
        progress (another step may finish the job at once)."""
        if self._known.get(node.uuid) == self.serial():
            return False
        result = await self._send(node, self._calls(node))
        if result.error is not None:
            log.warning("replicating the %s to %s: %s", self.WHAT, node.name,
                        result.error.message)
            return False
        answer = result.payload if isinstance(result.payload, dict) else {}
        serial = answer.get("serial")
        if not isinstance(serial, int):
            return False
        progress = serial != self._known.get(node.uuid)
        self._known[node.uuid] = serial
        if not answer.get("applied", True):
            log.info("%s replica of %s is at serial %d: sending a snapshot",
                     self.WHAT, node.name, serial)
            self._known[node.uuid] = -1  # below any log entry: snapshot next
            progress = True
        return progress

    async def push_round(self) -> bool:
        """Bring every candidate that is behind one step forward, all at once; True
        when a candidate made progress."""
        behind = self._behind()
        steps = await asyncio.gather(*(self.push(node) for node in behind))
        return any(steps)

    async def _run(self) -> None:
        """Keep one pusher per online candidate (candidates come and go) and wake them
        all after each entry; every few seconds while one is behind."""
        while True:
            timeout = self.retry_interval if self._behind() else None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            self._wake.clear()
            current = {node.uuid for node in self.candidates()}
            for uuid in [uuid for uuid in self._lanes if uuid not in current]:
                self._lanes.pop(uuid).cancel()
                self._lane_wake.pop(uuid, None)
            for uuid in current:
                lane = self._lanes.get(uuid)
                if lane is None or lane.done():
                    self._lane_wake[uuid] = asyncio.Event()
                    self._lanes[uuid] = asyncio.create_task(
                        self._lane(uuid), name=f"{self.WHAT} replication to {uuid}")
                self._lane_wake[uuid].set()
            if not current:
                self._stepped.set()

    async def _lane(self, uuid: str) -> None:
        """Push to one candidate at its own pace: a candidate that hangs until the
        call's timeout holds up nobody else (each candidate has its own pusher)."""
        wake = self._lane_wake[uuid]
        while True:
            await wake.wait()
            wake.clear()
            try:
                while (node := self.store.find("node", uuid)) is not None \
                        and await self.push(node):
                    self._stepped.set()
            except Exception:  # a bug here must not stop replication for good
                log.exception("%s replication to %s failed", self.WHAT, uuid)
            self._stepped.set()


class ConfigReplicator(Replicator[tuple[Sequence[Row], Sequence[str]]]):
    """The configuration: an entry per commit (rows written, UUIDs deleted)."""

    PROCEDURE = "config_replicate"
    WHAT = "configuration"

    def __init__(self, store: ConfigStore, rpc: NodeRpc, **options: Any) -> None:
        super().__init__(store, rpc, **options)
        store.add_listener(lambda serial, rows, deletes: self.record(serial, (rows, deletes)))

    def serial(self) -> int:
        """The cluster configuration serial."""
        return self.store.serial

    def merge(self, base: int, serial: int,
              entries: Sequence[tuple[Sequence[Row], Sequence[str]]]) -> dict[str, Any]:
        """Each object once, in its last state; deleted objects once."""
        upserts: dict[str, Row] = {}
        deleted: set[str] = set()
        for rows, deletes in entries:
            for row in rows:
                upserts[row.uuid] = row
                deleted.discard(row.uuid)
            for uuid in deletes:
                upserts.pop(uuid, None)
                deleted.add(uuid)
        return {"base": base, "serial": serial,
                "upserts": row_args(list(upserts.values())), "deletes": sorted(deleted)}

    async def snapshot(self) -> dict[str, Any]:
        """Every object at the current serial."""
        return snapshot_args(self.store)


class JobReplicator(Replicator[JobRows]):
    """The job queue: an entry per group-commit batch."""

    PROCEDURE = "jobs_replicate"
    WHAT = "job queue"

    def __init__(self, store: ConfigStore, jobs: JobStore, rpc: NodeRpc,
                 **options: Any) -> None:
        super().__init__(store, rpc, **options)
        self.jobs = jobs
        jobs.add_listener(self.record)

    def serial(self) -> int:
        """The job queue's batch serial."""
        return self.jobs.serial

    def merge(self, base: int, serial: int, entries: Sequence[JobRows]) -> dict[str, Any]:
        """Each job once, in its last state (archived if it was archived)."""
        live: dict[int, bytes] = {}
        archive: dict[int, tuple[int | None, bytes]] = {}
        meta: dict[str, object] = {}
        for rows in entries:
            for job_id, data in rows.upserts:
                live[job_id] = data
            for job_id, end, data in rows.archive:
                live.pop(job_id, None)
                archive[job_id] = (end, data)
            meta.update(rows.meta)
        merged = JobRows(upserts=list(live.items()),
                         archive=[(job_id, end, data) for job_id, (end, data) in archive.items()],
                         meta=list(meta.items()))
        return {"base": base, "serial": serial, **job_row_args(merged)}

    async def snapshot(self) -> dict[str, Any]:
        """The whole queue, read after every earlier batch."""
        return job_snapshot_args(*await self.jobs.snapshot())

    async def snapshot_calls(self) -> AsyncGenerator[dict[str, Any], None]:
        """The whole queue, read part by part as it is sent (the archive can be far
        larger than what the master should hold in memory at once)."""
        async with contextlib.aclosing(self._snapshot_pieces()) as pieces, \
                contextlib.aclosing(session_calls(pieces)) as calls:
            async for call in calls:
                yield call

    async def _snapshot_pieces(self) -> AsyncGenerator[dict[str, Any], None]:
        async with contextlib.aclosing(self.jobs.snapshot_parts(self.part_bytes)) as parts:
            async for serial, rows in parts:
                for piece in split_rows(job_snapshot_args(serial, rows), self.part_bytes):
                    yield piece
