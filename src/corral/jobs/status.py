"""What a job's status means, and the error a job that did not succeed stands for.

Apart from :mod:`corral.jobs.model` (the queue's records, msgspec Structs) so that a
command following its job (:mod:`corral.jobs.follow`) or selecting jobs by status
loads nothing but these names and the error classes. The final statuses are also
what an opcode's job dependency may name (:data:`corral.opcodes.base.FINAL_JOB_STATUSES`,
which a unit test keeps equal to :data:`FINAL_STATUSES`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Literal

from corral.errors import CorralError, JobCanceledError, OpExecError, from_ganeti, from_wire

__all__ = [
    "CANCELED",
    "CANCELING",
    "ERROR",
    "FINAL_STATUSES",
    "PENDING_STATUSES",
    "QUEUED",
    "RUNNING",
    "STATUSES",
    "SUCCESS",
    "WAITING",
    "JobStatus",
    "job_error",
]

JobStatus = Literal["queued", "waiting", "canceling", "running", "canceled", "success", "error"]

QUEUED: Final = "queued"
WAITING: Final = "waiting"
CANCELING: Final = "canceling"
RUNNING: Final = "running"
CANCELED: Final = "canceled"
SUCCESS: Final = "success"
ERROR: Final = "error"

#: Every status, in Ganeti's order.
STATUSES: Final = (QUEUED, WAITING, CANCELING, RUNNING, CANCELED, SUCCESS, ERROR)
#: Statuses a job or opcode never leaves (the set job dependencies may name).
FINAL_STATUSES: Final = frozenset({CANCELED, SUCCESS, ERROR})
#: Statuses of a job that has not started running (or is being canceled).
PENDING_STATUSES: Final = frozenset({QUEUED, WAITING, CANCELING})


def _canceled_message(job_id: int, opresult: Sequence[Any]) -> str:
    """``job N was canceled``, with the reason an opcode's result gives (a REJECT
    filter names itself there)."""
    for result in opresult:
        if isinstance(result, dict) and "message" in result:
            why = str(result["message"])
        elif (err := from_ganeti(result)) is not None:
            why = err.message
        elif isinstance(result, str) and result:
            why = result
        else:
            continue
        return f"job {job_id} was canceled: {why}"
    return f"job {job_id} was canceled"


def job_error(job_id: int, status: str, opstatus: Sequence[str],
              opresult: Sequence[Any]) -> CorralError:
    """The error a job that did not succeed stands for.

    The first failed opcode's error is rebuilt with its class (from corral's
    ``{"code", "message"}`` or Ganeti's encoding, see :func:`corral.errors.from_ganeti`);
    after successful opcodes the message says it was a partial failure, as Ganeti's
    does.
    """
    if status in ("canceled", "canceling"):
        return JobCanceledError(_canceled_message(job_id, opresult))
    has_ok = False
    for index, (op_status, result) in enumerate(zip(opstatus, opresult, strict=False)):
        if op_status == "success":
            has_ok = True
        elif op_status == "error":
            if isinstance(result, dict) and "message" in result:
                err = from_wire(result)
            else:
                err = from_ganeti(result) or OpExecError(str(result))
            if has_ok:
                return type(err)(f"partial failure (opcode {index}): {err.message}")
            return err
    return OpExecError(f"job {job_id} ended with status {status}: {opresult!r}")
