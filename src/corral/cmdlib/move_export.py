"""The source's part of an inter-cluster move: the disks of ``OP_BACKUP_EXPORT`` mode
``remote`` (design 2.2).

:func:`remote_export_prereq` checks, before anything is stopped or sent, what the
third party brought: this cluster's key name, the destination's signed certificate
and each disk's signed destination (:mod:`corral.cmdlib.move_checks`).
:func:`send_disks` then streams each disk from the instance's primary node
(``move_export``: the OS ``export`` script's output, or the disk itself for an
instance without OS, through the transport of :mod:`corral.noded.impexp` with the
move key made by ``prepare-export`` and the destination's certificate as the one CA
it trusts) to the importer the destination started, one disk after the other, with
progress in the job log. The move key is removed after the last disk, whatever
happened.

:class:`LUBackupExportAnywhere` is the logical unit of ``OP_BACKUP_EXPORT``: mode
``local`` is :class:`corral.cmdlib.backup.LUBackupExport`'s; mode ``remote`` checks,
stops the instance (``shutdown``, the default; ``shutdown_timeout``), sends the disks,
then removes the instance (``remove_instance``, what ``move-instance`` asks unless
``--keep-source-instance``) or starts it again if it ran. Its answer is Ganeti's
``[true, [per-disk success]]``. A failed transfer fails the job naming the disk and
the bytes sent; the instance is started again if it ran and is not removed.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from corral.cmdlib import disk_transfer
from corral.cmdlib.backup import LUBackupExport, allowed_compression_tools
from corral.cmdlib.backup_prepare import read_domain_secret
from corral.cmdlib.base import LogicalUnit
from corral.cmdlib.common import check_node_online
from corral.cmdlib.instance_base import RPC_QUICK, InstanceLU, call_node, is_running, wire
from corral.cmdlib.move_checks import RemoteExportTarget, check_remote_export
from corral.errors import CorralError, OpPrereqError, ParameterError
from corral.impexp import require_allowed
from corral.objects import Node
from corral.objects.specs import InstanceSpec
from corral.opcodes.backup_ops import OpBackupExport

__all__ = ["LUBackupExportAnywhere", "remote_export_prereq", "send_disks"]


async def remote_export_prereq(lu: LogicalUnit[Any], instance_name: str,
                               disk_count: int) -> RemoteExportTarget:
    """Check the destination values of a remote export (see the module doc)."""
    op = lu.op
    secret = await read_domain_secret(lu.master.paths or getattr(lu.master.rpc, "paths", None))
    return check_remote_export(secret, instance_name, disk_count, op.x509_key_name,
                               op.destination_x509_ca, op.target_node)


async def send_disks(lu: LogicalUnit[Any], node: Node, spec: InstanceSpec,
                     target: RemoteExportTarget, compression: str) -> list[bool]:
    """Send every disk of ``spec`` from ``node``, one after the other; one success
    flag per disk (Ganeti's per-disk results). A failed disk stops the export: its
    transfer is aborted and the error (:class:`~corral.errors.OpExecError` with the
    bytes sent) raised. The move key is removed at the end in every case."""
    master = lu.master
    results = [False] * len(spec.disks)
    search_path = list(master.store.cluster.os_search_path)
    try:
        for index, (host, port, magic) in enumerate(target.disks):
            disk = spec.disks[index]
            name = f"{spec.name}-export-{secrets.token_hex(6)}-{index}"
            source: dict[str, Any] = (
                {"kind": "os", "instance": wire(spec), "index": index,
                 "search_path": search_path} if spec.os else
                {"kind": "disk", "disk": wire(disk)})
            label = f"disk/{index}"
            try:
                await call_node(master, node, "move_export", {
                    "x509_key_name": target.key_name, "peer_ca": target.ca_pem,
                    "transfer": {"name": name, "magic": magic, "compression": compression,
                                 "source": source, "host": host, "port": port,
                                 "expected": disk.size * 1024 * 1024}},
                    f"{label}: starting the export to {host}:{port}")
                lu.feedback(f"{label}: sending to {host} port {port}")
                final = await disk_transfer.follow(master, lu.feedback, [node], name, label)
            except BaseException:
                await asyncio.shield(disk_transfer.abort(master, [node], name))
                raise
            lu.feedback(f"{label}: {int(final.get('bytes') or 0)} bytes sent "
                        f"({int(final.get('wire_bytes') or 0)} on the wire, {compression})")
            results[index] = True
    finally:
        try:
            await call_node(master, node, "x509_cert_remove", {"name": target.key_name},
                            f"removing the X509 key {target.key_name} on {node.name}")
        except CorralError as err:
            lu.feedback(f" - WARNING: {err.message}; the watcher removes it once expired")
    return results


class LUBackupExportAnywhere(LUBackupExport):
    """``OP_BACKUP_EXPORT`` in both modes (see the module doc)."""

    OP_ID = "OP_BACKUP_EXPORT"

    def _remote(self) -> bool:
        return self.op.mode == "remote"

    def check_arguments(self) -> None:
        """Remote: the destination list and an allowed compression."""
        if not self._remote():
            super().check_arguments()
            return
        op: OpBackupExport = self.op
        if not isinstance(op.target_node, list):
            raise ParameterError(
                "a remote export needs target_node (RAPI: destination): the list of the "
                "destination's disk answers, [host, port, magic, hmac, salt] per disk")
        require_allowed(op.compress, allowed_compression_tools(self))

    def expand_names(self) -> None:
        """Remote: the instance only (the target is another cluster)."""
        if not self._remote():
            super().expand_names()
            return
        InstanceLU.expand_names(self)

    def extra_nodes(self) -> list[Node]:
        """Remote: no node of this cluster besides the primary."""
        return [] if self._remote() else super().extra_nodes()

    def check_prereq(self) -> None:
        """Remote: disks to send, the primary node online."""
        if not self._remote():
            super().check_prereq()
            return
        InstanceLU.check_prereq(self)
        inst = self.instance
        if not inst.disks:
            raise OpPrereqError(f"instance {inst.name} has no disks to export")
        check_node_online(self.primary, f"export instance {inst.name}")

    async def execute(self) -> list[Any]:
        """Remote: check, stop, send, then remove or restart (see the module doc)."""
        if not self._remote():
            return await super().execute()
        op, inst, source = self.op, self.instance, self.primary
        target = await remote_export_prereq(self, inst.name, len(inst.disks))
        if op.dry_run:
            return [False, []]
        was_running = is_running(await self.instance_info(source))
        if was_running and op.shutdown:
            self.feedback(f"Shutting down instance {inst.name}")
            await self.call_one(source, "instance_shutdown",
                                {"instance": self.spec(), "timeout": float(op.shutdown_timeout),
                                 "reason": op.reason},
                                f"shutting down instance {inst.name}",
                                rpc_timeout=op.shutdown_timeout + RPC_QUICK)
        down = was_running and op.shutdown
        try:
            results = await send_disks(self, source, self.instance_spec(), target, op.compress)
        except BaseException:
            if down:
                await asyncio.shield(self._start(source))
            raise
        if op.remove_instance:
            await self._remove_instance()
        elif down:
            await self._start(source)
        return [True, results]
