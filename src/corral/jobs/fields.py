"""The job query fields (Ganeti's names, titles and kinds) for ``Query("job", ...)``.

Values come from :data:`corral.jobs.model.JOB_FIELDS`, the same getters QueryJobs
uses, so both calls always agree. Timestamps are ``[sec, usec]`` pairs; filters
compare them as seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from corral.errors import ParameterError
from corral.jobs.model import JOB_FIELDS, Job, as_json_values
from corral.qlang import FieldKind, FieldRegistry, ResultStatus, requested_names

__all__ = ["JOB_QUERY_FIELDS", "query_jobs", "query_jobs_by_id", "requested_job_ids"]

# name, title, kind, doc (timestamps are split into seconds for filters)
_DEFINITIONS: Final[tuple[tuple[str, str, FieldKind, str], ...]] = (
    ("id", "ID", "number", "The job's number, increasing with each submission"),
    ("status", "Status", "text",
     "Where the job is: queued, waiting, running, canceling, canceled, success or error"),
    ("priority", "Priority", "number", "Priority now: -20 runs first, 19 last"),
    ("archived", "Archived", "bool", "True once the job has been moved to the archive"),
    ("ops", "OpCodes", "other", "Each opcode as submitted, in dict form"),
    ("opresult", "OpCode_result", "other", "What each opcode returned, or its error"),
    ("opstatus", "OpCode_status", "other", "State of each opcode"),
    ("oplog", "OpCode_log", "other", "Per opcode: its log entries [serial, time, type, message]"),
    ("opstart", "OpCode_start", "other",
     "Per opcode: when it was picked up, before its locks were taken"),
    ("opexec", "OpCode_exec", "other",
     "Per opcode: when it began executing, its locks held"),
    ("opend", "OpCode_end", "other", "Per opcode: when it finished"),
    ("oppriority", "OpCode_prio", "other", "Per opcode: its priority"),
    ("summary", "Summary", "other", "Per opcode: OP_ID without OP_ and its main parameter"),
    ("reason", "Reason", "other", "Per opcode: its reason trail [source, reason, ns]"),
    ("received_ts", "Received", "other",
     "When the queue accepted the job, as [seconds, microseconds]"),
    ("start_ts", "Start", "other",
     "When the first opcode was picked up, as [seconds, microseconds]"),
    ("end_ts", "End", "other",
     "When the job reached a final state, as [seconds, microseconds]"),
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


def requested_job_ids(qfilter: Any) -> list[int]:
    """The job ids a filter only names (``id`` equalities joined by ``|``), in order,
    each once; ``[]`` when the filter is anything else. Ids may be given as strings."""
    ids: list[int] = []
    for value in requested_names(qfilter, "id") or ():
        try:
            job_id = int(value)
        except (TypeError, ValueError):
            raise ParameterError(
                f"invalid job id {value!r} in the query filter: expected an integer"
            ) from None
        if job_id not in ids:
            ids.append(job_id)
    return ids


def query_jobs_by_id(ids: Sequence[int], found: Mapping[int, Job],
                     fields: Sequence[str]) -> dict[str, Any]:
    """``Query("job", fields, ids...)`` for jobs asked for by id: a row per id in the
    order asked, as Ganeti answers; an id no job has gets its ``id`` and every other
    field unavailable."""
    answer = JOB_QUERY_FIELDS.query([], fields, None, None)
    for job_id in ids:
        job = found.get(job_id)
        if job is not None:
            answer["data"].extend(JOB_QUERY_FIELDS.query([job], fields, None, None)["data"])
            continue
        answer["data"].append([
            [int(ResultStatus.NORMAL), job_id] if name == "id"
            else [int(ResultStatus.UNKNOWN if name not in JOB_QUERY_FIELDS
                      else ResultStatus.UNAVAIL), None]
            for name in fields])
    return answer
