"""``/2/groups``, ``/2/groups/[name]``, ``/modify``, ``/rename`` and ``/assign-nodes``."""

from __future__ import annotations

from typing import Any, Final

from corral.opcodes.instance_change_ops import MAX_DISKS, MAX_NICS
from corral.rapi.handlers.common import query_one, query_rows, uri_list
from corral.rapi.request import RapiRequest

__all__ = [
    "ADD_RENAME",
    "GROUP_FIELDS",
    "MODIFY_RENAME",
    "add",
    "assign_nodes",
    "cluster_policy",
    "delete",
    "get",
    "index",
    "modify",
    "open_policy",
    "rename",
]

#: Fields of each group in ``/2/groups?bulk=1`` and ``/2/groups/[name]`` (Ganeti's list;
#: corral has no instance policies, so every group shows :func:`open_policy`).
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


#: The largest number an instance specification limit takes here (32-bit clients).
_NO_LIMIT: Final = 2**31 - 1


def open_policy(disk_templates: list[str], std: dict[str, int]) -> dict[str, Any]:
    """corral has no instance policies: what Ganeti calls the policy of a group without
    limits, for clients that need one (htools read ``ipolicy`` of every group).

    Every specification is allowed up to corral's own limits (16 disks, 8 NICs), every
    enabled disk template, and no ratio limits VCPUs or spindles in practice.
    """
    low = dict.fromkeys(("cpu-count", "disk-count", "disk-size", "memory-size",
                         "nic-count", "spindle-use"), 0)
    high = {**dict.fromkeys(low, _NO_LIMIT), "disk-count": MAX_DISKS, "nic-count": MAX_NICS}
    return {"minmax": [{"min": low, "max": high}], "std": {**low, **std},
            "disk-templates": disk_templates, "vcpu-ratio": float(_NO_LIMIT),
            "spindle-ratio": float(_NO_LIMIT)}


def cluster_policy(disk_templates: list[str], beparams: dict[str, Any]) -> dict[str, Any]:
    """:func:`open_policy` with the cluster's enabled disk templates and, as the standard
    specification, its default backend parameters (``beparams`` as the cluster has
    them: ``{"default": {...}}``)."""
    defaults = beparams.get("default", {}) if isinstance(beparams, dict) else {}
    return open_policy(list(disk_templates), {
        "cpu-count": int(defaults.get("vcpus", 1)),
        "memory-size": int(defaults.get("maxmem", 128)),
        "disk-count": 1, "disk-size": 1024, "nic-count": 1,
        "spindle-use": int(defaults.get("spindle_use", 1))})


async def _with_policy(req: RapiRequest, groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give groups without a policy (all of them, today) the open one."""
    if any(group.get("ipolicy") is None for group in groups):
        templates, beparams = await req.call(
            "QueryConfigValues", ["enabled_disk_templates", "beparams"])
        policy = cluster_policy(templates, beparams)
        for group in groups:
            if group.get("ipolicy") is None:
                group["ipolicy"] = policy
                group["custom_ipolicy"] = {}
    return groups


async def index(req: RapiRequest) -> list[dict[str, Any]]:
    """Every node group: names and URIs, or with ``bulk=1`` their fields."""
    if req.flag("bulk"):
        return await _with_policy(req, await query_rows(req, "group", GROUP_FIELDS))
    rows = await query_rows(req, "group", ["name"])
    return uri_list((row["name"] for row in rows), "/2/groups/%s", "name")


async def add(req: RapiRequest) -> int:
    """Add a node group (``OP_GROUP_ADD`` from the body); a job id."""
    return await req.submit(req.opcode("OP_GROUP_ADD", {"dry_run": req.flag("dry-run")},
                                       rename=ADD_RENAME))


async def get(req: RapiRequest) -> dict[str, Any]:
    """One node group's fields."""
    group = await query_one(req, "group", "node group", req.item("group_name"), GROUP_FIELDS)
    return (await _with_policy(req, [group]))[0]


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
