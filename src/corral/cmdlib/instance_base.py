"""What the instance areas share: the base of single-instance logical units, calls to
one node, disk specs and storage directories, NIC addresses and the OS check.

The instance logical units live in four modules (``instance_create``, ``instance``
for the life cycle of an existing instance, ``instance_migration`` and
``instance_change``); they all build on this one, so that an instance is locked,
re-read, described to a node and committed the same way everywhere.

Locks. :class:`InstanceLU` locks its instance exclusively and the instance's nodes
at the node and node-resource levels: shared for operations that only act on the
instance where it is (start, stop, reboot, reinstall, rename, remove; a shared node
lock keeps the node from being removed or taken offline underneath while many such
operations on one node run side by side), exclusively for those that move it or
change what it uses on a node.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import msgspec

from corral.cmdlib.base import LockRequest, LogicalUnit, MasterContext
from corral.cmdlib.common import (
    check_node_online,
    disk_node_spec,
    expand_instance,
    fill_osparams,
    instance_spec,
    split_os_name,
)
from corral.errors import (
    CorralError,
    NotFoundError,
    OpPrereqError,
    OsError,
    ParameterError,
    did_you_mean,
)
from corral.locking import LockLevel
from corral.objects import Disk, Instance, Node
from corral.objects.params import BE_PARAMS, HV_PARAMS, update_params, validate_params
from corral.objects.specs import DiskSpec, InstanceSpec
from corral.opcodes.instance_ops import InstanceOp

if TYPE_CHECKING:
    from corral.config import ConfigStore

__all__ = [
    "FILE_TEMPLATES",
    "RPC_INSTALL",
    "RPC_QUICK",
    "RPC_START",
    "InstanceLU",
    "call_node",
    "check_file_space",
    "check_hv_be",
    "check_instance_name",
    "check_ip",
    "check_mac",
    "check_memory_fits_group",
    "check_node_takes_instance",
    "check_os",
    "check_variant",
    "commit_instance",
    "generate_mac",
    "instance_info_text",
    "is_running",
    "remove_disks",
    "storage_dir",
    "wire",
]

_Op = TypeVar("_Op", bound=InstanceOp)

#: Disk templates corral creates as files.
FILE_TEMPLATES = frozenset({"file", "sharedfile"})

#: Node RPC timeouts (seconds): quick calls, starting an instance, running an OS script.
RPC_QUICK = 60.0
RPC_START = 300.0
RPC_INSTALL = 3660.0

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_MAC_RE = re.compile(r"^([0-9a-f]{2}:){5}[0-9a-f]{2}$")
#: What asks for a generated MAC where a MAC is expected.
_GENERATE_MAC = ("", "auto", "generate")
_MAC_ATTEMPTS = 64


# -- small helpers ------------------------------------------------------------------


def wire(spec: InstanceSpec | DiskSpec) -> dict[str, Any]:
    """A spec as RPC arguments."""
    result: dict[str, Any] = msgspec.to_builtins(spec)
    return result


def instance_info_text(name: str) -> str:
    """The metadata a new disk of instance ``name`` gets (Ganeti's
    ``originstname+<name>``): an ExtStorage volume's ``VOL_METADATA``."""
    return f"originstname+{name}"


def check_instance_name(name: str) -> None:
    """Refuse names that cannot be host names."""
    if len(name) > 255 or not _NAME_RE.match(name):
        raise ParameterError(
            f"invalid instance name {name!r}: use letters, digits, '.', '-' and '_', "
            "starting with a letter or a digit (at most 255 characters)")


async def call_node(master: MasterContext, node: Node, procedure: str,
                    args: Mapping[str, Any], what: str, *,
                    timeout: float = RPC_QUICK,  # noqa: ASYNC109 - the RPC's own timeout
                    ) -> Any:
    """Call ``procedure`` on one node; its payload, or its error prefixed by ``what``
    and naming the node."""
    results = await master.rpc.call([node], procedure, args, timeout=timeout)
    return results[node.name].get(what)


def check_node_takes_instance(node: Node, doing: str) -> None:
    """Refuse a node that cannot receive an instance: offline, drained or not
    vm_capable; ``doing`` says what was attempted ("create instance web1")."""
    check_node_online(node, doing)
    if node.drained:
        raise OpPrereqError(f"cannot {doing}: node {node.name} is drained (it takes no new "
                            "instances)")
    if not node.vm_capable:
        raise OpPrereqError(f"cannot {doing}: node {node.name} is not vm_capable")


def is_running(info: Any) -> bool:
    """Whether an ``instance_info`` answer says the instance runs (paused counts)."""
    return isinstance(info, dict) and info.get("state") not in (None, "shutdown")


async def commit_instance(master: MasterContext, uuid: str, reason: Sequence[Sequence[Any]],
                    change: Callable[[Instance], None],
                    disks: Callable[[Disk], None] | None = None, *,
                    status_change: bool = False) -> Instance:
    """Commit ``change`` to the instance (and ``disks`` to each of its disks); return
    the committed instance.

    The instance keeps the reason trail of its last *status change* (seed 001: why it
    was last started, stopped, rebooted...): ``reason`` replaces it only when
    ``status_change`` says this is one (the caller starts or stops the instance) or
    when the commit changes the admin state (``up``/``down``/``offline``). Other
    changes (parameters, disks, OS, name, a live migration) leave it alone.
    """
    async with master.store.transaction() as txn:
        inst = txn.get("instance", uuid)
        admin_state = inst.admin_state
        change(inst)
        if status_change or inst.admin_state != admin_state:
            inst.last_reason = [list(entry) for entry in reason]
        txn.update(inst)
        if disks is not None:
            for disk_uuid in inst.disks:
                disk = txn.get("disk", disk_uuid)
                disks(disk)
                txn.update(disk)
    return master.store.get("instance", uuid)


# -- parameters and the OS ------------------------------------------------------------


def check_hv_be(hypervisor: str, hvparams: Mapping[str, Any], beparams: Mapping[str, Any]
                ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Validated instance-level hypervisor and backend parameter overrides."""
    hv = validate_params("hypervisor", HV_PARAMS[hypervisor], hvparams, instance_level=True)
    be = validate_params("backend", BE_PARAMS, beparams, instance_level=True)
    return update_params({}, hv), update_params({}, be)


async def check_memory_fits_group(lu: LogicalUnit[Any], group_uuid: str, hypervisor: str,
                                  maxmem: int) -> None:
    """Refuse a ``maxmem`` larger than the total memory of every node of the group:
    such an instance could never start anywhere in it.

    The nodes are asked (``node_info``, whose answer is kept a while: see
    :mod:`corral.cmdlib.node_memory`); nodes that are offline, not vm_capable or do
    not answer are left out, and when none tells its memory the check cannot be made:
    that is said in the job log and the value is accepted, as Ganeti goes ahead when
    it cannot read a node's memory.
    """
    store = lu.master.store
    group = store.get("nodegroup", group_uuid)
    nodes = sorted((n for n in store.all("node")
                    if n.group == group_uuid and not n.offline and n.vm_capable),
                   key=lambda n: n.name)
    totals = await lu.master.node_memory.totals(lu.master.rpc, nodes, hypervisor,
                                                timeout=RPC_QUICK) if nodes else {}
    if not totals:
        lu.feedback(f" - WARNING: no node of group {group.name} told its memory; maxmem "
                    f"({maxmem} MiB) is not checked against it")
        return
    largest_node, largest = max(totals.items(), key=lambda item: (item[1], item[0]))
    if maxmem > largest:
        raise ParameterError(
            f"backend parameter maxmem ({maxmem} MiB) is more memory than any node of "
            f"group {group.name} has (the largest, {largest_node}, has {largest} MiB): "
            f"the instance could never start; accepted: at most {largest} MiB")


def check_variant(os_name: str, variants: Sequence[str], force_variant: bool) -> None:
    """Refuse ``os_name`` unless it names exactly one of the OS's ``variants`` (design
    2.1); an OS without variants takes none. ``force_variant`` lets a missing or
    undeclared variant through: the scripts then get the first declared variant or
    the one given."""
    if force_variant:
        return
    base, variant = split_os_name(os_name)
    choices = ", ".join(f"{base}+{v}" for v in variants)
    forced = "--force-variant (RAPI/opcode: force_variant=true)"
    if variants and not variant:
        raise OsError(f"OS {base} has variants: give exactly one, as one of {choices} "
                      f"(or {forced} to let the OS pick its first)")
    if variants and variant not in variants:
        raise OsError(f"OS {base} has no variant {variant!r}; its variants: {choices} "
                      f"({forced} passes an undeclared one to the OS scripts)")
    if variant and not variants:
        raise OsError(f"OS {base} has no variants, but {os_name!r} names one; use {base}")


async def check_os(lu: LogicalUnit[Any], node: Node, os_name: str, *,
                   force_variant: bool, own_params: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``os_name`` on ``node`` (exists, valid, variant, parameters); return the
    OS parameters filled in the order instance > OS+variant > OS."""
    cluster = lu.master.store.cluster
    base = split_os_name(os_name)[0]
    search_path = list(cluster.os_search_path)
    info = await call_node(lu.master, node, "os_get",
                           {"name": base if force_variant else os_name,
                            "search_path": search_path},
                           f"looking up OS {os_name}")
    if not isinstance(info, dict):
        raise OsError(f"OS {os_name}: node {node.name} answered no OS description")
    if not info.get("valid", True):
        raise OsError(f"OS {os_name} is not valid on node {node.name}: {info.get('message')}")
    check_variant(os_name, list(info.get("variants") or []), force_variant)
    known = {str(entry[0]).lower() for entry in info.get("parameters") or [] if entry}
    unknown = sorted(name for name in own_params if name.lower() not in known)
    if unknown:
        raise OsError(f"OS {base} does not have the parameter(s) {', '.join(unknown)}; "
                      + did_you_mean(unknown, sorted(known), noun="parameters of the OS",
                                     listing=f"gnt-os info {base}"))
    filled = fill_osparams(lu.master.store, os_name, dict(own_params))
    if filled or known:
        # An OS without parameters has nothing to verify: spare the script run.
        await call_node(lu.master, node, "os_validate",
                        {"name": os_name, "osparams": filled, "search_path": search_path,
                         "force_variant": force_variant},
                        f"validating the parameters of OS {os_name}")
    return filled


# -- NIC addresses --------------------------------------------------------------------


def _where(where: str) -> str:
    return f"{where}: " if where else ""


def check_mac(value: Any, where: str = "") -> str:
    """A MAC address in canonical form (lower case, colons); ``""`` for the words that
    ask for a generated one (empty, ``auto``, ``generate``)."""
    mac = "" if value is None else str(value).strip().lower().replace("-", ":")
    if mac in _GENERATE_MAC:
        return ""
    if not _MAC_RE.match(mac):
        raise ParameterError(f"{_where(where)}invalid MAC address {value!r}: expected six "
                             "hex octets like aa:00:00:12:34:56, or 'auto'/'generate'")
    return mac


def check_ip(value: Any, where: str = "") -> str | None:
    """An IP address in canonical form, or None for none (``None``, ``""``, ``none``)."""
    if value is None or (isinstance(value, str) and value.lower() in ("", "none")):
        return None
    if not isinstance(value, str):
        raise ParameterError(f"{_where(where)}invalid IP address {value!r}")
    if value.lower() == "pool":
        raise ParameterError(f"{_where(where)}if ip=pool, parameter network must be passed "
                             "too (network=NAME: the NIC takes a free address of its pool)")
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ParameterError(f"{_where(where)}invalid IP address {value!r}") from None


def generate_mac(prefix: str, used: set[str]) -> str:
    """A MAC of the cluster's three-octet ``prefix`` and three random octets that is not
    in ``used``; it is added to ``used``."""
    for _attempt in range(_MAC_ATTEMPTS):
        suffix = secrets.randbits(24)
        mac = f"{prefix.lower()}:{suffix >> 16:02x}:{(suffix >> 8) & 0xff:02x}:{suffix & 0xff:02x}"
        if mac not in used:
            used.add(mac)
            return mac
    raise OpPrereqError(f"no free MAC address found with the prefix {prefix} after "
                        f"{_MAC_ATTEMPTS} attempts; set another prefix with "
                        "'gnt-cluster modify --mac-prefix'")


# -- disks ----------------------------------------------------------------------------


def storage_dir(store: ConfigStore, instance: Instance, template: str) -> str:
    """The cluster-wide directory for new disks of ``instance`` (``file`` or
    ``sharedfile``): where its existing disks are (an instance created with a
    ``file_storage_dir`` subdirectory keeps it), else the cluster's directory."""
    for uuid in instance.disks:
        disk = store.get("disk", uuid)
        if disk.dev_type == template and len(disk.logical_id) == 2:
            path = PurePosixPath(disk.logical_id[1])
            if path.parent.name == instance.uuid:
                return str(path.parent.parent)
    cluster = store.cluster
    base = cluster.shared_file_storage_dir if template == "sharedfile" \
        else cluster.file_storage_dir
    if not base:
        raise OpPrereqError(f"the cluster has no {template} storage directory; set it with "
                            "'gnt-cluster modify'")
    return base


async def check_file_space(lu: LogicalUnit[Any], node: Node, hypervisor: str,
                           instance_name: str, new_disks: Sequence[tuple[int, Disk]], *,
                           forced: bool, override: str) -> None:
    """Refuse new file disks larger than the free space of their storage directory on
    ``node`` (the primary node; for ``sharedfile`` the shared directory as it sees it).

    ``new_disks`` are ``(index, disk)`` pairs; the sizes of the disks landing in the
    same directory are added up. The free space is the node's own ``node_info``
    answer for the directory, the figure ``grow-disk``'s dry run also checks against.
    Disk files are sparse, so a disk larger than the free space can be created, but
    it fails its guest once written: ``forced`` (the request's ``override``, named in
    the message) turns the refusal into a warning in the job log. A node that does
    not tell the free space is reported there too and the disks are accepted, as
    with memory (:func:`check_memory_fits_group`).
    """
    wanted: dict[str, list[tuple[int, Disk]]] = {}
    for index, disk in new_disks:
        if disk.dev_type in FILE_TEMPLATES and len(disk.logical_id) == 2:
            directory = str(PurePosixPath(disk.logical_id[1]).parent.parent)
            wanted.setdefault(directory, []).append((index, disk))
    if not wanted:
        return
    results = await lu.master.rpc.call(
        [node], "node_info", {"storage_dirs": sorted(wanted), "hypervisors": [hypervisor]},
        timeout=RPC_QUICK)
    answer = results[node.name]
    storage = answer.payload.get("storage") \
        if not answer.failed and isinstance(answer.payload, dict) else None
    for directory, disks in sorted(wanted.items()):
        info = storage.get(directory) if isinstance(storage, dict) else None
        free = info.get("free") if isinstance(info, dict) else None
        needed = sum(disk.size for _index, disk in disks)
        if len(disks) == 1:
            what = f"disk {disks[0][0]} ({needed} MiB) of instance {instance_name} needs"
        else:
            numbers = ", ".join(str(index) for index, _disk in disks)
            what = (f"disks {numbers} (together {needed} MiB) of instance {instance_name} "
                    "need")
        if not isinstance(free, int) or isinstance(free, bool):
            lu.feedback(f" - WARNING: node {node.name} did not tell the free space of "
                        f"{directory}; the {needed} MiB of new disks of instance "
                        f"{instance_name} there are not checked against it")
            continue
        if needed <= free:
            continue
        message = (f"{what} more space than node {node.name} has free in {directory}: "
                   f"{free} MiB free")
        if forced:
            lu.feedback(f" - WARNING: {message}; creating the sparse file(s) anyway")
            continue
        raise OpPrereqError(f"{message}; to create the sparse disk file(s) anyway, use "
                            f"{override}")


async def remove_disks(lu: LogicalUnit[Any], node: Node, disks: Sequence[DiskSpec], *,
                       best_effort: bool) -> list[str]:
    """Remove ``disks`` on ``node``; failures are raised, or with ``best_effort``
    reported in the job log and returned."""
    failures: list[str] = []
    for disk in disks:
        try:
            await call_node(lu.master, node, "blockdev_remove", {"disk": wire(disk)},
                            f"removing disk {disk.index}")
        except CorralError as err:
            if not best_effort:
                raise
            lu.feedback(f"Warning: {err.message}")
            failures.append(err.message)
    return failures


# -- the base of single-instance logical units ----------------------------------------


class InstanceLU(LogicalUnit[_Op]):
    """A logical unit about one instance: locks it (and its nodes) by name.

    Subclasses name further nodes to lock (a migration target) in
    :meth:`extra_nodes` and further instance names (a rename's new name) in
    :meth:`instance_locks`; the instance is re-read in :meth:`check_prereq`, and a
    primary node that changed while the job waited for its locks is refused.
    """

    #: Whether the instance lock is shared (read-only units).
    SHARED_INSTANCE: ClassVar[bool] = False
    #: Whether the instance's nodes are locked shared (the unit acts on the instance
    #: where it is) rather than exclusively (it moves it or changes what it uses).
    SHARED_NODES: ClassVar[bool] = False
    #: Whether the nodes of the instance are locked (node and node-resource levels).
    LOCK_NODES: ClassVar[bool] = True

    instance: Instance

    def expand_names(self) -> None:
        """The instance by name or UUID (``instance_name`` takes either); an
        ``instance_uuid`` given too must be that instance's, as in Ganeti. The opcode
        then carries the canonical name and UUID."""
        op = self.op
        inst = expand_instance(self.master.store, op.instance_name)
        if op.instance_uuid and op.instance_uuid != inst.uuid:
            raise ParameterError(f"instance_name {op.instance_name!r} and instance_uuid "
                                 f"{op.instance_uuid!r} name different instances")
        op.instance_name, op.instance_uuid = inst.name, inst.uuid
        self.instance = inst

    def extra_nodes(self) -> list[Node]:
        """Nodes besides the primary one that the unit locks."""
        return []

    def instance_locks(self) -> list[str]:
        """Names of the instance locks the unit takes (its instance's)."""
        return [self.instance.name]

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The instance; the primary and extra nodes at node and node-resource level."""
        locks = {LockLevel.INSTANCE: LockRequest(self.instance_locks(),
                                                 shared=self.SHARED_INSTANCE)}
        if self.LOCK_NODES:
            names = {self.master.store.get("node", self.instance.primary_node).name}
            names.update(node.name for node in self.extra_nodes())
            locks[LockLevel.NODE] = LockRequest(sorted(names), shared=self.SHARED_NODES)
            locks[LockLevel.NODE_RES] = LockRequest(sorted(names), shared=self.SHARED_NODES)
        return locks

    def check_prereq(self) -> None:
        """Re-read the instance now that it is locked."""
        store = self.master.store
        current = store.find("instance", self.instance.uuid)
        if current is None:
            raise NotFoundError(f"instance {self.instance.name} was removed meanwhile")
        self.instance = current
        if self.LOCK_NODES:
            owned = self.master.locks.owned_locks(LockLevel.NODE, owner=self.owner)
            if self.primary.name not in owned:
                raise OpPrereqError(
                    f"instance {current.name} moved to node {self.primary.name} while this "
                    "job waited for its locks; submit it again"
                )

    # -- helpers ---------------------------------------------------------------
    @property
    def primary(self) -> Node:
        """The instance's primary node."""
        return self.master.store.get("node", self.instance.primary_node)

    def disks(self) -> list[Disk]:
        """The instance's disks, in order."""
        return [self.master.store.get("disk", uuid) for uuid in self.instance.disks]

    def disk_spec(self, disk: Disk, index: int, node: Node | None = None,
                  logical_id: list[str] | None = None) -> DiskSpec:
        """What ``node`` (the primary node unless given) needs to know about one disk,
        parameters filled (see :func:`corral.cmdlib.common.disk_node_spec`);
        ``logical_id`` overrides the disk's."""
        return disk_node_spec(self.master.store, disk, index, node or self.primary,
                              logical_id)

    def instance_spec(self, node: Node | None = None) -> InstanceSpec:
        """The instance's filled spec (for ``node`` if not the primary)."""
        return instance_spec(self.master.store, self.instance, node)

    def spec(self, node: Node | None = None) -> dict[str, Any]:
        """The instance spec as RPC arguments (for ``node`` if not the primary)."""
        return wire(self.instance_spec(node))

    def last_reason(self) -> list[list[Any]]:
        """The reason trail of the instance's last status change (from the
        configuration), which a node that becomes its primary keeps from then on."""
        return [list(entry) for entry in self.instance.last_reason]

    async def instance_info(self, node: Node) -> Any:
        """``instance_info`` of the instance on ``node`` (raises naming the node)."""
        return await self.call_one(
            node, "instance_info",
            {"instance": self.instance.name, "hypervisor": self.instance.hypervisor},
            f"asking for instance {self.instance.name}")

    async def running(self) -> bool:
        """Whether the hypervisor on the primary node runs the instance."""
        return is_running(await self.instance_info(self.primary))

    async def call_one(self, node: Node, procedure: str, args: Mapping[str, Any], what: str,
                       *, rpc_timeout: float = RPC_QUICK) -> Any:
        """Call ``procedure`` on one node; its error is raised, prefixed by ``what``."""
        return await call_node(self.master, node, procedure, args, what, timeout=rpc_timeout)

    async def try_call(self, node: Node, procedure: str, args: Mapping[str, Any], what: str
                       ) -> bool:
        """Like :meth:`call_one`, but a failure is only reported in the job log."""
        try:
            await self.call_one(node, procedure, args, what)
        except CorralError as err:
            self.feedback(f" - WARNING: {err.message}")
            return False
        return True

    async def update_instance(self, change: Callable[[Instance], None],
                        disks: Callable[[Disk], None] | None = None, *,
                        status_change: bool = False) -> None:
        """Commit ``change`` to the instance (and ``disks`` to each disk); the opcode's
        reason trail becomes the instance's last one on a status change (see
        :func:`commit_instance`)."""
        self.instance = await commit_instance(self.master, self.instance.uuid, self.op.reason,
                                        change, disks, status_change=status_change)

    async def set_state(self, *, status_change: bool = False, **changes: Any) -> None:
        """Commit attribute ``changes`` (``admin_state="up"``) to the instance;
        ``status_change`` as for :func:`commit_instance`."""
        def change(inst: Instance) -> None:
            for name, value in changes.items():
                setattr(inst, name, value)
        await self.update_instance(change, status_change=status_change)
