"""How gnt-* tools print: aligned tables for ``list``, indented info for ``info``.

Both layouts are Ganeti's, character for character, because administrators' scripts
parse them:

- :func:`format_table`: columns separated by one space and padded to the widest
  cell, numeric columns right-aligned, the last column not padded when it is
  left-aligned. With a separator, cells are joined by it and never padded.
- :func:`format_info`: the YAML-like hierarchy of ``gnt-cluster info`` and
  ``gnt-instance info``. Dicts print their keys sorted; a list of ``(key, value)``
  pairs prints in order (an ordered dict), and pairs with a third member, an
  alignment group, get their values aligned with the others of that group; other
  lists print as ``- item`` lines; a tuple of plain values prints inline as ``[a,
  b]``; anything else prints as ``str(value)``. Nested levels indent by two spaces.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from io import StringIO
from typing import Any

__all__ = [
    "effective_units",
    "format_bool",
    "format_info",
    "format_params",
    "format_table",
    "format_unit",
]

_INDENT = "  "


# -- tables ------------------------------------------------------------------------


def format_table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    separator: str | None = None,
    no_headers: bool = False,
    numeric_columns: Collection[int] = (),
) -> list[str]:
    """Lay out ``rows`` under ``headers`` as Ganeti's list commands do; one string per line.

    Cells are converted with ``str``. ``numeric_columns`` holds the indexes of the
    columns to right-align. With ``separator`` (``--separator``) cells are joined by
    it without padding.

    :raises ValueError: if a row does not have one cell per header.
    """
    table: list[list[str]] = [] if no_headers else [list(headers)]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row has {len(row)} cells for {len(headers)} columns: {row!r}")
        table.append([str(cell) for cell in row])
    if separator is not None:
        return [separator.join(line) for line in table]
    widths = [max((len(line[i]) for line in table), default=0) for i in range(len(headers))]
    if headers and (len(headers) - 1) not in numeric_columns:
        widths[-1] = 0  # no trailing spaces after a left-aligned last column
    return [
        " ".join(
            cell.rjust(widths[i]) if i in numeric_columns else cell.ljust(widths[i])
            for i, cell in enumerate(line)
        )
        for line in table
    ]


def format_bool(value: bool) -> str:
    """``Y`` or ``N``, as Ganeti's list commands show booleans."""
    return "Y" if value else "N"


def effective_units(units: str | None, separator: str | None) -> str:
    """The unit to format sizes in: ``--units`` if given, else ``h``, or ``m`` with a separator."""
    if units is not None:
        return units
    return "m" if separator else "h"


def format_unit(mebibytes: float, units: str) -> str:
    """Format a size in MiB as Ganeti does for ``--units`` ``h``, ``m``, ``g`` or ``t``.

    ``h`` picks the unit and adds a suffix (``512M``, ``1.5G``, ``2.0T``); the others
    print the bare number (MiB rounded to an integer, GiB and TiB with one decimal).
    """
    if units not in ("h", "m", "g", "t"):
        raise ValueError(f"unknown unit {units!r}; use h, m, g or t")
    human = units == "h"
    if units == "m" or (human and mebibytes < 1024):
        return f"{mebibytes:.0f}" + ("M" if human else "")
    if units == "g" or (human and mebibytes < 1024 * 1024):
        return f"{mebibytes / 1024:.1f}" + ("G" if human else "")
    return f"{mebibytes / (1024 * 1024):.1f}" + ("T" if human else "")


# -- hierarchical info ---------------------------------------------------------------


def _is_plain(value: Any) -> bool:
    return not isinstance(value, list | dict | tuple)


def _group_widths(pairs: Sequence[Sequence[Any]]) -> dict[Any, int]:
    widths: dict[Any, int] = {}
    for entry in pairs:
        if len(entry) > 2:
            widths[entry[2]] = max(widths.get(entry[2], 0), len(str(entry[0])))
    return widths


def _begin_block(out: StringIO, after_key: bool) -> bool:
    """Start a nested block; returns whether its first line needs indenting."""
    if after_key:
        out.write("\n")
    return after_key


def _write_info(out: StringIO, data: Any, level: int, after_key: bool) -> None:
    indent = _INDENT * level
    if isinstance(data, dict):
        if not data:
            out.write("\n")
            return
        pad_first = _begin_block(out, after_key)
        for n, key in enumerate(sorted(data)):
            if n or pad_first:
                out.write(indent)
            out.write(f"{key}: ")
            _write_info(out, data[key], level + 1, True)
    elif isinstance(data, list) and data and isinstance(data[0], tuple):
        pad_first = _begin_block(out, after_key)
        widths = _group_widths(data)
        for n, entry in enumerate(data):
            key, value = entry[0], entry[1]
            if n or pad_first:
                out.write(indent)
            out.write(f"{key}: ")
            if len(entry) > 2:
                out.write(" " * (widths[entry[2]] - len(str(key))))
            _write_info(out, value, level + 1, True)
    elif isinstance(data, tuple) and all(_is_plain(item) for item in data):
        out.write("[" + ", ".join(str(item) for item in data) + "]\n")
    elif isinstance(data, list | tuple):
        if not data:
            out.write("\n")
            return
        pad_first = _begin_block(out, after_key)
        for n, item in enumerate(data):
            if n or pad_first:
                out.write(indent)
            out.write("- ")
            _write_info(out, item, level + 1, False)
    else:
        out.write(f"{data}\n")


def format_info(data: Any) -> str:
    """Render ``data`` the way Ganeti's ``info`` commands do (no trailing newline).

    ``data`` is built from dicts, lists of ``(key, value)`` or ``(key, value,
    alignment_group)`` tuples, other lists, tuples and plain values; see the module
    docstring for how each prints. The result is valid YAML for string values.
    """
    out = StringIO()
    _write_info(out, data, 0, False)
    return out.getvalue().rstrip("\n")


def format_params(custom: dict[str, Any] | None, filled: dict[str, Any] | None
                  ) -> dict[str, Any]:
    """Parameters as Ganeti's ``info`` shows them: the value when set here,
    ``default (value)`` when inherited; nested dicts likewise."""
    custom = custom or {}
    result: dict[str, Any] = {}
    for key, value in (filled or {}).items():
        if isinstance(value, dict) and value:
            result[key] = format_params(custom.get(key), value)
        elif key in custom:
            result[key] = str(custom[key])
        else:
            result[key] = f"default ({value})"
    return result
