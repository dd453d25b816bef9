"""An instance's disks when something went wrong: their status, recreating lost ones,
replacing from a mirror, and the "repair instance" operation (design 2.1).

* ``OP_INSTANCE_DISK_STATUS`` (corral's): each disk index and node with its status
  (:mod:`corral.cmdlib.disk_status`).
* ``OP_INSTANCE_RECREATE_DISKS`` (Ganeti's): make disks again, empty, where they were
  lost: on the instance's node, or on ``nodes`` (a new primary, when the old one
  failed: the disks left there are not removed, as Ganeti warns). Ganeti creates
  every disk it is given and fails on one that exists; corral checks first and
  refuses a disk that still holds data on the target node (only missing disks are
  made, and faulty ones are removed and made again), so that a typo cannot wipe a
  good disk.
* ``OP_INSTANCE_REPLACE_DISKS`` (Ganeti's): only internally mirrored templates (DRBD)
  have a copy to replace a disk from; for the others it is refused with Ganeti's
  words and a hint.
* ``OP_INSTANCE_REPAIR_DISKS`` (corral's, design 2.1's "repair instance"): fixes what
  can be fixed while the instance keeps a good copy: disks that are there but not
  active are activated on their node; a faulty or missing half of a mirror would be
  replaced from the good half (replace-disks on that side). A disk with no good copy
  left is not touched: the job fails naming it and saying that ``recreate-disks``
  makes it again, empty.
"""

from __future__ import annotations

from typing import Any

import msgspec

from corral.cmdlib.base import LockRequest
from corral.cmdlib.common import check_node_online, expand_node
from corral.cmdlib.disk_layout import check_space, filled_disk_spec, logical_id_on_node
from corral.cmdlib.disk_status import (
    DiskStatusEntry,
    instance_disk_status,
    node_disk_status,
)
from corral.cmdlib.instance_base import RPC_START, InstanceLU, is_running
from corral.errors import OpExecError, OpPrereqError, ParameterError
from corral.locking import LockLevel
from corral.objects import Disk, Instance, Node
from corral.objects.disk_templates import template
from corral.objects.params import parse_size
from corral.opcodes.storage_ops import (
    OpInstanceDiskStatus,
    OpInstanceRecreateDisks,
    OpInstanceRepairDisks,
    OpInstanceReplaceDisks,
)

__all__ = [
    "LUInstanceDiskStatus",
    "LUInstanceRecreateDisks",
    "LUInstanceRepairDisks",
    "LUInstanceReplaceDisks",
]

#: Disk parameters ``recreate-disks`` may change (Ganeti's).
RECREATE_CHANGEABLE = frozenset({"size", "mode", "spindles"})


class LUInstanceDiskStatus(InstanceLU[OpInstanceDiskStatus]):
    """Each disk index and node of the instance with its status."""

    OP_ID = "OP_INSTANCE_DISK_STATUS"
    SHARED_INSTANCE = True
    SHARED_NODES = True

    def extra_nodes(self) -> list[Node]:
        """The other nodes holding the instance's disks."""
        return _disk_nodes(self)

    async def execute(self) -> list[dict[str, Any]]:
        """One entry per disk and node, by disk index."""
        entries = await instance_disk_status(self.master, self.instance)
        return [entry.to_dict() for entry in entries]


def _disk_nodes(lu: InstanceLU[Any]) -> list[Node]:
    store = lu.master.store
    uuids = {uuid for disk in lu.disks() for uuid in disk.nodes}
    uuids.discard(lu.instance.primary_node)
    return [store.get("node", uuid) for uuid in sorted(uuids)]


# -- recreate ----------------------------------------------------------------------


class LUInstanceRecreateDisks(InstanceLU[OpInstanceRecreateDisks]):
    """Make lost disks again, empty, on the instance's node or on a new one."""

    OP_ID = "OP_INSTANCE_RECREATE_DISKS"

    new_nodes: list[Node]

    def check_arguments(self) -> None:
        """Disks named once, changes only of size, mode and spindles."""
        op = self.op
        if op.iallocator:
            raise ParameterError("instance allocators are not available for recreate-disks; "
                                 "name the node with nodes (-n NODE)")
        self.changes: dict[int, dict[str, Any]] = {}
        for entry in op.disks:
            index, params = (entry, {}) if isinstance(entry, int) else entry
            if not isinstance(index, int) or isinstance(index, bool) or index < 0:
                raise ParameterError(f"Invalid disk index '{index}'")
            if index in self.changes:
                raise ParameterError(f"Some disks have been specified more than once: {index}")
            unsupported = sorted(set(params) - RECREATE_CHANGEABLE)
            if unsupported:
                raise ParameterError(f"Parameters for disk {index} try to change "
                                     f"unmodifyable parameter(s): {', '.join(unsupported)}")
            parsed = dict(params)
            if "size" in parsed:
                parsed["size"] = parse_size(parsed["size"])
            if parsed.get("mode") not in (None, "rw", "ro"):
                raise ParameterError(f"invalid disk mode {parsed['mode']!r}; valid: rw, ro")
            self.changes[index] = parsed

    def expand_names(self) -> None:
        """The instance and the new nodes, if any."""
        super().expand_names()
        store = self.master.store
        keys = self.op.node_uuids or self.op.nodes
        self.new_nodes = [expand_node(store, key) for key in keys]
        self.op.nodes = [node.name for node in self.new_nodes]
        self.op.node_uuids = [node.uuid for node in self.new_nodes] or None

    def extra_nodes(self) -> list[Node]:
        """The new nodes and the other nodes of the disks."""
        return [*self.new_nodes, *_disk_nodes(self)]

    def check_prereq(self) -> None:
        """Disks to recreate exist in the configuration; the instance is stopped
        (unless its old primary is offline and nodes change); one new node per
        node the instance has."""
        super().check_prereq()
        inst = self.instance
        disks = self.disks()
        nodes = {inst.primary_node} | {uuid for disk in disks for uuid in disk.nodes}
        if self.new_nodes and len(self.new_nodes) != len(nodes):
            raise ParameterError(f"Instance {inst.name} currently has {len(nodes)} nodes, "
                                 f"but {len(self.new_nodes)} replacement nodes were "
                                 "specified")
        self.target = self.new_nodes[0] if self.new_nodes else self.primary
        check_node_online(self.target, f"recreate the disks of {inst.name}")
        if not disks:
            raise OpPrereqError(f"Instance '{inst.name}' has no disks", ecode="wrong_input")
        wanted = sorted(self.changes) if self.changes else list(range(len(disks)))
        if wanted[-1] >= len(disks):
            raise ParameterError(f"Invalid disk index '{wanted[-1]}'\ninstance {inst.name} "
                                 f"has disks 0 to {len(disks) - 1}")
        if self.new_nodes and wanted != list(range(len(disks))):
            raise ParameterError("Can't recreate disks partially and change the nodes at "
                                 "the same time")
        self.wanted = wanted
        self.moving = bool(self.new_nodes) and self.target.uuid != inst.primary_node
        if not (self.moving and self.primary.offline) and inst.admin_state == "up":
            raise OpPrereqError(f"Instance '{inst.name}' is marked to be up, cannot "
                                "recreate disks")

    async def execute(self) -> None:
        """Check the target, make the disks, record sizes and the new node."""
        inst, target = self.instance, self.target
        if not (self.moving and self.primary.offline) and not self.primary.offline \
                and is_running(await self.instance_info(self.primary)):
            raise OpPrereqError(f"Instance {inst.name} is running, cannot recreate disks")
        disks = self.disks()
        plan: list[tuple[int, Disk, list[str]]] = []
        for index in self.wanted:
            disk = msgspec.structs.replace(disks[index], params=dict(disks[index].params))
            changes = self.changes.get(index, {})
            disk.size = changes.get("size", disk.size)
            disk.mode = changes.get("mode", disk.mode)
            disk.spindles = changes.get("spindles", disk.spindles)
            new_id = (logical_id_on_node(self.master.store, inst, disk, index)
                      if self.moving else list(disk.logical_id))
            plan.append((index, disk, new_id))
        faulty = await self._check_target(plan)
        creating = [(index, msgspec.structs.replace(disk, logical_id=new_id))
                    for index, disk, new_id in plan]
        # Sparse files larger than the free space are only a warning here, as they are
        # with --ignore-ipolicy at creation: the disks existed before. Volumes must fit.
        await check_space(self, target, inst.hypervisor, inst.name,
                          [(i, d) for i, d in creating if i not in faulty],
                          forced=True, override="")
        if self.op.dry_run:
            return
        if self.moving:
            self.feedback(" - WARNING: Changing the instance's nodes, you will have to "
                          "remove any disks left on the older nodes manually")
        created: list[Any] = []
        try:
            for index, disk in creating:
                spec = filled_disk_spec(self.master.store, disk, index, target)
                wire = msgspec.to_builtins(spec)
                if index in faulty:
                    self.feedback(f" - INFO: removing the faulty disk/{index} on node "
                                  f"{target.name}")
                    await self.call_one(target, "blockdev_remove", {"disk": wire},
                                        f"removing disk {index} of instance {inst.name}")
                self.feedback(f"Creating disk {index} ({disk.size} MiB) on {target.name}")
                await self.call_one(target, "blockdev_create", {"disk": wire},
                                    f"creating disk {index} of instance {inst.name}",
                                    rpc_timeout=RPC_START)
                created.append(wire)
        except BaseException:
            for wire in created:
                await self.try_call(target, "blockdev_remove", {"disk": wire},
                                    "removing a disk made before the failure")
            raise
        made = {disk.uuid: (disk, new_id) for _index, disk, new_id in plan}
        target_uuid = target.uuid

        def change(instance: Instance) -> None:
            instance.primary_node = target_uuid

        def record(disk: Disk) -> None:
            if disk.uuid in made:
                new, new_id = made[disk.uuid]
                disk.size, disk.mode, disk.spindles = new.size, new.mode, new.spindles
                disk.logical_id = new_id
            if self.moving:
                disk.nodes = [target_uuid]

        await self.update_instance(change if self.moving else (lambda _i: None), record)

    async def _check_target(self, plan: list[tuple[int, Disk, list[str]]]) -> set[int]:
        """Refuse disks that hold data on the target; answer the faulty ones."""
        inst, target = self.instance, self.target
        wanted = [(inst, index, msgspec.structs.replace(disk, logical_id=new_id), target)
                  for index, disk, new_id in plan]
        entries: list[DiskStatusEntry] = await node_disk_status(self.master, wanted)
        faulty: set[int] = set()
        for entry in entries:
            if entry.state == "faulty":
                faulty.add(entry.index)
            elif entry.state == "unknown":
                raise OpPrereqError(f"cannot tell whether disk/{entry.index} of instance "
                                    f"{inst.name} exists on node {target.name}: "
                                    f"{entry.message}")
            elif entry.state != "missing":
                raise OpPrereqError(
                    f"disk/{entry.index} of instance {inst.name} exists on node "
                    f"{target.name} ({entry.state}): recreate-disks makes lost disks and "
                    "would wipe it; remove it first, or name only the lost disks with "
                    "--disk")
        return faulty


# -- replace -------------------------------------------------------------------------


class LUInstanceReplaceDisks(InstanceLU[OpInstanceReplaceDisks]):
    """Replace disks from their mirror: only internally mirrored templates have one."""

    OP_ID = "OP_INSTANCE_REPLACE_DISKS"

    def check_arguments(self) -> None:
        """Ganeti's rules for the mode and the new secondary."""
        op = self.op
        if op.mode == "replace_new_secondary":
            if not (op.remote_node or op.remote_node_uuid or op.iallocator):
                raise ParameterError("When changing the secondary either an iallocator "
                                     "script must be used or the new node given")
        elif op.remote_node or op.remote_node_uuid or op.iallocator:
            raise ParameterError("The iallocator and new node options can only be used "
                                 "when changing the secondary node")

    def check_prereq(self) -> None:
        """The instance has a mirror (one secondary node)."""
        super().check_prereq()
        inst = self.instance
        row = template(inst.disk_template)
        if row is None or not row.mirrored:
            secondaries = len(_disk_nodes(self))
            raise OpPrereqError(
                f"The instance has a strange layout, expected one secondary but found "
                f"{secondaries}\ninstance {inst.name} has disk template "
                f"{inst.disk_template}, which keeps no mirror to replace disks from "
                "(replace-disks works on internally mirrored templates, drbd); use "
                "'gnt-instance recreate-disks' for lost disks", ecode="internal_error")
        raise OpPrereqError(f"disk template {inst.disk_template} is not available on "
                            "this cluster")

    async def execute(self) -> None:
        """Never reached: every template corral has was refused."""
        raise OpExecError("replace-disks has nothing to do")


# -- repair --------------------------------------------------------------------------


class LUInstanceRepairDisks(InstanceLU[OpInstanceRepairDisks]):
    """Fix what is broken in an instance's disks while it keeps a good copy."""

    OP_ID = "OP_INSTANCE_REPAIR_DISKS"

    def extra_nodes(self) -> list[Node]:
        """The other nodes holding the instance's disks."""
        return _disk_nodes(self)

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The instance and its nodes, exclusively (disks are changed there)."""
        return super().declare_locks()

    async def execute(self) -> list[list[Any]]:
        """The repairs made: ``[[disk index, node, action], ...]``; a disk that cannot
        be repaired fails the job (after the others were repaired)."""
        inst = self.instance
        entries = await instance_disk_status(self.master, inst)
        row = template(inst.disk_template)
        mirrored = row is not None and row.mirrored
        lost: list[str] = []
        to_activate: dict[str, tuple[Node, list[DiskStatusEntry]]] = {}
        for entry in entries:
            where = f"disk/{entry.index} on node {entry.node.name}"
            if entry.state == "ok":
                continue
            if entry.state == "inactive":
                to_activate.setdefault(entry.node.name, (entry.node, []))[1].append(entry)
            elif entry.state in ("offline", "unknown"):
                lost.append(f"{where}: its state cannot be told ({entry.message})")
            elif not mirrored:
                lost.append(f"{where} is {entry.state} and disk template "
                            f"{inst.disk_template} keeps no other copy of it: its data is "
                            f"lost; 'gnt-instance recreate-disks --disk={entry.index} "
                            f"{inst.name}' makes it again, empty")
            else:
                lost.append(f"{where} is {entry.state}: replacing a mirror half needs "
                            "'gnt-instance replace-disks'")
        if self.op.dry_run:
            return []
        done: list[list[Any]] = []
        for _name, (node, items) in sorted(to_activate.items()):
            specs = [msgspec.to_builtins(self.disk_spec(e.disk, e.index, node))
                     for e in items]
            self.feedback(f"Activating disk(s) {', '.join(str(e.index) for e in items)} "
                          f"of instance {inst.name} on node {node.name}")
            await self.call_one(node, "blockdev_assemble", {"disks": specs},
                                f"activating the disks of instance {inst.name}")
            done.extend([e.index, node.name, "activated"] for e in items)
        if lost:
            raise OpExecError(f"instance {inst.name} has disks that cannot be repaired:\n"
                              + "\n".join(f"  {line}" for line in lost))
        if not done:
            self.feedback(f"The disks of instance {inst.name} need no repair")
        return done


#: The logical units of this area.
UNITS: tuple[type[Any], ...] = (LUInstanceDiskStatus, LUInstanceRecreateDisks,
                                LUInstanceReplaceDisks, LUInstanceRepairDisks)
