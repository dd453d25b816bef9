"""The text form of query filters (``gnt-* list --filter``), to and from the list form.

Grammar (Ganeti's, lowest precedence first)::

    filter     := filter "or" filter | filter "and" filter | "not" filter
                | "(" filter ")" | condition
    condition  := field ("==" | "=" | "!=" | "<" | "<=" | ">" | ">=") value
                | field "=~" regexp | field "!~" regexp
                | field "=*" string | field "!*" string        (DNS-name globs)
                | value "in" field | value "not" "in" field
                | field                                        (truth of the field)
    field      := letter followed by letters, digits, "_", "/", "."
    value      := integer (optional sign) | string
    string     := "..." or '...'
    regexp     := ["m"] delimiter ... delimiter [flags]  delimiters / # ^ |, flags i s

Where corral differs from Ganeti, it is to make every list-form filter expressible:
inside strings ``\\``, ``\"``, ``\'``, ``\n``, ``\t`` and ``\r`` are escapes (other
backslashes stay as they are), and inside a regexp only "backslash delimiter" is an
escape, so ``m/\\d+/`` is the regexp ``\\d+`` (Ganeti dropped every backslash).
``and``, ``or`` and ``not`` are not field names.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

import pyparsing as pp

from corral.errors import QueryFilterError

__all__ = [
    "format_filter",
    "glob_to_regexp",
    "make_filter",
    "make_simple_filter",
    "parse_filter",
]

_FIELD_RE: Final = r"(?!(?:and|or|not)(?![A-Za-z0-9_/.]))[A-Za-z][A-Za-z0-9_/.]*"
_REGEXP_DELIMITERS: Final = "/#^|"
_REGEXP_FLAGS: Final = frozenset("is")
_STRING_ESCAPES: Final = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t", "r": "\r"}
#: Characters that make a command-line argument a filter rather than a name (Ganeti's).
FILTER_DETECTION_CHARS: Final = frozenset(" \t\n\v\f\r!\"'()/<=>\\~")
GLOB_DETECTION_CHARS: Final = frozenset("*?")

_BINARY_OPS: Final = {"==": "==", "=": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


# --- helpers shared by parsing and formatting -------------------------------------------


def glob_to_regexp(pattern: str) -> str:
    """Ganeti's DNS-name glob: ``*`` and ``?`` never match a dot; the pattern matches
    the leading labels of a name (``node1`` matches ``node1.example.com``)."""
    parts = []
    for chunk in re.split(r"([*?])", pattern):
        if chunk == "*":
            parts.append("[^.]*")
        elif chunk == "?":
            parts.append("[^.]")
        else:
            parts.append(re.escape(chunk))
    return "^" + "".join(parts) + r"(\..*)?$"


def _unescape_string(body: str) -> str:
    return re.sub(r"\\(.)", lambda m: _STRING_ESCAPES.get(m.group(1), m.group(0)), body)


def _unescape_regexp(body: str, delimiter: str) -> str:
    return re.sub(
        r"\\(.)", lambda m: m.group(1) if m.group(1) == delimiter else m.group(0), body,
        flags=re.DOTALL,
    )


# --- parsing ------------------------------------------------------------------------------


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
    field = pp.Regex(_FIELD_RE).set_name("field name")
    number = pp.Regex(r"[+-]?[0-9]+").set_name("integer")
    number.set_parse_action(lambda toks: int(toks[0]))
    string = pp.Regex(r""""(?:[^"\\\n\r]|\\[^\n\r])*"|'(?:[^'\\\n\r]|\\[^\n\r])*'""")
    string.set_name("quoted string").set_parse_action(_on_string)
    unterminated = pp.Regex("[\"']").set_name("quoted string")
    unterminated.set_parse_action(_on_unterminated)
    value = (number | string | unterminated).set_name("value (integer or quoted string)")
    glob = (string | unterminated).set_name("quoted string (a glob pattern)")
    regexp_alternatives = "|".join(
        f"{re.escape(d)}(?:[^{re.escape(d)}\\\\]|\\\\.)*{re.escape(d)}" for d in _REGEXP_DELIMITERS
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


def parse_filter(text: str) -> list[Any]:
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


# --- formatting ------------------------------------------------------------------------


def _format_field(field: Any) -> str:
    if not isinstance(field, str) or not re.fullmatch(_FIELD_RE, field):
        raise QueryFilterError(
            f"field name {field!r} cannot be written in the text form; a field name there "
            "is a letter followed by letters, digits, '_', '/' or '.', and not and/or/not"
        )
    return field


def _format_value(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise QueryFilterError(
            f"value {value!r} cannot be written in the text form; it accepts integers "
            "and strings"
        )
    if isinstance(value, int):
        return str(value)
    escaped = (
        value.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\r", "\\r")
        .replace("\t", "\\t")
    )
    return f'"{escaped}"'


def _format_regexp(pattern: Any) -> str:
    if not isinstance(pattern, str):
        raise QueryFilterError(f"regular expression {pattern!r} must be a string")
    pairs = re.findall(r"\\.|.", pattern, flags=re.DOTALL)
    # Prefer a delimiter the pattern does not use, then one it never escapes ("\/"
    # cannot be written inside m/.../); failing both, "\/" is written as "/", which
    # means the same to the regexp engine.
    unused = [d for d in _REGEXP_DELIMITERS if d not in pattern]
    unescaped = [d for d in _REGEXP_DELIMITERS if "\\" + d not in pairs]
    delimiter = (unused or unescaped or ["/"])[0]
    out = []
    for pair in pairs:
        if pair == delimiter or pair == "\\" + delimiter:
            out.append("\\" + delimiter)
        else:
            out.append(pair)
    return f"m{delimiter}{''.join(out)}{delimiter}"


def _format(expr: Any, context: int) -> str:
    """``context``: 0 top or inside ``or``, 1 inside ``and``, 2 inside ``not``."""
    if not isinstance(expr, (list, tuple)) or not expr:
        raise QueryFilterError(f"query filter part {expr!r} is not a non-empty list")
    op, operands = expr[0], list(expr[1:])
    if op in ("|", "&"):
        if not operands:
            raise QueryFilterError(f"{op!r} without operands has no text form")
        if len(operands) == 1:
            return _format(operands[0], context)
        mine = 0 if op == "|" else 1
        text = f" {'or' if op == '|' else 'and'} ".join(_format(o, 3) for o in operands)
        return text if context <= mine else f"({text})"
    if op == "!" and len(operands) == 1:
        return f"not {_format(operands[0], 2)}"
    if op == "?" and len(operands) == 1:
        return _format_field(operands[0])
    if op in ("==", "=", "!=", "<", "<=", ">", ">=") and len(operands) == 2:
        symbol = "==" if op == "=" else op
        return f"{_format_field(operands[0])} {symbol} {_format_value(operands[1])}"
    if op == "=~" and len(operands) == 2:
        return f"{_format_field(operands[0])} =~ {_format_regexp(operands[1])}"
    if op == "=[]" and len(operands) == 2:
        return f"{_format_value(operands[1])} in {_format_field(operands[0])}"
    raise QueryFilterError(f"query filter part {expr!r} has no text form")


def format_filter(expr: Any) -> str:
    """Write a list-form filter in the text form; :func:`parse_filter` reads it back.

    ``"="`` is written as ``==`` and ``|``/``&`` with one operand as that operand, so
    those come back in their canonical form. Raises :class:`QueryFilterError` for what
    the text form cannot express (booleans, floats, lists as values, empty ``|``).
    """
    if expr is None or (isinstance(expr, (list, tuple)) and not expr):
        return ""
    return _format(expr, 0)


# --- building filters from command-line names --------------------------------------------


def make_simple_filter(field: str, names: Sequence[str | int] | None) -> list[Any] | None:
    """``["|", ["==", field, name], ...]`` for the names, or None when there are none."""
    if not names:
        return None
    return ["|", *(["==", field, name] for name in names)]


def make_filter(
    args: Sequence[str],
    force_filter: bool = False,
    namefield: str = "name",
    isnumeric: bool = False,
) -> list[Any] | None:
    """Ganeti's reading of the arguments of a ``list`` command.

    One argument that looks like a filter (or any with ``force_filter``) is parsed as
    the text form; otherwise each argument is a name, a glob (``*``, ``?``) or, with
    ``isnumeric``, an integer (job ids). No arguments: None (everything).
    """
    if force_filter or (len(args) == 1 and FILTER_DETECTION_CHARS & set(args[0])):
        if len(args) != 1:
            raise QueryFilterError(
                f"exactly one argument must be given as a filter, got {len(args)}; "
                "quote the whole filter"
            )
        return parse_filter(args[0])
    if not args:
        return None
    parts: list[Any] = []
    for arg in args:
        if isnumeric:
            try:
                parts.append(["==", namefield, int(arg)])
            except ValueError:
                raise QueryFilterError(
                    f"invalid {namefield} {arg!r}: expected an integer"
                ) from None
        elif GLOB_DETECTION_CHARS & set(arg):
            parts.append(["=~", namefield, glob_to_regexp(arg)])
        else:
            parts.append(["==", namefield, arg])
    return ["|", *parts]

