"""Following a job through luxi's ``WaitForJobChange``, without doing the I/O.

The gnt-* commands wait for their jobs over a blocking luxi client and RAPI over an
asynchronous one; both follow a job the same way, so the steps live here once and
each caller only sends the requests:

    follower = JobFollower(job_id)
    while not follower.finished:
        entries = follower.update(call("WaitForJobChange", *follower.request(timeout)))
        ...                                  # print entries (None: nothing changed)
    results = job_results(job_id, call("QueryJobs", *JOB_RESULT_QUERY))

Each request asks only for the status and the log entries newer than the last one
seen, so every log entry is handed out exactly once.
"""

from __future__ import annotations

from typing import Any, Final

from corral.errors import NotFoundError
from corral.jobs.status import FINAL_STATUSES, SUCCESS, job_error

__all__ = ["JOB_RESULT_FIELDS", "JobFollower", "job_results"]

#: What ``QueryJobs`` is asked for once a job has ended (see :func:`job_results`).
JOB_RESULT_FIELDS: Final = ("status", "opstatus", "opresult")


class JobFollower:
    """Where following one job stands: its last status and the last log serial seen."""

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        #: The job's status from the last answer (None before the first one).
        self.status: str | None = None
        self._prev_info: list[Any] | None = None
        self._prev_serial: int | None = None

    @property
    def finished(self) -> bool:
        """Whether the job has reached a status it never leaves."""
        return self.status in FINAL_STATUSES

    def request(self, timeout: float) -> list[Any]:
        """The arguments of the next ``WaitForJobChange`` call (waiting ``timeout`` s)."""
        return [self.job_id, ["status"], self._prev_info, self._prev_serial, timeout]

    def update(self, answer: Any) -> list[Any] | None:
        """Take a ``WaitForJobChange`` answer; the new log entries
        (``[serial, timestamp, log_type, message]``), or None when nothing changed.

        :raises NotFoundError: the job is gone (archived or never existed).
        """
        if answer is None:
            raise NotFoundError(f"job {self.job_id} not found (lost while waiting for it)")
        if answer == "nochange":
            return None
        job_info, entries = answer
        self.status = job_info[0]
        self._prev_info = job_info
        entries = list(entries or ())
        for entry in entries:
            serial = int(entry[0])
            self._prev_serial = serial if self._prev_serial is None else max(
                self._prev_serial, serial)
        return entries


def job_results(job_id: int, rows: Any) -> list[Any]:
    """The opcode results of a job that ended, from ``QueryJobs([job_id],
    JOB_RESULT_FIELDS)``; raise the error of the opcode that failed.

    :raises NotFoundError: the job is gone.
    :raises CorralError: the job failed or was canceled (see :func:`job_error`).
    """
    if not rows or rows[0] is None:
        raise NotFoundError(f"job {job_id} not found (lost while waiting for it)")
    status, opstatus, opresult = rows[0]
    if status == SUCCESS:
        return list(opresult)
    raise job_error(job_id, status, opstatus, opresult)
