"""corral.qlang text form: parse_filter (Ganeti's grammar), format_filter and the
filters built from command-line names."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from corral.errors import QueryFilterError
from corral.qlang import (
    format_filter,
    glob_to_regexp,
    make_filter,
    make_simple_filter,
    parse_filter,
)

# Expected values are what Ganeti 3.0's qlang.ParseFilter answers for the same text.
GANETI_EXAMPLES = [
    ('name == "web1"', ["==", "name", "web1"]),
    ("name = 'web1'", ["==", "name", "web1"]),
    ("size != 3", ["!=", "size", 3]),
    ("size < -5", ["<", "size", -5]),
    ("size <= +5", ["<=", "size", 5]),
    ("size>7", [">", "size", 7]),
    ("size >= 0", [">=", "size", 0]),
    ("x.y/z_1 != 3", ["!=", "x.y/z_1", 3]),
    ("name =~ /a/", ["=~", "name", "a"]),
    ("name =~ m/a/", ["=~", "name", "a"]),
    ("name =~ #a#si", ["=~", "name", "(?is)a"]),
    ("name =~ m^a^i", ["=~", "name", "(?i)a"]),
    ("name =~ m|a|", ["=~", "name", "a"]),
    ("name !~ m/x/", ["!", ["=~", "name", "x"]]),
    ('name =* "*.site"', ["=~", "name", r"^[^.]*\.site(\..*)?$"]),
    ('name !* "n?"', ["!", ["=~", "name", r"^n[^.](\..*)?$"]]),
    ('"x" in tags', ["=[]", "tags", "x"]),
    ("1 not in ids", ["!", ["=[]", "ids", 1]]),
    ("admin_up", ["?", "admin_up"]),
    ("in", ["?", "in"]),
    ("a and b or not c", ["|", ["&", ["?", "a"], ["?", "b"]], ["!", ["?", "c"]]]),
    ("not a and b", ["&", ["!", ["?", "a"]], ["?", "b"]]),
    ("a and b and c", ["&", ["?", "a"], ["?", "b"], ["?", "c"]]),
    ("a or (b or c)", ["|", ["?", "a"], ["|", ["?", "b"], ["?", "c"]]]),
    ("not not a", ["!", ["!", ["?", "a"]]]),
    ("not size == 1", ["!", ["==", "size", 1]]),
    ("(a)", ["?", "a"]),
    ('\tname\t==\t"a\tb"', ["==", "name", "a\tb"]),  # tabs are kept, not expanded
]


@pytest.mark.parametrize(("text", "expected"), GANETI_EXAMPLES)
def test_parse_like_ganeti(text: str, expected: list[Any]) -> None:
    assert parse_filter(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # corral makes escapes work (Ganeti kept or dropped the backslashes)
        (r'name == "a\"b"', ["==", "name", 'a"b']),
        (r"name == 'it\'s'", ["==", "name", "it's"]),
        (r'name == "a\\b"', ["==", "name", "a\\b"]),
        (r'name == "a\nb"', ["==", "name", "a\nb"]),
        (r'name == "a\qb"', ["==", "name", r"a\qb"]),
        (r"name =~ m/\d+\/x/i", ["=~", "name", r"(?i)\d+/x"]),
        (r"name =~ m#a\#b\|#", ["=~", "name", r"a#b\|"]),
        ("name =~ /x/ and y", ["&", ["=~", "name", "x"], ["?", "y"]]),
    ],
)
def test_escapes(text: str, expected: list[Any]) -> None:
    assert parse_filter(text) == expected


@pytest.mark.parametrize(
    ("text", "position", "message"),
    [
        ("foo bar", 4, "Expected end of text"),
        ("x == 1.5", 6, "Expected end of text"),
        ('x == "a', 5, "unterminated quoted string"),
        ('x == "a" and y =* "b', 18, "unterminated quoted string"),
        ("x == ", 5, r"Expected value \(integer or quoted string\)"),
        ("name =* foo", 8, r"Expected quoted string \(a glob pattern\)"),
        ("name =~ foo", 8, r"Expected regular expression \(m/\.\.\./flags\)"),
        ("name =~ m/x/m", 8, "unknown regular expression flag.* 'm'; accepted flags: i .*, s "),
        ("name =~ m/(/", 8, "invalid regular expression '\\('"),
        ("a and", 5, "Expected condition"),
        ("(a", 2, "Unbalanced parentheses"),
        ("x in y", 2, "Expected end of text"),
        ("", 0, "Expected"),
    ],
)
def test_errors_give_the_position(text: str, position: int, message: str) -> None:
    with pytest.raises(QueryFilterError) as info:
        parse_filter(text)
    text_of_error = str(info.value)
    assert f"at position {position} (column {position + 1})" in text_of_error
    assert re.search(message, text_of_error), text_of_error
    assert "joined with and, or, not and parentheses" in text_of_error  # what is accepted


def test_glob_matches_leading_labels() -> None:
    pattern = re.compile(glob_to_regexp("node?"))
    assert pattern.search("node1")
    assert pattern.search("node1.example.com")
    assert not pattern.search("node12")
    assert not pattern.search("xnode1")
    assert re.compile(glob_to_regexp("*.site")).search("a.site")
    assert re.compile(glob_to_regexp("*")).search("") is not None
    assert glob_to_regexp("a+b") == r"^a\+b(\..*)?$"


def test_make_simple_filter() -> None:
    assert make_simple_filter("name", ["a", "b"]) == [
        "|", ["==", "name", "a"], ["==", "name", "b"]
    ]
    assert make_simple_filter("id", [3]) == ["|", ["==", "id", 3]]
    assert make_simple_filter("name", []) is None
    assert make_simple_filter("name", None) is None


def test_make_filter() -> None:
    assert make_filter([]) is None
    assert make_filter(["web1", "db*"]) == [
        "|", ["==", "name", "web1"], ["=~", "name", glob_to_regexp("db*")]
    ]
    assert make_filter(["12", "13"], namefield="id", isnumeric=True) == [
        "|", ["==", "id", 12], ["==", "id", 13]
    ]
    assert make_filter(['status == "error"']) == ["==", "status", "error"]
    assert make_filter(["up"], force_filter=True) == ["?", "up"]
    with pytest.raises(QueryFilterError, match="invalid id 'x': expected an integer"):
        make_filter(["x"], namefield="id", isnumeric=True)
    with pytest.raises(QueryFilterError, match=r"exactly one argument .* got 2"):
        make_filter(["a", "b"], force_filter=True)


# --- format_filter ---------------------------------------------------------------------


def test_format_examples() -> None:
    assert format_filter(None) == ""
    assert format_filter(["=", "name", "a"]) == 'name == "a"'
    assert format_filter(["|", ["?", "a"]]) == "a"
    assert (
        format_filter(["&", ["|", ["?", "a"], ["?", "b"]], ["!", ["=[]", "tags", "t"]]])
        == '(a or b) and not "t" in tags'
    )
    assert format_filter(["=~", "name", "a/b"]) == "name =~ m#a/b#"


def test_format_strings_with_quotes_and_control_characters() -> None:
    value = 'a"b\\c\nd\te\rf\'g'
    text = format_filter(["==", "n", value])
    assert "\n" not in text
    assert parse_filter(text) == ["==", "n", value]


def test_format_regexp_with_every_escaped_delimiter() -> None:
    # "\/" cannot be written with "/" as delimiter; it becomes "/", which means the same.
    pattern = r"\/\#\^\|x"
    parsed = parse_filter(format_filter(["=~", "n", pattern]))
    assert parsed == ["=~", "n", r"/\#\^\|x"]
    assert re.search(parsed[2], "/#^|x")


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        (["==", "n", True], "value True cannot be written"),
        (["==", "n", 1.5], "value 1.5 cannot be written"),
        (["==", "and", 1], "field name 'and' cannot be written"),
        (["?", "9x"], "field name '9x' cannot be written"),
        (["&"], "without operands has no text form"),
        (["?", "a", "b"], "has no text form"),
        ("a", "is not a non-empty list"),
    ],
)
def test_format_refuses_what_the_text_form_cannot_say(expr: Any, message: str) -> None:
    with pytest.raises(QueryFilterError, match=message):
        format_filter(expr)


field_names = st.from_regex(r"[A-Za-z][A-Za-z0-9_/.]{0,6}", fullmatch=True).filter(
    lambda name: name not in ("and", "or", "not")
)
values = st.one_of(
    st.integers(-(10**12), 10**12),
    st.text(max_size=8),
    st.text(st.sampled_from(["a", '"', "'", "\\", "\n", "\t", "\r", " ", "é", "/"]), max_size=6),
)
regexp_parts = st.sampled_from(
    ["a", "/", "#", "^", "|", r"\d", r"\/", r"\#", r"\|", r"\^", ".", "x*", r"\\", "(?:b)",
     " ", "\n", "'", '"', "é"]
)
regexps = st.lists(regexp_parts, max_size=6).map("".join)
leaves = st.one_of(
    st.tuples(st.just("?"), field_names).map(list),
    st.tuples(st.sampled_from(["==", "!=", "<", "<=", ">", ">="]), field_names, values).map(list),
    st.tuples(st.just("=~"), field_names, regexps).map(list),
    st.tuples(st.just("=[]"), field_names, values).map(list),
)
canonical_filters = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.tuples(st.just("!"), children).map(list),
        st.builds(lambda op, subs: [op, *subs], st.sampled_from(["|", "&"]),
                  st.lists(children, min_size=2, max_size=3)),
    ),
    max_leaves=6,
)


def _regexps(expr: list[Any]) -> list[str]:
    if expr[0] in ("|", "&", "!"):
        return [r for sub in expr[1:] for r in _regexps(sub)]
    return [expr[2]] if expr[0] == "=~" else []


@settings(max_examples=120, deadline=None)
@given(canonical_filters)
def test_text_form_round_trip(expr: list[Any]) -> None:
    # A regexp escaping all four delimiters has no exact text form (see above).
    assume(
        not any(all("\\" + d in re.findall(r"\\.|.", r, re.S) for d in "/#^|")
                for r in _regexps(expr))
    )
    text = format_filter(expr)
    assert parse_filter(text) == expr, text
