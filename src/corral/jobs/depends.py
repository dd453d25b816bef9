"""Job dependencies: the ``depends`` opcode parameter in the job queue.

An opcode may name jobs it depends on, each with the final statuses it accepts. The
queue keeps a job queued while a job it depends on is not finished (its *blockers*
count), releases it when the last one finishes, and checks the finished jobs'
statuses when the opcode is about to run, the way Ganeti's job queue does: a
cancelled dependency cancels the job (unless ``canceled`` is accepted), any other
unaccepted status, a missing job or a job that depends on itself ends it in error.

:class:`Dependencies` sees the queue's live jobs, the jobs being archived and the
store, like :class:`~corral.jobs.reading.JobReader`; the queue
(:mod:`corral.jobs.queue`) decides what to do with its answers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from corral.errors import ParameterError
from corral.jobs.model import CANCELED, FINAL_STATUSES, Job
from corral.jobs.reading import LiveJob
from corral.jobs.store import JobStore

__all__ = ["Dependencies", "Problem", "resolve_depends"]

#: Why an opcode may not run: ("cancel" or "error", the message its job ends with).
Problem = tuple[Literal["cancel", "error"], str]


class Dependencies:
    """Who waits for whom among a job queue's live jobs, and the check before an opcode."""

    def __init__(self, live: Mapping[int, LiveJob], archiving: Mapping[int, Job],
                 store: JobStore) -> None:
        self._live = live
        self._archiving = archiving
        self._store = store

    def register(self, entry: LiveJob) -> None:
        """Count the unfinished live jobs that ``entry``'s unfinished opcodes depend on
        as its blockers, and make ``entry`` a dependent of each."""
        job_id = entry.job.id
        seen: set[int] = set()
        for op in entry.job.ops:
            if op.status in FINAL_STATUSES:
                continue
            for dep_id, _statuses in op.input.get("depends") or ():
                dep = self._live.get(dep_id)
                if dep_id in seen or dep_id == job_id or dep is None:
                    continue
                if dep.job.status not in FINAL_STATUSES:
                    seen.add(dep_id)
                    entry.blockers += 1
                    dep.dependents.append(entry)

    @staticmethod
    def release(entry: LiveJob) -> list[LiveJob]:
        """``entry`` reached a final status: the jobs that waited for it, each with one
        blocker less (the queue starts those that are startable now)."""
        dependents, entry.dependents = entry.dependents, []
        for dependent in dependents:
            dependent.blockers -= 1
        return dependents

    async def check(self, entry: LiveJob, index: int) -> Problem | None:
        """Whether opcode ``index`` of ``entry`` may run: None, or why not."""
        job = entry.job
        for dep_id, wanted in job.ops[index].input.get("depends") or ():
            if dep_id == job.id:
                return ("error", "Job can't depend on itself")
            dep = self._live.get(dep_id)
            if dep is not None:
                status = dep.job.status
            elif dep_id in self._archiving:
                status = self._archiving[dep_id].status
            else:
                archived = await self._store.read_archived([dep_id])
                if dep_id not in archived:
                    return ("error", f"Dependency error: job {dep_id} not found")
                status = archived[dep_id].status
            if status not in FINAL_STATUSES:
                return ("error", f"Dependency error: job {dep_id} is not finished ({status})")
            if status == CANCELED and CANCELED not in wanted:
                return ("cancel", f"Dependency job {dep_id} was cancelled")
            if wanted and status not in wanted:
                return (
                    "error",
                    f"Dependency job {dep_id} finished with status '{status}', "
                    f"not one of '{', '.join(wanted)}' as required",
                )
        return None


def resolve_depends(
    depends: Sequence[tuple[int, Sequence[str]]],
    position: int,
    earlier: list[tuple[bool, int | str]],
) -> list[tuple[int, list[str]]]:
    """Turn relative (negative) dependency ids into the ids of earlier jobs of the same
    submission: ``earlier`` holds their results, ``position`` is this job's place."""
    resolved = []
    for dep_id, statuses in depends:
        if dep_id < 0:
            target = position + dep_id
            if target < 0 or not earlier[target][0]:
                raise ParameterError(f"Unable to resolve relative job ID {dep_id}")
            dep_id = int(earlier[target][1])
        resolved.append((dep_id, list(statuses)))
    return resolved
