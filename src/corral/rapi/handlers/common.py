"""Helpers the resource handlers share: index lists, query rows, one item by name or UUID."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from corral.errors import NotFoundError
from corral.rapi.request import RapiRequest

__all__ = ["by_name_or_uuid", "query_one", "query_rows", "uri_list"]


def uri_list(ids: Iterable[Any], template: str, key: str) -> list[dict[str, Any]]:
    """An index resource's answer: ``[{key: id, "uri": template % id}]``, sorted by id."""
    return [{key: item, "uri": template % item} for item in sorted(ids)]


def by_name_or_uuid(value: str) -> list[Any]:
    """A query filter selecting the item whose name or UUID is ``value``."""
    return ["|", ["=", "name", value], ["=", "uuid", value]]


async def query_rows(req: RapiRequest, what: str, fields: Sequence[str],
                     qfilter: Any = None) -> list[dict[str, Any]]:
    """Rows of a luxi ``Query`` as dicts; values that are not normal become None (as
    Ganeti's older query calls, which RAPI's lists and items use, give them)."""
    answer = await req.call("Query", what, list(fields), qfilter)
    return [
        {name: value if status == 0 else None
         for name, (status, value) in zip(fields, row, strict=True)}
        for row in answer["data"]
    ]


async def query_one(req: RapiRequest, what: str, noun: str, key: str,
                    fields: Sequence[str]) -> dict[str, Any]:
    """The fields of the one item of ``what`` named (or with the UUID) ``key``."""
    rows = await query_rows(req, what, fields, by_name_or_uuid(key))
    if not rows:
        raise NotFoundError(f"{noun} {key!r} not found (by name or UUID)")
    return rows[0]
