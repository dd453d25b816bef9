"""Ganeti's query language: filters in list and text form, and query field registries.

* :func:`compile_filter` turns the list form (``["&", ["==", "status", "running"], ...]``)
  into a predicate, once; :func:`parse_filter` and :func:`format_filter` convert between
  the text form (``status == "running" and name =~ m/^web/``) and the list form.
* :class:`FieldRegistry` holds one resource's fields and answers ``Query`` and
  ``QueryFields`` in Ganeti's shapes, with a :class:`ResultStatus` per value.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from corral.qlang.compiler import (
        MAX_LEVELS,
        OPERATORS,
        FilterEvaluationError,
        ResultStatus,
        ValueCheck,
        compile_filter,
    )
    from corral.qlang.fields import (
        KINDS,
        Field,
        FieldDef,
        FieldKind,
        FieldRegistry,
        pick_items,
        requested_names,
    )
    from corral.qlang.parser import (
        format_filter,
        glob_to_regexp,
        make_filter,
        make_simple_filter,
        parse_filter,
    )

__all__ = [
    "KINDS",
    "MAX_LEVELS",
    "OPERATORS",
    "Field",
    "FieldDef",
    "FieldKind",
    "FieldRegistry",
    "FilterEvaluationError",
    "ResultStatus",
    "ValueCheck",
    "compile_filter",
    "format_filter",
    "glob_to_regexp",
    "make_filter",
    "make_simple_filter",
    "parse_filter",
    "pick_items",
    "requested_names",
]

# Names load on first use: the command line builds filters from names (the parser
# module) without the compiler and field registries the master evaluates them with.
__getattr__, __dir__ = lazy_exports(__name__, {
    **dict.fromkeys(("MAX_LEVELS", "OPERATORS", "FilterEvaluationError", "ResultStatus",
                     "ValueCheck", "compile_filter"), "compiler"),
    **dict.fromkeys(("KINDS", "Field", "FieldDef", "FieldKind", "FieldRegistry", "pick_items",
                     "requested_names"), "fields"),
    **dict.fromkeys(("format_filter", "glob_to_regexp", "make_filter", "make_simple_filter",
                     "parse_filter"), "parser"),
})
