"""``/2/networks``, ``/2/networks/[name]``, ``/modify``, ``/connect``, ``/disconnect``.

Bodies are the opcodes' parameters, as in Ganeti: ``POST /2/networks`` takes
``network_name``, ``network``, ``gateway``, ``add_reserved_ips``, ...; ``connect``
takes ``group_name``, ``network_mode``, ``network_link`` (and ``network_vlan``,
``conflicts_check``); ``disconnect`` takes ``group_name``. Tags are served by
:mod:`corral.rapi.handlers.tags`.
"""

from __future__ import annotations

from typing import Any, Final

from corral.rapi.handlers.common import query_one, query_rows, uri_list
from corral.rapi.request import RapiRequest

__all__ = ["NETWORK_FIELDS", "add", "connect", "delete", "disconnect", "get", "index",
           "modify"]

#: Fields of each network in ``/2/networks?bulk=1`` and ``/2/networks/[name]``
#: (Ganeti's list, in its order).
NETWORK_FIELDS: Final = (
    "name", "network", "gateway", "network6", "gateway6", "mac_prefix", "free_count",
    "reserved_count", "map", "group_list", "inst_list", "external_reservations",
    "ctime", "mtime", "uuid", "serial_no", "tags",
)


async def index(req: RapiRequest) -> list[dict[str, Any]]:
    """Every network: names and URIs, or with ``bulk=1`` their fields."""
    if req.flag("bulk"):
        return await query_rows(req, "network", NETWORK_FIELDS)
    rows = await query_rows(req, "network", ["name"])
    return uri_list((row["name"] for row in rows), "/2/networks/%s", "name")


async def add(req: RapiRequest) -> int:
    """Add a network (``OP_NETWORK_ADD`` from the body); a job id."""
    return await req.submit(req.opcode("OP_NETWORK_ADD", {"dry_run": req.flag("dry-run")}))


async def get(req: RapiRequest) -> dict[str, Any]:
    """One network's fields."""
    return await query_one(req, "network", "network", req.item("network_name"),
                           NETWORK_FIELDS)


async def delete(req: RapiRequest) -> int:
    """Remove a network connected to no group; a job id."""
    return await req.submit(req.opcode("OP_NETWORK_REMOVE", {
        "network_name": req.item("network_name"), "dry_run": req.flag("dry-run")},
        from_body=False))


async def modify(req: RapiRequest) -> int:
    """Change a network's gateway, IPv6 settings, MAC prefix or reservations; a job id."""
    return await req.submit(req.opcode("OP_NETWORK_SET_PARAMS", {
        "network_name": req.item("network_name"), "dry_run": req.flag("dry-run")}))


async def connect(req: RapiRequest) -> int:
    """Connect the network to a node group (body: ``group_name``, ``network_mode``,
    ``network_link``); a job id."""
    return await req.submit(req.opcode("OP_NETWORK_CONNECT", {
        "network_name": req.item("network_name"), "dry_run": req.flag("dry-run")}))


async def disconnect(req: RapiRequest) -> int:
    """Disconnect the network from a node group (body: ``group_name``); a job id."""
    return await req.submit(req.opcode("OP_NETWORK_DISCONNECT", {
        "network_name": req.item("network_name"), "dry_run": req.flag("dry-run")}))
