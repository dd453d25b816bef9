"""corral.qlang.compile_filter: every operator, the errors, and agreement with a
straightforward interpreter over random filters and items."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.errors import QueryFilterError, UnknownFieldError
from corral.qlang import MAX_LEVELS, FilterEvaluationError, ResultStatus, compile_filter

Item = dict[str, Any]


def resolve(field: str) -> Callable[[Item], Any]:
    if field not in {"name", "size", "tags", "up", "ratio", "missing"}:
        raise UnknownFieldError(f"unknown field {field!r}")
    return lambda item: item[field]


ITEM: Item = {
    "name": "web1.example.com",
    "size": 10,
    "tags": ["a", "b", 3],
    "up": True,
    "ratio": 0.5,
    "missing": ResultStatus.NODATA,
}


def matches(expr: Any, item: Item = ITEM) -> bool:
    return compile_filter(expr, resolve)(item)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        (["==", "name", "web1.example.com"], True),
        (["=", "name", "web1.example.com"], True),
        (["==", "name", "web2"], False),
        (["==", "size", "10"], False),  # different types are simply unequal
        (["!=", "size", 10], False),
        (["!=", "size", 11], True),
        (["!=", "size", "10"], True),
        (["<", "size", 11], True),
        (["<", "size", 10], False),
        (["<=", "size", 10], True),
        ([">", "size", 10], False),
        ([">", "size", 9], True),
        ([">=", "size", 10], True),
        ([">=", "ratio", 1], False),
        (["<", "name", "x"], True),
        ([">", "name", "x"], False),
        (["=~", "name", r"^web\d"], True),
        (["=~", "name", "example"], True),  # search, not match
        (["=~", "name", "^example"], False),
        (["=~", "name", "(?i)WEB"], True),
        (["=[]", "tags", "a"], True),
        (["=[]", "tags", 3], True),
        (["=[]", "tags", "c"], False),
        (["?", "up"], True),
        (["?", "size"], True),
        (["!", ["?", "up"]], False),
        (["&", ["?", "up"], ["==", "size", 10]], True),
        (["&", ["?", "up"], ["==", "size", 11]], False),
        (["|", ["==", "size", 11], ["==", "size", 10]], True),
        (["|", ["==", "size", 11], ["==", "size", 12]], False),
        (["&"], True),
        (["|"], False),
        (None, True),
        ([], True),
    ],
)
def test_operators(expr: Any, expected: bool) -> None:
    assert matches(expr) is expected


def test_truth_of_false_values() -> None:
    item = dict(ITEM, up=False, size=0, tags=[])
    assert not matches(["?", "up"], item)
    assert not matches(["?", "size"], item)
    assert not matches(["?", "tags"], item)


@pytest.mark.parametrize("op", ["==", "!=", "<", "<=", ">", ">=", "=~", "=[]"])
def test_value_that_is_not_normal_is_accepted(op: str) -> None:
    # Ganeti's query daemon: "filter has no data to work, accepting it".
    value: Any = "x" if op == "=~" else 1
    assert matches([op, "missing", value])
    assert not matches(["!", [op, "missing", value]])


def test_truth_of_value_that_is_not_normal() -> None:
    assert matches(["?", "missing"])


def test_resolve_called_once_per_field_at_compile_time() -> None:
    calls: list[str] = []

    def counting(field: str) -> Callable[[Item], Any]:
        calls.append(field)
        return resolve(field)

    test = compile_filter(
        ["|", ["==", "size", 1], ["&", ["?", "size"], ["=~", "name", "web"]], ["?", "name"]],
        counting,
    )
    assert sorted(calls) == ["name", "size"]
    for _ in range(3):
        assert test(ITEM)
    assert sorted(calls) == ["name", "size"]


def test_regexp_compiled_at_compile_time() -> None:
    with pytest.raises(QueryFilterError, match=r"invalid regular expression '\(' for field"):
        compile_filter(["=~", "name", "("], resolve)


def test_unknown_field_propagates() -> None:
    with pytest.raises(UnknownFieldError, match="nope"):
        compile_filter(["&", ["?", "up"], ["==", "nope", 1]], resolve)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("name", r"'name' \(level 0\) is not a filter"),
        (["&", []], r"\[\] \(level 1\) is not a filter"),
        (["&", "x"], r"'x' \(level 1\) is not a filter"),
        (["~", "name"], r"unknown query filter operator '~'.*accepted: \|, &, !, \?, ==, ="),
        ([1, "name"], "unknown query filter operator 1"),
        (["!"], "'!' takes exactly one operand, got 0"),
        (["?", "a", "b"], r"'\?' takes exactly one operand, got 2"),
        (["==", "name"], "'==' takes exactly two operands .* got 1"),
        (["=[]", "tags", 1, 2], "'=\\[\\]' takes exactly two operands .* got 3"),
        (["==", 5, 5], "needs a field name as its first operand, got 5"),
        (["?", ["x"]], "needs a field name as its first operand"),
        (["<", "size", [1]], r"'<' on field 'size' cannot use the value \[1\] \(list\)"),
        (["<", "up", True], "accepts a string or a number"),
        (["==", "size", None], "accepts a string, a number or a boolean"),
        (["=~", "name", 5], r"accepts a regular expression \(string\)"),
    ],
)
def test_malformed_filters(expr: Any, message: str) -> None:
    with pytest.raises(QueryFilterError, match=message):
        compile_filter(expr, resolve)


def test_nesting_limit() -> None:
    expr: Any = ["?", "up"]
    for _ in range(MAX_LEVELS - 1):
        expr = ["!", expr]
    assert compile_filter(expr, resolve)(ITEM) is (MAX_LEVELS % 2 == 1)
    with pytest.raises(QueryFilterError, match="nested too deep: at most 10 levels"):
        compile_filter(["!", expr], resolve)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        (["<", "name", 5], r"cannot compare field 'name' with 5 using '<'.*expected a number"),
        ([">=", "size", "a"], r"the value is 10 \(int\), expected a string"),
        (["<", "up", 1], r"the value is True \(bool\), expected a number"),
        (["=~", "size", "1"], "'=~' on field 'size' needs a string value"),
        (["=[]", "name", "w"], "'=\\[\\]' on field 'name' needs a list value"),
    ],
)
def test_impossible_comparisons_fail_when_evaluated(expr: Any, message: str) -> None:
    test = compile_filter(expr, resolve)  # compiles: the value's type is not known yet
    with pytest.raises(FilterEvaluationError, match=message) as info:
        test(ITEM)
    # Both a user-facing query-filter error and a TypeError for callers that want
    # "impossible comparison is false".
    assert isinstance(info.value, QueryFilterError)
    assert isinstance(info.value, TypeError)


def test_tuples_are_accepted_as_list_form() -> None:
    assert matches(("&", ("==", "size", 10), ("?", "up")))


# --- property: compiled filters agree with a plain interpreter ------------------------

FIELDS = ("s", "n", "l", "b")
ERROR = "error"


def reference(expr: Any, item: Item) -> Any:
    """Evaluate by walking the tree; ERROR where the compiled filter must raise."""
    op, *args = expr
    if op in ("|", "&"):
        for sub in args:
            result = reference(sub, item)
            if result == ERROR:
                return ERROR
            if op == "|" and result:
                return True
            if op == "&" and not result:
                return False
        return op == "&"
    if op == "!":
        result = reference(args[0], item)
        return ERROR if result == ERROR else not result
    value = item[args[0]]
    if isinstance(value, ResultStatus):
        return True
    if op == "?":
        return bool(value)
    operand = args[1]
    if op in ("==", "="):
        return value == operand
    if op == "!=":
        return value != operand
    if op == "=~":
        return re.search(operand, value) is not None if isinstance(value, str) else ERROR
    if op == "=[]":
        return operand in value if isinstance(value, list) else ERROR
    same = (
        isinstance(value, str)
        if isinstance(operand, str)
        else isinstance(value, int) and not isinstance(value, bool)
    )
    if not same:
        return ERROR
    return {"<": value < operand, "<=": value <= operand, ">": value > operand,
            ">=": value >= operand}[op]


statuses = st.sampled_from([s for s in ResultStatus if s != ResultStatus.NORMAL])
items = st.fixed_dictionaries(
    {
        "s": st.one_of(st.text("abc", max_size=3), statuses),
        "n": st.one_of(st.integers(-3, 3), statuses),
        "l": st.one_of(st.lists(st.one_of(st.integers(-2, 2), st.text("ab", max_size=1)),
                                max_size=3), statuses),
        "b": st.one_of(st.booleans(), statuses),
    }
)
scalars = st.one_of(st.integers(-3, 3), st.text("abc", max_size=2))
leaves = st.one_of(
    st.tuples(st.just("?"), st.sampled_from(FIELDS)).map(list),
    st.tuples(st.sampled_from(["==", "=", "!=", "<", "<=", ">", ">=", "=[]"]),
              st.sampled_from(FIELDS), scalars).map(list),
    st.tuples(st.just("=~"), st.sampled_from(FIELDS),
              st.sampled_from(["a", "^b", "c$", "a|b", "^$", "(?i)A"])).map(list),
)
filters = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.tuples(st.just("!"), children).map(list),
        st.builds(lambda op, subs: [op, *subs], st.sampled_from(["|", "&"]),
                  st.lists(children, max_size=3)),
    ),
    max_leaves=8,
)


def item_resolve(field: str) -> Callable[[Item], Any]:
    return lambda item: item[field]


@settings(max_examples=150, deadline=None)
@given(filters, st.lists(items, min_size=1, max_size=5))
def test_compiled_filter_agrees_with_reference(expr: Any, sample: list[Item]) -> None:
    try:
        test = compile_filter(expr, item_resolve)
    except QueryFilterError:
        # only a too deep nesting can be refused here
        assert _depth(expr) > MAX_LEVELS
        return
    for item in sample:
        expected = reference(expr, item)
        if expected == ERROR:
            with pytest.raises(FilterEvaluationError):
                test(item)
        else:
            assert test(item) is expected, (expr, item)


def _depth(expr: Any) -> int:
    if expr[0] in ("|", "&", "!"):
        return 1 + max((_depth(e) for e in expr[1:]), default=0)
    return 1
