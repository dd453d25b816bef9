"""The grammar of the text form of query filters, built on pyparsing.

:func:`corral.qlang.parser.parse_filter` loads this module on its first call, so that
the gnt-* tools start without pyparsing (about a third of their start-up time) and
pay for it only when given a filter. The grammar is described in
:mod:`corral.qlang.parser`.
"""

from __future__ import annotations

import re
from typing import Any, Final

import pyparsing as pp

from corral.errors import QueryFilterError
from corral.qlang.tokens import FIELD_RE, REGEXP_DELIMITERS, glob_to_regexp

__all__ = ["parse_text"]

_REGEXP_FLAGS: Final = frozenset("is")
_STRING_ESCAPES: Final = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t", "r": "\r"}
_BINARY_OPS: Final = {"==": "==", "=": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def _unescape_string(body: str) -> str:
    return re.sub(r"\\(.)", lambda m: _STRING_ESCAPES.get(m.group(1), m.group(0)), body)


def _unescape_regexp(body: str, delimiter: str) -> str:
    return re.sub(
        r"\\(.)", lambda m: m.group(1) if m.group(1) == delimiter else m.group(0), body,
        flags=re.DOTALL,
    )


def _on_string(toks: pp.ParseResults) -> str:
    text: str = toks[0]
    return _unescape_string(text[1:-1])


def _on_regexp(text: str, loc: int, toks: pp.ParseResults) -> str:
    literal: str = toks[0]
    start = 1 if literal.startswith("m") else 0
    delimiter = literal[start]
    end = literal.rindex(delimiter)
    body, flags = literal[start + 1 : end], literal[end + 1 :]
    unknown = sorted(set(flags) - _REGEXP_FLAGS)
    if unknown:
        raise pp.ParseFatalException(
            text, loc, f"unknown regular expression flag(s) {''.join(unknown)!r}; "
            "accepted flags: i (ignore case), s (dot matches newline)"
        )
    pattern = _unescape_regexp(body, delimiter)
    if flags:
        pattern = "(?" + "".join(sorted(set(flags))) + ")" + pattern
    try:
        re.compile(pattern)
    except re.error as err:
        raise pp.ParseFatalException(
            text, loc, f"invalid regular expression {pattern!r} ({err})"
        ) from None
    return pattern


def _on_unterminated(text: str, loc: int, _toks: pp.ParseResults) -> None:
    raise pp.ParseFatalException(text, loc, "unterminated quoted string")


class _Node:
    """A parsed filter, opaque to pyparsing (which would splice a plain list)."""

    __slots__ = ("expr",)

    def __init__(self, expr: list[Any]) -> None:
        self.expr = expr


def _build_parser() -> pp.ParserElement:
    field = pp.Regex(FIELD_RE).set_name("field name")
    number = pp.Regex(r"[+-]?[0-9]+").set_name("integer")
    number.set_parse_action(lambda toks: int(toks[0]))
    string = pp.Regex(r""""(?:[^"\\\n\r]|\\[^\n\r])*"|'(?:[^'\\\n\r]|\\[^\n\r])*'""")
    string.set_name("quoted string").set_parse_action(_on_string)
    unterminated = pp.Regex("[\"']").set_name("quoted string")
    unterminated.set_parse_action(_on_unterminated)
    value = (number | string | unterminated).set_name("value (integer or quoted string)")
    glob = (string | unterminated).set_name("quoted string (a glob pattern)")
    regexp_alternatives = "|".join(
        f"{re.escape(d)}(?:[^{re.escape(d)}\\\\]|\\\\.)*{re.escape(d)}" for d in REGEXP_DELIMITERS
    )
    regexp = pp.Regex(f"m?(?:{regexp_alternatives})[A-Za-z]*", flags=re.DOTALL)
    regexp.set_name("regular expression (m/.../flags)").set_parse_action(_on_regexp)

    def binary(toks: pp.ParseResults) -> _Node:
        return _Node([_BINARY_OPS[toks[1]], toks[0], toks[2]])

    def negated(inner: list[Any]) -> _Node:
        return _Node(["!", inner])

    in_cond = value + pp.Keyword("in").suppress() + field
    in_cond.set_parse_action(lambda t: _Node(["=[]", t[1], t[0]]))
    not_in_cond = value + pp.Keyword("not").suppress() + pp.Keyword("in").suppress() + field
    not_in_cond.set_parse_action(lambda t: negated(["=[]", t[1], t[0]]))
    regexp_cond = field + pp.Suppress("=~") - regexp
    regexp_cond.set_parse_action(lambda t: _Node(["=~", t[0], t[1]]))
    not_regexp_cond = field + pp.Suppress("!~") - regexp
    not_regexp_cond.set_parse_action(lambda t: negated(["=~", t[0], t[1]]))
    glob_cond = field + pp.Suppress("=*") - glob
    glob_cond.set_parse_action(lambda t: _Node(["=~", t[0], glob_to_regexp(t[1])]))
    not_glob_cond = field + pp.Suppress("!*") - glob
    not_glob_cond.set_parse_action(lambda t: negated(["=~", t[0], glob_to_regexp(t[1])]))
    binary_cond = field + pp.one_of(list(_BINARY_OPS)) - value
    binary_cond.set_parse_action(binary)
    truth_cond = field.copy().set_parse_action(lambda t: _Node(["?", t[0]]))
    condition = (
        in_cond
        | not_in_cond
        | regexp_cond
        | not_regexp_cond
        | glob_cond
        | not_glob_cond
        | binary_cond
        | truth_cond
    ).set_name("condition")

    def negate(toks: pp.ParseResults) -> _Node:
        return _Node(["!", toks[0][0].expr])

    def logic(op: str) -> Any:
        def action(toks: pp.ParseResults) -> _Node:
            return _Node([op, *(node.expr for node in toks[0])])

        return action

    expression: pp.ParserElement = pp.infix_notation(  # type: ignore[no-untyped-call]
        condition,
        [
            (pp.Keyword("not").suppress(), 1, pp.OpAssoc.RIGHT, negate),
            (pp.Keyword("and").suppress(), 2, pp.OpAssoc.LEFT, logic("&")),
            (pp.Keyword("or").suppress(), 2, pp.OpAssoc.LEFT, logic("|")),
        ],
    )
    parser = pp.StringStart() + expression + pp.StringEnd()
    parser.parse_with_tabs()
    return parser


_PARSER: pp.ParserElement | None = None


def parse_text(text: str) -> list[Any]:
    """Parse the text form of a filter into the list form.

    Raises :class:`~corral.errors.QueryFilterError` giving the position of the error.
    """
    global _PARSER
    if _PARSER is None:
        _PARSER = _build_parser()
    try:
        result = _PARSER.parse_string(text, parse_all=True)
    except pp.ParseBaseException as err:
        raise QueryFilterError(
            f"cannot parse query filter {text!r} at position {err.loc} (column {err.col}): "
            f"{err.msg}; a filter is made of conditions such as 'name == \"web1\"', "
            "'name =~ m/^web/i', 'name =* \"web*\"', '\"tag\" in tags' or a field name, "
            "joined with and, or, not and parentheses"
        ) from None
    node: _Node = result[0]
    return node.expr
