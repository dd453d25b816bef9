"""The job query fields (Ganeti's names, titles and kinds) for ``Query("job", ...)``.

Values come from :data:`corral.jobs.model.JOB_FIELDS`, the same getters QueryJobs
uses, so both calls always agree. Timestamps are ``[sec, usec]`` pairs; filters
compare them as seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from corral.jobs.model import JOB_FIELDS, Job, as_json_values
from corral.qlang import FieldKind, FieldRegistry

__all__ = ["JOB_QUERY_FIELDS", "query_jobs"]

# name, title, kind, doc (timestamps are split into seconds for filters)
_DEFINITIONS: Final[tuple[tuple[str, str, FieldKind, str], ...]] = (
    ("id", "ID", "number", "Job ID"),
    ("status", "Status", "text", "Job status"),
    ("priority", "Priority", "number", "Current job priority (-20 to 19)"),
    ("archived", "Archived", "bool", "Whether job is archived"),
    ("ops", "OpCodes", "other", "List of all opcodes"),
    ("opresult", "OpCode_result", "other", "List of opcodes results"),
    ("opstatus", "OpCode_status", "other", "List of opcodes status"),
    ("oplog", "OpCode_log", "other", "List of opcode output logs"),
    ("opstart", "OpCode_start", "other",
     "List of opcode start timestamps (before acquiring locks)"),
    ("opexec", "OpCode_exec", "other",
     "List of opcode execution start timestamps (after acquiring locks)"),
    ("opend", "OpCode_end", "other", "List of opcode execution end timestamps"),
    ("oppriority", "OpCode_prio", "other", "List of opcode priorities"),
    ("summary", "Summary", "other", "List of per-opcode summaries"),
    ("reason", "Reason", "other", "List of per-opcode reason trails"),
    ("received_ts", "Received", "other",
     "Timestamp of when job was received (tuple containing seconds and microseconds)"),
    ("start_ts", "Start", "other",
     "Timestamp of job start (tuple containing seconds and microseconds)"),
    ("end_ts", "End", "other",
     "Timestamp of job end (tuple containing seconds and microseconds)"),
    ("paused_by", "Paused_by", "text", "UUID of the filter rule pausing the job, if any"),
)
_TIMESTAMPS: Final = frozenset({"received_ts", "start_ts", "end_ts"})


def _getter(value: Callable[[Job], Any]) -> Callable[[None, Job], Any]:
    def get(_ctx: None, job: Job) -> Any:
        return as_json_values(value(job))

    return get


def _build() -> FieldRegistry[None, Job]:
    registry: FieldRegistry[None, Job] = FieldRegistry("job")
    for name, title, kind, doc in _DEFINITIONS:
        registry.add(
            name, title, kind, doc, _getter(JOB_FIELDS[name]), split_timestamp=name in _TIMESTAMPS
        )
    return registry


#: The registry answering ``Query("job", ...)`` and ``QueryFields("job", ...)``.
JOB_QUERY_FIELDS: Final = _build()


def query_jobs(jobs: Sequence[Job], fields: Sequence[str], qfilter: Any) -> dict[str, Any]:
    """``Query("job", fields, qfilter)`` over ``jobs``: Ganeti's QueryResponse."""
    return JOB_QUERY_FIELDS.query(jobs, fields, qfilter, None)
