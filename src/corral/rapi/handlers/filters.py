"""``/2/filters`` and ``/2/filters/[uuid]``: job filter rules (seed 000).

Changes go straight to the master daemon (luxi ``ReplaceFilter``/``DeleteFilter``),
never through the job queue, so they work while the queue is full or paused.
"""

from __future__ import annotations

from typing import Any, Final

from corral.opcodes import check_rapi_trail
from corral.rapi.handlers.common import uri_list
from corral.rapi.request import RapiRequest

__all__ = ["FILTER_FIELDS", "add", "delete", "get", "index", "replace"]

#: Fields of a filter rule as RAPI shows it (Ganeti's list and order).
FILTER_FIELDS: Final = ("watermark", "priority", "predicates", "action", "reason_trail", "uuid")


async def index(req: RapiRequest) -> list[dict[str, Any]]:
    """Every rule: UUIDs and URIs, or with ``bulk=1`` all their fields."""
    if req.flag("bulk"):
        rows = await req.call("QueryFilters", None, list(FILTER_FIELDS))
        return [dict(zip(FILTER_FIELDS, row, strict=True)) for row in rows]
    rows = await req.call("QueryFilters", None, ["uuid"])
    return uri_list((row[0] for row in rows), "/2/filters/%s", "uuid")


async def get(req: RapiRequest) -> dict[str, Any]:
    """One rule."""
    rows = await req.call("QueryFilters", [req.item("filter_uuid")], list(FILTER_FIELDS))
    return dict(zip(FILTER_FIELDS, rows[0], strict=True))


async def _replace(req: RapiRequest, uuid: str | None) -> str:
    """The body's trail is checked (no ``gnt:`` source from outside, see
    :func:`check_rapi_trail`) and kept whole; the ``reason=`` text and RAPI's own
    entries follow it."""
    body = req.body_dict()
    trail: list[list[Any]] = [list(e) for e in check_rapi_trail(body.get("reason", []))]
    trail.extend(req.reason_trail())
    result: str = await req.call("ReplaceFilter", uuid, body.get("priority", 0),
                                 body.get("predicates", []), body.get("action", "CONTINUE"),
                                 trail)
    return result


async def add(req: RapiRequest) -> str:
    """Add a rule; its new UUID."""
    return await _replace(req, None)


async def replace(req: RapiRequest) -> str:
    """Replace the rule with this UUID, or add it under this UUID; the UUID."""
    return await _replace(req, req.item("filter_uuid"))


async def delete(req: RapiRequest) -> None:
    """Delete a rule."""
    await req.call("DeleteFilter", req.item("filter_uuid"))
