"""What a RAPI resource is made of: routes, operations, query arguments and bodies.

The route table (:mod:`corral.rapi.routes`) is built from these pieces. A
:class:`Route` is a path pattern and, per HTTP method, either an
:class:`Operation` (handler, access level, query arguments, body and response
schemas) or a :class:`NotServed` entry for a method Ganeti has and corral does not
serve yet, which answers 501 with the reason instead of a bare 404.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from corral.rapi.schema import Schema, opcode_schema

if TYPE_CHECKING:
    from corral.rapi.request import RapiRequest

__all__ = [
    "ACCESS_LEVELS",
    "DEPENDS_ONLY",
    "METHODS",
    "PATH_PARAMS",
    "QUERY_RESOURCES",
    "Access",
    "ArgKind",
    "Body",
    "Handler",
    "NotServed",
    "Operation",
    "PathParam",
    "QueryArg",
    "Route",
]

#: Who may call an operation (Ganeti's ``*_ACCESS`` lists):
#: ``public``: anyone, unless the daemon requires authentication (then any user);
#: ``read``: users with the ``read`` or ``write`` option; ``write``: users with ``write``.
Access = Literal["public", "read", "write"]
ACCESS_LEVELS: Final = ("public", "read", "write")

#: The HTTP methods RAPI resources use.
METHODS: Final = ("GET", "PUT", "POST", "DELETE")

#: How a query argument's text is read: ``flag`` is Ganeti's boolean as an integer
#: (``0`` false, any other integer true), ``int`` an integer, ``text`` a string,
#: ``texts`` a string that may be repeated (``?tag=a&tag=b``).
ArgKind = Literal["flag", "int", "text", "texts"]

#: Answers one request; returns the JSON-able result.
Handler = Callable[["RapiRequest"], Awaitable[Any]]


@dataclass(frozen=True)
class PathParam:
    """A variable part of a path."""

    pattern: str
    doc: str
    #: The only values that name something, when they are known in advance.
    enum: tuple[str, ...] | None = None


#: The resources ``/2/query/[resource]`` answers (those the master daemon queries).
QUERY_RESOURCES: Final = ("instance", "node", "group", "os", "job", "filter", "lock")

#: Ganeti's name pattern: letters, digits, ``.``, ``_`` and ``-`` (UUIDs match too);
#: ASCII only, as host names are and as JSON Schema reads ``\w``.
_NAME = r"[A-Za-z0-9_.-]+"
_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"

#: The variable parts paths may contain, by name.
PATH_PARAMS: Final[Mapping[str, PathParam]] = {
    "instance_name": PathParam(_NAME, "Instance name or UUID"),
    "node_name": PathParam(_NAME, "Node name or UUID"),
    "group_name": PathParam(_NAME, "Node group name or UUID"),
    "network_name": PathParam(_NAME, "Network name"),
    "job_id": PathParam(r"\d+", "Job ID"),
    "filter_uuid": PathParam(_UUID, "Filter rule UUID"),
    "disk_index": PathParam(r"\d+", "Disk index, from 0"),
    "resource": PathParam(_NAME, "Query resource", enum=QUERY_RESOURCES),
}


@dataclass(frozen=True)
class QueryArg:
    """A query argument an operation accepts."""

    name: str
    kind: ArgKind
    doc: str
    default: Any = None
    required: bool = False
    #: The only values accepted, when the argument is an enumeration.
    choices: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Body:
    """A request body: its schema, and whether the server checks it before the handler.

    Opcode bodies set ``check`` to False: decoding into the opcode checks every
    parameter, with messages naming the opcode parameter.
    """

    schema: Schema
    required: bool = False
    check: bool = True
    #: Keys the schema does not name are dropped (and reported) before the check, as
    #: Ganeti ignores the body of operations that take their parameters from the URL.
    ignore_unknown: bool = False


#: A request body whose only use is ``depends`` (a job dependency list), for
#: operations whose opcode takes its parameters from the URL alone; other keys are
#: ignored, as Ganeti ignores these bodies.
DEPENDS_ONLY = Body({**opcode_schema("OP_TEST_DELAY", only=("depends",),
                                     doc="Only 'depends': [[job_id, [statuses]], ...] is "
                                         "used; other keys are ignored, as in Ganeti"),
                     "additionalProperties": True}, ignore_unknown=True)


@dataclass(frozen=True)
class Operation:
    """One method of one resource."""

    handler: Handler
    access: Access
    summary: str
    response: Schema
    args: tuple[QueryArg, ...] = ()
    body: Body | None = None
    description: str = ""
    #: True when the answer is the id of a submitted job.
    job: bool = False

    def arg(self, name: str) -> QueryArg | None:
        """The query argument called ``name``, if the operation takes it."""
        return next((a for a in self.args if a.name == name), None)


@dataclass(frozen=True)
class NotServed:
    """A method Ganeti serves on this path that corral does not serve yet, and why.

    Callers are authenticated as for Ganeti's operation (``access``) before they hear
    that it is not served, so what a user may learn does not depend on it.
    """

    reason: str
    access: Access = "write"


_PARAM_RE = re.compile(r"\{([a-z_]+)\}")


@dataclass(frozen=True)
class Route:
    """A resource: a path pattern and what each method does there."""

    path: str
    methods: Mapping[str, Operation | NotServed]
    doc: str
    params: tuple[str, ...] = field(init=False)
    #: Matches the whole path (use ``fullmatch``).
    regex: re.Pattern[str] = field(init=False)
    name: str = field(init=False)

    def __post_init__(self) -> None:
        params = tuple(_PARAM_RE.findall(self.path))
        unknown = [p for p in params if p not in PATH_PARAMS]
        if unknown:
            raise ValueError(f"{self.path}: unknown path parameter(s) {unknown}")
        bad = [m for m in self.methods if m not in METHODS]
        if bad:
            raise ValueError(f"{self.path}: unknown method(s) {bad}")
        pattern = _PARAM_RE.sub(
            lambda m: f"(?P<{m.group(1)}>{PATH_PARAMS[m.group(1)].pattern})", self.path)
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "regex", re.compile(pattern))
        object.__setattr__(self, "name", _route_name(self.path))

    @property
    def served(self) -> dict[str, Operation]:
        """The methods corral serves here."""
        return {m: op for m, op in self.methods.items() if isinstance(op, Operation)}


def _route_name(path: str) -> str:
    """``/2/instances/{instance_name}/startup`` -> ``instances_name_startup``, the
    resource's name in reason trails (Ganeti's handler names, without ``R_2_``)."""
    segments = [s for s in path.split("/") if s]
    if segments[:1] == ["2"] and len(segments) > 1:
        segments = segments[1:]
    parts = []
    for part in segments:
        match = _PARAM_RE.fullmatch(part)
        parts.append(match.group(1).rsplit("_", 1)[-1] if match else
                     part.replace("-", "_").replace(".", "_"))
    return "_".join(parts) or "root"
