"""The processor: runs one opcode of a job through its logical unit.

It is the job queue's executor (:data:`corral.jobs.Executor`). Locks are taken
through the :class:`~corral.locking.LockManager`, level by level from the cluster
lock down, owned by the job, with the :class:`~corral.locking.LockAttemptStrategy`:
growing timeouts, everything released between attempts, then one blocking attempt.
Each attempt asks with the job's current priority, so a ``change-priority`` counts
from the next attempt on. Locks are released when the opcode ends, whatever the
outcome, so a job paused at an opcode boundary holds nothing. A job still waiting for
its locks is interrupted by cancelling its task (CancelJob, or a PAUSE rule): the
pending acquire leaves the lock queue and what the job holds is released here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from corral.cmdlib.base import LockRequest, LogicalUnit, MasterContext
from corral.errors import InternalError
from corral.jobs import OpContext
from corral.locking import BGL, LockAttemptStrategy, LockLevel
from corral.opcodes import OpCode

__all__ = ["DRY_RUN_MESSAGE", "JobOwner", "Processor"]

log = logging.getLogger(__name__)

LUClass = type[LogicalUnit[Any]]


#: What a job with ``dry_run`` logs once its checks passed (Ganeti's words).
DRY_RUN_MESSAGE = " - INFO: dry-run mode requested, not actually executing the operation"

class JobOwner:
    """The lock owner for a job; lock listings show it as ``job/<id>``."""

    __slots__ = ("job_id",)

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id

    def __hash__(self) -> int:
        return hash(("job", self.job_id))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobOwner) and other.job_id == self.job_id

    def __str__(self) -> str:
        return f"job/{self.job_id}"


class Processor:
    """Executes opcodes with the logical units registered for them."""

    def __init__(
        self,
        master: MasterContext,
        units: dict[str, LUClass],
        strategy: Callable[[], LockAttemptStrategy] = LockAttemptStrategy,
    ) -> None:
        self.master = master
        self.units = units
        self._strategy = strategy

    async def execute(self, op: OpCode, ctx: OpContext) -> Any:
        """Run ``op`` for ``ctx``'s job: checks, locks, prerequisites, execution."""
        unit_class = self.units.get(op.OP_ID)
        if unit_class is None:
            raise InternalError(f"no logical unit for {op.OP_ID}")

        def feedback(message: Any, log_type: str = "message") -> None:
            ctx.feedback(message, log_type)

        owner = JobOwner(ctx.job_id)
        unit = unit_class(op, self.master, feedback)
        unit.owner = owner
        unit.check_arguments()
        unit.expand_names()
        await unit.prepare()
        needed: dict[LockLevel, LockRequest] = {}
        if unit.USES_BGL:
            needed[LockLevel.CLUSTER] = LockRequest([BGL], shared=not unit.REQ_BGL)
        needed.update(unit.declare_locks())
        locks = self.master.locks
        try:
            if needed:
                started = time.monotonic()
                await self._strategy().run(
                    lambda timeout: self._attempt(needed, owner, ctx, timeout),
                    lambda: locks.release_all(owner=owner),
                )
                self.master.lock_waited(op.OP_ID, time.monotonic() - started)
            ctx.running()
            try:
                unit.check_prereq()
                if op.dry_run:
                    # Ganeti's log line for it; the unit itself stops after its checks.
                    feedback(DRY_RUN_MESSAGE)
                return await unit.execute()
            except BaseException:
                await unit.abort()
                raise
        finally:
            locks.release_all(owner=owner)

    async def _attempt(
        self, needed: dict[LockLevel, LockRequest], owner: JobOwner, ctx: OpContext,
        timeout: float | None,  # noqa: ASYNC109 - the lock strategy's per-attempt budget
    ) -> bool:
        """Take every needed lock, top level first, within ``timeout`` in total."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for level in sorted(needed):
            request = needed[level]
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            got = await self.master.locks.acquire(
                level, request.names, shared=request.shared, timeout=remaining,
                priority=ctx.priority, owner=owner,
            )
            if got is None:
                log.debug("job %d: %s locks not acquired within %s s", ctx.job_id, level,
                          timeout)
                return False
        return True
