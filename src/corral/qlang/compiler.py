"""Compile the list form of a query filter into a Python predicate.

A filter is a list whose first item is an operator (Ganeti's query language)::

    ["&", ["==", "status", "running"], ["=~", "name", "^web"]]

The tree is walked once, at compile time: every node becomes a closure, regular
expressions are compiled and every field is resolved to an accessor exactly once.
Evaluating the result for an item only calls closures.

Semantics follow Ganeti (its query daemon where its two implementations differ):

* a field whose value is not normal (the accessor returned a :class:`ResultStatus`)
  gives a condition with nothing to test, and Ganeti *accepts* such an item: the
  condition is true (``!`` around it is then false);
* ``==``/``=``/``!=`` compare with Python equality, values of different types are
  simply unequal;
* ``<``, ``<=``, ``>``, ``>=`` compare numbers with numbers and strings with strings;
  anything else, a regular expression on a non-string or ``=[]`` on a non-list raises
  :class:`FilterEvaluationError` while evaluating (Ganeti fails the query too);
* ``?`` is the truth of the field's value, ``=~`` is :func:`re.search`, ``=[]`` is
  "the list value contains the operand";
* filters may nest at most :data:`MAX_LEVELS` levels deep.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import IntEnum
from typing import Any, Final, TypeVar

from corral.errors import QueryFilterError

__all__ = [
    "BINARY_OPERATORS",
    "LOGIC_OPERATORS",
    "MAX_LEVELS",
    "OPERATORS",
    "UNARY_OPERATORS",
    "FilterEvaluationError",
    "ResultStatus",
    "ValueCheck",
    "compile_filter",
]

T = TypeVar("T")

Predicate = Callable[[T], bool]

#: Called as ``check(operator, field, value)`` for every binary condition at compile
#: time; raises :class:`QueryFilterError` if the field cannot be compared with value.
ValueCheck = Callable[[str, str, Any], None]

LOGIC_OPERATORS: Final = ("|", "&")
UNARY_OPERATORS: Final = ("!", "?")
BINARY_OPERATORS: Final = ("==", "=", "!=", "<", "<=", ">", ">=", "=~", "=[]")
OPERATORS: Final = LOGIC_OPERATORS + UNARY_OPERATORS + BINARY_OPERATORS

#: How deep filters may nest (Ganeti's limit).
MAX_LEVELS: Final = 10

_ACCEPTED = ", ".join(OPERATORS)


class ResultStatus(IntEnum):
    """Status of one value in a query result (Ganeti's ``RS_*``)."""

    NORMAL = 0
    UNKNOWN = 1
    NODATA = 2
    UNAVAIL = 3
    OFFLINE = 4


class FilterEvaluationError(QueryFilterError, TypeError):
    """A condition met a value it cannot test (e.g. ``<`` between a string and a number).

    It is a :class:`QueryFilterError` for the user and a :class:`TypeError` for callers
    that treat an impossible comparison as false.
    """


def _always(_item: object) -> bool:
    return True


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _kind_of(value: object) -> str:
    return type(value).__name__


def compile_filter(
    expr: Any,
    resolve: Callable[[str], Callable[[T], Any]],
    *,
    check: ValueCheck | None = None,
) -> Callable[[T], bool]:
    """Compile a list-form filter into a predicate over items.

    ``resolve(field)`` returns an accessor for the field's value (or raises
    :class:`~corral.errors.UnknownFieldError`); it is called once per distinct field.
    An accessor returns the value, or a :class:`ResultStatus` when there is none.
    ``check`` lets a field registry refuse values of the wrong kind at compile time.
    ``None`` and ``[]`` mean "no filter": every item matches.
    Malformed filters raise :class:`~corral.errors.QueryFilterError` naming the part.
    """
    if expr is None or (isinstance(expr, (list, tuple)) and len(expr) == 0):
        return _always
    return _Compiler(resolve, check).compile(expr, 0)


class _Compiler:
    """One compilation: the field cache and the value check."""

    def __init__(
        self, resolve: Callable[[str], Callable[[Any], Any]], check: ValueCheck | None
    ) -> None:
        self._resolve = resolve
        self._check = check
        self._accessors: dict[str, Callable[[Any], Any]] = {}

    def accessor(self, field: str) -> Callable[[Any], Any]:
        try:
            return self._accessors[field]
        except KeyError:
            found = self._accessors[field] = self._resolve(field)
            return found

    def compile(self, expr: Any, level: int) -> Callable[[Any], bool]:
        if not isinstance(expr, (list, tuple)) or not expr:
            raise QueryFilterError(
                f"query filter part {expr!r} (level {level}) is not a filter; expected a "
                f"non-empty list [operator, operands...] with operator one of {_ACCEPTED}"
            )
        if level >= MAX_LEVELS:
            raise QueryFilterError(
                f"query filter nested too deep: at most {MAX_LEVELS} levels are accepted"
            )
        op, operands = expr[0], list(expr[1:])
        if op in LOGIC_OPERATORS:
            parts = tuple(self.compile(sub, level + 1) for sub in operands)
            return _any_of(parts) if op == "|" else _all_of(parts)
        if op in UNARY_OPERATORS:
            if len(operands) != 1:
                raise QueryFilterError(
                    f"query filter operator {op!r} takes exactly one operand, got "
                    f"{len(operands)} in {expr!r}"
                )
            if op == "!":
                return _negate(self.compile(operands[0], level + 1))
            return _truth(self.accessor(self._field(op, operands[0], expr)))
        if isinstance(op, str) and op in BINARY_OPERATORS:
            if len(operands) != 2:
                raise QueryFilterError(
                    f"query filter operator {op!r} takes exactly two operands (a field "
                    f"name and a value), got {len(operands)} in {expr!r}"
                )
            field = self._field(op, operands[0], expr)
            value = operands[1]
            self._check_value(op, field, value)
            get = self.accessor(field)
            if self._check is not None:
                self._check(op, field, value)
            return _binary(op, field, value, get)
        raise QueryFilterError(
            f"unknown query filter operator {op!r} in {expr!r}; accepted: {_ACCEPTED}"
        )

    @staticmethod
    def _field(op: str, field: Any, expr: Any) -> str:
        if not isinstance(field, str):
            raise QueryFilterError(
                f"query filter operator {op!r} needs a field name as its first operand, "
                f"got {field!r} in {expr!r}"
            )
        return field

    @staticmethod
    def _check_value(op: str, field: str, value: Any) -> None:
        if op == "=~":
            ok, accepted = isinstance(value, str), "a regular expression (string)"
        elif op in ("<", "<=", ">", ">="):
            ok, accepted = isinstance(value, str) or _is_number(value), "a string or a number"
        else:
            ok = isinstance(value, (str, int, float))
            accepted = "a string, a number or a boolean"
        if not ok:
            raise QueryFilterError(
                f"query filter operator {op!r} on field {field!r} cannot use the value "
                f"{value!r} ({_kind_of(value)}); it accepts {accepted}"
            )


# --- closures --------------------------------------------------------------------------


def _any_of(parts: tuple[Callable[[Any], bool], ...]) -> Callable[[Any], bool]:
    def evaluate(item: Any) -> bool:
        return any(part(item) for part in parts)

    return evaluate


def _all_of(parts: tuple[Callable[[Any], bool], ...]) -> Callable[[Any], bool]:
    def evaluate(item: Any) -> bool:
        return all(part(item) for part in parts)

    return evaluate


def _negate(inner: Callable[[Any], bool]) -> Callable[[Any], bool]:
    def evaluate(item: Any) -> bool:
        return not inner(item)

    return evaluate


def _truth(get: Callable[[Any], Any]) -> Callable[[Any], bool]:
    def evaluate(item: Any) -> bool:
        value = get(item)
        return isinstance(value, ResultStatus) or bool(value)

    return evaluate


def _binary(op: str, field: str, value: Any, get: Callable[[Any], Any]) -> Callable[[Any], bool]:
    if op in ("==", "="):
        return _equal(get, value)
    if op == "!=":
        return _not_equal(get, value)
    if op == "=~":
        return _regexp(field, _compile_regexp(field, value), get)
    if op == "=[]":
        return _contains(field, value, get)
    return _ordering(op, field, value, get)


def _equal(get: Callable[[Any], Any], value: Any) -> Callable[[Any], bool]:
    def evaluate(item: Any) -> bool:
        actual = get(item)
        return isinstance(actual, ResultStatus) or bool(actual == value)

    return evaluate


def _not_equal(get: Callable[[Any], Any], value: Any) -> Callable[[Any], bool]:
    def evaluate(item: Any) -> bool:
        actual = get(item)
        return isinstance(actual, ResultStatus) or bool(actual != value)

    return evaluate


def _compile_regexp(field: str, pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as err:
        raise QueryFilterError(
            f"invalid regular expression {pattern!r} for field {field!r}: {err}; "
            "expected a Python regular expression"
        ) from None


def _regexp(
    field: str, regexp: re.Pattern[str], get: Callable[[Any], Any]
) -> Callable[[Any], bool]:
    search = regexp.search

    def evaluate(item: Any) -> bool:
        actual = get(item)
        if isinstance(actual, ResultStatus):
            return True
        if not isinstance(actual, str):
            raise FilterEvaluationError(
                f"'=~' on field {field!r} needs a string value, but the value is "
                f"{actual!r} ({_kind_of(actual)})"
            )
        return search(actual) is not None

    return evaluate


def _contains(field: str, value: Any, get: Callable[[Any], Any]) -> Callable[[Any], bool]:
    def evaluate(item: Any) -> bool:
        actual = get(item)
        if isinstance(actual, ResultStatus):
            return True
        if not isinstance(actual, (list, tuple)):
            raise FilterEvaluationError(
                f"'=[]' on field {field!r} needs a list value, but the value is "
                f"{actual!r} ({_kind_of(actual)})"
            )
        return value in actual

    return evaluate


_ORDERINGS: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "<": lambda a, b: bool(a < b),
    "<=": lambda a, b: bool(a <= b),
    ">": lambda a, b: bool(a > b),
    ">=": lambda a, b: bool(a >= b),
}


def _ordering(
    op: str, field: str, value: Any, get: Callable[[Any], Any]
) -> Callable[[Any], bool]:
    compare = _ORDERINGS[op]
    same_kind: Callable[[object], bool]
    if isinstance(value, str):
        same_kind, wanted = (lambda v: isinstance(v, str)), "a string"
    else:
        same_kind, wanted = _is_number, "a number"

    def evaluate(item: Any) -> bool:
        actual = get(item)
        if isinstance(actual, ResultStatus):
            return True
        if not same_kind(actual):
            raise FilterEvaluationError(
                f"cannot compare field {field!r} with {value!r} using {op!r}: the value "
                f"is {actual!r} ({_kind_of(actual)}), expected {wanted}"
            )
        return compare(actual, value)

    return evaluate

