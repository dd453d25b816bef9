"""Jobs and their opcodes as the queue keeps and stores them, in Ganeti's value formats.

A :class:`Job` is an ordered list of :class:`QueuedOpCode`; the job's status and
priority are derived from its opcodes (Ganeti's rules), so they can never disagree.
Timestamps are ``[seconds, microseconds]`` pairs and log entries are
``[serial, [sec, usec], log_type, message]``, which is what luxi clients expect.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Final

import msgspec

from corral.errors import OpExecError, UnknownFieldError, did_you_mean, to_ganeti
from corral.jobs.status import (
    CANCELED,
    CANCELING,
    ERROR,
    FINAL_STATUSES,
    PENDING_STATUSES,
    QUEUED,
    RUNNING,
    STATUSES,
    SUCCESS,
    WAITING,
    JobStatus,
    job_error,
)

__all__ = [
    "CANCELED",
    "CANCELING",
    "ERROR",
    "FINAL_STATUSES",
    "JOB_FIELDS",
    "PENDING_STATUSES",
    "PRECEDING_FAILED",
    "QUEUED",
    "RUNNING",
    "STATUSES",
    "SUCCESS",
    "WAITING",
    "Job",
    "JobStatus",
    "LogEntry",
    "QueuedOpCode",
    "Timestamp",
    "as_json_values",
    "decode_job",
    "encode_error",
    "encode_job",
    "job_error",
    "job_info",
    "timestamp_now",
]

#: ``(seconds, microseconds)``; JSON encodes it as ``[sec, usec]``.
Timestamp = tuple[int, int]
#: ``(serial, timestamp, log_type, message)``.
LogEntry = tuple[int, Timestamp, str, Any]

_DEFAULT_PRIORITY: Final = 0
#: The error of the opcodes after a failed one (Ganeti's text).
PRECEDING_FAILED: Final = "Preceding opcode failed"


def timestamp_now() -> Timestamp:
    """The current time as Ganeti's ``(seconds, microseconds)`` pair."""
    now = time.time_ns() // 1000
    return (now // 1_000_000, now % 1_000_000)


def encode_error(err: BaseException) -> list[Any]:
    """An opcode's error result as Ganeti encodes it (see :func:`corral.errors.to_ganeti`)."""
    return to_ganeti(err)


class QueuedOpCode(msgspec.Struct, kw_only=True):
    """One opcode of a job: its input (Ganeti dict form) and its execution record."""

    input: dict[str, Any]
    summary: str
    priority: int = _DEFAULT_PRIORITY
    status: JobStatus = "queued"
    result: Any = None
    log: list[LogEntry] = msgspec.field(default_factory=list)
    start_timestamp: Timestamp | None = None
    exec_timestamp: Timestamp | None = None
    end_timestamp: Timestamp | None = None


class Job(msgspec.Struct, kw_only=True):
    """A job: ordered opcodes plus timestamps, the log serial and the pausing filter."""

    id: int
    ops: list[QueuedOpCode]
    received_timestamp: Timestamp
    start_timestamp: Timestamp | None = None
    end_timestamp: Timestamp | None = None
    log_serial: int = 0
    #: uuid of the filter rule holding this job (PAUSE), shown as ``paused_by``.
    paused_by: str | None = None
    archived: bool = False

    @property
    def status(self) -> JobStatus:
        """Ganeti's job status from the opcode statuses (first decisive opcode wins)."""
        status: JobStatus = QUEUED
        all_success = True
        for op in self.ops:
            op_status = op.status
            if op_status == SUCCESS:
                continue
            all_success = False
            if op_status in (WAITING, RUNNING):
                status = op_status
            elif op_status != QUEUED:
                # canceling, canceled or error: decides the job's status
                return op_status
        return SUCCESS if all_success else status

    @property
    def priority(self) -> int:
        """The highest priority (lowest number) among unfinished opcodes."""
        pending = [op.priority for op in self.ops if op.status not in FINAL_STATUSES]
        return min(pending) if pending else _DEFAULT_PRIORITY

    def log_after(self, serial: int | None) -> list[LogEntry]:
        """Log entries of every opcode with a serial above ``serial`` (all if None)."""
        limit = -1 if serial is None else serial
        if self.log_serial <= limit:
            return []
        entries = [entry for op in self.ops for entry in op.log if entry[0] > limit]
        entries.sort(key=lambda entry: entry[0])
        return entries

    def add_log(self, index: int, log_type: str, message: Any) -> LogEntry:
        """Append a log entry to opcode ``index`` with the next serial."""
        self.log_serial += 1
        entry: LogEntry = (self.log_serial, timestamp_now(), log_type, message)
        self.ops[index].log.append(entry)
        return entry

    def fail_at(self, index: int, err: BaseException) -> None:
        """Opcode ``index`` failed with ``err``; the opcodes after it fail too, with
        Ganeti's :data:`PRECEDING_FAILED`."""
        op = self.ops[index]
        op.status = ERROR
        op.result = encode_error(err)
        op.end_timestamp = timestamp_now()
        self.finish_unfinished(ERROR, encode_error(OpExecError(PRECEDING_FAILED)))

    def finish_unfinished(self, status: JobStatus, result: Any) -> None:
        """Put every unfinished opcode into final ``status`` with ``result``."""
        now = timestamp_now()
        for op in self.ops:
            if op.status not in FINAL_STATUSES:
                op.status = status
                op.result = result
                op.end_timestamp = now
        self.end_timestamp = now


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Job)
_plain_decoder = msgspec.json.Decoder()


def encode_job(job: Job) -> bytes:
    """The stored form of ``job`` (JSON)."""
    return _encoder.encode(job)


def decode_job(data: bytes | str) -> Job:
    """A job back from :func:`encode_job`."""
    return _decoder.decode(data)


def _ops(attr: str) -> Callable[[Job], list[Any]]:
    def get(job: Job) -> list[Any]:
        return [getattr(op, attr) for op in job.ops]

    return get


def _oplog(job: Job) -> list[Any]:
    return [list(op.log) for op in job.ops]


def _reason(job: Job) -> list[Any]:
    return [op.input.get("reason", []) for op in job.ops]


#: Job query fields (Ganeti's names) -> plain value of a job.
JOB_FIELDS: Final[dict[str, Callable[[Job], Any]]] = {
    "id": lambda job: job.id,
    "status": lambda job: job.status,
    "priority": lambda job: job.priority,
    "ops": _ops("input"),
    "opresult": _ops("result"),
    "opstatus": _ops("status"),
    "oplog": _oplog,
    "opstart": _ops("start_timestamp"),
    "opexec": _ops("exec_timestamp"),
    "opend": _ops("end_timestamp"),
    "oppriority": _ops("priority"),
    "received_ts": lambda job: job.received_timestamp,
    "start_ts": lambda job: job.start_timestamp,
    "end_ts": lambda job: job.end_timestamp,
    "summary": _ops("summary"),
    "archived": lambda job: job.archived,
    "reason": _reason,
    "paused_by": lambda job: job.paused_by,
}


def job_info(job: Job, fields: Sequence[str]) -> list[Any]:
    """Values of ``fields`` for ``job`` as JSON builtins (tuples become lists)."""
    try:
        values = [JOB_FIELDS[name](job) for name in fields]
    except KeyError as err:
        raise UnknownFieldError(
            f"unknown job field {err.args[0]!r}; "
            f"{did_you_mean(err.args[0], sorted(JOB_FIELDS), noun='known fields')}"
        ) from None
    return list(as_json_values(values))


def as_json_values(value: Any) -> Any:
    """``value`` as a JSON client sees it (tuples become lists), for comparisons."""
    return _plain_decoder.decode(_encoder.encode(value))
