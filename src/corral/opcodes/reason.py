"""The reason trail every opcode carries (seed 001): who asked for it, and why.

An entry is ``(source, reason, timestamp_ns)``. Sources starting with ``gnt:`` belong
to corral itself: the CLI adds ``gnt:client:gnt-<tool>``, RAPI ``gnt:client:rapi``,
the job queue ``gnt:opcode:<op>``. A user's own text is a ``user`` entry. Trails that
arrive from outside (luxi, RAPI bodies) may carry any source except the ``gnt:``
ones the submitting client is entitled to add: :func:`check_submitted_trail` says
which.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from typing import Any

from corral.errors import ParameterError

__all__ = [
    "CLIENT_PREFIX",
    "INTERNAL_PREFIX",
    "OPCODE_PREFIX",
    "RAPI_SOURCE",
    "USER_SOURCE",
    "ReasonEntry",
    "check_submitted_trail",
    "client_entry",
    "opcode_source",
    "queue_entry",
    "rapi_entry",
    "user_entry",
]

#: One reason trail entry: ``(source, reason, timestamp in ns since the epoch)``.
ReasonEntry = tuple[str, str, int]

#: Prefix of every source corral itself adds.
INTERNAL_PREFIX = "gnt:"
#: Prefix of the entries command-line tools add (``gnt:client:gnt-job``).
CLIENT_PREFIX = "gnt:client:"
#: Prefix of the entry the job queue adds to each opcode.
OPCODE_PREFIX = "gnt:opcode:"
#: Source of the entry the RAPI daemon adds.
RAPI_SOURCE = "gnt:client:rapi"
#: Source of a user's own ``--reason`` / ``reason=`` text.
USER_SOURCE = "user"

_CAMEL_RE = re.compile(r"(?<!^)(?=[A-Z])")


def _now() -> int:
    return time.time_ns()


def opcode_source(op_id: str) -> str:
    """``OP_TEST_DELAY`` -> ``gnt:opcode:test_delay``, the queue's source for an opcode."""
    # An OP_ID, or a class name such as OpTestDelay.
    name = op_id[3:] if op_id.startswith("OP_") else _CAMEL_RE.sub("_", op_id.removeprefix("Op"))
    return OPCODE_PREFIX + name.lower()


def client_entry(tool: str, verb: str) -> ReasonEntry:
    """The entry a command-line tool adds: ``("gnt:client:<tool>", verb, now)``."""
    return (CLIENT_PREFIX + tool, verb, _now())


def rapi_entry(resource: str) -> ReasonEntry:
    """The entry the RAPI daemon adds: ``("gnt:client:rapi", resource, now)``."""
    return (RAPI_SOURCE, resource, _now())


def user_entry(text: str) -> ReasonEntry:
    """A user's own reason: ``("user", text, now)``."""
    return (USER_SOURCE, text, _now())


def queue_entry(op_id: str, job_id: int, index: int) -> ReasonEntry:
    """The entry the job queue adds to opcode ``index`` of job ``job_id``."""
    return (opcode_source(op_id), f"job={job_id};index={index}", _now())


def check_submitted_trail(
    trail: Iterable[Sequence[Any]], *, allowed_internal: Iterable[str] = ()
) -> list[ReasonEntry]:
    """Validate a trail that arrived from outside and return it as entries.

    Sources starting with ``gnt:`` are refused unless they start with one of
    ``allowed_internal`` (the luxi server allows ``gnt:client:``, which the CLI and
    RAPI add for themselves; ``gnt:opcode:`` is only ever added by the queue).
    """
    allowed = tuple(allowed_internal)
    entries: list[ReasonEntry] = []
    for index, entry in enumerate(trail):
        if (
            not isinstance(entry, (list, tuple))
            or len(entry) != 3
            or not isinstance(entry[0], str)
            or not isinstance(entry[1], str)
            or isinstance(entry[2], bool)
            or not isinstance(entry[2], int)
        ):
            raise ParameterError(
                f"reason trail entry {index}: expected [source, reason, timestamp_ns] "
                f"(text, text, integer), got {entry!r}"
            )
        source = entry[0]
        if source.startswith(INTERNAL_PREFIX) and not source.startswith(allowed):
            accepted = ", ".join(allowed) if allowed else "none"
            raise ParameterError(
                f"reason trail entry {index}: source {source!r} is reserved for corral "
                f"itself ('gnt:' sources accepted from clients: {accepted}); "
                f"use source {USER_SOURCE!r} for your own reasons"
            )
        entries.append((source, entry[1], entry[2]))
    return entries
