"""Reading the job queue: the runtime record of a live job, lookups that reach into
the archive, QueryJobs and WaitForJobChange.

:class:`JobReader` sees the queue's live jobs, the jobs being archived and the store,
and never changes them: the queue (:mod:`corral.jobs.queue`) makes every change and
calls :func:`wake` once it is durable, which answers the waiters here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from corral.errors import CorralError, NotFoundError, UnknownFieldError, did_you_mean
from corral.jobs.model import (
    FINAL_STATUSES,
    JOB_FIELDS,
    Job,
    LogEntry,
    as_json_values,
    job_info,
)
from corral.jobs.store import JobStore
from corral.opcodes import OpCode

__all__ = ["JobReader", "LiveJob", "wake"]


@dataclass(eq=False, slots=True)
class LiveJob:
    """Runtime state of a live (not archived) job."""

    job: Job
    opcodes: list[OpCode] | None = None
    version: int = 0
    durable: int = 0
    saved: bool = True
    #: Why the job's newest change could not be stored (None once one is stored).
    save_error: CorralError | None = None
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    gen: int = 0
    blockers: int = 0
    dependents: list[LiveJob] = field(default_factory=list)
    rate_rule: str | None = None
    rate_limit: int = 0
    counted_rule: str | None = None
    pause_rule: str | None = None
    #: The PAUSE rule that interrupted the job's wait for locks (its task is being
    #: cancelled to leave the lock queues; see :meth:`~corral.jobs.queue.JobQueue.reevaluate`).
    pause_interrupt: str | None = None
    cancel_requested: bool = False
    #: Cancelled by a planned master failover (see :meth:`~corral.jobs.queue.JobQueue.hand_over`).
    handed_over: bool = False


class JobReader:
    """Reads of the queue's jobs; answers are never ahead of what is durable."""

    def __init__(self, live: Mapping[int, LiveJob], archiving: Mapping[int, Job],
                 store: JobStore) -> None:
        self._live = live
        self._archiving = archiving
        self._store = store

    def get(self, job_id: int) -> Job | None:
        """The live (not archived) job ``job_id``, or None."""
        entry = self._live.get(job_id)
        return entry.job if entry is not None else None

    async def jobs(self, ids: Sequence[int] | None = None, *, archived: bool = False) -> list[Job]:
        """Jobs by id (archived ones too), or every live job; unknown ids are skipped.

        With ``archived`` and no ids, the archived jobs come too, all in id order
        (Ganeti includes them when the ``archived`` field is asked for).
        """
        await asyncio.shield(self._store.barrier())
        if ids is None:
            live = [entry.job for entry in self._live.values()]
            if not archived:
                return live
            every = {job.id: job for job in await self._store.read_all_archived()}
            every.update(self._archiving)
            every.update((job.id, job) for job in live)
            return [every[job_id] for job_id in sorted(every)]
        found = await self.lookup(ids)
        return [found[job_id] for job_id in ids if job_id in found]

    async def lookup(self, ids: Sequence[int]) -> dict[int, Job]:
        """Jobs by id: live, being archived or archived; unknown ids are left out."""
        found: dict[int, Job] = {}
        missing = []
        for job_id in ids:
            entry = self._live.get(job_id)
            if entry is not None:
                found[job_id] = entry.job
            elif job_id in self._archiving:
                found[job_id] = self._archiving[job_id]
            else:
                missing.append(job_id)
        if missing:
            found.update(await self._store.read_archived(missing))
        return found

    async def query(
        self, ids: Sequence[int] | None, fields: Sequence[str]
    ) -> list[list[Any] | None]:
        """QueryJobs: a row of plain values per job id (None for unknown ids).

        Without ids, every live job in id order. Reads wait for writes in flight,
        so nothing not yet durable is reported as done.
        """
        unknown = [name for name in fields if name not in JOB_FIELDS]
        if unknown:
            raise UnknownFieldError(
                f"unknown job field(s) {', '.join(unknown)}; "
                f"{did_you_mean(unknown, sorted(JOB_FIELDS), noun='known fields')}"
            )
        await asyncio.shield(self._store.barrier())
        if ids is None:
            return [job_info(entry.job, fields) for entry in self._live.values()]
        found = await self.lookup(ids)
        return [job_info(found[i], fields) if i in found else None for i in ids]

    async def wait_for_change(
        self,
        job_id: int,
        fields: Sequence[str],
        prev_info: list[Any] | None,
        prev_serial: int | None,
        timeout: float,  # noqa: ASYNC109 -- luxi's WaitForJobChange timeout
    ) -> Literal["nochange"] | tuple[list[Any], list[Any]]:
        """WaitForJobChange: the job's ``fields`` and new log entries, once they differ.

        Answers at once if the (durable) job differs from ``prev_info``, has log
        entries after ``prev_serial``, or is final; otherwise waits for the next
        durable change, or returns ``"nochange"`` after ``timeout`` seconds. The
        waiter holds a future the producer resolves; it never polls.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        while True:
            entry = self._live.get(job_id)
            if entry is None:
                found = await self.lookup([job_id])
                if job_id not in found:
                    raise NotFoundError(f"job {job_id} not found")
                job = found[job_id]
                return (job_info(job, fields), _log_builtins(job.log_after(prev_serial)))
            job = entry.job
            if entry.save_error is not None:
                raise entry.save_error
            if entry.durable == entry.version and entry.saved:
                info = job_info(job, fields)
                log = job.log_after(prev_serial)
                if info != prev_info or log or job.status in FINAL_STATUSES:
                    return (info, _log_builtins(log))
            remaining = deadline - loop.time()
            if remaining <= 0:
                return "nochange"
            waiter: asyncio.Future[None] = loop.create_future()
            entry.waiters.append(waiter)
            try:
                async with asyncio.timeout(remaining):
                    await waiter
            except TimeoutError:
                return "nochange"
            finally:
                if not waiter.done():
                    waiter.cancel()
                if waiter in entry.waiters:
                    entry.waiters.remove(waiter)


def wake(entry: LiveJob) -> None:
    """Wake every waiter of ``entry`` (its change is durable, or it left the queue)."""
    waiters, entry.waiters = entry.waiters, []
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(None)


def _log_builtins(entries: list[LogEntry]) -> list[Any]:
    return list(as_json_values(entries))


