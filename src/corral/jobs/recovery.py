"""What becomes of the jobs a dead master daemon left unfinished.

The master daemon runs jobs in its own process, so its death (kill -9, a crash, a
power cut; or the death of the master whose queue a candidate takes over in a
master failover) cuts short every job it was processing. At the next start the
queue settles each one so that only work that really began is lost, as Ganeti's
master daemon did when it ran jobs in-process (Ganeti 2.x; Ganeti 3.0 runs each job
in a process of its own that outlives its queue daemon):

* **waiting**: the opcode was waiting for its locks and had done nothing: it goes
  back to queued and the job runs again from it. Its start times stay (Ganeti keeps
  them), its reason trail is untouched, and its log says what happened;
* **running**: the opcode was executing and may have done part of its work: it ends
  in error with :data:`CRASH_MESSAGE`, the opcodes after it in error as after any
  failed opcode (:data:`~corral.jobs.model.PRECEDING_FAILED`);
* **canceling**: the client was told the job will be canceled: it ends canceled;
* **queued** (also half-done jobs between two opcodes): nothing to do, it runs.
"""

from __future__ import annotations

import logging

from corral.errors import OpExecError
from corral.jobs.model import CANCELED, CANCELING, QUEUED, RUNNING, WAITING, Job

__all__ = ["CANCELED_RESULT", "CRASH_MESSAGE", "REQUEUED_MESSAGE", "recover_interrupted"]

_log = logging.getLogger(__name__)

#: The error of the opcode that was executing when the master daemon died.
CRASH_MESSAGE = ("Unclean master daemon shutdown: the master daemon died while the opcode "
                 "was running")
#: The log entry of a job whose opcode waited for locks when the master daemon died.
REQUEUED_MESSAGE = ("The master daemon died while this opcode waited for its locks (it had "
                    "not started): the job went back to the queue")
#: The result of the opcodes of a canceled job (Ganeti's text).
CANCELED_RESULT = "Job canceled by request"


def recover_interrupted(job: Job) -> bool:
    """Settle ``job`` as the module says; False when it needs nothing (not started,
    or finished)."""
    status = job.status
    if status not in (WAITING, RUNNING, CANCELING):
        return False
    if status == CANCELING:
        job.finish_unfinished(CANCELED, CANCELED_RESULT)
    for index, op in enumerate(job.ops):
        if op.status == WAITING:
            op.status = QUEUED
            op.result = None
            job.add_log(index, "message", REQUEUED_MESSAGE)
            break
        if op.status == RUNNING:
            job.fail_at(index, OpExecError(CRASH_MESSAGE))
            break
    _log.warning("job %s was %s when the master daemon died: now %s", job.id, status,
                 job.status)
    return True
