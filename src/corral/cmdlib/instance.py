"""The life cycle of an existing instance: remove, start, stop, reboot, reinstall,
rename. Creating one is :mod:`corral.cmdlib.instance_create`; what one can learn
about instances (``gnt-instance list``/``info``) is :mod:`corral.cmdlib.instance_query`.
This area module registers all three.

Every unit here is an :class:`~corral.cmdlib.instance_base.InstanceLU` that locks its
instance exclusively and its primary node shared (it acts on the instance where it
is), and stores the opcode's reason trail on the instance with each status change:
start, stop, reboot (``gnt-instance info`` shows the last one; a reinstall or rename
leaves it, see :func:`~corral.cmdlib.instance_base.commit_instance`).

Parameters accepted for compatibility and ignored: the startup ``force`` and
``shutdown_timeout``, the shutdown ``force`` and ``admin_state_source``, the reboot
``ignore_secondaries`` and the query-data ``use_locking`` (answers come from one
consistent configuration snapshot).
"""

from __future__ import annotations

from typing import Any

from corral.cmdlib.base import LogicalUnit, MasterContext, QueryResource
from corral.cmdlib.common import add_name_lock, check_node_online, drop_name_lock, lower_os_params
from corral.cmdlib.disk_layout import METADATA_TEMPLATES, RELEASED_TEMPLATES
from corral.cmdlib.instance_base import (
    RPC_INSTALL,
    RPC_QUICK,
    RPC_START,
    InstanceLU,
    check_hv_be,
    check_instance_name,
    check_os,
    instance_info_text,
    remove_disks,
    wire,
)
from corral.cmdlib.instance_create import LUInstanceCreate
from corral.cmdlib.instance_query import LUInstanceQueryData, instance_resource
from corral.errors import (
    AlreadyExistsError,
    CorralError,
    OpPrereqError,
    ParameterError,
)
from corral.locking import LockLevel
from corral.objects import fill_params
from corral.objects.params import update_params
from corral.opcodes.instance_ops import (
    OpInstanceReboot,
    OpInstanceReinstall,
    OpInstanceRemove,
    OpInstanceRename,
    OpInstanceShutdown,
    OpInstanceStartup,
)

__all__ = [
    "UNITS",
    "LUInstanceCreate",
    "LUInstanceQueryData",
    "LUInstanceReboot",
    "LUInstanceReinstall",
    "LUInstanceRemove",
    "LUInstanceRename",
    "LUInstanceShutdown",
    "LUInstanceStartup",
    "query_resources",
]


class LUInstanceRemove(InstanceLU[Any]):
    """``OP_INSTANCE_REMOVE``: stop, remove the disks, forget the instance and its lock."""

    OP_ID = "OP_INSTANCE_REMOVE"
    SHARED_NODES = True

    async def execute(self) -> None:
        """Shut down, remove disks, remove from the configuration."""
        op: OpInstanceRemove = self.op
        inst, node = self.instance, self.primary
        if op.dry_run:
            return None
        spec = self.instance_spec()
        hint = "; use ignore_failures (--ignore-failures) to remove it anyway"
        try:
            await self.call_one(node, "instance_shutdown",
                        {"instance": wire(spec), "timeout": float(op.shutdown_timeout),
                         "reason": op.reason, "forget": True},
                        f"shutting down instance {inst.name}",
                        rpc_timeout=op.shutdown_timeout + RPC_QUICK)
        except CorralError as err:
            if not op.ignore_failures:
                raise type(err)(err.message + hint) from err
            self.feedback(f"Warning: {err.message}; removing the instance anyway")
        try:
            await remove_disks(self, node, spec.disks, best_effort=op.ignore_failures)
        except CorralError as err:
            raise type(err)(err.message + hint) from err
        async with self.master.store.transaction() as txn:
            txn.remove("instance", inst.uuid)
            for disk_uuid in inst.disks:
                txn.remove("disk", disk_uuid)
        await self.master.locks.remove(LockLevel.INSTANCE, inst.name, owner=self.owner)
        return None


class LUInstanceStartup(InstanceLU[Any]):
    """``OP_INSTANCE_STARTUP``: start on the primary node and remember it should run."""

    OP_ID = "OP_INSTANCE_STARTUP"
    SHARED_NODES = True

    def check_prereq(self) -> None:
        """Not offline; node online (unless ``ignore_offline_nodes``); params valid."""
        super().check_prereq()
        op: OpInstanceStartup = self.op
        inst = self.instance
        if inst.admin_state == "offline":
            raise OpPrereqError(f"instance {inst.name} is marked offline; bring it online "
                                "with 'gnt-instance modify --online' first")
        if self.primary.offline and not op.ignore_offline_nodes:
            raise OpPrereqError(
                f"cannot start instance {inst.name}: its primary node {self.primary.name} is "
                "offline (ignore_offline_nodes only records the wanted state)")
        self.hv_extra, self.be_extra = check_hv_be(inst.hypervisor, op.hvparams, op.beparams)

    async def execute(self) -> None:
        """Start unless it runs; record admin state up (unless ``no_remember``)."""
        op: OpInstanceStartup = self.op
        inst, node = self.instance, self.primary
        if op.dry_run:
            return None
        if not op.no_remember:
            await self.set_state(admin_state="up", status_change=True)
        if node.offline:
            self.feedback(f"Primary node {node.name} is offline: instance {inst.name} is only "
                          "marked as started")
            return None
        if await self.running():
            self.feedback(f"Instance {inst.name} is already running")
            return None
        spec = self.instance_spec()
        spec.hvparams = fill_params(spec.hvparams, self.hv_extra)
        spec.beparams = fill_params(spec.beparams, self.be_extra)
        spec.admin_state = "up"
        await self.call_one(node, "instance_start",
                    {"instance": wire(spec), "startup_paused": op.startup_paused,
                     "reason": op.reason},
                    f"starting instance {inst.name}", rpc_timeout=RPC_START)
        if op.no_remember:
            # not remembered as wanted up, but it did start: that is its last status
            # change, and its reason is kept (as Ganeti's node does)
            await self.set_state(status_change=True)
        return None


class LUInstanceShutdown(InstanceLU[Any]):
    """``OP_INSTANCE_SHUTDOWN``: stop on the primary node, remember it should not run."""

    OP_ID = "OP_INSTANCE_SHUTDOWN"
    SHARED_NODES = True

    def check_prereq(self) -> None:
        """Not offline; node online (unless ``ignore_offline_nodes``)."""
        super().check_prereq()
        op: OpInstanceShutdown = self.op
        inst = self.instance
        if inst.admin_state == "offline":
            raise OpPrereqError(f"instance {inst.name} is marked offline (it is not running)")
        if self.primary.offline and not op.ignore_offline_nodes:
            raise OpPrereqError(
                f"cannot shut down instance {inst.name}: its primary node {self.primary.name} "
                "is offline (ignore_offline_nodes only records the wanted state)")

    async def execute(self) -> None:
        """Record admin state down (unless ``no_remember``), then stop."""
        op: OpInstanceShutdown = self.op
        inst, node = self.instance, self.primary
        if op.dry_run:
            return None
        if not op.no_remember:
            await self.set_state(admin_state="down", status_change=True)
        if node.offline:
            self.feedback(f"Primary node {node.name} is offline: instance {inst.name} is only "
                          "marked as stopped")
            return None
        await self.call_one(node, "instance_shutdown",
                    {"instance": self.spec(), "timeout": float(op.timeout),
                     "reason": op.reason},
                    f"shutting down instance {inst.name}", rpc_timeout=op.timeout + RPC_QUICK)
        released = [wire(self.disk_spec(d, i)) for i, d in enumerate(self.disks())
                    if d.dev_type in RELEASED_TEMPLATES]
        if released:
            # As Ganeti deactivates a stopped instance's disks: rbd images are unmapped,
            # ExtStorage volumes detached.
            await self.try_call(node, "blockdev_shutdown", {"disks": released},
                                f"deactivating the disks of instance {inst.name}")
        if op.no_remember:
            await self.set_state(status_change=True)  # stopped: see LUInstanceStartup
        return None


class LUInstanceReboot(InstanceLU[Any]):
    """``OP_INSTANCE_REBOOT``: soft/hard by the hypervisor, full = stop + start.

    As in Ganeti, rebooting an instance that does not run starts it, and the
    instance is then marked as wanted up.
    """

    OP_ID = "OP_INSTANCE_REBOOT"
    SHARED_NODES = True

    def check_prereq(self) -> None:
        """Not offline, node online."""
        super().check_prereq()
        inst = self.instance
        if inst.admin_state == "offline":
            raise OpPrereqError(f"instance {inst.name} is marked offline; bring it online "
                                "with 'gnt-instance modify --online' first")
        check_node_online(self.primary, f"reboot instance {inst.name}")

    async def execute(self) -> None:
        """Reboot (or start) and record admin state up."""
        op: OpInstanceReboot = self.op
        inst, node = self.instance, self.primary
        if op.dry_run:
            return None
        running = await self.running()
        spec = self.instance_spec()
        spec.admin_state = "up"
        if running and op.reboot_type in ("soft", "hard"):
            await self.call_one(node, "instance_reboot",
                        {"instance": wire(spec), "reboot_type": op.reboot_type,
                         "timeout": float(op.shutdown_timeout), "reason": op.reason},
                        f"rebooting instance {inst.name}",
                        rpc_timeout=op.shutdown_timeout + RPC_START)
        else:
            if running:
                await self.call_one(node, "instance_shutdown",
                            {"instance": wire(spec), "timeout": float(op.shutdown_timeout),
                             "reason": op.reason},
                            f"shutting down instance {inst.name} for a full reboot",
                            rpc_timeout=op.shutdown_timeout + RPC_QUICK)
            else:
                self.feedback(f"Instance {inst.name} was not running: starting it")
            await self.call_one(node, "instance_start",
                        {"instance": wire(spec), "startup_paused": False,
                         "reason": op.reason},
                        f"starting instance {inst.name}", rpc_timeout=RPC_START)
        await self.set_state(admin_state="up", status_change=True)
        return None


class LUInstanceReinstall(InstanceLU[Any]):
    """``OP_INSTANCE_REINSTALL``: run the OS's create script again on a stopped instance.

    A blacklisted OS may be reinstalled. ``osparams`` apply to this installation only
    (merged over the instance's own); a new ``os_type`` is stored once the
    installation succeeded.
    """

    OP_ID = "OP_INSTANCE_REINSTALL"
    SHARED_NODES = True

    def check_arguments(self) -> None:
        """Private/secret OS parameters are not supported yet."""
        if self.op.osparams_private or self.op.osparams_secret:
            raise ParameterError("private and secret OS parameters are not supported yet; "
                                 "use osparams")

    def check_prereq(self) -> None:
        """Stopped (admin state down), node online."""
        super().check_prereq()
        inst = self.instance
        if inst.admin_state == "up":
            raise OpPrereqError(f"instance {inst.name} is marked to run; shut it down first "
                                "(gnt-instance shutdown)")
        if inst.admin_state == "offline":
            raise OpPrereqError(f"instance {inst.name} is marked offline; bring it online "
                                "with 'gnt-instance modify --online' first")
        check_node_online(self.primary, f"reinstall instance {inst.name}")
        if not (self.op.os_type or inst.os):
            raise ParameterError(f"instance {inst.name} has no OS yet; name one with "
                                 "os_type (-o OS+VARIANT)")

    async def execute(self) -> None:
        """Check it does not run, check the OS, install, record the OS."""
        op: OpInstanceReinstall = self.op
        inst, node = self.instance, self.primary
        if await self.running():
            raise OpPrereqError(f"instance {inst.name} is running on node {node.name}; shut "
                                "it down first")
        os_name = op.os_type or inst.os
        params = update_params({k.lower(): v for k, v in inst.osparams.items()},
                               lower_os_params(op.osparams or {}))
        filled = await check_os(self, node, os_name, force_variant=op.force_variant,
                                 own_params=params)
        if op.dry_run:
            return None
        spec = self.instance_spec()
        spec.os = os_name
        spec.osparams = filled
        self.feedback(f"Reinstalling OS {os_name} on {node.name}")
        await self.call_one(node, "instance_os_add",
                    {"instance": wire(spec), "reinstall": True, "debug": op.debug_level,
                     "force_variant": op.force_variant},
                    f"reinstalling OS {os_name} for instance {inst.name}", rpc_timeout=RPC_INSTALL)
        await self.set_state(os=os_name)
        return None


class LUInstanceRename(InstanceLU[Any]):
    """``OP_INSTANCE_RENAME``: new name in the configuration and the locks, then the
    OS's rename script (its failure is a warning: the rename stands, as in Ganeti)."""

    OP_ID = "OP_INSTANCE_RENAME"
    SHARED_NODES = True

    def check_arguments(self) -> None:
        """The new name is a valid name."""
        check_instance_name(self.op.new_name)

    def instance_locks(self) -> list[str]:
        """The instance's lock and its new name's."""
        return [self.instance.name, self.op.new_name]

    async def prepare(self) -> None:
        """Add the new name's lock so that a create of that name waits for us."""
        name = self.op.new_name
        if name == self.op.instance_name:
            raise ParameterError(f"instance {name!r} already has that name")
        await add_name_lock(self, name)

    def check_prereq(self) -> None:
        """Stopped, the new name free, node online."""
        super().check_prereq()
        inst = self.instance
        if inst.admin_state == "up":
            raise OpPrereqError(f"instance {inst.name} is marked to run; shut it down before "
                                "renaming it")
        if self.master.store.find("instance", self.op.new_name) is not None:
            raise AlreadyExistsError(f"instance {self.op.new_name!r} already exists")
        check_node_online(self.primary, f"rename instance {inst.name}")

    async def execute(self) -> str:
        """Rename in the configuration and the locks, then run the rename script."""
        op: OpInstanceRename = self.op
        inst, node = self.instance, self.primary
        old_name = inst.name
        if await self.running():
            raise OpPrereqError(f"instance {old_name} is running on node {node.name}; shut "
                                "it down first")
        if op.dry_run:
            await self.abort()
            return op.new_name
        await self.set_state(name=op.new_name)
        await self.master.locks.remove(LockLevel.INSTANCE, old_name, owner=self.owner)
        for index, disk in enumerate(self.disks()):
            if disk.dev_type in METADATA_TEMPLATES:
                # Volumes on external storage name their instance (Ganeti's setinfo).
                await self.try_call(node, "blockdev_setinfo",
                                    {"disk": wire(self.disk_spec(disk, index)),
                                     "info": instance_info_text(op.new_name)},
                                    f"updating the metadata of disk {index}")
        try:
            await self.call_one(node, "instance_run_rename",
                        {"instance": self.spec(), "old_name": old_name,
                         "debug": op.debug_level},
                        f"running the OS rename script of instance {op.new_name}",
                        rpc_timeout=RPC_INSTALL)
        except CorralError as err:
            self.feedback(f"Warning: {err.message} (the instance is renamed in the "
                          "configuration nevertheless)")
        return op.new_name

    async def abort(self) -> None:
        """Remove the new name's lock unless an instance has that name."""
        await drop_name_lock(self, self.op.new_name)


#: The logical units of this area.
UNITS: tuple[type[LogicalUnit[Any]], ...] = (
    LUInstanceCreate,
    LUInstanceRemove,
    LUInstanceStartup,
    LUInstanceShutdown,
    LUInstanceReboot,
    LUInstanceReinstall,
    LUInstanceRename,
    LUInstanceQueryData,
)


def query_resources(ctx: MasterContext) -> dict[str, QueryResource]:
    """The ``instance`` query resource (``gnt-instance list``, ``/2/query/instance``)."""
    return {"instance": instance_resource(ctx)}
