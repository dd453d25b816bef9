"""The arguments of every luxi method, one msgspec Struct each.

A request carries its arguments by position (``{"method", "args": [...], "version"}``,
as Ganeti's clients send them), so each Struct is ``array_like``: its fields are the
positions, in order, and trailing fields with a default may be left out. The master
daemon decodes a request's ``args`` into the method's Struct (:func:`decode_args`)
before the method runs; a bad argument is refused with a :class:`ParameterError`
naming the method, the argument and what it accepts. Encoding a Struct gives the
``args`` list back (:func:`encode_args`), so a client may build requests from the
same types.

Types with a name of their own (:data:`JobId`, ...) carry a ``title`` and a
``description`` that the error messages quote.
"""

from __future__ import annotations

import re
import types
import typing
from typing import Annotated, Any, Final, TypeVar

import msgspec
from msgspec import Meta

from corral.errors import ParameterError

__all__ = [
    "CALLS",
    "ArchiveJob",
    "AutoArchiveJobs",
    "CancelJob",
    "ChangeJobPriority",
    "DeleteFilter",
    "JobId",
    "LuxiArgs",
    "Placement",
    "PrepareMasterHandover",
    "Query",
    "QueryClusterInfo",
    "QueryConfigValues",
    "QueryFields",
    "QueryFilters",
    "QueryJobs",
    "QueryTags",
    "ReplaceFilter",
    "SetDrainFlag",
    "SubmitJob",
    "SubmitManyJobs",
    "WaitForJobChange",
    "decode_args",
    "encode_args",
    "signature",
]

#: A job id: an integer, or its decimal digits as a string (RAPI paths, old clients).
JobId = Annotated[
    Annotated[int, Meta(ge=0)] | Annotated[str, Meta(pattern=r"^[0-9]+$")],
    Meta(title="job id", description="a non-negative integer"),
]
#: Seconds, a whole or fractional number from 0.
Seconds = Annotated[float, Meta(ge=0, title="duration",
                                description="seconds, a number >= 0")]
#: A job's priority (Ganeti's range).
Priority = Annotated[int, Meta(ge=-20, le=19, title="priority",
                               description="an integer from -20 (highest) to 19 (lowest)")]
#: A job filter's priority: rules are tried by increasing priority.
FilterPriority = Annotated[int, Meta(ge=0, title="filter priority",
                                     description="a non-negative integer")]
#: One submitted opcode, as a client sends it (checked by :mod:`corral.opcodes`).
Opcode = dict[str, Any]
#: A job: its opcodes, in order.
Job = Annotated[list[Opcode], Meta(min_length=1, title="job",
                                   description="a non-empty list of opcodes")]
#: Names of fields to return.
Fields = list[str]
#: A node's name (not empty).
NodeName = Annotated[str, Meta(min_length=1, title="node name",
                               description="a node name")]


class LuxiArgs(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """Base of the argument Structs: positional, no extra arguments."""


class QueryClusterInfo(LuxiArgs):
    """``QueryClusterInfo()``."""


class QueryConfigValues(LuxiArgs):
    """``QueryConfigValues(fields)``."""

    fields: Fields


class QueryTags(LuxiArgs):
    """``QueryTags(kind, name)``; the cluster's name may be null or empty."""

    kind: str
    name: str | None


class SubmitJob(LuxiArgs):
    """``SubmitJob(ops)``."""

    ops: Job


class SubmitManyJobs(LuxiArgs):
    """``SubmitManyJobs(jobs)``."""

    jobs: list[list[Opcode]]


class WaitForJobChange(LuxiArgs):
    """``WaitForJobChange(job_id, fields, prev_job_info, prev_log_serial, timeout)``."""

    job_id: JobId
    fields: Fields
    prev_job_info: list[Any] | None
    prev_log_serial: int | None
    timeout: Seconds


class CancelJob(LuxiArgs):
    """``CancelJob(job_id[, kill])``."""

    job_id: JobId
    kill: bool = False


class ArchiveJob(LuxiArgs):
    """``ArchiveJob(job_id)``."""

    job_id: JobId


class AutoArchiveJobs(LuxiArgs):
    """``AutoArchiveJobs(age, timeout)``: ages and timeouts in seconds (``age`` may be
    negative: every finished job)."""

    age: float
    timeout: float


class ChangeJobPriority(LuxiArgs):
    """``ChangeJobPriority(job_id, priority)``."""

    job_id: JobId
    priority: Priority


class QueryJobs(LuxiArgs):
    """``QueryJobs(job_ids, fields)``; null or an empty list means every job."""

    job_ids: list[JobId] | None
    fields: Fields


class Query(LuxiArgs):
    """``Query(what, fields, qfilter)``."""

    what: str
    fields: Fields
    qfilter: Any


class QueryFields(LuxiArgs):
    """``QueryFields(what, fields)``; null fields means every field."""

    what: str
    fields: Fields | None


class QueryFilters(LuxiArgs):
    """``QueryFilters(uuids, fields)``; null or empty uuids means every filter."""

    uuids: list[str] | None
    fields: Fields


class ReplaceFilter(LuxiArgs):
    """``ReplaceFilter(uuid, priority, predicates, action, reason)``; a null uuid adds a
    rule. Predicates and the action are checked by :func:`corral.jobs.filters.validate_rule`."""

    uuid: str | None
    priority: FilterPriority
    predicates: Any
    action: Any
    reason: list[Any] | None


class DeleteFilter(LuxiArgs):
    """``DeleteFilter(uuid)``."""

    uuid: str


class SetDrainFlag(LuxiArgs):
    """``SetDrainFlag(drain_flag)``."""

    drain_flag: bool


class SetWatcherPause(LuxiArgs):
    """``SetWatcherPause(until)``: seconds since the epoch, or ``None`` to end it."""

    until: float | None


class PrepareMasterHandover(LuxiArgs):
    """``PrepareMasterHandover(new_master, wait)``: corral's own (see
    :data:`corral.luxi.protocol.HANDOVER_METHOD`)."""

    new_master: NodeName
    wait: Seconds


class Placement(LuxiArgs):
    """``Placement(method, path, query, version_header, content_type, body, user,
    read_only, prefix, accept)``: corral's own; one call of the ``/placement/`` REST API,
    forwarded by the RAPI daemon (answers ``{"status", "headers", "body"}``)."""

    method: Annotated[str, Meta(pattern=r"^[A-Z]+$")]
    path: str
    query: str = ""
    version_header: str | None = None
    content_type: str | None = None
    body: str = ""
    user: str | None = None
    read_only: bool = True
    prefix: str = "/placement"
    accept: str | None = None


#: Every luxi method the master daemon answers, by name, with its arguments' type.
CALLS: Final[dict[str, type[LuxiArgs]]] = {
    cls.__name__: cls for cls in (
        QueryClusterInfo, QueryConfigValues, QueryTags, SubmitJob, SubmitManyJobs,
        WaitForJobChange, CancelJob, ArchiveJob, AutoArchiveJobs, ChangeJobPriority,
        QueryJobs, Query, QueryFields, QueryFilters, ReplaceFilter, DeleteFilter,
        SetDrainFlag, SetWatcherPause, PrepareMasterHandover, Placement,
    )
}


def signature(cls: type[LuxiArgs]) -> str:
    """``(job_id[, kill])``: the argument names, optional ones in brackets."""
    required = len(cls.__struct_fields__) - len(cls.__struct_defaults__)
    names = cls.__struct_fields__
    text = ", ".join(names[:required])
    for name in names[required:]:
        text += f"[, {name}]" if text else f"[{name}]"
    return f"({text})"


def encode_args(args: LuxiArgs) -> list[Any]:
    """The ``args`` list of a request carrying ``args``."""
    result: list[Any] = msgspec.to_builtins(args)
    return result


_T = TypeVar("_T", bound=LuxiArgs)

_AT = re.compile(r"^(?P<detail>.*) - at `\$\[(?P<index>\d+)\](?P<rest>.*)`$", re.S)
_GOT = re.compile(r", got `[^`]*`$")
_TYPE = re.compile(r"`([^`]*)`")
_TYPE_WORDS = {"array": "a list", "object": "an object", "str": "a string", "int": "an integer",
               "float": "a number", "bool": "true or false", "null": "null"}
#: A step of a msgspec error path: ``[3]`` (list), ``[...]`` (a dict's value), ``.name``.
_STEP = re.compile(r"\[(\d+|\.\.\.)\]|\.([^.\[]+)")
#: What :func:`_value_at` answers when the path does not say which value it was.
_UNKNOWN: Final = object()


def _non_null(annotation: Any) -> Any:
    """``X`` for ``X | None``; anything else unchanged."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return members[0]
    return annotation


def _titled(annotation: Any, rest: str) -> Meta | None:
    """The titled :class:`Meta` of the type found at ``rest`` (``[0]``, ``.key`` ...)
    inside ``annotation``, if that type has one."""
    for _index, _key in _STEP.findall(rest):
        annotation = _non_null(annotation)
        if typing.get_origin(annotation) is Annotated:
            annotation = _non_null(annotation.__origin__)
        inner = typing.get_args(annotation)
        if typing.get_origin(annotation) is list and inner:
            annotation = inner[0]
        elif typing.get_origin(annotation) is dict and len(inner) == 2:
            annotation = inner[1]
        else:
            return None
    annotation = _non_null(annotation)
    if typing.get_origin(annotation) is Annotated:
        for extra in annotation.__metadata__:
            if isinstance(extra, Meta) and extra.title:
                return extra
    return None


def _value_at(value: Any, rest: str) -> Any:
    for index, key in _STEP.findall(rest):
        if index == "...":
            return _UNKNOWN
        try:
            value = value[int(index)] if index else value[key]
        except (LookupError, TypeError):
            return _UNKNOWN
    return value


def _found(value: Any) -> str:
    if value is _UNKNOWN:
        return "something else"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def decode_args(method: str, cls: type[_T], args: list[Any]) -> _T:
    """Turn a request's ``args`` into ``cls``.

    :raises ParameterError: naming ``method``, the argument (and the place inside it),
        the value found and what is accepted there.
    """
    try:
        return msgspec.convert(args, cls)
    except msgspec.ValidationError as err:
        raise _explain(method, cls, args, str(err)) from None


def _explain(method: str, cls: type[LuxiArgs], args: list[Any], text: str) -> ParameterError:
    match = _AT.match(text)
    if match is None:
        count = f"{len(args)} argument(s)" if isinstance(args, list) else _found(args)
        return ParameterError(f"{method} takes {signature(cls)}, got {count}")
    index = int(match["index"])
    name = cls.__struct_fields__[index]
    rest = match["rest"]
    value = _value_at(args[index], rest)
    where = f"{method}: argument {name!r}{rest}"
    hints = typing.get_type_hints(cls, include_extras=True)
    meta = _titled(hints[name], rest)
    if meta is not None:
        return ParameterError(f"{where}: invalid {meta.title} {_found(value)}: expected "
                              f"{meta.description}")
    detail = _TYPE.sub(lambda m: " or ".join(_TYPE_WORDS.get(word, word)
                                             for word in m[1].split(" | ")),
                       _GOT.sub("", match["detail"]))
    found = _found(value) if value is _UNKNOWN else f"{_found(value)} ({type(value).__name__})"
    return ParameterError(f"{where}: {detail[0].lower()}{detail[1:]}, got {found}")
