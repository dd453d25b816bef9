"""``/2/instances/[name]/prepare-export``: the first step of an inter-cluster move.

As in Ganeti's RAPI, the mode comes from the ``mode`` query argument (``local`` or
``remote``) and the body is not read; the job's result holds the signed key name,
certificate and handshake (see :mod:`corral.cmdlib.backup_prepare`).
"""

from __future__ import annotations

from corral.rapi.request import RapiRequest

__all__ = ["prepare_export"]


async def prepare_export(req: RapiRequest) -> int:
    """Submit ``OP_BACKUP_PREPARE``; a job id."""
    return await req.submit(req.opcode("OP_BACKUP_PREPARE", {
        "instance_name": req.item("instance_name"), "mode": req.text("mode")},
        from_body=False))
