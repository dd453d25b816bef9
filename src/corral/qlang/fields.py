"""Query fields of one resource and the answers to ``Query`` and ``QueryFields``.

Each resource (jobs, filters, nodes, ...) has one :class:`FieldRegistry`. A field's
getter returns the value for an item, or a :class:`ResultStatus` when there is no
normal value (unknown, no data, unavailable, node offline). Answers have Ganeti's
shapes so luxi and RAPI pass them through unchanged::

    {"fields": [{"name", "title", "kind", "doc"}, ...],
     "data": [[[status, value], ...], ...]}          # Query; value None unless normal
    {"fields": [...]}                                 # QueryFields

A requested field that does not exist is answered, as Ganeti does, with kind
``"unknown"`` and ``[ResultStatus.UNKNOWN, None]`` in every row; a filter on a field
that does not exist is an :class:`~corral.errors.UnknownFieldError`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, Literal, TypeVar

import msgspec

from corral.errors import QueryFilterError, UnknownFieldError, did_you_mean
from corral.qlang.compiler import ResultStatus, compile_filter
from corral.utils.nicesort import nice_key

__all__ = ["KINDS", "LIST_FIELDS_COMMANDS", "Field", "FieldDef", "FieldKind", "FieldRegistry",
           "pick_items", "requested_names"]

C = TypeVar("C")
T = TypeVar("T")

FieldKind = Literal["text", "bool", "number", "float", "unit", "timestamp", "other", "unknown"]
KINDS: Final[frozenset[str]] = frozenset(
    ("text", "bool", "number", "float", "unit", "timestamp", "other", "unknown")
)

_NAME_RE: Final = re.compile(r"^[a-z0-9/._]+$")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


#: The command that lists a resource's fields, named in "unknown field" messages.
LIST_FIELDS_COMMANDS: Final[dict[str, str]] = {
    resource: f"gnt-{resource} list-fields"
    for resource in ("node", "group", "instance", "job", "filter", "network")
}

#: Which filter values each kind can be compared with (Ganeti's checks), and how to say so.
_KIND_VALUES: Final[dict[str, tuple[Callable[[object], bool], str]]] = {
    "text": (lambda v: isinstance(v, str), "a string"),
    "bool": (lambda v: isinstance(v, bool), "a boolean"),
    "number": (_is_int, "an integer"),
    "unit": (_is_int, "an integer"),
    "float": (_is_number, "a number"),
    "timestamp": (_is_number, "a number (seconds since the epoch)"),
    "other": (lambda v: True, "any value"),
}


class FieldDef(msgspec.Struct, frozen=True):
    """What a client learns about a field (Ganeti's ``QueryFieldDefinition``)."""

    name: str
    title: str
    kind: FieldKind
    doc: str

    def to_dict(self) -> dict[str, Any]:
        """The wire form: ``{"name", "title", "kind", "doc"}``."""
        return {"name": self.name, "title": self.title, "kind": self.kind, "doc": self.doc}


@dataclass(frozen=True, slots=True)
class Field(Generic[C, T]):
    """A field: its definition and ``getter(ctx, item)``.

    ``split_timestamp`` marks values that are Ganeti ``[seconds, microseconds]`` pairs;
    filters then compare them as seconds (a float).
    """

    definition: FieldDef
    getter: Callable[[C, T], Any]
    split_timestamp: bool = False

    @property
    def name(self) -> str:
        """The field's name."""
        return self.definition.name


def requested_names(qfilter: Any, namefield: str = "name") -> list[Any] | None:
    """The values a filter asks ``namefield`` to equal, when the filter is nothing but
    such equalities joined by ``|`` (nested or not); ``[]`` for no filter; None for any
    other filter. This is how Ganeti tells "these items, by name" from a real filter."""
    if qfilter is None:
        return []
    if not isinstance(qfilter, list) or not qfilter:
        return None
    op = qfilter[0]
    if op == "|":
        names: list[Any] = []
        for part in qfilter[1:]:
            found = requested_names(part, namefield)
            if found is None:
                return None
            names.extend(found)
        return names
    if op in ("=", "==") and len(qfilter) == 3 and qfilter[1] == namefield:
        return [qfilter[2]]
    return None


def pick_items(items: Iterable[T], qfilter: Any, name_of: Callable[[T], str],
               lookup: Callable[[str], T], namefield: str = "name") -> tuple[list[T], Any]:
    """The items a query looks at, in the order it answers them (Ganeti's rules), and
    the filter still to apply to them.

    When the filter only names items (:func:`requested_names`), each named item in the
    order named, once per mention, found by ``lookup(name)`` (which raises for an
    unknown name, and may accept more than the exact name, such as a UUID), and no
    filter left; otherwise all ``items`` in natural order of ``name_of(item)`` and
    ``qfilter``.
    """
    names = [n for n in requested_names(qfilter, namefield) or () if isinstance(n, str)]
    if names:
        return [lookup(name) for name in names], None
    return sorted(items, key=lambda item: nice_key(name_of(item))), qfilter


def _unknown_definition(name: str) -> FieldDef:
    return FieldDef(name=name, title=name, kind="unknown", doc=f"Unknown field '{name}'")


def _cell(value: Any) -> list[Any]:
    if isinstance(value, ResultStatus):
        return [int(value), None]
    return [int(ResultStatus.NORMAL), value]


def _merge_timestamp(value: Any) -> Any:
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(map(_is_number, value)):
        return value[0] + value[1] / 1_000_000
    return value


class FieldRegistry(Generic[C, T]):
    """The query fields of one resource (``"job"``, ``"filter"``, ...)."""

    def __init__(self, resource: str, fields: Iterable[Field[C, T]] = ()) -> None:
        self.resource = resource
        self._fields: dict[str, Field[C, T]] = {}
        for field in fields:
            self.register(field)

    def register(self, field: Field[C, T]) -> None:
        """Add a field; its name must be new and match ``[a-z0-9/._]+``."""
        name = field.definition.name
        if not _NAME_RE.match(name):
            raise ValueError(f"field name {name!r} must match [a-z0-9/._]+")
        if field.definition.kind not in KINDS - {"unknown"}:
            raise ValueError(f"field {name!r} has an invalid kind {field.definition.kind!r}")
        if name in self._fields:
            raise ValueError(f"field {name!r} is already registered for {self.resource}")
        self._fields[name] = field

    def add(
        self,
        name: str,
        title: str,
        kind: FieldKind,
        doc: str,
        getter: Callable[[C, T], Any],
        *,
        split_timestamp: bool = False,
    ) -> Field[C, T]:
        """Define and register a field in one call; returns it."""
        field = Field(FieldDef(name, title, kind, doc), getter, split_timestamp)
        self.register(field)
        return field

    def __contains__(self, name: object) -> bool:
        return name in self._fields

    def names(self) -> list[str]:
        """All field names, sorted as Ganeti sorts them."""
        return sorted(self._fields, key=nice_key)

    def definitions(self, names: Sequence[str] | None = None) -> list[FieldDef]:
        """Definitions of the named fields in that order (unknown ones with kind
        ``"unknown"``), or of every field sorted by name when ``names`` is None."""
        if names is None:
            return [self._fields[name].definition for name in self.names()]
        return [
            self._fields[name].definition if name in self._fields else _unknown_definition(name)
            for name in names
        ]

    def query_fields(self, names: Sequence[str] | None = None) -> dict[str, Any]:
        """The answer to ``QueryFields``: ``{"fields": [definition dicts]}``."""
        return {"fields": [d.to_dict() for d in self.definitions(names)]}

    def field_hint(self, unknown: Sequence[str]) -> str:
        """The end of an "unknown field" message: the nearest known fields and the
        command that lists them all."""
        return did_you_mean(unknown, self.names(), noun="known fields",
                            listing=LIST_FIELDS_COMMANDS.get(self.resource))

    def compile(self, qfilter: Any, ctx: C) -> Callable[[T], bool]:
        """Compile a list-form filter over this resource's fields, for one ``ctx``.

        Unknown fields raise :class:`UnknownFieldError`; values that cannot be compared
        with a field of its kind raise :class:`QueryFilterError` (as in Ganeti).
        """

        def resolve(name: str) -> Callable[[T], Any]:
            try:
                field = self._fields[name]
            except KeyError:
                raise UnknownFieldError(
                    f"unknown field {name!r} in the query filter for {self.resource}; "
                    f"{self.field_hint([name])}"
                ) from None
            getter = field.getter
            if field.split_timestamp:
                return lambda item: _merge_timestamp(getter(ctx, item))
            return lambda item: getter(ctx, item)

        return compile_filter(qfilter, resolve, check=self._check_value)

    def _check_value(self, op: str, name: str, value: Any) -> None:
        kind = self._fields[name].definition.kind
        if op == "=[]":
            return  # the operand is an element of the (list) value, not a value of the kind
        accepts, accepted = _KIND_VALUES[kind]
        if op == "=~":
            accepts, accepted = (lambda v: isinstance(v, str)), "a string"
            if kind not in ("text", "other"):
                raise QueryFilterError(
                    f"cannot use '=~' on field {name!r} of kind {kind!r}; regular "
                    "expressions apply to text fields"
                )
        if not accepts(value):
            raise QueryFilterError(
                f"cannot compare field {name!r} (kind {kind!r}) with {value!r} "
                f"({type(value).__name__}) using {op!r}; it compares with {accepted}"
            )

    def query(
        self, items: Iterable[T], fields: Sequence[str], qfilter: Any, ctx: C
    ) -> dict[str, Any]:
        """The answer to ``Query``: ``{"fields": [...], "data": [[[status, value], ...]]}``.

        Rows keep the order of ``items``; only items the filter accepts are included.
        """
        test = self.compile(qfilter, ctx)
        getters = [self._row_getter(name) for name in fields]
        data = [
            [_cell(getter(ctx, item)) for getter in getters] for item in items if test(item)
        ]
        return {"fields": [d.to_dict() for d in self.definitions(fields)], "data": data}

    def values(
        self, items: Iterable[T], fields: Sequence[str], qfilter: Any, ctx: C
    ) -> list[list[Any]]:
        """Plain rows (values only, None where not normal), as ``QueryJobs`` answers.

        Unlike :meth:`query`, an unknown output field is an :class:`UnknownFieldError`.
        """
        unknown = [name for name in fields if name not in self._fields]
        if unknown:
            raise UnknownFieldError(
                f"unknown output field(s) for {self.resource}: {', '.join(unknown)}; "
                f"{self.field_hint(unknown)}"
            )
        answer = self.query(items, fields, qfilter, ctx)
        return [[value for _status, value in row] for row in answer["data"]]

    def _row_getter(self, name: str) -> Callable[[C, T], Any]:
        field = self._fields.get(name)
        if field is None:
            return lambda _ctx, _item: ResultStatus.UNKNOWN
        return field.getter
