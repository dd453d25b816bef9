"""Moving an instance to another node: migrate (running, no stop), failover (stop here,
start there; shared storage) and move (stop, copy the disks' data, start there).

Which one fits depends on where the disks' data lives: ``sharedfile`` and ``diskless``
disks are reachable from every node, so migration and failover only change the
primary node; ``file`` disks live on the primary node alone and must be copied
(``move``). Nothing is committed before the node operations succeed: a failed
migration leaves the instance on its source node, a failed move removes the copies
and restarts the instance where it was.

The single-instance base class they build on is
:class:`corral.cmdlib.instance_base.InstanceLU`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, ClassVar, TypeVar

import msgspec

from corral.cmdlib.aggregates import instance_constraints, refuse_unmet
from corral.cmdlib.allocation import allocator_names, relocation_target
from corral.cmdlib.base import LockRequest
from corral.cmdlib.common import (
    check_node_online,
    expand_node,
    fill_hvparams,
)
from corral.cmdlib.disk_layout import RELEASED_TEMPLATES, logical_id_on_node
from corral.cmdlib.instance_base import (
    RPC_START,
    InstanceLU,
    check_node_takes_instance,
    is_running,
)
from corral.cmdlib.ipolicy import group_ipolicy, stored_instance_violations
from corral.cmdlib.nic_networks import check_networks_reach
from corral.errors import (
    CorralError,
    NotFoundError,
    OpExecError,
    OpPrereqError,
    ParameterError,
)
from corral.locking import ALL_SET, LockLevel
from corral.objects import Disk, Instance, Node, fill_params
from corral.objects.disk_templates import templates_where
from corral.objects.params import DISK_TEMPLATES
from corral.objects.specs import DiskSpec
from corral.opcodes.instance_change_ops import (
    MOVE_COMPRESSIONS,
    OpInstanceFailover,
    OpInstanceMigrate,
    OpInstanceMove,
)
from corral.opcodes.instance_ops import InstanceOp

__all__ = [
    "LUInstanceFailover",
    "LUInstanceMigrate",
    "LUInstanceMove",
]

_Op = TypeVar("_Op", bound=InstanceOp)

#: Disk templates whose data every node reaches (migration/failover need no copy).
SHARED_TEMPLATES = templates_where(shared=True)
#: Disk templates whose data ``move`` copies (an instance without disks moves too).
COPYABLE_TEMPLATES = frozenset({"file", "diskless"})
#: Disk templates a live migration takes along (qemu mirrors them), by hypervisor.
MIRRORED_TEMPLATES = frozenset({"file"})
MIRRORING_HYPERVISORS = frozenset({"kvm"})
#: Disk templates whose volumes are opened and closed around a migration (ExtStorage
#: ``open``/``close``: shared by both nodes while the guest moves).
OPENED_TEMPLATES = frozenset({"ext"})
#: How often the master asks the source for a running migration's progress (s).
PROGRESS_INTERVAL = 0.5
#: How long the master waits for ``migration_send`` beyond the disks' copy time: the
#: source itself gives up on a migration that stops making progress.
SEND_TIMEOUT = 900.0


# -- moving instances between nodes ------------------------------------------------


def check_target_node(node: Node, instance: Instance, what: str) -> None:
    """Refuse a target that is the primary, offline, drained or not vm-capable."""
    if node.uuid == instance.primary_node:
        raise OpPrereqError(f"cannot {what} instance {instance.name} to node {node.name}: "
                            "it is already its primary node")
    check_node_takes_instance(node, f"{what} instance {instance.name}")


def _target_from_op(lu: _MoveBase[Any], target_node: str | None, target_uuid: str | None,
                    iallocator: str | None, what: str) -> Node | None:
    """The named target node; None when an allocator is to choose it (the one named,
    else the cluster's defaults: ``lu.allocators``)."""
    key = target_uuid or target_node
    if key and iallocator:
        raise ParameterError("Do not specify both, iallocator and node")
    if key:
        return expand_node(lu.master.store, key)
    if not iallocator and not lu.master.store.cluster.default_iallocators:
        raise ParameterError(
            "No iallocator or node given and no cluster-wide default iallocator found; "
            "please specify either an iallocator or a node, or set a cluster-wide default "
            f"iallocator\nto {what} instance {lu.instance.name}, name its target node with "
            "-n/--target-node")
    lu.allocators = allocator_names(lu.master, iallocator)
    return None


class _MoveBase(InstanceLU[_Op]):
    """Shared steps of migrate, failover and move.

    Without a target node an allocator chooses one (a ``relocate`` request away from
    the primary node) when the unit executes: until then every node is locked, and
    the others are released once it has answered.
    """

    #: The target node: named, or chosen by :meth:`choose_target`.
    target: Node
    #: The allocators to try when no target node was named (empty: one was).
    allocators: list[str] = []
    WHAT: ClassVar[str] = "move"

    def set_target(self, target: Node | None) -> None:
        """Record the named target node (None: an allocator chooses, see
        :func:`_target_from_op`)."""
        if target is not None:
            self.target = target

    def extra_nodes(self) -> list[Node]:
        """The target node."""
        return [] if self.allocators else [self.target]

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The instance and its nodes; every node when an allocator chooses the target."""
        locks = super().declare_locks()
        if self.allocators and LockLevel.NODE in locks:
            locks[LockLevel.NODE] = LockRequest(ALL_SET, shared=self.SHARED_NODES)
            locks[LockLevel.NODE_RES] = LockRequest(ALL_SET, shared=self.SHARED_NODES)
        return locks

    async def choose_target(self) -> None:
        """Ask the allocators for a node to move the instance to, then check it as a
        named one."""
        self.target = await relocation_target(self, self.allocators, self.instance,
                                              self.primary)
        self.check_target()

    def check_prereq(self) -> None:
        """Target still valid; see the subclasses for the disk checks."""
        super().check_prereq()
        if not self.allocators:
            self.check_target()
        cluster = self.master.store.cluster
        if self.instance.hypervisor not in cluster.enabled_hypervisors:
            raise OpPrereqError(
                f"cannot {self.WHAT} instance {self.instance.name}: its hypervisor "
                f"{self.instance.hypervisor!r} is not enabled in the cluster (enabled: "
                f"{', '.join(cluster.enabled_hypervisors)})")
        if self.needs_source():
            check_node_online(self.primary, f"{self.WHAT} instance {self.instance.name}")

    def check_target(self) -> None:
        """The target node takes the instance: online, reachable networks, its
        placement constraints (no override), and its group's instance policy when
        that is another group (``ignore_ipolicy`` turns a violation into a warning,
        as in Ganeti)."""
        store = self.master.store
        target = store.find("node", self.target.uuid)
        if target is None:
            raise NotFoundError(f"node {self.target.name} was removed meanwhile")
        self.target = target
        check_target_node(target, self.instance, self.WHAT)
        check_networks_reach(store, self.instance, target)
        refuse_unmet(store, target, instance_constraints(self.instance), self.instance.name)
        if target.group != self.primary.group:
            group = store.get("nodegroup", target.group)
            problems = stored_instance_violations(store, self.instance,
                                                  group_ipolicy(store, group))
            if problems:
                message = (f"Instance does not meet target node group's ({group.uuid}) "
                           f"instance policy: {', '.join(problems)}")
                if not getattr(self.op, "ignore_ipolicy", False):
                    raise OpPrereqError(message, ecode="wrong_input")
                self.feedback(f" - WARNING: {message}")

    def needs_source(self) -> bool:
        """Whether the source node must be online (a failover that ignores
        consistency works with a dead source)."""
        return True

    def beparams(self) -> dict[str, Any]:
        """The instance's filled backend parameters (cluster ← group ← instance; the
        target's group, or the primary node's before an allocator chose the target)."""
        store = self.master.store
        node = getattr(self, "target", None) or self.primary
        group = store.get("nodegroup", node.group)
        return fill_params(store.cluster.beparams.get("default", {}), group.beparams,
                           self.instance.beparams)

    async def check_target_has_needs(self) -> None:
        """Refuse a target node that lacks what the instance needs there (its
        hypervisor, the bridges of bridged NICs, the shared storage of its disks),
        before anything changes; the node itself says (``instance_check_host``)."""
        inst, target = self.instance, self.target
        answer = await self.call_one(target, "instance_check_host",
                                     {"instance": self.spec(target)},
                                     f"checking node {target.name} for instance {inst.name}")
        missing = answer.get("missing") if isinstance(answer, dict) else None
        if not isinstance(missing, list):
            raise OpPrereqError(f"node {target.name} answered {answer!r} when asked what it "
                                f"lacks for instance {inst.name}")
        if missing:
            raise OpPrereqError(
                f"cannot {self.WHAT} instance {inst.name} to node {target.name}: the node "
                f"lacks what the instance needs: {'; '.join(str(m) for m in missing)}; "
                "nothing was changed")

    async def check_free_memory(self, needed: int) -> None:
        """Refuse when the target node has less than ``needed`` MiB free."""
        info = await self.call_one(
            self.target, "node_info",
            {"storage_dirs": [], "hypervisors": [self.instance.hypervisor]},
            f"asking node {self.target.name} for its free memory",
        )
        free = info.get("memory_free") if isinstance(info, dict) else None
        if isinstance(free, int) and free < needed:
            raise OpPrereqError(
                f"not enough memory on node {self.target.name} to {self.WHAT} instance "
                f"{self.instance.name}: needs {needed} MiB, {free} MiB free"
            )

    async def start_on_target(self) -> None:
        """Start the instance on its new primary node (the configuration says so)."""
        self.feedback(f"starting instance {self.instance.name} on node {self.target.name}")
        try:
            await self.call_one(self.target, "instance_start",
                                {"instance": self.spec(), "startup_paused": False,
                                 "reason": self.op.reason},
                                f"starting instance {self.instance.name}")
        except CorralError as err:
            raise OpExecError(
                f"{err.message}; the instance's primary node is now {self.target.name}: "
                f"start it there with 'gnt-instance startup {self.instance.name}'"
            ) from None

    async def switch_primary(self, logical_ids: dict[str, list[str]] | None = None, *,
                             status_change: bool = False) -> None:
        """Commit the target as primary node (and as the disks' node); a failover or
        move of an instance that should run stops and starts it, a ``status_change``
        that records the opcode's reason (a live migration is none)."""
        source_uuid, target_uuid = self.instance.primary_node, self.target.uuid

        def change(inst: Instance) -> None:
            inst.primary_node = target_uuid

        def change_disk(disk: Disk) -> None:
            disk.nodes = [target_uuid if n == source_uuid else n for n in disk.nodes] \
                or [target_uuid]
            if logical_ids and disk.uuid in logical_ids:
                disk.logical_id = logical_ids[disk.uuid]

        await self.update_instance(change, change_disk, status_change=status_change)


class LUInstanceFailover(_MoveBase[OpInstanceFailover]):
    """Stop the instance on its node, make the target its primary, start it there."""

    OP_ID = "OP_INSTANCE_FAILOVER"
    WHAT = "fail over"

    def check_arguments(self) -> None:
        """``cleanup`` belongs to migrations."""
        if self.op.cleanup:
            raise ParameterError("cleanup applies to migrations only (gnt-instance migrate "
                                 "--cleanup), not to failovers")

    def expand_names(self) -> None:
        """The instance and the target node."""
        super().expand_names()
        self.set_target(_target_from_op(self, self.op.target_node, self.op.target_node_uuid,
                                        self.op.iallocator, "fail over"))

    def needs_source(self) -> bool:
        """A dead source node is fine when consistency is ignored."""
        return not self.op.ignore_consistency

    def check_prereq(self) -> None:
        """Shared storage only; the target can take the instance."""
        super().check_prereq()
        _check_shared(self.instance, "fail over", "failovers")

    async def execute(self) -> None:
        """Shut down on the source, switch the primary node, start on the target."""
        inst = self.instance
        if self.allocators:
            await self.choose_target()
        await self.check_target_has_needs()
        if inst.admin_state == "up":
            await self.check_free_memory(self.beparams()["maxmem"])
        if self.op.dry_run:
            return None
        await failover(self, self.op.shutdown_timeout, self.op.ignore_consistency)
        return None


async def failover(lu: _MoveBase[Any], shutdown_timeout: float, ignore_consistency: bool
                   ) -> None:
    """The failover steps (also used by a migration that falls back to failover)."""
    inst, source = lu.instance, lu.primary
    lu.feedback(f"shutting down instance {inst.name} on node {source.name}")
    try:
        await lu.call_one(source, "instance_shutdown",
                          {"instance": lu.spec(), "timeout": float(shutdown_timeout),
                           "reason": lu.op.reason, "forget": True},
                          f"shutting down instance {inst.name}")
    except CorralError as err:
        if not (ignore_consistency or source.offline):
            raise OpExecError(
                f"{err.message}; nothing was changed (use ignore_consistency, "
                "--ignore-consistency, if the node is really down)"
            ) from None
        lu.feedback(f" - WARNING: {err.message}; proceeding anyway: make sure node "
                    f"{source.name} is down")
    specs = [lu.disk_spec(d, i, source) for i, d in enumerate(lu.disks())]
    closed = [spec for spec in specs if spec.dev_type in OPENED_TEMPLATES]
    if closed and not source.offline:
        await lu.try_call(source, "blockdev_close", {"disks": _to_builtins(closed)},
                          f"closing the disks of instance {inst.name}")
    if specs and not source.offline:
        await lu.try_call(source, "blockdev_shutdown", {"disks": _to_builtins(specs)},
                          f"deactivating the disks of instance {inst.name}")
    await lu.switch_primary(status_change=lu.instance.admin_state == "up")
    lu.feedback(f"instance {inst.name} now has node {lu.target.name} as primary node")
    if lu.instance.admin_state == "up":
        await lu.start_on_target()


def _to_builtins(value: Any) -> Any:
    return msgspec.to_builtins(value)


def _check_shared(instance: Instance, verb: str, noun: str, *,
                  mirrored: bool = False) -> None:
    """Refuse disks a migration or failover cannot reach on the target; ``mirrored``
    (a live migration under kvm) also takes local ``file`` disks, whose data qemu
    copies to the target while the guest runs."""
    template = instance.disk_template
    if mirrored and template in MIRRORED_TEMPLATES:
        return
    if template not in SHARED_TEMPLATES:
        hint = (" its disks' data lives on the primary node only: use 'gnt-instance move'"
                " to copy it to another node" if template == "file" else "")
        if template == "file" and noun == "migrations":
            hint += (f" (or the kvm hypervisor, which migrates them; this instance uses "
                     f"{instance.hypervisor!r})")
        raise OpPrereqError(
            f"cannot {verb} instance {instance.name}: disk template {template!r} does not "
            f"allow {noun} (only {', '.join(sorted(SHARED_TEMPLATES & set(DISK_TEMPLATES)))}"
            f" do);{hint}".rstrip(";")
        )


class LUInstanceMigrate(_MoveBase[OpInstanceMigrate]):
    """Move a running instance to the target node without stopping it."""

    OP_ID = "OP_INSTANCE_MIGRATE"
    WHAT = "migrate"

    def check_arguments(self) -> None:
        """``live`` and ``mode`` exclude each other."""
        if self.op.live is not None and self.op.mode is not None:
            raise ParameterError("give only one of 'live' (obsolete) and 'mode'")

    def expand_names(self) -> None:
        """The instance and the target node."""
        super().expand_names()
        self.set_target(_target_from_op(self, self.op.target_node, self.op.target_node_uuid,
                                        self.op.iallocator, "migrate"))
        if self.op.cleanup and self.allocators:
            raise ParameterError("a migration cleanup needs the node the failed migration "
                                 "went to: give it as the target node (-n/--target-node)")

    def check_prereq(self) -> None:
        """Shared storage only; the target can take the instance."""
        super().check_prereq()
        self.as_failover = False
        if not self.op.cleanup and self.instance.admin_state != "up" \
                and self.op.allow_failover:
            self.feedback(f"instance {self.instance.name} is marked "
                          f"{self.instance.admin_state}; failing it over instead")
            self.as_failover = True
        _check_shared(self.instance, "migrate" if not self.as_failover else "fail over",
                      "migrations" if not self.as_failover else "failovers",
                      mirrored=not self.as_failover and self.mirrors_disks())
        if not self.op.cleanup and not self.as_failover and self.beparams()["always_failover"]:
            self.feedback(f"instance {self.instance.name} is set to always fail over "
                          "(always_failover); failing it over instead")
            self.as_failover = True

    def live(self) -> bool:
        """The migration mode: the opcode's, else the hypervisor parameter's."""
        if self.op.live is not None:
            return self.op.live
        mode = self.op.mode
        if mode is None:
            hvparams = fill_hvparams(self.master.store, self.instance)
            mode = hvparams.get("migration_mode", "live")
        return mode == "live"

    async def execute(self) -> None:
        """Accept on the target, send from the source, finish; then commit."""
        inst = self.instance
        if self.op.cleanup:
            if not self.op.dry_run:
                await self._cleanup()
            return None
        if self.allocators:
            await self.choose_target()
        await self.check_target_has_needs()
        if not self.as_failover:
            running = is_running(await self.instance_info(self.primary))
            if not running:
                if not self.op.allow_failover:
                    raise OpPrereqError(
                        f"cannot migrate instance {inst.name}: it is not running on node "
                        f"{self.primary.name}; use failover (gnt-instance failover) or "
                        "allow_failover (--allow-failover)"
                    )
                self.feedback(f"instance {inst.name} is not running; failing it over")
                self.as_failover = True
        if self.as_failover:
            if inst.admin_state == "up":
                await self.check_free_memory(self.beparams()["maxmem"])
            if not self.op.dry_run:
                await failover(self, 120, False)
            return None
        await self.check_free_memory(self.beparams()["minmem"])
        if self.op.dry_run:
            return None
        await self._migrate()
        return None

    def mirrors_disks(self) -> bool:
        """Whether this migration copies local disks (kvm, ``file`` template)."""
        return (self.instance.hypervisor in MIRRORING_HYPERVISORS
                and self.instance.disk_template in MIRRORED_TEMPLATES
                and bool(self.instance.disks))

    async def _migrate(self) -> None:
        """Create the disks on the target (local disks), accept there, send from the
        source while reporting its progress, finish on both; then commit. A failure in
        any step drops the target's copy and resumes the instance on the source."""
        inst, source, target = self.instance, self.primary, self.target
        live = self.live()
        mirror = self.mirrors_disks()
        target_ip = target.secondary_ip or target.primary_ip
        self.feedback(f"migrating instance {inst.name} from {source.name} to {target.name} "
                      f"({'live' if live else 'non-live'}"
                      f"{', copying its local disks' if mirror else ''})")
        created: list[DiskSpec] = []
        new_ids: dict[str, list[str]] = {}
        target_spec = self.spec(target)
        try:
            if mirror:
                new_ids = await self._create_target_disks(created)
                for disk in target_spec["disks"]:
                    disk["logical_id"] = new_ids.get(disk["uuid"], disk["logical_id"])
            devices = await self._same_machine(target_spec)
            await self._shared_disks(source, "blockdev_open", {"exclusive": False},
                                     "opening the disks of instance {inst} for sharing on "
                                     "node {node}", only=OPENED_TEMPLATES, strict=True)
            accepted = await self.call_one(
                target, "migration_accept",
                {"instance": target_spec, "address": target_ip, "mirror_disks": mirror,
                 "devices": devices},
                f"preparing node {target.name} to receive instance {inst.name}",
                rpc_timeout=RPC_START)
            nbd_port = accepted.get("nbd_port") if isinstance(accepted, dict) else None
            size = sum(d.size for d in self.disks()) if mirror else 0
            figures: Any = await self._send(
                {"instance": self.spec(), "target_ip": target_ip, "live": live,
                 "target_name": target.name, "nbd_port": nbd_port},
                SEND_TIMEOUT + size / 10)
            await self.call_one(target, "migration_finish",
                                {"instance": target_spec, "success": True,
                                 "reason": self.last_reason()},
                                f"starting instance {inst.name} on node {target.name} "
                                "after its migration")
        except BaseException as err:
            if not isinstance(err, CorralError):
                await self._abort(target_spec, created)
                raise
            if not await self._arrived():
                resumed = await self._abort(target_spec, created)
                where = (f"instance {inst.name} stays on node {source.name}" if resumed else
                         f"instance {inst.name} may be paused on node {source.name} or run "
                         f"on node {target.name}: run 'gnt-instance migrate --cleanup -n "
                         f"{target.name} {inst.name}' once both nodes answer")
                raise OpExecError(f"{err.message}; {where}") from None
            self.feedback(f" - WARNING: {err.message}; but the instance already runs on node "
                          f"{target.name}: it stays there")
            figures = None
        if not isinstance(figures, dict) or figures.get("total_time") is None:
            pass
        elif not live:
            self.feedback(f"migration done in {figures.get('elapsed', '?')} ms, the guest "
                          "stopped throughout (non-live)")
        else:
            self.feedback(f"migration done in {figures.get('elapsed', '?')} ms (memory "
                          f"{figures['total_time']} ms), guest stopped for "
                          f"{figures.get('downtime', '?')} ms")
        old_specs = [self.disk_spec(d, i, source) for i, d in enumerate(self.disks())]
        await self.try_call(source, "migration_finish_source",
                            {"instance": self.spec(), "success": True},
                            f"stopping the migrated instance {inst.name} on node "
                            f"{source.name}")
        await self._hand_over_shared_disks(source, target)
        await self.switch_primary(new_ids or None)
        if mirror:
            for spec in old_specs:
                await self.try_call(source, "blockdev_remove", {"disk": _to_builtins(spec)},
                                    f"removing disk {spec.index} of instance {inst.name} "
                                    "from the old node")
        self.feedback(f"instance {inst.name} migrated to node {target.name}")

    async def _shared_disks(self, node: Node, procedure: str, extra: dict[str, Any],
                            what: str, *, only: frozenset[str], strict: bool = False
                            ) -> None:
        """Call ``procedure`` on ``node`` for the instance's disks of the templates in
        ``only`` (nothing when it has none); ``what`` names the step (``{inst}``,
        ``{node}``). A failure fails the migration when ``strict``, else it is
        reported in the job log."""
        disks = [self.disk_spec(d, i, node) for i, d in enumerate(self.disks())
                 if d.dev_type in only]
        if not disks:
            return
        args = {"disks": _to_builtins(disks), **extra}
        label = what.format(inst=self.instance.name, node=node.name)
        if strict:
            await self.call_one(node, procedure, args, label)
        else:
            await self.try_call(node, procedure, args, label)

    async def _hand_over_shared_disks(self, old: Node, new: Node) -> None:
        """After the guest moved from ``old`` to ``new`` (or back, after a failure):
        ``old`` closes the disks and lets go of them (unmaps rbd images, detaches
        ExtStorage volumes), ``new`` opens them exclusively, as Ganeti does."""
        await self._shared_disks(old, "blockdev_close", {}, "closing the disks of "
                                 "instance {inst} on node {node}", only=OPENED_TEMPLATES)
        await self._shared_disks(new, "blockdev_open", {"exclusive": True},
                                 "opening the disks of instance {inst} on node {node}",
                                 only=OPENED_TEMPLATES)
        await self._shared_disks(old, "blockdev_shutdown", {}, "releasing the disks of "
                                 "instance {inst} on node {node}", only=RELEASED_TEMPLATES)

    async def _same_machine(self, target_spec: dict[str, Any]) -> dict[str, Any]:
        """Make the target start the machine the source runs: the parameters it was
        started with (as Ganeti's target starts from the source's runtime), save the
        cluster-wide migration settings, which apply to this migration. Answers the
        source's device layout (opaque here) for the target's ``migration_accept``."""
        inst, source = self.instance, self.primary
        started = await self.call_one(
            source, "migration_info", {"instance": inst.name, "hypervisor": inst.hypervisor},
            f"asking node {source.name} what instance {inst.name} was started with")
        if not isinstance(started, dict):
            return {}
        hvparams = dict(started.get("hvparams") or {})
        hvparams.update({k: v for k, v in target_spec["hvparams"].items()
                         if k.startswith("migration_")})
        changed = sorted(k for k in set(hvparams) | set(target_spec["hvparams"])
                         if hvparams.get(k) != target_spec["hvparams"].get(k))
        changed += sorted(k for k, v in (started.get("beparams") or {}).items()
                          if target_spec["beparams"].get(k) != v)
        if changed:
            self.feedback(f"instance {inst.name} keeps the parameters it was started with "
                          f"on node {self.target.name} "
                          f"({', '.join(changed)} changed since); they apply at its next "
                          "start")
        target_spec["hvparams"] = hvparams
        target_spec["beparams"] = dict(started.get("beparams") or target_spec["beparams"])
        devices = started.get("devices")
        return dict(devices) if isinstance(devices, dict) else {}

    async def _arrived(self) -> bool:
        """Whether the guest already runs on the target (a migration that completed
        although the source's node daemon could not say so): then it must stay there."""
        try:
            info = await self.instance_info(self.target)
        except CorralError:
            return False
        return _state(info) == "running"

    async def _create_target_disks(self, created: list[DiskSpec]) -> dict[str, list[str]]:
        """Create the instance's local disks, empty, on the target (listed in
        ``created`` as they are made, for the caller to remove on failure)."""
        inst, target = self.instance, self.target
        new_ids: dict[str, list[str]] = {}
        for index, disk in enumerate(self.disks()):
            new_id = logical_id_on_node(self.master.store, inst, disk, index)
            new = self.disk_spec(disk, index, target, new_id)
            self.feedback(f"creating disk {index} ({disk.size} MiB) on node {target.name}")
            await self.call_one(target, "blockdev_create", {"disk": _to_builtins(new)},
                                f"creating disk {index} of instance {inst.name} on node "
                                f"{target.name}")
            created.append(new)
            new_ids[disk.uuid] = new_id
        return new_ids

    async def _send(self, args: dict[str, Any], rpc_timeout: float) -> Any:
        """``migration_send`` on the source; meanwhile its progress goes to the job log
        (the source answers ``migration_status`` while it migrates)."""
        inst, source = self.instance, self.primary
        send = asyncio.ensure_future(self.call_one(
            source, "migration_send", args, f"migrating instance {inst.name}",
            rpc_timeout=rpc_timeout))
        last = ""
        try:
            while True:
                done, _ = await asyncio.wait({send}, timeout=PROGRESS_INTERVAL)
                if done:
                    return send.result()
                try:
                    status = await self.call_one(
                        source, "migration_status",
                        {"instance": inst.name, "hypervisor": inst.hypervisor},
                        f"asking node {source.name} how the migration goes")
                except CorralError:
                    continue
                line = progress_line(status)
                if line and line != last:
                    self.feedback(line)
                    last = line
        finally:
            if not send.done():
                send.cancel()
                with contextlib.suppress(BaseException):
                    await send

    async def _abort(self, target_spec: dict[str, Any], created: list[DiskSpec]) -> bool:
        """Undo a failed migration: the target's qemu and disks go, then the instance
        runs on the source again. When the target cannot be told to drop its copy, the
        source is left as it is (a completed migration may run the guest there): the
        job log says to run ``--cleanup``. Whether the source was resumed."""
        inst, source, target = self.instance, self.primary, self.target
        self.feedback(f"migration of instance {inst.name} failed: aborting")
        dropped = await self.try_call(target, "migration_finish",
                                      {"instance": target_spec, "success": False},
                                      f"dropping instance {inst.name} on node {target.name}")
        if not dropped:
            self.feedback(
                f" - WARNING: instance {inst.name} is not resumed on node {source.name} as "
                f"node {target.name} may run it; run 'gnt-instance migrate --cleanup "
                f"{inst.name}' once node {target.name} answers")
            return False
        await self._hand_over_shared_disks(target, source)
        resumed = await self.try_call(source, "migration_finish_source",
                                      {"instance": self.spec(), "success": False},
                                      f"resuming instance {inst.name} on node {source.name}")
        for spec in created:
            await self.try_call(target, "blockdev_remove", {"disk": _to_builtins(spec)},
                                f"removing the copy of disk {spec.index} on node "
                                f"{target.name}")
        return resumed

    async def _cleanup(self) -> None:
        """After a failed migration: find where the instance runs and record that.

        A copy still waiting for (or holding, paused) incoming data is ``migrating``:
        it is dropped unless the source holds nothing; a source left paused by the
        migration is resumed.
        """
        inst, source, target = self.instance, self.primary, self.target
        self.feedback("checking where the instance actually runs")
        source_state = _state(await self.instance_info(source))
        target_state = _state(await self.instance_info(target))
        self.feedback(f"instance {inst.name}: {source_state or 'absent'} on {source.name}, "
                      f"{target_state or 'absent'} on {target.name}")
        target_spec = self.spec(target)
        if source_state in _RUNS and target_state in _RUNS:
            raise OpExecError(f"instance {inst.name} runs on both {source.name} and "
                              f"{target.name}: stop one of them by hand")
        if target_state in _RUNS or (target_state and not source_state):
            await self.call_one(target, "migration_finish",
                                {"instance": target_spec, "success": True,
                                 "reason": self.last_reason()},
                                f"finishing the migration of instance {inst.name}")
            if source_state:
                await self.try_call(source, "migration_finish_source",
                                    {"instance": self.spec(), "success": True},
                                    f"stopping instance {inst.name} on node {source.name}")
            await self.switch_primary()
            self.feedback(f"instance {inst.name} runs on {target.name}: now its primary node")
            return
        await self.try_call(target, "migration_finish",
                            {"instance": target_spec, "success": False},
                            f"cleaning up instance {inst.name}")
        if source_state:
            await self.try_call(source, "migration_finish_source",
                                {"instance": self.spec(), "success": False},
                                f"resuming instance {inst.name} on node {source.name}")
        where = "runs" if source_state else "does not run anywhere; it stays"
        self.feedback(f"instance {inst.name} {where} on node {source.name}")


#: The states of a copy that really runs the guest (``migrating`` is a copy that
#: sends or waits for it).
_RUNS = frozenset({"running", "paused"})


def _state(info: Any) -> str:
    """An ``instance_info`` answer's state; empty when the instance is not there."""
    if not is_running(info):
        return ""
    return str(info.get("state") or "running")


def _mib(value: Any) -> str:
    return f"{value / 1048576:.1f} MiB" if isinstance(value, int | float) else "?"


def progress_line(status: Any) -> str:
    """One job-log line from a ``migration_status`` answer (empty when it says nothing):
    the disks being copied, then memory sent and remaining, the expected downtime."""
    if not isinstance(status, dict) or not status.get("status"):
        return ""
    parts: list[str] = []
    for disk in status.get("disks") or []:
        if isinstance(disk, dict):
            parts.append(f"disk {disk.get('index', '?')}: {_mib(disk.get('done'))} of "
                         f"{_mib(disk.get('total'))} copied")
    ram = status.get("ram")
    if isinstance(ram, dict) and ram.get("total"):
        share = 100.0 * float(ram.get("transferred") or 0) / float(ram["total"])
        parts.append(f"memory: {_mib(ram.get('transferred'))} sent ({share:.1f}%), "
                     f"{_mib(ram.get('remaining'))} remaining")
    if status.get("expected_downtime") is not None:
        parts.append(f"expected downtime {status['expected_downtime']} ms")
    return f"migration {status['status']}" + (": " + ", ".join(parts) if parts else "")


class LUInstanceMove(_MoveBase[OpInstanceMove]):
    """Stop the instance, copy its file disks to the target node, start it there."""

    OP_ID = "OP_INSTANCE_MOVE"
    WHAT = "move"

    def check_arguments(self) -> None:
        """A known compression mode."""
        if self.op.compress not in MOVE_COMPRESSIONS:
            raise ParameterError(f"unknown compression {self.op.compress!r}; valid ones: "
                                 f"{', '.join(MOVE_COMPRESSIONS)}")

    def expand_names(self) -> None:
        """The instance and the target node."""
        super().expand_names()
        self.set_target(_target_from_op(self, self.op.target_node, self.op.target_node_uuid,
                                        None, "move"))

    def needs_source(self) -> bool:
        """The source must answer when there is data to copy."""
        return bool(self.instance.disks) or not self.op.ignore_consistency

    def check_prereq(self) -> None:
        """Copyable disks only."""
        super().check_prereq()
        template = self.instance.disk_template
        if template not in COPYABLE_TEMPLATES:
            hint = (": they are reachable from every node, use 'gnt-instance failover' "
                    "or 'migrate'" if template in SHARED_TEMPLATES else "")
            raise OpPrereqError(f"cannot move instance {self.instance.name}: disks of "
                                f"template {template!r} cannot be copied{hint}")

    async def execute(self) -> None:
        """Shut down, copy every disk, commit, remove the source copies, start."""
        inst = self.instance
        await self.check_target_has_needs()
        if inst.admin_state == "up":
            await self.check_free_memory(self.beparams()["maxmem"])
        if self.op.dry_run:
            return None
        if self.op.compress != "none":
            self.feedback(f"note: compress={self.op.compress} is not used; disk data streams "
                          "between node daemons uncompressed")
        source, target = self.primary, self.target
        try:
            was_running = is_running(await self.instance_info(source))
        except CorralError:
            if not self.op.ignore_consistency or inst.disks:
                raise
            was_running = False
        self.feedback(f"shutting down instance {inst.name} on node {source.name}")
        try:
            await self.call_one(source, "instance_shutdown",
                                {"instance": self.spec(),
                                 "timeout": float(self.op.shutdown_timeout),
                                 "reason": self.op.reason},
                                f"shutting down instance {inst.name}")
        except CorralError as err:
            if not self.op.ignore_consistency:
                raise OpExecError(f"{err.message}; nothing was changed") from None
            self.feedback(f" - WARNING: {err.message}; proceeding anyway")
        try:
            new_ids = await self._copy_disks(source, target)
        except BaseException:
            if was_running:
                await self.try_call(source, "instance_start",
                                    {"instance": self.spec(), "startup_paused": False,
                                     "reason": self.op.reason},
                                    f"restarting instance {inst.name}")
            raise
        old_specs = [self.disk_spec(d, i, source) for i, d in enumerate(self.disks())]
        await self.switch_primary(new_ids, status_change=self.instance.admin_state == "up")
        for spec in old_specs:
            await self.try_call(source, "blockdev_remove", {"disk": _to_builtins(spec)},
                                f"removing disk {spec.index} of instance {inst.name} from "
                                f"the old node")
        await self.try_call(source, "instance_shutdown",
                            {"instance": self.spec(source), "forget": True},
                            f"forgetting instance {inst.name} on the old node")
        self.feedback(f"instance {inst.name} moved to node {target.name}")
        if self.instance.admin_state == "up":
            await self.start_on_target()
        return None

    async def _copy_disks(self, source: Node, target: Node) -> dict[str, list[str]]:
        """Create and fill every disk on the target; undo all on failure."""
        inst = self.instance
        cluster = self.master.store.cluster
        created: list[DiskSpec] = []
        new_ids: dict[str, list[str]] = {}
        try:
            for index, disk in enumerate(self.disks()):
                new_id = logical_id_on_node(self.master.store, inst, disk, index)
                new = self.disk_spec(disk, index, target, new_id)
                old = self.disk_spec(disk, index, source)
                await self.call_one(target, "blockdev_create", {"disk": _to_builtins(new)},
                                    f"creating disk {index} of instance {inst.name}")
                created.append(new)
                self.feedback(f"copying disk {index} ({disk.size} MiB) to node {target.name}")
                started = time.monotonic()
                copied = await self.call_one(
                    target, "blockdev_copy_from",
                    {"disk": _to_builtins(new), "source_ip": source.primary_ip,
                     "source_port": cluster.noded_port, "source_disk": _to_builtins(old)},
                    f"copying disk {index} of instance {inst.name}",
                    rpc_timeout=60.0 + disk.size / 10,
                )
                size = copied.get("bytes") if isinstance(copied, dict) else None
                self.feedback(f"disk {index}: {size if size is not None else '?'} bytes "
                              f"copied in {time.monotonic() - started:.1f} s")
                new_ids[disk.uuid] = new_id
        except BaseException:
            for spec in created:
                await self.try_call(target, "blockdev_remove", {"disk": _to_builtins(spec)},
                                    f"removing the copy of disk {spec.index}")
            raise
        return new_ids
