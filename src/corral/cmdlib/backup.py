"""Instance exports: ``OP_BACKUP_EXPORT`` (mode ``local``), ``OP_BACKUP_QUERY`` and
``OP_BACKUP_REMOVE`` (``gnt-backup export|list|remove``). Imports are
``OP_INSTANCE_CREATE`` with ``mode=import`` (:mod:`corral.cmdlib.instance_create`).

An export streams every disk through the instance's OS ``export`` script on its
primary node to the target node's export directory (:mod:`corral.cmdlib.disk_transfer`),
then writes ``config.ini`` there (:mod:`corral.cmdlib.export_config`), as Ganeti
does, so Ganeti and corral read each other's exports. The export is written as
``<instance>.new`` and only put in place once complete; a failed export leaves the
previous one (if any) as it was and nothing half-written.

The instance is shut down for the copy unless ``shutdown`` is false (Ganeti's
``--noshutdown``, unsafe for a running instance). Where the disk template has
snapshots (``plain``: LVM snapshots) the disks are snapshotted, the instance is
started again at once and the snapshots are exported, so it is down only for
moments.
"""

from __future__ import annotations

import time
from typing import Any

from corral.cmdlib.base import LockRequest, LogicalUnit
from corral.cmdlib.common import check_node_online, expand_node
from corral.cmdlib.disk_transfer import TransferEnds, transfer_disk
from corral.cmdlib.export_config import write_export
from corral.cmdlib.instance_base import (
    RPC_QUICK,
    RPC_START,
    InstanceLU,
    call_node,
    is_running,
    remove_disks,
    wire,
)
from corral.cmdlib.instance_query import filled_beparams
from corral.errors import CorralError, OpExecError, OpPrereqError, ParameterError
from corral.impexp import DEFAULT_COMPRESSION_TOOLS, require_allowed
from corral.locking import ALL_SET, LockLevel
from corral.objects import Node
from corral.objects.specs import DiskSpec
from corral.opcodes.backup_ops import OpBackupExport, OpBackupQuery, OpBackupRemove

__all__ = ["SNAPSHOT_TEMPLATES", "UNITS", "LUBackupExport", "LUBackupQuery",
           "LUBackupRemove", "allowed_compression_tools"]

#: Disk templates whose disks are snapshotted for an export (Ganeti: LVM).
SNAPSHOT_TEMPLATES = frozenset({"plain"})


def allowed_compression_tools(lu: LogicalUnit[Any]) -> tuple[str, ...]:
    """The cluster's ``compression_tools`` (Ganeti's default list plus zstd when the
    cluster does not set its own)."""
    tools = getattr(lu.master.store.cluster, "compression_tools", None)
    return tuple(tools) if tools else DEFAULT_COMPRESSION_TOOLS


class LUBackupExport(InstanceLU[OpBackupExport]):
    """``OP_BACKUP_EXPORT``: copy an instance's disks and configuration to a node."""

    OP_ID = "OP_BACKUP_EXPORT"
    SHARED_NODES = True

    target: Node

    def check_arguments(self) -> None:
        """Local mode with a target node; an allowed compression."""
        op = self.op
        if op.mode != "local":
            raise ParameterError("only local exports (mode 'local') are implemented here; "
                                 "remote exports need prepare-export")
        if not isinstance(op.target_node, str) and not op.target_node_uuid:
            raise ParameterError("a local export needs target_node (a node name)")
        require_allowed(op.compress, allowed_compression_tools(self))

    def expand_names(self) -> None:
        """The instance and the target node."""
        super().expand_names()
        key = self.op.target_node_uuid or self.op.target_node
        if not isinstance(key, str):
            raise ParameterError("a local export needs target_node (a node name)")
        self.target = expand_node(self.master.store, key)
        self.op.target_node, self.op.target_node_uuid = self.target.name, self.target.uuid

    def extra_nodes(self) -> list[Node]:
        """The target node."""
        return [self.target]

    def check_prereq(self) -> None:
        """Disks to export, both nodes online."""
        super().check_prereq()
        inst = self.instance
        if not inst.disks:
            raise OpPrereqError(f"instance {inst.name} has no disks to export")
        check_node_online(self.primary, f"export instance {inst.name}")
        check_node_online(self.target, f"export instance {inst.name}")
        if not inst.os:
            raise OpPrereqError(f"instance {inst.name} has no OS; its export script is "
                                "what writes the disks out")

    async def execute(self) -> list[Any]:
        """Prepare the target, shut down (snapshot and restart where possible), send
        every disk, write the config, put the export in place; remove the instance
        if asked. Ganeti's answer: ``[finalized, [per-disk success]]``."""
        op, inst = self.op, self.instance
        source, target = self.primary, self.target
        disks = self.disks()
        size = sum(d.size for d in disks)
        await call_node(self.master, target, "export_prepare",
                        {"export": inst.name, "size": size},
                        f"preparing the export of {inst.name} ({size} MiB)")
        if op.dry_run:
            await self._try(target, "export_abort", {"export": inst.name}, "cleaning up")
            return [False, []]
        try:
            results = await self._export(source, target)
            config = write_export(inst, disks, source.uuid, int(time.time()),
                                  filled_beparams(self.master.store, inst, source),
                                  "none")
            self.feedback(f"Finalizing export on {target.name}")
            await call_node(self.master, target, "export_finalize",
                            {"export": inst.name, "config": config},
                            f"finalizing the export of {inst.name}")
        except BaseException:
            await self._try(target, "export_abort", {"export": inst.name},
                            "removing the unfinished export")
            raise
        await self._remove_older(target)
        if op.remove_instance:
            await self._remove_instance()
        return [True, results]

    async def _export(self, source: Node, target: Node) -> list[bool]:
        op, inst = self.op, self.instance
        was_running = is_running(await self.instance_info(source))
        snapshot = inst.disk_template in SNAPSHOT_TEMPLATES
        specs = [self.disk_spec(d, i) for i, d in enumerate(self.disks())]
        snapshots: list[DiskSpec] = []
        down = False
        if was_running and op.shutdown:
            self.feedback(f"Shutting down instance {inst.name}")
            await self.call_one(source, "instance_shutdown",
                                {"instance": self.spec(),
                                 "timeout": float(op.shutdown_timeout),
                                 "reason": op.reason},
                                f"shutting down instance {inst.name}",
                                rpc_timeout=op.shutdown_timeout + RPC_QUICK)
            down = True
        try:
            if snapshot:
                for spec in specs:
                    name = f"{spec.uuid}.snap"
                    self.feedback(f"Snapshotting disk/{spec.index}")
                    logical_id = await self.call_one(
                        source, "blockdev_snapshot",
                        {"disk": wire(spec), "name": name, "size": max(1, spec.size // 10)},
                        f"snapshotting disk/{spec.index}")
                    snapshots.append(self.disk_spec(self.disks()[spec.index], spec.index,
                                                    None, list(logical_id)))
                if down and not op.remove_instance:
                    await self._start(source)
                    down = False
            exported = snapshots or specs
            instance_spec = self.instance_spec()
            instance_spec = type(instance_spec)(**{
                **{f: getattr(instance_spec, f) for f in instance_spec.__struct_fields__},
                "disks": exported})
            results = []
            for index, spec in enumerate(exported):
                label = f"disk/{index}"
                self.feedback(f"Exporting {label} from {source.name} to {target.name}")
                ends = TransferEnds(
                    source_node=source,
                    source={"kind": "os", "instance": wire(instance_spec), "index": index,
                            "search_path": list(self.master.store.cluster.os_search_path)},
                    destination_node=target,
                    destination={"kind": "export", "export": inst.name, "file": spec.uuid},
                    compression=op.compress, expected=spec.size << 20)
                await transfer_disk(self.master, self.feedback, ends, label)
                results.append(True)
            return results
        finally:
            for snap in snapshots:
                await self._try(source, "blockdev_remove", {"disk": wire(snap)},
                                f"removing the snapshot of disk/{snap.index}")
            if down and not op.remove_instance:
                await self._start(source)

    async def _start(self, source: Node) -> None:
        self.feedback(f"Starting instance {self.instance.name}")
        try:
            await self.call_one(source, "instance_start",
                                {"instance": self.spec(), "startup_paused": False,
                                 "reason": self.op.reason},
                                f"starting instance {self.instance.name}",
                                rpc_timeout=RPC_START)
        except CorralError as err:
            raise OpExecError(f"could not start instance {self.instance.name} again after "
                              f"the export: {err.message}") from err

    async def _try(self, node: Node, procedure: str, args: dict[str, Any], what: str) -> None:
        try:
            await call_node(self.master, node, procedure, args, what)
        except CorralError as err:
            self.feedback(f" - WARNING: {err.message}")

    async def _remove_older(self, target: Node) -> None:
        """Exports of this instance on other nodes are older: removed, as Ganeti does."""
        others = [n for n in self.master.store.all("node") if n.uuid != target.uuid
                  and not n.offline]
        if not others:
            return
        results = await self.master.rpc.call(others, "export_list", {}, timeout=RPC_QUICK)
        for node in others:
            result = results[node.name]
            if not result.failed and self.instance.name in (result.payload or []):
                self.feedback(f"Removing old export of {self.instance.name} on {node.name}")
                await self._try(node, "export_remove", {"export": self.instance.name},
                                "removing an older export")

    async def _remove_instance(self) -> None:
        op, inst, node = self.op, self.instance, self.primary
        self.feedback(f"Removing instance {inst.name}")
        spec = self.instance_spec()
        try:
            await self.call_one(node, "instance_shutdown",
                                {"instance": wire(spec), "timeout": float(op.shutdown_timeout),
                                 "reason": op.reason, "forget": True},
                                f"shutting down instance {inst.name}",
                                rpc_timeout=op.shutdown_timeout + RPC_QUICK)
            await remove_disks(self, node, spec.disks, best_effort=op.ignore_remove_failures)
        except CorralError as err:
            if not op.ignore_remove_failures:
                raise OpExecError(f"the export is complete but removing instance "
                                  f"{inst.name} failed: {err.message}") from err
            self.feedback(f" - WARNING: {err.message}; removing the instance anyway")
        async with self.master.store.transaction() as txn:
            txn.remove("instance", inst.uuid)
            for disk_uuid in inst.disks:
                txn.remove("disk", disk_uuid)
        await self.master.locks.remove(LockLevel.INSTANCE, inst.name, owner=self.owner)


class LUBackupQuery(LogicalUnit[OpBackupQuery]):
    """``OP_BACKUP_QUERY``: node name → its exports (``false`` if it did not answer)."""

    OP_ID = "OP_BACKUP_QUERY"
    USES_BGL = False

    def expand_names(self) -> None:
        """The nodes asked (all when none are named)."""
        store = self.master.store
        self.nodes = [expand_node(store, n) for n in self.op.nodes] if self.op.nodes else \
            sorted(store.all("node"), key=lambda n: n.name)

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The nodes, shared, only with ``use_locking``."""
        if not self.op.use_locking:
            return {}
        return {LockLevel.NODE: LockRequest([n.name for n in self.nodes], shared=True)}

    async def execute(self) -> dict[str, Any]:
        """Ask every node for its export list."""
        online = [n for n in self.nodes if not n.offline]
        results = await self.master.rpc.call(online, "export_list", {}, timeout=RPC_QUICK)
        answer: dict[str, Any] = {}
        for node in self.nodes:
            result = results.get(node.name)
            answer[node.name] = False if result is None or result.failed else \
                list(result.payload or [])
        return answer


class LUBackupRemove(LogicalUnit[OpBackupRemove]):
    """``OP_BACKUP_REMOVE``: remove an instance's exports from every node."""

    OP_ID = "OP_BACKUP_REMOVE"

    def expand_names(self) -> None:
        """The export's name: the instance's name, if there is such an instance."""
        store = self.master.store
        found = store.find("instance", self.op.instance_name)
        self.name = found.name if found is not None else self.op.instance_name

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """Every node, shared."""
        return {LockLevel.NODE: LockRequest(ALL_SET, shared=True)}

    async def execute(self) -> None:
        """Remove the export wherever it is; say so when it is nowhere."""
        nodes = [n for n in self.master.store.all("node") if not n.offline]
        results = await self.master.rpc.call(nodes, "export_remove", {"export": self.name},
                                             timeout=RPC_QUICK)
        removed = [name for name, r in results.items() if not r.failed and r.payload]
        errors = [r.error.message for r in results.values() if r.error is not None]
        for error in errors:
            self.feedback(f" - WARNING: {error}")
        if not removed:
            self.feedback("Export not found. If trying to remove an export belonging to a "
                          "deleted instance please use its Fully Qualified Domain Name.")


#: The logical units of this area.
UNITS: tuple[type[LogicalUnit[Any]], ...] = (LUBackupExport, LUBackupQuery, LUBackupRemove)
