"""The status of an instance's disks, per disk and node (design 2.1, "Instance disk status").

Each node that holds disks of the instance is asked once (``blockdev_find`` with
every disk it holds; the LVM driver answers all of a node's volumes from one
``lvs``), concurrently. A disk on a node is then one of:

``ok``
    there, usable, not degraded;
``inactive``
    there but not active (an LV not activated): ``activate-disks`` makes it usable;
``degraded``
    there but lacking redundancy (a mirror half is syncing or gone);
``faulty``
    there but its data is (partly) lost: an LV whose physical volume vanished;
``missing``
    not there at all;
``offline``
    on a node marked offline, which is not asked;
``unknown``
    the node did not answer (the entry says why).

The repairs (:mod:`corral.cmdlib.instance_repair`) and ``gnt-cluster verify-disks``
(:mod:`corral.cmdlib.verify_disks`) decide from these entries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from corral.cmdlib.common import disk_node_spec
from corral.errors import OpPrereqError
from corral.objects import Disk, Instance, Node
from corral.storage.base import LDISK_CODES

if TYPE_CHECKING:
    from corral.cmdlib.base import MasterContext

__all__ = [
    "SYNC_POLL",
    "DiskState",
    "DiskStatusEntry",
    "disk_nodes",
    "faulty_disks",
    "ganeti_status",
    "instance_disk_status",
    "node_disk_status",
    "wait_for_sync",
]

DiskState = Literal["ok", "inactive", "degraded", "faulty", "missing", "offline", "unknown"]

#: How long a node may take to look its disks up, in seconds.
STATUS_TIMEOUT = 60.0
#: Seconds between two looks at a resynchronisation in progress.
SYNC_POLL = 2.0


@dataclass(frozen=True)
class DiskStatusEntry:
    """One disk of an instance on one node."""

    index: int
    disk: Disk
    node: Node
    state: DiskState
    status: dict[str, Any] | None = None
    """The node's :class:`~corral.storage.DiskStatus` (None when missing or not asked)."""
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The entry as ``OP_INSTANCE_DISK_STATUS`` answers it."""
        status = self.status or {}
        return {
            "index": self.index, "iv_name": self.disk.iv_name or f"disk/{self.index}",
            "uuid": self.disk.uuid, "dev_type": self.disk.dev_type, "node": self.node.name,
            "status": self.state, "dev_path": status.get("dev_path"),
            "major": status.get("major"), "minor": status.get("minor"),
            "sync_percent": status.get("sync_percent"),
            "estimated_time": status.get("estimated_time"),
            "is_degraded": status.get("is_degraded"),
            "ldisk_status": status.get("ldisk_status"), "message": self.message,
        }


def disk_nodes(instance: Instance, disk: Disk) -> list[str]:
    """UUIDs of the nodes that hold ``disk``'s data (its primary first)."""
    nodes = [instance.primary_node]
    nodes.extend(uuid for uuid in disk.nodes if uuid != instance.primary_node)
    return nodes


def _state(status: dict[str, Any] | None) -> DiskState:
    if status is None:
        return "missing"
    if status.get("ldisk_status") == "faulty":
        return "faulty"
    if status.get("is_degraded"):
        return "degraded"
    if not status.get("active", True):
        return "inactive"
    return "ok"


async def node_disk_status(master: MasterContext,
                           wanted: Sequence[tuple[Instance, int, Disk, Node]]
                           ) -> list[DiskStatusEntry]:
    """The status of each ``(instance, index, disk, node)``: one ``blockdev_find``
    per node, all nodes at once; entries in the order given."""
    by_node: dict[str, list[int]] = {}
    nodes: dict[str, Node] = {}
    entries: list[DiskStatusEntry | None] = [None] * len(wanted)
    for position, (_inst, index, disk, node) in enumerate(wanted):
        if node.offline:
            entries[position] = DiskStatusEntry(index, disk, node, "offline",
                                                message=f"node {node.name} is offline")
            continue
        by_node.setdefault(node.name, []).append(position)
        nodes[node.name] = node

    def args(node: Node) -> dict[str, Any]:
        specs = [disk_node_spec(master.store, wanted[p][2], wanted[p][1], node)
                 for p in by_node[node.name]]
        return {"disks": [msgspec.to_builtins(spec) for spec in specs]}

    results = await master.rpc.call(list(nodes.values()), "blockdev_find", args,
                                    timeout=STATUS_TIMEOUT) if nodes else {}
    for name, positions in by_node.items():
        result = results[name]
        payload = result.payload
        answered = (not result.failed and isinstance(payload, list)
                    and len(payload) == len(positions))
        for offset, position in enumerate(positions):
            _inst, index, disk, node = wanted[position]
            if not answered:
                message = (result.error.message if result.error
                           else f"node {name} answered {payload!r}")
                entries[position] = DiskStatusEntry(index, disk, node, "unknown",
                                                    message=message)
                continue
            status = payload[offset] if isinstance(payload[offset], dict) else None
            entries[position] = DiskStatusEntry(index, disk, node, _state(status), status)
    return [entry for entry in entries if entry is not None]


async def instance_disk_status(master: MasterContext, instance: Instance
                               ) -> list[DiskStatusEntry]:
    """Every disk of ``instance`` on every node holding it, by disk index then node."""
    store = master.store
    wanted: list[tuple[Instance, int, Disk, Node]] = []
    for index, disk_uuid in enumerate(instance.disks):
        disk = store.get("disk", disk_uuid)
        for node_uuid in disk_nodes(instance, disk):
            wanted.append((instance, index, disk, store.get("node", node_uuid)))
    return await node_disk_status(master, wanted)


async def faulty_disks(master: MasterContext, instance: Instance, node: Node) -> list[int]:
    """Indexes of ``instance``'s disks whose data on ``node`` is faulty or missing
    (Ganeti's ``FindFaultyInstanceDisks``, which lets a missing copy pass: here it
    counts, since neither is a copy to rely on); a node that cannot tell raises."""
    entries = [e for e in await instance_disk_status(master, instance)
               if e.node.uuid == node.uuid]
    for entry in entries:
        if entry.state == "unknown":
            raise OpPrereqError(f"Failed to get disk status from node {node.name}: "
                                f"{entry.message}")
    return [entry.index for entry in entries if entry.state in ("faulty", "missing")]


def ganeti_status(entry: DiskStatusEntry) -> list[Any] | None:
    """The entry as Ganeti's ``pstatus``/``sstatus`` of ``OP_INSTANCE_QUERY_DATA``:
    ``[dev_path, major, minor, sync_percent, estimated_time, is_degraded,
    ldisk_status]`` (the local disk status as Ganeti's number), or None when the
    disk is not there or the node was not asked."""
    status = entry.status
    if status is None:
        return None
    return [status.get("dev_path"), status.get("major"), status.get("minor"),
            status.get("sync_percent"), status.get("estimated_time"),
            bool(status.get("is_degraded")),
            LDISK_CODES.get(str(status.get("ldisk_status")), LDISK_CODES["unknown"])]


async def wait_for_sync(master: MasterContext, instance: Instance,
                        feedback: Callable[[str], Any]) -> bool:
    """Wait until no disk of ``instance`` is resynchronising on its primary node,
    reporting the progress in Ganeti's words; whether the disks are in sync (a
    degraded disk left over is not). Disks that never resync (every template but a
    mirrored one) are in sync at once."""
    feedback(f" - INFO: Waiting for instance {instance.name} to sync disks")
    while True:
        entries = [e for e in await instance_disk_status(master, instance)
                   if e.node.uuid == instance.primary_node]
        syncing = [e for e in entries
                   if e.status is not None and e.status.get("sync_percent") is not None]
        if not syncing:
            break
        for entry in syncing:
            assert entry.status is not None
            eta = entry.status.get("estimated_time")
            left = f"{eta}s" if eta else "unknown time"
            feedback(f" - INFO: - device {entry.disk.iv_name}: "
                     f"{float(entry.status['sync_percent']):5.2f}% done, {left} remaining "
                     "(estimated)")
        await asyncio.sleep(SYNC_POLL)
    degraded = [e for e in entries if e.state in ("degraded", "faulty", "missing")]
    if degraded:
        feedback(f" - WARNING: Instance {instance.name}'s disks are degraded: "
                 + ", ".join(f"{e.disk.iv_name} ({e.state})" for e in degraded))
        return False
    feedback(f" - INFO: Instance {instance.name}'s disks are in sync")
    return True
