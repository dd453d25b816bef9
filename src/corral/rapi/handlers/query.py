"""``/2/query/[resource]`` and ``/2/query/[resource]/fields``: the generic query."""

from __future__ import annotations

from typing import Any

from corral.errors import ParameterError
from corral.rapi.request import RapiRequest

__all__ = ["fields", "get", "put"]


def _split(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def _fields_arg(req: RapiRequest) -> list[str]:
    text = req.text("fields")
    if not text:
        raise ParameterError("missing the 'fields' query argument: the fields to return, "
                             "comma-separated (GET /2/query/[resource]/fields lists them)")
    return _split(text)


async def get(req: RapiRequest) -> dict[str, Any]:
    """Selected fields of every item (``?fields=a,b``, required)."""
    result: dict[str, Any] = await req.call("Query", req.item("resource"), _fields_arg(req),
                                            None)
    return result


async def put(req: RapiRequest) -> dict[str, Any]:
    """Selected fields of the items a filter accepts: body ``{fields, qfilter}``
    (``filter`` is the older name of ``qfilter``)."""
    body = req.body_dict()
    names = body["fields"] if "fields" in body else _fields_arg(req)
    qfilter = body.get("qfilter")
    if qfilter is None:
        qfilter = body.get("filter")
    result: dict[str, Any] = await req.call("Query", req.item("resource"), names, qfilter)
    return result


async def fields(req: RapiRequest) -> dict[str, Any]:
    """The definitions of the resource's fields (all, or those in ``?fields=``)."""
    text = req.text("fields")
    result: dict[str, Any] = await req.call("QueryFields", req.item("resource"),
                                            _split(text) if text else None)
    return result
