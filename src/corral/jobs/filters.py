"""Job filter rules (seed 000): checking a rule and deciding what happens to a job.

A filter rule has a priority, a list of predicates and an action. Rules are tried in
the order (priority, watermark, uuid); the first rule whose predicates all hold for a
job decides what happens to it, except that a ``CONTINUE`` rule never decides: it is
documentation for a rule that is switched off. A job no rule decides is accepted.

Predicates are query-language expressions (:mod:`corral.qlang`) over one of three
views of a job:

``jobid``
    the job id, field ``id``; the string ``"watermark"`` in a value position stands
    for the rule's watermark (the highest job id when the rule was added).
``opcode``
    each opcode in its dict form: ``OP_ID`` and every parameter (dotted names reach
    into nested dicts). True if at least one opcode matches; an opcode that lacks a
    field the expression uses does not match (as Ganeti).
``reason``
    each reason trail entry of each opcode, fields ``source``, ``reason`` and
    ``timestamp``. True if at least one entry matches.

A negation at the top of an ``opcode`` or ``reason`` expression, ``["!", E]``, negates
the existence instead: the predicate holds when *no* opcode (no trail entry) matches
``E``. Every job carries entries of corral's own (``gnt:client:…``, ``gnt:opcode:…``)
and often opcodes a rule is not about, so "some entry does not match ``E``" would hold
for nearly every job; the seed's example "pause all new jobs not belonging to a
maintenance" (``["reason", ["!", ["=~", "reason", "maintenance pink bunny"]]]``) means
"no entry matches". Only the top level is special: a ``!`` inside ``&`` or ``|`` (or
under another ``!``) is evaluated per opcode or per entry, as in Ganeti, so
``["!", ["!", E]]`` reads "every entry matches ``E``".

The queue re-evaluates every waiting job whenever the rules change, so the rules are
compiled once, by :meth:`FilterChain.from_rules`, into closures; :meth:`FilterChain.decide`
only calls them. A comparison that cannot be made (a number against a string) is false
for that job, opcode or entry rather than an error, as in Ganeti.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

from corral.errors import ParameterError, QueryFilterError, UnknownFieldError
from corral.objects import FilterRule
from corral.qlang import compile_filter

__all__ = [
    "ACTIONS",
    "PREDICATE_NAMES",
    "Decision",
    "DecisionAction",
    "FilterChain",
    "action_from_text",
    "validate_rule",
]

#: Names of the predicates a rule can use, in the order the seed lists them.
PREDICATE_NAMES: Final = ("jobid", "opcode", "reason")

#: Actions written as a plain string; ``RATE_LIMIT`` is written ``["RATE_LIMIT", n]``.
ACTIONS: Final = ("ACCEPT", "PAUSE", "REJECT", "CONTINUE")

#: What a decision can say; ``CONTINUE`` never decides anything.
DecisionAction = Literal["ACCEPT", "PAUSE", "REJECT", "RATE_LIMIT"]

_ACCEPTED_ACTIONS: Final = (
    "one of 'ACCEPT', 'PAUSE', 'REJECT', 'CONTINUE' or ['RATE_LIMIT', n] with n a positive integer"
)
_WATERMARK: Final = "watermark"
_LOGIC_OPS: Final = frozenset({"|", "&", "!"})
_REASON_FIELDS: Final = {"source": 0, "reason": 1, "timestamp": 2}
_MISSING: Final = object()
_DECIDING: Final[dict[str, DecisionAction]] = {
    "ACCEPT": "ACCEPT",
    "PAUSE": "PAUSE",
    "REJECT": "REJECT",
    "RATE_LIMIT": "RATE_LIMIT",
}

_T = TypeVar("_T")

#: A compiled predicate: does it hold for (job id, opcodes in dict form)?
_Predicate = Callable[[int, Sequence[Mapping[str, Any]]], bool]


@dataclass(frozen=True, slots=True)
class Decision:
    """What the filter rules decided for one job.

    ``rule_uuid`` is the deciding rule (``None`` when no rule matched and the job is
    accepted by default); ``limit`` is the ``n`` of a ``RATE_LIMIT`` rule, ``None``
    for every other action. The queue enforces the limit: at most ``limit`` jobs
    decided by that rule run at once.
    """

    action: DecisionAction
    rule_uuid: str | None = None
    limit: int | None = None


_ACCEPT_BY_DEFAULT: Final = Decision("ACCEPT")


# --- checking ------------------------------------------------------------------------


def validate_rule(
    priority: Any, predicates: Any, action: Any
) -> tuple[list[list[Any]], str | list[Any]]:
    """Check a rule as a client sent it and return its (predicates, action) normalised.

    Every predicate is compiled, so a rule that passes here also compiles in
    :meth:`FilterChain.from_rules`. Tuples become lists (the form stored and sent back).

    Raises :class:`ParameterError` for the priority or the action and
    :class:`QueryFilterError` (or :class:`UnknownFieldError`) for a predicate, the
    message naming the bad part and what is accepted there.
    """
    if isinstance(priority, bool) or not isinstance(priority, int) or priority < 0:
        raise ParameterError(f"priority: expected a non-negative integer, got {priority!r}")
    if not isinstance(predicates, (list, tuple)):
        raise QueryFilterError(
            "predicates: expected a list of [name, expression] pairs,"
            f" got {type(predicates).__name__} {predicates!r}"
        )
    normal: list[list[Any]] = []
    for index, predicate in enumerate(predicates, start=1):
        name, expr = _check_predicate(index, predicate)
        _compile_predicate(index, name, expr, watermark=0)
        normal.append([name, _as_lists(expr)])
    normal_action, _ = _check_action(action)
    return normal, normal_action


def action_from_text(text: str) -> str | list[Any]:
    """Turn a command-line action into its wire form.

    ``"RATE_LIMIT n"`` becomes ``["RATE_LIMIT", n]`` (as Ganeti's ``--action`` option
    does); any other text is returned unchanged for :func:`validate_rule` to judge.
    """
    match = re.fullmatch(r"\s*RATE_LIMIT\s+(\d+)\s*", text)
    if match:
        return ["RATE_LIMIT", int(match.group(1))]
    return text


def _check_action(action: Any) -> tuple[str | list[Any], int | None]:
    """The action normalised and its rate limit (``None`` unless ``RATE_LIMIT``)."""
    if isinstance(action, str):
        if action in ACTIONS:
            return action, None
        hint = ""
        if action.upper() in ACTIONS:
            hint = " (actions are upper case)"
        elif action.strip().upper().startswith("RATE_LIMIT"):
            hint = " (a rate limit is the list ['RATE_LIMIT', n], not a string)"
        raise ParameterError(
            f"action: unknown action {action!r}{hint}; expected {_ACCEPTED_ACTIONS}"
        )
    if isinstance(action, (list, tuple)) and action and action[0] == "RATE_LIMIT":
        limit = action[1] if len(action) == 2 else None
        if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
            raise ParameterError(
                f"action: RATE_LIMIT takes exactly one positive integer, got {list(action)!r};"
                " expected ['RATE_LIMIT', n] with n > 0"
            )
        return ["RATE_LIMIT", limit], limit
    raise ParameterError(f"action: malformed action {action!r}; expected {_ACCEPTED_ACTIONS}")


def _check_predicate(index: int, predicate: Any) -> tuple[str, Any]:
    """The (name, expression) of one predicate, or an error naming it."""
    accepted = ", ".join(repr(n) for n in PREDICATE_NAMES)
    if not isinstance(predicate, (list, tuple)) or not predicate:
        raise QueryFilterError(
            f"predicate {index}: expected a list [name, expression], got {predicate!r}"
        )
    name = predicate[0]
    if name not in PREDICATE_NAMES:
        raise QueryFilterError(
            f"predicate {index}: unknown predicate {name!r}; accepted: {accepted}"
        )
    if len(predicate) != 2:
        raise QueryFilterError(
            f"predicate {index} ({name!r}): expected exactly one expression after the name,"
            f" got {len(predicate) - 1}"
        )
    return name, predicate[1]


def _as_lists(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_as_lists(v) for v in value]
    return value


# --- compiling -----------------------------------------------------------------------


def _compile_predicate(index: int, name: str, expr: Any, watermark: int) -> _Predicate:
    """Compile one predicate to a closure; qlang errors get the predicate's name."""
    try:
        if name == "jobid":
            return _compile_jobid(expr, watermark)
        if name == "opcode":
            return _compile_opcode(expr)
        return _compile_reason(expr)
    except ParameterError as err:
        # QueryFilterError and UnknownFieldError keep their class (and code).
        raise type(err)(f"predicate {index} ({name!r}): {err.message}") from err


def _substitute_watermark(expr: Any, watermark: int) -> Any:
    """``expr`` with the string ``"watermark"`` in every value position replaced.

    Value positions are those after the field of a comparison (not the pattern of
    ``=~``), at any depth below ``|``, ``&`` and ``!``. Anything malformed is left for
    the compiler to report.
    """
    if not isinstance(expr, (list, tuple)) or not expr or not isinstance(expr[0], str):
        return expr
    op = expr[0]
    if op in _LOGIC_OPS:
        return [op, *(_substitute_watermark(e, watermark) for e in expr[1:])]
    if op in ("?", "=~"):  # no value, or a regular expression rather than a value
        return list(expr)
    values = [watermark if v == _WATERMARK else v for v in expr[2:]]
    return [op, *expr[1:2], *values]


def _holds(test: Callable[[_T], bool], item: _T) -> bool:
    """Run a compiled expression; an impossible comparison is false, as in Ganeti."""
    try:
        return bool(test(item))
    except TypeError:
        return False


def _compile_jobid(expr: Any, watermark: int) -> _Predicate:
    def resolve(field: str) -> Callable[[int], Any]:
        if field != "id":
            raise UnknownFieldError(
                f"unknown field {field!r}; the jobid predicate has only the field 'id'"
            )
        return _identity

    test = compile_filter(_substitute_watermark(expr, watermark), resolve)

    def jobid_holds(job_id: int, ops: Sequence[Mapping[str, Any]]) -> bool:
        return _holds(test, job_id)

    return jobid_holds


def _identity(job_id: int) -> int:
    return job_id


def _lookup(op: Mapping[str, Any], field: str) -> Any:
    """An opcode field by name, dotted names reaching into nested dicts; ``_MISSING``
    when the opcode has no such field."""
    if field in op:
        return op[field]
    value: Any = op
    for part in field.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _split_negation(expr: Any) -> tuple[bool, Any]:
    """``(True, E)`` for a top-level negation ``["!", E]``, else ``(False, expr)``.

    Anything malformed (``["!"]``, ``["!", a, b]``) is not split, so that the query
    language compiler reports it as it would anywhere else.
    """
    if isinstance(expr, (list, tuple)) and len(expr) == 2 and expr[0] == "!":
        return True, expr[1]
    return False, expr


def _compile_opcode(expr: Any) -> _Predicate:
    negated, inner = _split_negation(expr)
    used: list[str] = []

    def resolve(field: str) -> Callable[[Mapping[str, Any]], Any]:
        used.append(field)
        return lambda op: _lookup(op, field)

    test = compile_filter(inner, resolve)
    fields = tuple(dict.fromkeys(used))

    def opcode_matches(op: Mapping[str, Any]) -> bool:
        # Ganeti: an opcode lacking a field the expression uses does not match.
        if any(_lookup(op, f) is _MISSING for f in fields):
            return False
        return _holds(test, op)

    def opcode_holds(job_id: int, ops: Sequence[Mapping[str, Any]]) -> bool:
        found = any(opcode_matches(op) for op in ops)
        return not found if negated else found

    return opcode_holds


def _compile_reason(expr: Any) -> _Predicate:
    def resolve(field: str) -> Callable[[Sequence[Any]], Any]:
        position = _REASON_FIELDS.get(field)
        if position is None:
            accepted = ", ".join(repr(f) for f in _REASON_FIELDS)
            raise UnknownFieldError(
                f"unknown field {field!r}; the reason predicate has the fields {accepted}"
            )
        return lambda entry: entry[position]

    negated, inner = _split_negation(expr)
    test = compile_filter(inner, resolve)

    def entry_matches(entry: Any) -> bool:
        return isinstance(entry, (list, tuple)) and len(entry) >= 3 and _holds(test, entry)

    def reason_holds(job_id: int, ops: Sequence[Mapping[str, Any]]) -> bool:
        found = any(entry_matches(entry) for op in ops for entry in op.get("reason") or ())
        return not found if negated else found

    return reason_holds


# --- deciding ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _CompiledRule:
    uuid: str
    decision: Decision | None  # None for CONTINUE
    predicates: tuple[_Predicate, ...]


class FilterChain:
    """The filter rules of a cluster, compiled and in evaluation order.

    Build one with :meth:`from_rules` whenever the rules change; :meth:`decide` then
    costs only the compiled predicates, never a compilation.
    """

    __slots__ = ("_rules",)

    def __init__(self, rules: Sequence[_CompiledRule] = ()) -> None:
        self._rules = tuple(rules)

    @classmethod
    def from_rules(cls, rules: Iterable[FilterRule]) -> FilterChain:
        """Compile ``rules`` and order them by (priority, watermark, uuid).

        A stored rule that no longer checks raises the same error as
        :func:`validate_rule`, prefixed with the rule's uuid.
        """
        ordered = sorted(rules, key=lambda r: (r.priority, r.watermark, r.uuid))
        compiled = [_compile_rule(rule) for rule in ordered]
        return cls(compiled)

    @property
    def uuids(self) -> tuple[str, ...]:
        """The rules' uuids in evaluation order (``CONTINUE`` rules included)."""
        return tuple(rule.uuid for rule in self._rules)

    def __len__(self) -> int:
        return len(self._rules)

    def decide(self, job_id: int, ops: Sequence[Mapping[str, Any]]) -> Decision:
        """What happens to job ``job_id`` whose opcodes (dict form with ``reason``) are
        ``ops``: the first non-``CONTINUE`` rule whose predicates all hold decides;
        no such rule means ``ACCEPT`` with ``rule_uuid`` ``None``."""
        for rule in self._rules:
            if rule.decision is None:
                continue
            if all(pred(job_id, ops) for pred in rule.predicates):
                return rule.decision
        return _ACCEPT_BY_DEFAULT


def _compile_rule(rule: FilterRule) -> _CompiledRule:
    try:
        action, limit = _check_action(rule.action)
        predicates = []
        for index, predicate in enumerate(rule.predicates, start=1):
            name, expr = _check_predicate(index, predicate)
            predicates.append(_compile_predicate(index, name, expr, rule.watermark))
    except ParameterError as err:
        raise type(err)(f"filter {rule.uuid}: {err.message}") from err
    name = action if isinstance(action, str) else action[0]
    decision = None if name == "CONTINUE" else Decision(_DECIDING[name], rule.uuid, limit)
    return _CompiledRule(rule.uuid, decision, tuple(predicates))
