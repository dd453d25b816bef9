"""Disks of an existing instance: activate, deactivate, grow (the templates that can).

Growing asks the primary node for a dry run first (it refuses an amount larger than
the free space of the disk's file system), then grows and records the new size.
"""

from __future__ import annotations

import msgspec

from corral.cmdlib.common import check_node_online
from corral.cmdlib.instance_base import InstanceLU, is_running
from corral.cmdlib.ipolicy import group_ipolicy
from corral.errors import OpExecError, OpPrereqError
from corral.objects import Disk, Instance
from corral.objects.disk_templates import template
from corral.objects.ipolicy import spec_violations
from corral.opcodes.instance_change_ops import (
    OpInstanceActivateDisks,
    OpInstanceDeactivateDisks,
    OpInstanceGrowDisk,
)

__all__ = ["LUInstanceActivateDisks", "LUInstanceDeactivateDisks", "LUInstanceGrowDisk"]


class LUInstanceActivateDisks(InstanceLU[OpInstanceActivateDisks]):
    """Make the instance's disks available on its primary node."""

    OP_ID = "OP_INSTANCE_ACTIVATE_DISKS"

    def check_prereq(self) -> None:
        """The primary node is online."""
        super().check_prereq()
        check_node_online(self.primary, f"activate the disks of {self.instance.name}")

    async def execute(self) -> list[list[str]] | None:
        """``blockdev_assemble`` → ``[node, iv_name, path]`` per disk."""
        disks = self.disks()
        if self.op.dry_run:
            return None
        if not disks:
            return []
        primary = self.primary
        specs = [msgspec.to_builtins(self.disk_spec(d, i)) for i, d in enumerate(disks)]
        paths = await self.call_one(primary, "blockdev_assemble", {"disks": specs},
                                    f"activating the disks of instance {self.instance.name}")
        if not isinstance(paths, list) or len(paths) != len(disks):
            raise OpPrereqError(f"node {primary.name} answered {paths!r} to activating "
                                f"{len(disks)} disks")
        if self.op.wait_for_sync:
            from corral.cmdlib.disk_status import wait_for_sync
            if not await wait_for_sync(self.master, self.instance, self.feedback):
                raise OpExecError("Can't activate the disks of instance "
                                  f"{self.instance.name}: they are degraded")
        return [[primary.name, d.iv_name or f"disk/{i}", str(path)]
                for i, (d, path) in enumerate(zip(disks, paths, strict=True))]


class LUInstanceDeactivateDisks(InstanceLU[OpInstanceDeactivateDisks]):
    """Release the instance's disks on its primary node."""

    OP_ID = "OP_INSTANCE_DEACTIVATE_DISKS"

    def check_prereq(self) -> None:
        """Not marked up (unless forced)."""
        super().check_prereq()
        inst = self.instance
        if inst.admin_state == "up" and not self.op.force:
            raise OpPrereqError(f"instance {inst.name} is marked up: shut it down before "
                                "deactivating its disks (or force)")

    async def execute(self) -> None:
        """Refuse if it runs (unless forced), then ``blockdev_shutdown``."""
        inst, primary = self.instance, self.primary
        if not self.op.force and not primary.offline \
                and is_running(await self.instance_info(primary)):
            raise OpPrereqError(f"instance {inst.name} is running on node {primary.name}: "
                                "stop it before deactivating its disks (or force)")
        disks = self.disks()
        if self.op.dry_run or not disks:
            return None
        specs = [msgspec.to_builtins(self.disk_spec(d, i)) for i, d in enumerate(disks)]
        await self.call_one(primary, "blockdev_shutdown", {"disks": specs},
                            f"deactivating the disks of instance {inst.name}")
        return None


class LUInstanceGrowDisk(InstanceLU[OpInstanceGrowDisk]):
    """Grow one disk of an instance (by an amount or to a size, in MiB)."""

    OP_ID = "OP_INSTANCE_GROW_DISK"

    def check_prereq(self) -> None:
        """The disk exists and can grow; the new size is not smaller."""
        super().check_prereq()
        inst, op = self.instance, self.op
        check_node_online(self.primary, f"grow a disk of {inst.name}")
        disks = self.disks()
        if not disks:
            raise OpPrereqError(f"instance {inst.name} has no disks (disk template "
                                f"{inst.disk_template}): there is nothing to grow")
        if op.disk >= len(disks):
            raise OpPrereqError(f"instance {inst.name} has no disk {op.disk}; its disks are "
                                f"0 to {len(disks) - 1}")
        self.disk = disks[op.disk]
        row = template(self.disk.dev_type)
        if row is None or not row.growable:
            raise OpPrereqError(f"Instance's disk layout {self.disk.dev_type} does not "
                                "support growing", ecode="wrong_input")
        if op.absolute:
            self.target_size, self.delta = op.amount, op.amount - self.disk.size
            if self.delta < 0:
                raise OpPrereqError(f"disk {op.disk} of instance {inst.name} has "
                                    f"{self.disk.size} MiB; it cannot shrink to "
                                    f"{op.amount} MiB")
        else:
            self.target_size, self.delta = self.disk.size + op.amount, op.amount
        store = self.master.store
        group = store.get("nodegroup", self.primary.group)
        sizes = [self.target_size if d.uuid == self.disk.uuid else d.size for d in disks]
        problems = spec_violations(group_ipolicy(store, group), memory=None, cpus=None,
                                   disk_sizes=sizes, nic_count=None, spindle_use=None,
                                   disk_templates=[d.dev_type for d in disks])
        if problems:
            message = f"Growing disk {op.disk} violates policy: {', '.join(problems)}"
            if not op.ignore_ipolicy:
                raise OpPrereqError(message, ecode="wrong_input")
            self.feedback(f" - WARNING: {message}")

    async def execute(self) -> None:
        """Dry run on the node, grow, record the new size."""
        inst, op, primary = self.instance, self.op, self.primary
        if self.delta == 0:
            self.feedback(f"disk {op.disk} of instance {inst.name} already has "
                          f"{self.target_size} MiB")
            return None
        spec = msgspec.to_builtins(self.disk_spec(self.disk, op.disk))
        await self.call_one(primary, "blockdev_grow",
                            {"disk": spec, "amount": self.delta, "dryrun": True},
                            f"checking that disk {op.disk} of {inst.name} can grow")
        if op.dry_run:
            return None
        self.feedback(f"growing disk {op.disk} of instance {inst.name} by {self.delta} MiB "
                      f"to {self.target_size} MiB")
        await self.call_one(primary, "blockdev_grow",
                            {"disk": spec, "amount": self.delta, "dryrun": False},
                            f"growing disk {op.disk} of instance {inst.name}")
        disk_uuid, size = self.disk.uuid, self.target_size

        def record(_inst: Instance) -> None:
            pass

        def grow(disk: Disk) -> None:
            if disk.uuid == disk_uuid:
                disk.size = size

        await self.update_instance(record, grow)
        return None
