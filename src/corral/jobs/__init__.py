"""The job queue (engine layer): jobs of opcodes, stored in SQLite, run as asyncio tasks.

    store = JobStore.open(path)
    queue = JobQueue(store, executor, max_running=20, decider=chain.decide)
    await queue.start()                      # crash recovery, then runs queued jobs
    job_id = await queue.submit([OpTestDelay(duration=0)])
    await queue.wait_for_change(job_id, ["status"], None, None, timeout=10)
    await queue.stop()

:mod:`corral.jobs.model` holds the job and opcode records in Ganeti's formats,
:mod:`corral.jobs.store` the SQLite store with group commit, :mod:`corral.jobs.queue`
the queue itself (:mod:`corral.jobs.interfaces` what it runs on,
:mod:`corral.jobs.reading` its reads and watches, :mod:`corral.jobs.depends` its
job dependencies) and :mod:`corral.jobs.fields` the job query fields.
``queue.hand_over(new_master, wait)`` prepares a planned master failover: no job is
lost, the new master continues the unfinished ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from corral.jobs.interfaces import Decider, DecisionLike, Executor, OpContext
    from corral.jobs.model import (
        FINAL_STATUSES,
        JOB_FIELDS,
        STATUSES,
        Job,
        JobStatus,
        QueuedOpCode,
        job_info,
    )
    from corral.jobs.queue import DEFAULT_MAX_RUNNING, Handover, JobQueue
    from corral.jobs.recovery import CRASH_MESSAGE
    from corral.jobs.store import JobStore

__all__ = [
    "CRASH_MESSAGE",
    "DEFAULT_MAX_RUNNING",
    "FINAL_STATUSES",
    "JOB_FIELDS",
    "STATUSES",
    "Decider",
    "DecisionLike",
    "Executor",
    "Handover",
    "Job",
    "JobQueue",
    "JobStatus",
    "JobStore",
    "OpContext",
    "QueuedOpCode",
    "job_info",
]

# Names load on first use: a gnt-* tool following a job needs corral.jobs.model and
# corral.jobs.follow, not the queue and its SQLite store.
__getattr__, __dir__ = lazy_exports(__name__, {
    **dict.fromkeys(("Decider", "DecisionLike", "Executor", "OpContext"), "interfaces"),
    **dict.fromkeys(("FINAL_STATUSES", "JOB_FIELDS", "STATUSES", "Job", "JobStatus",
                     "QueuedOpCode", "job_info"), "model"),
    **dict.fromkeys(("DEFAULT_MAX_RUNNING", "Handover", "JobQueue"), "queue"),
    "CRASH_MESSAGE": "recovery",
    "JobStore": "store",
})
