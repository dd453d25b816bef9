"""``/2/instances/[name]/prepare-export`` and ``/2/instances/[name]/export``: exports,
the first and the last step of an inter-cluster move on the source cluster.

As in Ganeti's RAPI, the mode comes from the ``mode`` query argument (``local`` or
``remote``) and the body is not read; the job's result holds the signed key name,
certificate and handshake (see :mod:`corral.cmdlib.backup_prepare`).
"""

from __future__ import annotations

from corral.rapi.request import RapiRequest

__all__ = ["EXPORT_RENAME", "export", "prepare_export"]

#: Body keys of ``PUT .../export`` that fill an opcode parameter of another name
#: (Ganeti's: the destination is the opcode's ``target_node``).
EXPORT_RENAME = {"destination": "target_node"}


async def prepare_export(req: RapiRequest) -> int:
    """Submit ``OP_BACKUP_PREPARE``; a job id."""
    return await req.submit(req.opcode("OP_BACKUP_PREPARE", {
        "instance_name": req.item("instance_name"), "mode": req.text("mode")},
        from_body=False))


async def export(req: RapiRequest) -> int:
    """Submit ``OP_BACKUP_EXPORT`` from the body (``mode`` local with ``destination``
    a node name, or remote with ``destination`` the destination's disk answers,
    ``x509_key_name`` and ``destination_x509_ca``); a job id."""
    return await req.submit(req.opcode("OP_BACKUP_EXPORT", {
        "instance_name": req.item("instance_name"), "dry_run": req.flag("dry-run")},
        rename=EXPORT_RENAME))
