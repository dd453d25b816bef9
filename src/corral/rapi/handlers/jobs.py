"""``/2/jobs``, ``/2/jobs/[id]`` and ``/2/jobs/[id]/wait``."""

from __future__ import annotations

from typing import Any, Final

from corral.errors import NotFoundError
from corral.rapi.handlers.common import uri_list
from corral.rapi.request import WAIT_TIMEOUT, RapiRequest

__all__ = ["JOB_FIELDS", "JOB_FIELDS_BULK", "cancel", "get", "index", "wait"]

#: Fields of each job in ``/2/jobs?bulk=1`` (Ganeti's list).
JOB_FIELDS_BULK: Final = ("id", "ops", "status", "summary", "opstatus", "received_ts",
                          "start_ts", "end_ts")
#: Fields of ``/2/jobs/[id]``.
JOB_FIELDS: Final = (*JOB_FIELDS_BULK, "oplog", "opresult")


async def index(req: RapiRequest) -> list[dict[str, Any]]:
    """Every job: ids and URIs, or with ``bulk=1`` their main fields."""
    if req.flag("bulk"):
        rows = await req.call("QueryJobs", None, list(JOB_FIELDS_BULK))
        return [dict(zip(JOB_FIELDS_BULK, row, strict=True)) for row in rows if row]
    rows = await req.call("QueryJobs", None, ["id"])
    return uri_list((row[0] for row in rows if row), "/2/jobs/%s", "id")


#: Job ids are 63-bit integers; a larger number cannot name a job.
_MAX_JOB_ID: Final = 2**63 - 1


def _job_id(req: RapiRequest) -> int:
    job_id = int(req.item("job_id"))
    if job_id > _MAX_JOB_ID:
        raise NotFoundError(f"job {job_id} not found")
    return job_id


async def get(req: RapiRequest) -> dict[str, Any]:
    """One job's status, opcodes, results and log."""
    job_id = _job_id(req)
    rows = await req.call("QueryJobs", [job_id], list(JOB_FIELDS))
    if not rows or rows[0] is None:
        raise NotFoundError(f"job {job_id} not found")
    return dict(zip(JOB_FIELDS, rows[0], strict=True))


async def cancel(req: RapiRequest) -> Any:
    """Cancel a job that has not started: ``[success, message]``."""
    return await req.call("CancelJob", _job_id(req))


async def wait(req: RapiRequest) -> dict[str, Any] | None:
    """Wait (at most ten seconds) until the job differs from what the client saw.

    Null when nothing changed in that time; otherwise the asked fields and the log
    entries after ``previous_log_serial``.
    """
    body = req.body_dict()
    answer = await req.call("WaitForJobChange", _job_id(req), body["fields"],
                            body.get("previous_job_info"), body.get("previous_log_serial"),
                            WAIT_TIMEOUT)
    if answer == "nochange":
        return None
    job_info, log_entries = answer
    return {"job_info": job_info, "log_entries": log_entries}
