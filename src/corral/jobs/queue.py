"""The job queue: submission, scheduling, execution, cancel, filters, watching, archive.

Every state change is made in memory, then saved through :class:`JobStore`, whose
group commit makes it durable; watchers are woken and callers answered only after
the commit (see :meth:`JobQueue._touch`). Jobs run as asyncio tasks, one opcode at
a time through the injected executor. Startable jobs sit in a heap ordered by
(priority, id), so starting a job costs O(log n) rather than a scan of the queue.

A job is *startable* when it is queued, saved, not paused by a filter and every job
it depends on has finished (Ganeti's scheduler keeps such jobs queued; the
bookkeeping is :mod:`corral.jobs.depends`). At most
``max_running`` jobs are started at once; a RATE_LIMIT rule caps the jobs it
decided to ``limit``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from corral.errors import (
    ConfigStoreError,
    CorralError,
    JobQueueDrainedError,
    NotMasterError,
    OpExecError,
    ParameterError,
)
from corral.jobs.depends import Dependencies, resolve_depends
from corral.jobs.interfaces import Decider, DecisionLike, Executor, OpContext
from corral.jobs.model import (
    CANCELED,
    CANCELING,
    FINAL_STATUSES,
    QUEUED,
    RUNNING,
    SUCCESS,
    WAITING,
    Job,
    QueuedOpCode,
    timestamp_now,
)
from corral.jobs.reading import JobReader, LiveJob, wake
from corral.jobs.recovery import CANCELED_RESULT, recover_interrupted
from corral.jobs.store import JobStore
from corral.opcodes import OpCode, op_from_dict, op_summary, op_to_dict
from corral.opcodes.reason import queue_entry

__all__ = [
    "DEFAULT_MAX_RUNNING",
    "Decider",
    "DecisionLike",
    "Executor",
    "Handover",
    "JobQueue",
    "OpContext",
]

_log = logging.getLogger(__name__)

#: Ganeti's default for the ``max_running_jobs`` cluster parameter.
DEFAULT_MAX_RUNNING = 20
#: Jobs of one submission created between two turns of the event loop (a call with
#: 500 jobs held the master's loop over 100 ms on a loaded machine).
SUBMIT_BATCH = 64
#: The error of an opcode that a planned master failover had to interrupt.
HANDOVER_INTERRUPTED = (
    "Master failover to {new_master}: this opcode was still running when the "
    "{timeout:g} s the old master waits for running opcodes had passed, and was "
    "interrupted; it may have done part of its work"
)
#: What CancelJob and ChangeJobPriority answer for a finished or unknown job (Ganeti's
#: text, which scripts match).
_NOT_IN_QUEUE = "Job {} not found in queue"


@dataclass(frozen=True, slots=True)
class Handover:
    """What :meth:`JobQueue.hand_over` left for the new master."""

    #: The jobs not finished, stored queued: the new master continues them.
    unfinished: list[int]
    #: The jobs whose running opcode was interrupted (they ended in error).
    interrupted: list[int]


class _Context:
    """The :class:`OpContext` the queue hands to the executor."""

    __slots__ = ("_entry", "_queue", "index", "job_id")

    def __init__(self, queue: JobQueue, entry: LiveJob, index: int) -> None:
        self._queue = queue
        self._entry = entry
        self.job_id = entry.job.id
        self.index = index

    @property
    def priority(self) -> int:
        return self._entry.job.ops[self.index].priority

    def feedback(self, message: Any, log_type: str = "message") -> None:
        self._entry.job.add_log(self.index, log_type, message)
        self._queue._touch(self._entry)

    def running(self) -> None:
        op = self._entry.job.ops[self.index]
        if op.status == WAITING:
            op.status = RUNNING
            op.exec_timestamp = timestamp_now()
            self._queue._touch(self._entry)


class JobQueue:
    """Ganeti's job queue over a :class:`JobStore`; methods map 1:1 to luxi calls."""

    def __init__(
        self,
        store: JobStore,
        executor: Executor,
        *,
        max_running: int = DEFAULT_MAX_RUNNING,
        decider: Decider | None = None,
    ) -> None:
        self._store = store
        self._executor = executor
        self._max_running = max_running
        self._decider = decider
        self._jobs: dict[int, LiveJob] = {}
        self._archiving: dict[int, Job] = {}
        self._ready: list[tuple[int, int, int]] = []
        self._running: dict[int, LiveJob] = {}
        self._rate_running: dict[str, int] = {}
        self._rate_held: dict[str, list[LiveJob]] = {}
        self._drained = False
        self._started = False
        self._stopping = False
        #: (new master, wait) once a planned master failover began.
        self._handover: tuple[str, float] | None = None
        self._reader = JobReader(self._jobs, self._archiving, store)
        self._depends = Dependencies(self._jobs, self._archiving, store)
        #: Called with each job that reached a final status (the master's metrics);
        #: a listener must be quick and must not raise.
        self.finished_listeners: list[Callable[[Job], None]] = []
        #: Jobs whose last change could not be stored (a full disk), by id, and the
        #: task that stores them again (see :meth:`_store_again`).
        self._unsaved: dict[int, LiveJob] = {}
        self._resaver: asyncio.Task[None] | None = None

    # -- life cycle ------------------------------------------------------------
    async def start(self) -> None:
        """Load the stored jobs, recover from a crash, and start the startable ones.

        A job found unfinished was cut short by the death of the master daemon (or
        of the master it was replicated from, after a failover). Only work that
        really began is lost, as in Ganeti (:func:`~corral.jobs.recovery.recover_interrupted`).
        """
        stored = self._store.load()
        self._drained = stored.drained
        for job in stored.jobs:
            entry = LiveJob(job)
            self._jobs[job.id] = entry
            if recover_interrupted(job):
                self._touch(entry)
        for entry in self._jobs.values():
            if entry.job.status not in FINAL_STATUSES:
                self._depends.register(entry)
                action, rule, limit = self._decide(entry.job)
                if action == "REJECT":
                    entry.job.finish_unfinished(CANCELED, _rejected_result(rule))
                    self._touch(entry)
                    continue
                self._apply_decision(entry, action, rule, limit)
        await asyncio.shield(self._store.barrier())
        self._started = True
        for entry in self._jobs.values():
            self._make_ready(entry)
        self._schedule()

    async def stop(self) -> None:
        """Stop running jobs (they stay as stored: error after the next start) and close."""
        self._stopping = True
        tasks = [entry.task for entry in self._running.values() if entry.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        if self._resaver is not None:
            self._resaver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._resaver
            self._resaver = None
        self._resave_unsaved()  # one last try: the disk may have room now
        with contextlib.suppress(CorralError):
            await self._store.barrier()
        for entry in self._jobs.values():
            wake(entry)
        await self._store.close()

    # -- settings ----------------------------------------------------------------
    @property
    def drained(self) -> bool:
        """Whether new jobs are refused."""
        return self._drained

    async def set_drain(self, flag: bool) -> None:
        """Set the drain flag (stored before returning)."""
        self._drained = bool(flag)
        await asyncio.shield(self._store.set_drained(self._drained))

    @property
    def max_running(self) -> int:
        """How many jobs may be waiting or running at once."""
        return self._max_running

    def set_max_running(self, count: int) -> None:
        """Change the bound on jobs waiting or running at once (at least 1)."""
        if count < 1:
            raise ParameterError(f"max_running_jobs must be at least 1, got {count}")
        self._max_running = count
        self._schedule()

    def set_decider(self, decider: Decider | None) -> None:
        """Install the filter decision function; call :meth:`reevaluate` afterwards."""
        self._decider = decider

    # -- submission ----------------------------------------------------------------
    async def submit(self, ops: Sequence[OpCode]) -> int:
        """Submit one job; returns its id once the job is stored.

        A job a REJECT filter rule matches is not refused: it is stored canceled,
        its opcodes' result naming the rule (as Ganeti's queue cancels it).
        """
        (result,) = await self._submit_jobs([ops], raise_errors=True)
        assert isinstance(result[1], int)
        return result[1]

    async def submit_many(self, jobs: Sequence[Sequence[OpCode]]) -> list[tuple[bool, int | str]]:
        """Submit several jobs: ``[(True, id) | (False, error message)]`` in order.

        A negative job id in an opcode's ``depends`` names an earlier job of the same
        call: -1 is the job just before this one.
        """
        return await self._submit_jobs(jobs, raise_errors=False)

    def _refusal(self) -> CorralError | None:
        """Why no job may be submitted now (a failover under way, a drained queue)."""
        if self._handover is not None:
            return NotMasterError(
                f"a master failover is in progress: the master role moves to "
                f"{self._handover[0]}, which runs every job not finished here; this node "
                "accepts no new jobs: submit again once the failover is done, to the new "
                "master (gnt-cluster getmaster)"
            )
        if self._drained:
            return JobQueueDrainedError(
                "the job queue is drained: new jobs are refused until it is undrained "
                "(gnt-cluster queue undrain)"
            )
        return None

    async def _submit_jobs(
        self, jobs: Sequence[Sequence[OpCode]], *, raise_errors: bool
    ) -> list[tuple[bool, int | str]]:
        refusal = self._refusal()
        if refusal is not None:
            raise refusal
        results: list[tuple[bool, int | str]] = []
        created: list[LiveJob] = []
        for position, ops in enumerate(jobs):
            if position and position % SUBMIT_BATCH == 0:
                # Hundreds of jobs in one call: let the loop serve others between
                # batches; a failover or drain begun meanwhile refuses the whole call.
                await asyncio.sleep(0)
                refusal = self._refusal()
                if refusal is not None:
                    self._forget(created)
                    raise refusal
            try:
                entry = self._create(ops, position, results)
            except ParameterError as err:
                if raise_errors:
                    raise
                results.append((False, str(err)))
                continue
            created.append(entry)
            results.append((True, entry.job.id))
        if created:
            try:
                await asyncio.shield(self._store.barrier())
            except CorralError:
                # Not stored: these jobs do not exist (the submitter gets the error).
                self._forget(created)
                raise
            for entry in created:
                entry.saved = True
                self._make_ready(entry)
            self._schedule()
        return results

    def _forget(self, created: Sequence[LiveJob]) -> None:
        """Drop jobs created by a submission that failed before they were stored."""
        for entry in created:
            self._jobs.pop(entry.job.id, None)
            wake(entry)

    def _create(
        self, ops: Sequence[OpCode], position: int, earlier: list[tuple[bool, int | str]]
    ) -> LiveJob:
        if not ops:
            raise ParameterError("a job needs at least one opcode")
        job_id = self._store.new_id()
        opcodes: list[OpCode] = []
        queued: list[QueuedOpCode] = []
        for index, op in enumerate(ops):
            changes: dict[str, Any] = {
                "reason": [*op.reason, queue_entry(op.OP_ID, job_id, index)]
            }
            if op.depends:
                changes["depends"] = resolve_depends(op.depends, position, earlier)
            op = msgspec.structs.replace(op, **changes)
            opcodes.append(op)
            queued.append(
                QueuedOpCode(input=op_to_dict(op), summary=op_summary(op), priority=op.priority)
            )
        job = Job(id=job_id, ops=queued, received_timestamp=timestamp_now())
        action, rule, limit = self._decide(job)
        entry = LiveJob(job, opcodes=opcodes, saved=False)
        if action == "REJECT":
            # Seed 000: entering the queue is filtered like being in it, so a rejected
            # job gets its id, is stored and ends canceled at once, naming the rule.
            job.finish_unfinished(CANCELED, _rejected_result(rule))
            _log.info("job %s canceled at submission by filter rule %s", job_id, rule)
        else:
            self._apply_decision(entry, action, rule, limit)
        self._jobs[job_id] = entry
        self._depends.register(entry)
        self._touch(entry)
        return entry

    # -- filters -------------------------------------------------------------------
    def _decide(self, job: Job) -> tuple[str, str | None, int]:
        if self._decider is None:
            return ("ACCEPT", None, 0)
        decision = self._decider(job.id, [op.input for op in job.ops])
        return (decision.action, decision.rule_uuid, decision.limit or 0)

    def _apply_decision(self, entry: LiveJob, action: str, rule: str | None, limit: int) -> None:
        """Record a PAUSE / RATE_LIMIT / ACCEPT decision on a job that is not final."""
        job = entry.job
        if action == "RATE_LIMIT":
            entry.rate_rule, entry.rate_limit = rule or "", limit
        else:
            entry.rate_rule, entry.rate_limit = None, 0
        if action == "PAUSE":
            if entry.task is None:
                if job.paused_by != rule:
                    job.paused_by = rule
                    entry.gen += 1
                    self._touch(entry)
            else:
                entry.pause_rule = rule
                if (job.status == WAITING and entry.pause_interrupt is None
                        and not entry.cancel_requested):
                    # Waiting for locks: leave the lock queues now, not after the
                    # opcode (seed 000: a paused job releases its locks at once).
                    entry.pause_interrupt = rule or ""
                    entry.task.cancel()
        else:
            entry.pause_rule = None
            if job.paused_by is not None:
                job.paused_by = None
                self._touch(entry)
                self._make_ready(entry)

    async def reevaluate(self) -> None:
        """Apply the (changed) filters to every queued, paused, waiting or running job.

        REJECT cancels queued and paused jobs (and waiting ones, like CancelJob);
        PAUSE holds queued jobs, takes jobs waiting for locks out of the lock queues
        and back to queued (releasing what they hold), and stops running ones at the
        next opcode boundary; any other decision releases a paused job.
        """
        for entry in list(self._jobs.values()):
            job = entry.job
            status = job.status
            if status in FINAL_STATUSES or status == CANCELING:
                continue
            action, rule, limit = self._decide(job)
            if action == "REJECT":
                if status == QUEUED:
                    self._cancel_queued(entry, _rejected_result(rule))
                elif status == WAITING:
                    self._cancel_waiting(entry)
                continue
            self._apply_decision(entry, action, rule, limit)
        # jobs taken out of their wait for locks: answer once they are back in the queue
        leaving = [entry.task for entry in self._running.values()
                   if entry.pause_interrupt is not None and entry.task is not None]
        if leaving:
            await asyncio.wait(leaving)
        # limits may have changed: recount, and give held jobs another chance
        self._rate_running.clear()
        for entry in self._running.values():
            entry.counted_rule = entry.rate_rule
            if entry.rate_rule is not None:
                self._rate_running[entry.rate_rule] = self._rate_running.get(entry.rate_rule, 0) + 1
        held = [entry for entries in self._rate_held.values() for entry in entries]
        self._rate_held.clear()
        for entry in held:
            self._make_ready(entry)
        self._schedule()
        await asyncio.shield(self._store.barrier())

    # -- dependencies (see :class:`~corral.jobs.depends.Dependencies`) ------------
    def _job_final(self, entry: LiveJob) -> None:
        """``entry`` reached a final status: release the jobs waiting for it."""
        for dependent in self._depends.release(entry):
            self._make_ready(dependent)
        for listener in self.finished_listeners:
            try:
                listener(entry.job)
            except Exception:  # a broken observer must not stop the queue
                _log.exception("job %s: a finished-job listener failed", entry.job.id)

    def counts(self) -> dict[tuple[str, str], int]:
        """Live jobs by (status, first opcode's OP_ID): what the queue holds now, read
        without waiting for anything (the master's metrics)."""
        counts: dict[tuple[str, str], int] = {}
        for entry in self._jobs.values():
            job = entry.job
            op_id = str(job.ops[0].input.get("OP_ID", "")) if job.ops else ""
            key = (job.status, op_id)
            counts[key] = counts.get(key, 0) + 1
        return counts

    # -- scheduling ----------------------------------------------------------------
    def _make_ready(self, entry: LiveJob) -> None:
        """Put ``entry`` into the start heap if it is startable (a stale copy is skipped)."""
        job = entry.job
        if (
            self._started
            and entry.saved
            and entry.task is None
            and entry.blockers <= 0
            and job.paused_by is None
            and entry.job.id in self._jobs
            and job.status == QUEUED
        ):
            entry.gen += 1
            heapq.heappush(self._ready, (job.priority, job.id, entry.gen))

    def _schedule(self) -> None:
        if self._stopping or self._handover is not None:
            return
        while len(self._running) < self._max_running and self._ready:
            _priority, job_id, gen = heapq.heappop(self._ready)
            entry = self._jobs.get(job_id)
            if entry is None or entry.gen != gen or entry.task is not None:
                continue
            if entry.job.paused_by is not None or entry.job.status != QUEUED:
                continue
            rule = entry.rate_rule
            if rule is not None:
                if self._rate_running.get(rule, 0) >= entry.rate_limit:
                    self._rate_held.setdefault(rule, []).append(entry)
                    continue
                self._rate_running[rule] = self._rate_running.get(rule, 0) + 1
            entry.counted_rule = rule
            self._running[job_id] = entry
            task = asyncio.get_running_loop().create_task(self._run(entry))
            entry.task = task
            task.add_done_callback(functools.partial(self._task_done, entry))

    def _task_done(self, entry: LiveJob, task: asyncio.Task[None]) -> None:
        entry.task = None
        entry.cancel_requested = False
        entry.pause_interrupt = None
        self._running.pop(entry.job.id, None)
        rule = entry.counted_rule
        if rule is not None:
            self._rate_running[rule] -= 1
            for held in self._rate_held.pop(rule, []):
                self._make_ready(held)
        if not task.cancelled() and task.exception() is not None:
            _log.error("job %s: processing failed", entry.job.id, exc_info=task.exception())
        if entry.job.status in FINAL_STATUSES:
            self._job_final(entry)
        else:
            self._make_ready(entry)
        self._schedule()

    # -- execution -------------------------------------------------------------------
    async def _run(self, entry: LiveJob) -> None:
        job = entry.job
        try:
            for index, op in enumerate(job.ops):
                if op.status in FINAL_STATUSES:
                    continue
                if self._handover is not None:
                    return  # a planned master failover: the new master runs the rest
                if entry.pause_rule is not None:
                    # PAUSE reached the opcode boundary: back to the queue, held
                    job.paused_by, entry.pause_rule = entry.pause_rule, None
                    self._touch(entry)
                    return
                now = timestamp_now()
                op.status = WAITING
                if op.start_timestamp is None:  # kept from before a crash (Ganeti's)
                    op.start_timestamp = now
                if job.start_timestamp is None:
                    job.start_timestamp = op.start_timestamp
                self._touch(entry)
                if not await self._run_opcode(entry, index):
                    return
            job.end_timestamp = job.ops[-1].end_timestamp
            self._touch(entry)
        except asyncio.CancelledError:
            if entry.handed_over and not entry.cancel_requested:
                self._leave_for_new_master(entry)
            elif (entry.pause_interrupt is not None and not entry.cancel_requested
                  and job.status == WAITING):
                self._pause_waiting(entry)
                task = asyncio.current_task()
                if not self._stopping and task is not None and task.uncancel() == 0:
                    return  # our own interruption, not the daemon stopping
            if not entry.cancel_requested:
                raise
            job.finish_unfinished(CANCELED, CANCELED_RESULT)
            self._touch(entry)

    async def _run_opcode(self, entry: LiveJob, index: int) -> bool:
        """Run opcode ``index`` (already waiting); False if the job ended with it."""
        job = entry.job
        op = job.ops[index]
        problem = await self._depends.check(entry, index)
        if problem is not None:
            kind, message = problem
            if kind == "cancel":
                job.finish_unfinished(CANCELED, message)
            else:
                self._fail(entry, index, OpExecError(message))
            self._touch(entry)
            return False
        try:
            if entry.opcodes is None:
                entry.opcodes = [op_from_dict(queued.input) for queued in job.ops]
            result = await self._executor(entry.opcodes[index], _Context(self, entry, index))
        except asyncio.CancelledError:
            raise
        except Exception as err:
            if not isinstance(err, CorralError):
                # A bug: the job result keeps its text, as Ganeti's does; the
                # traceback is for the master daemon's log.
                _log.error("job %s opcode %s failed unexpectedly", job.id, index,
                           exc_info=True)
            elif not isinstance(err, ParameterError | OpExecError):
                _log.debug("job %s opcode %s failed", job.id, index, exc_info=True)
            self._fail(entry, index, err)
            self._touch(entry)
            return False
        op.status = SUCCESS
        op.result = result
        op.end_timestamp = timestamp_now()
        self._touch(entry)
        return True

    def _pause_waiting(self, entry: LiveJob) -> None:
        """A job whose wait for locks a PAUSE rule interrupted: its opcode goes back to
        queued (its locks released by the executor), the job held by the rule if it
        still pauses it, else ready to wait for its locks again."""
        job = entry.job
        interrupted_by, entry.pause_interrupt = entry.pause_interrupt, None
        for index, op in enumerate(job.ops):
            if op.status == WAITING:
                op.status = QUEUED
                op.start_timestamp = None
                job.add_log(index, "message", f"Paused by filter rule {interrupted_by} "
                            "while waiting for locks: the locks were released and the "
                            "job went back to the queue")
                break
        if all(op.status == QUEUED for op in job.ops):
            job.start_timestamp = None
        job.paused_by, entry.pause_rule = entry.pause_rule, None
        self._touch(entry)

    def _fail(self, entry: LiveJob, index: int, err: BaseException) -> None:
        entry.job.fail_at(index, err)

    # -- planned master failover -------------------------------------------------------
    async def hand_over(self, new_master: str, wait: float) -> Handover:
        """Prepare a planned master failover to ``new_master``; no job is lost.

        From now on new jobs are refused (:class:`NotMasterError` naming the new
        master) and no job or opcode starts here. Jobs waiting for locks go back to
        queued at once; a job running an opcode stops after it, queued with the
        opcodes done recorded. Opcodes still running after ``wait`` seconds are
        interrupted and end in error saying so, the only jobs a handover fails.
        Returns once every change is stored: the new master, whose queue is this
        one's replica, continues every job that is not finished.
        """
        self._handover = (new_master, wait)
        for entry in list(self._running.values()):
            if entry.task is not None and entry.job.status == WAITING:
                entry.handed_over = True  # it holds no lock work yet: requeue now
                entry.task.cancel()
        tasks = {entry.task for entry in self._running.values() if entry.task is not None}
        interrupted: list[int] = []
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=wait)
            for entry in list(self._running.values()):
                if entry.task in pending:
                    entry.handed_over = True
                    if entry.job.status == RUNNING:
                        interrupted.append(entry.job.id)
                    entry.task.cancel()
            if pending:
                await asyncio.wait(pending)
        await asyncio.shield(self._store.barrier())
        unfinished = [job_id for job_id, entry in self._jobs.items()
                      if entry.job.status not in FINAL_STATUSES]
        return Handover(unfinished=sorted(unfinished), interrupted=sorted(interrupted))

    def _leave_for_new_master(self, entry: LiveJob) -> None:
        """A job cancelled by :meth:`hand_over`: an opcode waiting for locks goes back
        to queued, one running is interrupted."""
        assert self._handover is not None
        new_master, wait = self._handover
        job = entry.job
        for index, op in enumerate(job.ops):
            if op.status == WAITING:
                op.status = QUEUED
                op.start_timestamp = None
                job.add_log(index, "message", f"Master failover: the job moves to "
                            f"{new_master} and continues there")
            elif op.status == RUNNING:
                self._fail(entry, index, OpExecError(
                    HANDOVER_INTERRUPTED.format(new_master=new_master, timeout=wait)))
            else:
                continue
            break
        if all(op.status == QUEUED for op in job.ops):
            job.start_timestamp = None
        self._touch(entry)

    # -- durability and announcements ---------------------------------------------------
    def _touch(self, entry: LiveJob) -> asyncio.Future[None]:
        """Record a change of ``entry``'s job: save it, announce once durable."""
        entry.version += 1
        future = self._store.save(entry.job)
        future.add_done_callback(functools.partial(self._durable, entry, entry.version))
        return future

    def _durable(self, entry: LiveJob, version: int, future: asyncio.Future[None]) -> None:
        if future.cancelled():
            return
        err = future.exception()
        if err is not None:
            _log.error("job %s: cannot save: %s", entry.job.id, err)
            entry.save_error = (err if isinstance(err, CorralError) else ConfigStoreError(
                f"job {entry.job.id}: its change could not be stored: {err}"))
            wake(entry)  # its watchers get the error instead of waiting for ever
            self._unsaved[entry.job.id] = entry
            if not self._stopping and self._resaver is None:
                self._resaver = asyncio.get_running_loop().create_task(
                    self._store_again(), name="job queue: storing unsaved jobs again")
            return
        if version >= entry.version:
            self._unsaved.pop(entry.job.id, None)
        if version >= entry.version:
            entry.save_error = None
        if version > entry.durable:
            entry.durable = version
        if entry.durable == entry.version:
            wake(entry)

    #: Seconds between attempts to store the jobs whose change could not be stored.
    RESAVE_INTERVAL = 1.0

    async def _store_again(self) -> None:
        """Store again, every :data:`RESAVE_INTERVAL` seconds until it works, each job
        whose last change could not be stored. A job changes no more once it is
        finished: without this, a job that ended while the disk was full would stay
        unfinished in the file (and in the candidates' replicas) for ever, and a
        restarted master daemon or a new master would find it cut short."""
        try:
            while self._unsaved:
                await asyncio.sleep(self.RESAVE_INTERVAL)
                self._resave_unsaved()
                with contextlib.suppress(CorralError):
                    await self._store.barrier()
                await asyncio.sleep(0)  # the saves' own callbacks run first
                if self._unsaved:
                    _log.warning("%d jobs still cannot be stored; trying again in %g s",
                                 len(self._unsaved), self.RESAVE_INTERVAL)
        finally:
            self._resaver = None

    def _resave_unsaved(self) -> None:
        """Request that every job whose change could not be stored be stored again
        (not the jobs of a refused submission: they do not exist)."""
        entries = list(self._unsaved.values())
        self._unsaved.clear()
        for entry in entries:
            if self._jobs.get(entry.job.id) is entry:
                self._touch(entry)

    # -- cancel and priority ------------------------------------------------------------
    async def cancel(self, job_id: int) -> tuple[bool, str]:
        """CancelJob: queued jobs at once, waiting ones via their task; a running job
        only while its opcode is one that declares itself ``interruptible`` (a
        ``gnt-debug delay -i``), which has nothing to undo; other running ones not."""
        entry = self._jobs.get(job_id)
        if entry is None or entry.job.status in FINAL_STATUSES:
            # Ganeti's words for a finished job and an unknown one alike.
            return (False, _NOT_IN_QUEUE.format(job_id))
        status = entry.job.status
        if status == QUEUED:
            future = self._cancel_queued(entry, CANCELED_RESULT)
            await asyncio.shield(future)
            return (True, f"Job {job_id} canceled")
        if status == WAITING or (status == RUNNING and _interruptible(entry)):
            future = self._cancel_waiting(entry)
            await asyncio.shield(future)
            return (True, f"Job {job_id} will be canceled")
        return (False, f"Job {job_id} is no longer waiting in the queue")

    def _cancel_queued(self, entry: LiveJob, result: Any) -> asyncio.Future[None]:
        entry.gen += 1
        entry.job.paused_by = None
        entry.job.finish_unfinished(CANCELED, result)
        if entry.task is not None:  # started but not yet run: it finds nothing to do
            entry.cancel_requested = True
            entry.task.cancel()
        else:
            self._job_final(entry)
            self._schedule()
        return self._touch(entry)

    def _cancel_waiting(self, entry: LiveJob) -> asyncio.Future[None]:
        for op in entry.job.ops:
            if op.status not in FINAL_STATUSES:
                op.status = CANCELING
        entry.cancel_requested = True
        if entry.task is not None:
            entry.task.cancel()
        return self._touch(entry)

    async def change_priority(self, job_id: int, priority: int) -> tuple[bool, str]:
        """ChangeJobPriority: new priority for the opcodes not yet running."""
        if not -20 <= priority <= 19:
            raise ParameterError(f"priority must be between -20 and 19, got {priority}")
        entry = self._jobs.get(job_id)
        if entry is None or entry.job.status in FINAL_STATUSES:
            return (False, _NOT_IN_QUEUE.format(job_id))
        status = entry.job.status
        if status == CANCELING:
            return (False, f"Job {job_id} is cancelling")
        changed = False
        for op in entry.job.ops:
            if op.status in (QUEUED, WAITING):
                op.priority = priority
                changed = True
        if not changed:
            return (False, f"Job {job_id} had no pending opcodes")
        self._make_ready(entry)
        await asyncio.shield(self._touch(entry))
        return (
            True,
            f"Priorities of pending opcodes for job {job_id} have been changed to {priority}",
        )

    # -- archive -------------------------------------------------------------------------
    async def archive(self, job_id: int) -> bool:
        """ArchiveJob: move a finished job to the archive; False if unknown or unfinished."""
        entry = self._jobs.get(job_id)
        if entry is None or entry.job.status not in FINAL_STATUSES:
            return False
        await self._archive_entries([entry])
        return True

    async def auto_archive(self, age: float, timeout: float) -> tuple[int, int]:  # noqa: ASYNC109
        """AutoArchiveJobs: archive jobs finished at least ``age`` seconds ago (-1: all).

        Returns (archived, remaining): remaining counts finished jobs not examined
        because ``timeout`` seconds ran out.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        cutoff = time.time() - age
        finished = [e for e in self._jobs.values() if e.job.status in FINAL_STATUSES]
        archived = 0
        position = 0
        while position < len(finished) and loop.time() <= deadline:
            chunk = finished[position : position + 1000]
            position += len(chunk)
            old = [
                e
                for e in chunk
                if age < 0 or (e.job.end_timestamp is not None and e.job.end_timestamp[0] <= cutoff)
            ]
            if old:
                await self._archive_entries(old)
                archived += len(old)
        return (archived, len(finished) - position)

    async def _archive_entries(self, entries: list[LiveJob]) -> None:
        jobs = []
        for entry in entries:
            del self._jobs[entry.job.id]
            self._archiving[entry.job.id] = entry.job
            jobs.append(entry.job)
        try:
            await asyncio.shield(self._store.archive(jobs))
        finally:
            for job in jobs:
                self._archiving.pop(job.id, None)
        for entry in entries:
            wake(entry)

    # -- reading (see :class:`~corral.jobs.reading.JobReader`) -------------------------
    def get(self, job_id: int) -> Job | None:
        """The live (not archived) job ``job_id``, or None."""
        return self._reader.get(job_id)

    async def jobs(self, ids: Sequence[int] | None = None, *, archived: bool = False) -> list[Job]:
        """Jobs by id (archived ones too), or every live job (:meth:`JobReader.jobs`)."""
        return await self._reader.jobs(ids, archived=archived)

    async def query(
        self, ids: Sequence[int] | None, fields: Sequence[str]
    ) -> list[list[Any] | None]:
        """QueryJobs: a row of plain values per job id (:meth:`JobReader.query`)."""
        return await self._reader.query(ids, fields)

    async def wait_for_change(
        self,
        job_id: int,
        fields: Sequence[str],
        prev_info: list[Any] | None,
        prev_serial: int | None,
        timeout: float,  # noqa: ASYNC109 -- luxi's WaitForJobChange timeout
    ) -> Literal["nochange"] | tuple[list[Any], list[Any]]:
        """WaitForJobChange (:meth:`JobReader.wait_for_change`)."""
        return await self._reader.wait_for_change(job_id, fields, prev_info, prev_serial,
                                                  timeout)


def _interruptible(entry: LiveJob) -> bool:
    """Whether the opcode ``entry`` runs now may be stopped midway (it says so)."""
    running = [i for i, op in enumerate(entry.job.ops) if op.status == RUNNING]
    return bool(running and entry.opcodes is not None
                and getattr(entry.opcodes[running[0]], "interruptible", False) is True)


def _rejected_result(rule: str | None) -> str:
    return f"Job canceled by filter rule {rule}"
