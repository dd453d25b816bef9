"""``gnt-cluster verify-disks``: which instances' disks need activating, which are lost.

``OP_CLUSTER_VERIFY_DISKS`` submits one ``OP_GROUP_VERIFY_DISKS`` job per node group
(or for the group named), as Ganeti does, and answers their ids; a cluster whose
instances all use ExtStorage (or that has none) gets no jobs, as in Ganeti.

``OP_GROUP_VERIFY_DISKS`` looks at the instances of the group whose disks should be
active: corral keeps them active while an instance is marked up (it records no disks
activated on their own), so those are the instances marked up. Every node holding
their disks is asked once (:mod:`corral.cmdlib.disk_status`), all at once; the answer
is Ganeti's triple:

* ``{node: error}`` for the nodes that could not tell;
* the instances with a disk that is there but not active (``activate-disks`` fixes
  them);
* ``{instance: [[node, volume], ...]}`` for disks that are missing or whose data is
  lost (a faulty LV): ``recreate-disks`` (or, with a mirror, ``replace-disks``).

The volume is ``vg/lv`` for LVM disks, as in Ganeti, and the disk's path for the
others (files, devices). Nodes are named, where Ganeti 3.0 answers their UUIDs.
"""

from __future__ import annotations

from typing import Any

from corral.cmdlib.base import LockRequest, LogicalUnit
from corral.cmdlib.common import expand_group
from corral.cmdlib.disk_status import disk_nodes, node_disk_status
from corral.locking import ALL_SET, LockLevel
from corral.objects import Disk, Instance, Node
from corral.opcodes.storage_ops import OpClusterVerifyDisks, OpGroupVerifyDisks

__all__ = ["LUClusterVerifyDisks", "LUGroupVerifyDisks", "disk_volume"]


def disk_volume(disk: Disk) -> str:
    """How verify-disks names a disk's volume: ``vg/lv`` for LVM, else its path."""
    if disk.dev_type == "plain" and len(disk.logical_id) == 2:
        return f"{disk.logical_id[0]}/{disk.logical_id[1]}"
    if len(disk.logical_id) == 2:
        return str(disk.logical_id[1])
    return disk.uuid


class LUClusterVerifyDisks(LogicalUnit[OpClusterVerifyDisks]):
    """Submit one ``OP_GROUP_VERIFY_DISKS`` job per node group."""

    OP_ID = "OP_CLUSTER_VERIFY_DISKS"
    USES_BGL = False

    def expand_names(self) -> None:
        """The group named, or every group, by name."""
        store = self.master.store
        if self.op.group_name:
            self.groups = [expand_group(store, self.op.group_name).name]
        else:
            self.groups = sorted(group.name for group in store.all("nodegroup"))

    async def execute(self) -> dict[str, Any]:
        """The jobs submitted: ``{"jobs": [[true, id] | [false, why], ...]}``."""
        store = self.master.store
        instances = store.all("instance")
        if all(inst.disk_template == "ext" for inst in instances) or self.op.dry_run:
            return {"jobs": []}
        jobs = [[OpGroupVerifyDisks(group_name=name, reason=list(self.op.reason),
                                    priority=self.op.priority,
                                    comment=f"Submitted by {self.op.OP_ID}")]
                for name in self.groups]
        submitted = await self.master.submit_jobs(jobs)
        return {"jobs": [[ok, value] for ok, value in submitted]}


class LUGroupVerifyDisks(LogicalUnit[OpGroupVerifyDisks]):
    """The disk state of a group's instances that are marked up."""

    OP_ID = "OP_GROUP_VERIFY_DISKS"

    def expand_names(self) -> None:
        """The group by name or UUID."""
        self.group = expand_group(self.master.store, self.op.group_name)
        self.op.group_name = self.group.name

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """Every node, shared: the group's instances may have disks outside it."""
        return {LockLevel.NODE: LockRequest(ALL_SET, shared=True)}

    async def execute(self) -> list[Any]:
        """``[{node: error}, [instances to activate], {instance: [[node, volume]]}]``."""
        store = self.master.store
        members = {node.uuid for node in store.all("node") if node.group == self.group.uuid}
        wanted: list[tuple[Instance, int, Disk, Node]] = []
        for inst in sorted(store.all("instance"), key=lambda i: i.name):
            if inst.primary_node not in members or inst.admin_state != "up":
                continue
            for index, disk_uuid in enumerate(inst.disks):
                disk = store.get("disk", disk_uuid)
                for node_uuid in disk_nodes(inst, disk):
                    node = store.get("node", node_uuid)
                    if node.vm_capable:
                        wanted.append((inst, index, disk, node))
        node_errors: dict[str, str] = {}
        to_activate: set[str] = set()
        missing: dict[str, list[list[str]]] = {}
        entries = await node_disk_status(self.master, wanted)
        for (inst, _index, disk, _node), entry in zip(wanted, entries, strict=True):
            if entry.state == "unknown":
                node_errors.setdefault(entry.node.name, entry.message)
            elif entry.state in ("missing", "faulty"):
                missing.setdefault(inst.name, []).append([entry.node.name, disk_volume(disk)])
            elif entry.state == "inactive":
                to_activate.add(inst.name)
        return [node_errors, sorted(to_activate), missing]


#: The logical units of this area.
UNITS: tuple[type[LogicalUnit[Any]], ...] = (LUClusterVerifyDisks, LUGroupVerifyDisks)
