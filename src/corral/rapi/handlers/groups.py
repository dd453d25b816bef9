"""``/2/groups``, ``/2/groups/[name]``, ``/modify``, ``/rename`` and ``/assign-nodes``."""

from __future__ import annotations

from typing import Any, Final

from corral.rapi.handlers.common import query_one, query_rows, uri_list
from corral.rapi.request import RapiRequest

__all__ = [
    "ADD_RENAME",
    "GROUP_FIELDS",
    "MODIFY_RENAME",
    "add",
    "assign_nodes",
    "delete",
    "get",
    "index",
    "modify",
    "rename",
]

#: Fields of each group in ``/2/groups?bulk=1`` and ``/2/groups/[name]`` (Ganeti's list).
GROUP_FIELDS: Final = (
    "alloc_policy", "name", "node_cnt", "node_list", "ipolicy", "custom_ipolicy",
    "diskparams", "custom_diskparams", "ndparams", "custom_ndparams", "ctime", "mtime",
    "uuid", "serial_no", "tags",
)

#: Body keys of ``POST /2/groups`` that fill an opcode parameter of another name.
ADD_RENAME: Final = {"name": "group_name"}
#: Body keys of ``PUT /2/groups/[name]/modify`` named after the group's query fields.
MODIFY_RENAME: Final = {"custom_ndparams": "ndparams", "custom_ipolicy": "ipolicy",
                        "custom_diskparams": "diskparams"}


async def index(req: RapiRequest) -> list[dict[str, Any]]:
    """Every node group: names and URIs, or with ``bulk=1`` their fields."""
    if req.flag("bulk"):
        return await query_rows(req, "group", GROUP_FIELDS)
    rows = await query_rows(req, "group", ["name"])
    return uri_list((row["name"] for row in rows), "/2/groups/%s", "name")


async def add(req: RapiRequest) -> int:
    """Add a node group (``OP_GROUP_ADD`` from the body); a job id."""
    return await req.submit(req.opcode("OP_GROUP_ADD", {"dry_run": req.flag("dry-run")},
                                       rename=ADD_RENAME))


async def get(req: RapiRequest) -> dict[str, Any]:
    """One node group's fields."""
    return await query_one(req, "group", "node group", req.item("group_name"), GROUP_FIELDS)


async def delete(req: RapiRequest) -> int:
    """Remove an empty node group; a job id."""
    return await req.submit(req.opcode("OP_GROUP_REMOVE", {
        "group_name": req.item("group_name"), "dry_run": req.flag("dry-run")},
        from_body=False))


async def modify(req: RapiRequest) -> int:
    """Change a node group's parameters; a job id."""
    return await req.submit(req.opcode("OP_GROUP_SET_PARAMS",
                                       {"group_name": req.item("group_name")},
                                       rename=MODIFY_RENAME))


async def rename(req: RapiRequest) -> int:
    """Rename a node group (body: ``new_name``); a job id."""
    return await req.submit(req.opcode("OP_GROUP_RENAME", {
        "group_name": req.item("group_name"), "dry_run": req.flag("dry-run")}))


async def assign_nodes(req: RapiRequest) -> int:
    """Move nodes into the group (body: ``nodes``); a job id."""
    return await req.submit(req.opcode("OP_GROUP_ASSIGN_NODES", {
        "group_name": req.item("group_name"), "dry_run": req.flag("dry-run"),
        "force": req.flag("force")}))
