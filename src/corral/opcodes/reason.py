"""The reason trail every opcode carries (seed 001): who asked for it, and why.

An entry is ``(source, reason, timestamp_ns)``. Sources starting with ``gnt:`` belong
to corral itself: the CLI adds ``gnt:client:gnt-<tool>``, RAPI
``gnt:client:rapi:<operation>`` and ``gnt:library:rlib2:<operation>``, the job queue
``gnt:opcode:<op>``, the node daemon ``gnt:daemon:noded:<operation>`` and the watcher
``gnt:watcher``. A user's own text is a ``user`` entry. Trails that
arrive over luxi may carry any source except the ``gnt:`` ones the submitting client
is not entitled to add (:func:`check_submitted_trail` says which); trails in RAPI
bodies may carry no ``gnt:`` source at all (:func:`check_rapi_trail`).
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
    "LIBRARY_SOURCE",
    "LIBRARY_STAND_IN",
    "OPCODE_PREFIX",
    "RAPI_LIBRARY_PREFIX",
    "RAPI_SOURCE",
    "USER_SOURCE",
    "WATCHER_SOURCE",
    "ReasonEntry",
    "check_rapi_trail",
    "check_submitted_trail",
    "client_entry",
    "opcode_source",
    "queue_entry",
    "rapi_entries",
    "user_entry",
    "watcher_entry",
]

#: One reason trail entry: ``(source, reason, timestamp in ns since the epoch)``.
ReasonEntry = tuple[str, str, int]

#: Prefix of every source corral itself adds.
INTERNAL_PREFIX = "gnt:"
#: Prefix of the entries command-line tools add (``gnt:client:gnt-job``).
CLIENT_PREFIX = "gnt:client:"
#: Prefix of the entry the job queue adds to each opcode.
OPCODE_PREFIX = "gnt:opcode:"
#: Source of the entry the RAPI daemon adds, followed by ``:<operation>``.
RAPI_SOURCE = "gnt:client:rapi"
#: Prefix of the second entry RAPI adds for its request handling library, as Ganeti's
#: RAPI does (``gnt:library:rlib2:instances_name_shutdown``).
RAPI_LIBRARY_PREFIX = "gnt:library:rlib2:"
#: Source of the entries of the opcodes the watcher submits (Ganeti's).
WATCHER_SOURCE = "gnt:watcher"
#: Source of a user's own ``--reason`` / ``reason=`` text.
USER_SOURCE = "user"
#: Source of the entry Ganeti's RAPI client library appends to a filter's trail
#: (``["gnt:client", "", now]``); see :func:`check_rapi_trail`.
LIBRARY_SOURCE = "gnt:client"
#: What RAPI stores that entry as: RAPI saying "a RAPI client library passed this on".
LIBRARY_STAND_IN = "gnt:client:rapi-client"

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


def rapi_entries(operation: str) -> list[ReasonEntry]:
    """The two entries the RAPI daemon adds for ``operation`` (the resource's handler
    name, Ganeti's: ``instances_name_shutdown``), as seed 001 shows them: RAPI as the
    client, ``("gnt:client:rapi:<operation>", "", now)``, then its request library,
    ``("gnt:library:rlib2:<operation>", "", now)``, the entry Ganeti 3.0's RAPI adds."""
    return [(f"{RAPI_SOURCE}:{operation}", "", _now()),
            (RAPI_LIBRARY_PREFIX + operation, "", _now())]


def watcher_entry(text: str) -> ReasonEntry:
    """The entry of an opcode the watcher submits: ``("gnt:watcher", text, now)``."""
    return (WATCHER_SOURCE, text, _now())


def user_entry(text: str) -> ReasonEntry:
    """A user's own reason: ``("user", text, now)``."""
    return (USER_SOURCE, text, _now())


def queue_entry(op_id: str, job_id: int, index: int) -> ReasonEntry:
    """The entry the job queue adds to opcode ``index`` of job ``job_id``."""
    return (opcode_source(op_id), f"job={job_id};index={index}", _now())


def _checked_entry(index: int, entry: Any) -> ReasonEntry:
    """``entry`` as a :data:`ReasonEntry`, or an error naming it when it is not
    ``[text, text, integer]``."""
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
    return (entry[0], entry[1], entry[2])


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
    for index, raw in enumerate(trail):
        entry = _checked_entry(index, raw)
        source = entry[0]
        if source.startswith(INTERNAL_PREFIX) and not source.startswith(allowed):
            accepted = ", ".join(allowed) if allowed else "none"
            raise ParameterError(
                f"reason trail entry {index} {list(entry)!r}: source {source!r} is reserved "
                f"for corral itself ('gnt:' sources accepted from clients: {accepted}); "
                f"use source {USER_SOURCE!r} for your own reasons"
            )
        entries.append(entry)
    return entries


def check_rapi_trail(trail: Any) -> list[ReasonEntry]:
    """Validate a trail sent in a RAPI body (``POST``/``PUT /2/filters``).

    RAPI is the interface towards the outside world, so no ``gnt:`` source is accepted
    there: the refusal names the entry. One entry has a meaning of its own: Ganeti's
    RAPI client library appends ``["gnt:client", "", now]`` to every trail it sends
    (:data:`LIBRARY_SOURCE`). Refusing it would break that library and dropping it
    would lose an entry, so RAPI vouches for it: the entry is kept in its place, with
    its timestamp, under RAPI's source :data:`LIBRARY_STAND_IN`. Every other entry is
    returned as given.
    """
    if not isinstance(trail, (list, tuple)):
        raise ParameterError(
            f"reason: expected a list of [source, reason, timestamp_ns] entries, got {trail!r}"
        )
    entries: list[ReasonEntry] = []
    for index, raw in enumerate(trail):
        entry = _checked_entry(index, raw)
        source, text, timestamp = entry
        if source == LIBRARY_SOURCE and text == "":
            entries.append((LIBRARY_STAND_IN, text, timestamp))
            continue
        if source.startswith(INTERNAL_PREFIX):
            raise ParameterError(
                f"reason trail entry {index} {list(entry)!r}: source {source!r} is reserved "
                f"for corral itself and refused from RAPI clients; use any other source "
                f"(e.g. {USER_SOURCE!r}) for your own entries. The one 'gnt:' entry "
                f"accepted is [{LIBRARY_SOURCE!r}, '', timestamp_ns], which Ganeti's RAPI "
                f"client library adds (stored as {LIBRARY_STAND_IN!r})"
            )
        entries.append(entry)
    return entries
