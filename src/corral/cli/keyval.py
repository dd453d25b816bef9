"""Ganeti's option value syntaxes: ``key=val,...`` and ``ident:key=val,...``.

``-B``, ``-N``, ``--node-parameters`` and friends take ``key=val`` items separated by
commas. A comma inside a value is written ``\\,`` (and a backslash ``\\\\``). An item
without ``=`` is a shorthand::

    no_key   ->  key: False     (switch a boolean off)
    -key     ->  key: None      (reset to the default)
    key      ->  key: True      (switch a boolean on)

``-H`` and ``-D`` take ``ident:key=val,...`` (an ident alone means "no
parameters"); ``no_ident`` gives ``(ident, False)`` and ``-ident`` gives ``(ident,
None)`` — requests to remove the whole group, which take no parameters. An ident of
``-`` followed by a digit (``-1``) is a plain ident (an index counted from the end).

Errors are :class:`~corral.errors.ParameterError` and name the option and the item.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, TypeAlias

from corral.errors import ParameterError

__all__ = [
    "NO_PREFIX",
    "UN_PREFIX",
    "IdentValue",
    "KeyValDict",
    "KeyValValue",
    "merge_ident_keyvals",
    "parse_ident_keyval",
    "parse_keyval",
    "parse_multilist_ident_keyval",
    "unescape_and_split",
]

#: Prefix of a bare item that sets a key (or removes a group) with ``False``.
NO_PREFIX = "no_"
#: Prefix of a bare item that resets a key (or a group) with ``None``.
UN_PREFIX = "-"

#: A value in a parsed ``key=val`` list: the text, or what a bare item means.
KeyValValue: TypeAlias = str | bool | None
#: A parsed ``key=val,...`` list.
KeyValDict: TypeAlias = dict[str, KeyValValue]
#: What follows an ident: its parameters, ``False`` (``no_ident``) or ``None`` (``-ident``).
IdentValue: TypeAlias = KeyValDict | Literal[False] | None


def unescape_and_split(text: str, sep: str = ",") -> list[str]:
    """Split ``text`` at ``sep`` except where it is escaped with a backslash.

    ``\\<sep>`` is a literal separator and ``\\\\`` a literal backslash; any other
    backslash-escaped character stands for itself. So ``a\\,b,c`` gives ``["a,b",
    "c"]`` and ``a\\\\,b`` gives ``["a\\", "b"]``.
    """
    items: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            current.append(text[i + 1])
            i += 2
            continue
        if text.startswith(sep, i):
            items.append("".join(current))
            current = []
            i += len(sep)
            continue
        current.append(char)
        i += 1
    items.append("".join(current))
    return items


def parse_keyval(option_name: str, text: str, *, parse_prefixes: bool = True) -> KeyValDict:
    """Parse ``key=val,key=val,...`` given to ``option_name`` into a dict.

    An empty text gives ``{}``. Without ``parse_prefixes`` every item needs ``=``.

    :raises ParameterError: for a repeated key, an empty item or key, or a missing
        value; the message names the option and the item.
    """
    result: KeyValDict = {}
    if not text:
        return result
    for item in unescape_and_split(text):
        value: KeyValValue
        if "=" in item:
            key, value = item.split("=", 1)
        elif not parse_prefixes:
            raise ParameterError(
                f"option {option_name}: missing value for '{item}'; write '{item}=VALUE'"
            )
        elif item.startswith(NO_PREFIX):
            key, value = item[len(NO_PREFIX) :], False
        elif item.startswith(UN_PREFIX):
            key, value = item[len(UN_PREFIX) :], None
        else:
            key, value = item, True
        if not key:
            shown = f"empty item in '{text}'" if not item else f"no key name in '{item}'"
            raise ParameterError(
                f"option {option_name}: {shown}; expected key=value[,key=value...]"
            )
        if key in result:
            raise ParameterError(f"option {option_name}: duplicate key '{key}' in '{text}'")
        result[key] = value
    return result


def _is_removal(ident: str) -> bool:
    # "-1" is an index counted from the end, not the removal of group "1".
    return ident.startswith(UN_PREFIX) and not ident[len(UN_PREFIX) : len(UN_PREFIX) + 1].isdigit()


def parse_ident_keyval(
    option_name: str, text: str, *, parse_prefixes: bool = True
) -> tuple[str, IdentValue]:
    """Parse ``ident:key=val,...`` given to ``option_name`` into ``(ident, params)``.

    ``ident`` alone gives ``(ident, {})``; ``no_ident`` gives ``(ident, False)`` and
    ``-ident`` gives ``(ident, None)``, neither accepting parameters.

    :raises ParameterError: naming the option and the bad part.
    """
    ident, _, rest = text.partition(":")
    removal: Literal[False] | None
    if parse_prefixes and ident.startswith(NO_PREFIX):
        name, removal = ident[len(NO_PREFIX) :], False
    elif parse_prefixes and _is_removal(ident):
        name, removal = ident[len(UN_PREFIX) :], None
    else:
        if not ident:
            raise ParameterError(
                f"option {option_name}: missing name before ':' in '{text}';"
                " expected name:key=value[,key=value...]"
            )
        return ident, parse_keyval(option_name, rest, parse_prefixes=parse_prefixes)
    if not name:
        raise ParameterError(f"option {option_name}: missing name in '{text}'")
    if rest:
        raise ParameterError(
            f"option {option_name}: '{ident}' removes the whole '{name}' group and takes"
            f" no parameters (got '{text}')"
        )
    return name, removal


def merge_ident_keyvals(
    option_name: str, items: Iterable[tuple[str, IdentValue]]
) -> dict[str, IdentValue]:
    """Merge repeated uses of an ident option (``-H kvm:... -H fake:...``) into one dict.

    :raises ParameterError: if the same ident is given twice.
    """
    merged: dict[str, IdentValue] = {}
    for ident, value in items:
        if ident in merged:
            raise ParameterError(
                f"option {option_name}: '{ident}' given more than once; combine its"
                " parameters in one value"
            )
        merged[ident] = value
    return merged


def parse_multilist_ident_keyval(option_name: str, text: str) -> list[dict[str, KeyValDict]]:
    """Parse ``ident:key=val,.../ident:...//ident:...`` (as ``--ipolicy-bounds-specs``).

    ``//`` separates list entries and ``/`` the idents of one entry; every item needs
    ``=`` (no prefixes).

    :raises ParameterError: for an empty section or an ident repeated within an entry.
    """
    result: list[dict[str, KeyValDict]] = []
    for entry in text.split("//"):
        section: dict[str, KeyValDict] = {}
        for part in entry.split("/"):
            if not part:
                raise ParameterError(f"option {option_name}: empty section in '{text}'")
            ident, value = parse_ident_keyval(option_name, part, parse_prefixes=False)
            if ident in section:
                raise ParameterError(f"option {option_name}: '{ident}' given twice in '{entry}'")
            assert isinstance(value, dict)  # without prefixes there are no removals
            section[ident] = value
        result.append(section)
    return result
