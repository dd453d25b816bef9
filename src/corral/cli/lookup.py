"""Finding the objects a command names: by name, by UUID, or by a query filter.

Wherever a gnt-* command takes a node, node group or instance, its name or its UUID
works. List commands also take globs, or one argument in the query language's text
form (always with ``-F``), as Ganeti's do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from corral.cli.jobs import LuxiCaller
from corral.errors import NotFoundError
from corral.qlang.parser import (
    FILTER_DETECTION_CHARS,
    GLOB_DETECTION_CHARS,
    make_filter,
    make_simple_filter,
)

__all__ = ["name_or_uuid_filter", "query_named", "query_rows", "selection_filter"]


def selection_filter(names: Sequence[str], force_filter: bool = False) -> list[Any] | None:
    """The query filter for a list command's arguments: names (with globs) or UUIDs, or
    one argument that is a filter in the text form (always with ``-F``). Without globs
    the filter only names items, so the master answers them in the order named and
    refuses unknown names."""
    if not names:
        return None
    if force_filter or (len(names) == 1 and FILTER_DETECTION_CHARS & set(names[0])):
        return make_filter(list(names), force_filter=True)
    if not any(GLOB_DETECTION_CHARS & set(name) for name in names):
        # Names only: the master answers them in the order given, found by name or
        # UUID, and refuses an unknown one (Ganeti's unknown_entity).
        return make_filter(list(names))
    return ["|", make_filter(list(names)), make_simple_filter("uuid", list(names))]


def name_or_uuid_filter(names: Sequence[str]) -> list[Any]:
    """The query filter matching each of ``names`` exactly, as a name or as a UUID."""
    return ["|", *(["|", ["=", "name", n], ["=", "uuid", n]] for n in names)]


def query_rows(client: LuxiCaller, resource: str, fields: Sequence[str],
               qfilter: list[Any] | None) -> list[dict[str, Any]]:
    """A luxi ``Query``'s rows as field → value maps (None where the value is not
    available)."""
    answer = client.call("Query", resource, list(fields), qfilter)
    return [{f: (value if status == 0 else None)
             for f, (status, value) in zip(fields, row, strict=True)} for row in answer["data"]]


def query_named(client: LuxiCaller, resource: str, noun: str, names: Sequence[str],
                fields: Sequence[str]) -> list[dict[str, Any]]:
    """Rows (field → value, None when not available) of the named items in the order
    named, or of all of them; an unknown name is a :class:`NotFoundError` naming it.

    ``resource`` is the query resource (``node``, ``group``, ``instance``), ``noun``
    what the error calls one of them.
    """
    wanted = ["name", "uuid", *(f for f in fields if f not in ("name", "uuid"))]
    rows = query_rows(client, resource, wanted, name_or_uuid_filter(names) if names else None)
    known = {row["name"] for row in rows} | {row["uuid"] for row in rows}
    missing = [n for n in names if n not in known]
    if missing:
        raise NotFoundError(f"{noun} {', '.join(missing)} not found; see "
                            f"'gnt-{resource} list'")
    if names:
        order = {n: i for i, n in enumerate(names)}
        rows.sort(key=lambda r: min(order.get(str(r["name"]), len(order)),
                                    order.get(str(r["uuid"]), len(order))))
    return rows
