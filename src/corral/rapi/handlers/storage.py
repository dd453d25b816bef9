"""Storage: ``/2/nodes/[name]/storage`` (``/modify``, ``/repair``) and an instance's
disks: ``/recreate-disks``, ``/replace-disks``, ``/disk-status``, ``/repair-disks``.

As in Ganeti, listing a node's storage units is a job (its result holds the rows: it
asks the nodes and takes their locks), and the storage operations take their
parameters from query arguments, refusing a request without ``output_fields`` or
``name`` with Ganeti's words. ``replace-disks`` takes a body or, Ganeti's older form,
query arguments (``mode``, ``remote_node``, ``iallocator``, ``disks`` as ``0,2``).
``disk-status`` and ``repair-disks`` are corral's (design 2.1).
"""

from __future__ import annotations

from typing import Any

from corral.errors import ParameterError
from corral.rapi.request import RapiRequest

__all__ = ["disk_status", "list_storage", "modify_storage", "recreate_disks",
           "repair_disks", "repair_storage", "replace_disks"]


def _missing(name: str) -> ParameterError:
    return ParameterError(f"Missing the required '{name}' parameter")


async def list_storage(req: RapiRequest) -> int:
    """Submit ``OP_NODE_QUERY_STORAGE`` for the node; a job id."""
    fields = req.text("output_fields")
    if not fields:
        raise _missing("output_fields")
    return await req.submit(req.opcode("OP_NODE_QUERY_STORAGE", {
        "nodes": [req.item("node_name")], "storage_type": req.text("storage_type"),
        "output_fields": fields.split(",")}, from_body=False))


async def modify_storage(req: RapiRequest) -> int:
    """Submit ``OP_NODE_MODIFY_STORAGE`` (``allocatable``: 0 or 1); a job id."""
    name = req.text("name")
    if not name:
        raise _missing("name")
    changes: dict[str, Any] = {}
    if req.integer("allocatable") is not None:
        changes["allocatable"] = req.flag("allocatable")
    return await req.submit(req.opcode("OP_NODE_MODIFY_STORAGE", {
        "node_name": req.item("node_name"), "storage_type": req.text("storage_type"),
        "name": name, "changes": changes}, from_body=False))


async def repair_storage(req: RapiRequest) -> int:
    """Submit ``OP_REPAIR_NODE_STORAGE``; a job id."""
    name = req.text("name")
    if not name:
        raise _missing("name")
    return await req.submit(req.opcode("OP_REPAIR_NODE_STORAGE", {
        "node_name": req.item("node_name"), "storage_type": req.text("storage_type"),
        "name": name}, from_body=False))


async def recreate_disks(req: RapiRequest) -> int:
    """Submit ``OP_INSTANCE_RECREATE_DISKS`` (body: ``disks``, ``nodes``, ...); a job id."""
    return await req.submit(req.opcode("OP_INSTANCE_RECREATE_DISKS",
                                       {"instance_name": req.item("instance_name")}))


async def replace_disks(req: RapiRequest) -> int:
    """Submit ``OP_INSTANCE_REPLACE_DISKS`` from the body or the query arguments."""
    body = req.body_dict()
    if not body:
        body = {key: value for key in ("mode", "remote_node", "iallocator", "disks")
                if (value := req.text(key)) is not None}
    raw = body.pop("disks", None)
    if isinstance(raw, str) and raw:
        try:
            body["disks"] = [int(part) for part in raw.split(",")]
        except ValueError as err:
            raise ParameterError(f"Invalid disk index passed: {err}") from None
    elif raw:
        body["disks"] = raw
    return await req.submit(req.opcode("OP_INSTANCE_REPLACE_DISKS",
                                       {"instance_name": req.item("instance_name")},
                                       body=body))


async def disk_status(req: RapiRequest) -> int:
    """Submit ``OP_INSTANCE_DISK_STATUS``; a job id (its result holds the status)."""
    return await req.submit(req.opcode("OP_INSTANCE_DISK_STATUS",
                                       {"instance_name": req.item("instance_name")},
                                       from_body=False))


async def repair_disks(req: RapiRequest) -> int:
    """Submit ``OP_INSTANCE_REPAIR_DISKS``; a job id."""
    return await req.submit(req.opcode("OP_INSTANCE_REPAIR_DISKS", {
        "instance_name": req.item("instance_name"), "dry_run": req.flag("dry-run")},
        from_body=False))
