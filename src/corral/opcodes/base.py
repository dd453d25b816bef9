"""The opcode base: common fields, the registry and the Ganeti dict form.

An opcode is a msgspec Struct tagged by its ``OP_ID``, so the Ganeti dict form
``{"OP_ID": "OP_TEST_DELAY", "duration": 1.0, ...}`` decodes straight into the right
class with every parameter type-checked, and encodes back the same way. Only opcodes
that corral implements are registered: any other ``OP_ID`` is refused at submission.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import (
    Annotated,
    Any,
    ClassVar,
    Literal,
    TypeVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

import msgspec

from corral.errors import ParameterError, UnknownParameterError
from corral.opcodes.checks import Problem, check_shapes
from corral.opcodes.messages import plain_detail

__all__ = [
    "FINAL_JOB_STATUSES",
    "REGISTRY",
    "OpCode",
    "Priority",
    "op_from_dict",
    "op_summary",
    "op_to_dict",
    "plain_detail",
    "register",
]

#: Opcode/job priority: -20 is the highest, 19 the lowest, 0 the default (Ganeti's).
Priority = Annotated[int, msgspec.Meta(ge=-20, le=19)]

_FinalStatus = Literal["canceled", "success", "error"]

#: The statuses a job never leaves, which a job dependency may name (the same set as
#: :data:`corral.jobs.status.FINAL_STATUSES`, which the command line imports without
#: the opcodes; a unit test keeps the two equal).
FINAL_JOB_STATUSES: tuple[str, ...] = get_args(_FinalStatus)


class OpCode(
    msgspec.Struct, kw_only=True, forbid_unknown_fields=True, tag_field="OP_ID", tag=True
):
    """Fields every opcode has; subclasses add their parameters."""

    #: ``OP_...``: set by :func:`register`.
    OP_ID: ClassVar[str] = ""
    #: Parameter whose value goes into the job summary (Ganeti's ``OP_DSC_FIELD``).
    SUMMARY_FIELD: ClassVar[str | None] = None

    reason: list[tuple[str, str, int]] = msgspec.field(default_factory=list)
    priority: Priority = 0
    dry_run: bool = False
    debug_level: Annotated[int, msgspec.Meta(ge=0)] = 0
    depends: list[tuple[int, list[_FinalStatus]]] | None = None
    """``[[job_id, [statuses]]]``: wait for these jobs to end in one of the statuses;
    negative ids are relative to the job's position in ``SubmitManyJobs``."""
    comment: str | None = None


#: ``OP_ID`` -> opcode class, for every implemented opcode.
REGISTRY: dict[str, type[OpCode]] = {}

_O = TypeVar("_O", bound=type[OpCode])
_decode_type: Any = None


def register(cls: _O) -> _O:
    """Class decorator: record an opcode class under its tag as ``OP_ID``."""
    tag = cls.__struct_config__.tag
    assert isinstance(tag, str) and tag.startswith("OP_"), cls
    cls.OP_ID = tag
    REGISTRY[tag] = cls
    global _decode_type
    _decode_type = None
    return cls


def _union() -> Any:
    global _decode_type
    if _decode_type is None:
        # A tagged union of every registered class, built at run time.
        _decode_type = Union.__getitem__(tuple(REGISTRY.values()))
    return _decode_type


_PATH_RE = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")
_FIRST_RE = re.compile(r"^[^.\[]*")


class _Naming:
    """How an error names a parameter: as the caller calls it (``names`` maps opcode
    parameters to the caller's keys, e.g. RAPI's ``os`` for ``os_type``), after
    ``where`` (the opcode's id by default)."""

    def __init__(self, op_id: str, where: str | None, names: Mapping[str, str] | None) -> None:
        self.op_id = op_id
        self.where = where or op_id
        self.names = names or {}

    def path(self, path: str) -> str:
        """``os_type`` -> ``os``; ``disks[0].size`` keeps its inner part."""
        return _FIRST_RE.sub(lambda m: self.names.get(m.group(0), m.group(0)), path, count=1)

    def message(self, path: str, detail: str) -> str:
        return f"{self.where}: parameter '{self.path(path)}': {detail}"


def _choices(op_id: str, path: str) -> str:
    """The values a ``Literal`` parameter, or the items of a list of them, accepts
    (``?`` when not one)."""
    top = path.split("[", 1)[0].split(".", 1)[0]
    hint = get_type_hints(REGISTRY[op_id]).get(top)
    values: list[str] = []
    pending = [hint]
    while pending:
        item = pending.pop(0)
        if get_origin(item) is Literal:
            values.extend(str(v) for v in get_args(item))
        else:
            pending.extend(get_args(item))
    return ", ".join(values) or "?"


def _explain(naming: _Naming, err: msgspec.ValidationError) -> str:
    text = str(err)
    match = _PATH_RE.search(text)
    detail = plain_detail(text[: match.start()] if match else text)
    if match and match.group("path"):
        path = match.group("path")
        if detail.startswith("Invalid enum value"):
            detail = f"{detail}; valid: {_choices(naming.op_id, path)}"
        return naming.message(path, f"{detail[0].lower()}{detail[1:]}")
    if detail.startswith("Object missing required field"):
        field = detail.rsplit(" ", 1)[1]
        return f"{naming.where}: parameter '{naming.path(field)}' is required"
    if detail.startswith("Object contains unknown field"):
        field = detail.split("unknown field", 1)[1].strip()
        cls = REGISTRY[naming.op_id]
        valid = ", ".join(sorted(naming.path(name) for name in cls.__struct_fields__))
        return f"{naming.where}: unknown parameter {field}; valid parameters: {valid}"
    return f"{naming.where}: {detail}"


def op_from_dict(data: Mapping[str, Any], *, where: str | None = None,
                 names: Mapping[str, str] | None = None) -> OpCode:
    """Build and validate an opcode from its Ganeti dict form.

    Every parameter is checked, including the disk and NIC definitions and the
    parameter families inside dict parameters (:func:`corral.opcodes.checks.check_shapes`).
    Errors are :class:`ParameterError` naming, after ``where`` (default: the opcode's
    id), the path of the wrong value (``disks[0].size``) and what is accepted there;
    ``names`` renames parameters for callers whose users know them by other names.
    """
    if not isinstance(data, Mapping):
        raise ParameterError(f"an opcode must be an object with an OP_ID, got {data!r}")
    op_id = data.get("OP_ID")
    if not isinstance(op_id, str) or op_id not in REGISTRY:
        raise ParameterError(
            f"unknown opcode {op_id!r}; implemented: {', '.join(sorted(REGISTRY))}"
        )
    try:
        op: OpCode = msgspec.convert(dict(data), _union())
        check_shapes(op)
    except msgspec.ValidationError as err:
        raise ParameterError(_explain(_Naming(op_id, where, names), err)) from None
    except Problem as problem:
        naming = _Naming(op_id, where, names)
        cls = UnknownParameterError if problem.unknown else ParameterError
        raise cls(naming.message(problem.path, problem.detail)) from None
    return op


def op_to_dict(op: OpCode) -> dict[str, Any]:
    """The Ganeti dict form of ``op``: ``OP_ID`` and every parameter."""
    result: dict[str, Any] = msgspec.to_builtins(op)
    result["OP_ID"] = op.OP_ID
    for name in op.__struct_fields__:  # to_builtins omits nothing, but be explicit
        result.setdefault(name, msgspec.to_builtins(getattr(op, name)))
    return result


def op_summary(op: OpCode) -> str:
    """Ganeti's job summary: ``OP_ID`` without ``OP_``, plus the summary field's value."""
    text = op.OP_ID[3:]
    field = op.SUMMARY_FIELD
    if field:
        value = getattr(op, field, None)
        if isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        text = f"{text}({value})"
    return text

