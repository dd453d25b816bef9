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

from corral.errors import QueryFilterError
from corral.qlang.tokens import FIELD_RE, REGEXP_DELIMITERS, glob_to_regexp

__all__ = [
    "format_filter",
    "glob_to_regexp",
    "make_filter",
    "make_simple_filter",
    "parse_filter",
]

#: Characters that make a command-line argument a filter rather than a name (Ganeti's).
FILTER_DETECTION_CHARS: Final = frozenset(" \t\n\v\f\r!\"'()/<=>\\~")
GLOB_DETECTION_CHARS: Final = frozenset("*?")


def parse_filter(text: str) -> list[Any]:
    """Parse the text form of a filter into the list form.

    Raises :class:`~corral.errors.QueryFilterError` giving the position of the error.
    The grammar (:mod:`corral.qlang.grammar`, built on pyparsing) loads on the first
    call: listing by names, what most commands do, never needs it.
    """
    from corral.qlang.grammar import parse_text

    return parse_text(text)


# --- formatting ------------------------------------------------------------------------


def _format_field(field: Any) -> str:
    if not isinstance(field, str) or not re.fullmatch(FIELD_RE, field):
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
    unused = [d for d in REGEXP_DELIMITERS if d not in pattern]
    unescaped = [d for d in REGEXP_DELIMITERS if "\\" + d not in pairs]
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

