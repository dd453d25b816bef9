"""Helpers every area of logical units shares: name expansion and filled instance specs.

Names or UUIDs are accepted wherever a name is (design 2.1); :func:`expand` turns
either into the object, and the error for an unknown one lists a few that exist.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from corral.errors import (
    CorralError,
    NotFoundError,
    OpPrereqError,
    ParameterError,
    did_you_mean,
)
from corral.hypervisor.kvm.security import check_security_params
from corral.locking import LockLevel
from corral.objects import NIC, Disk, Instance, Node, NodeGroup, fill_params
from corral.objects.params import DISK_PARAMS, defaults, fill_hv_params
from corral.objects.specs import DiskSpec, InstanceSpec, NicSpec
from corral.paths import Paths

if TYPE_CHECKING:
    from corral.cmdlib.base import LogicalUnit, MasterContext
    from corral.config import ConfigStore

__all__ = [
    "add_name_lock",
    "check_hv_on_nodes",
    "check_hv_syntax",
    "check_node_online",
    "disk_node_spec",
    "drop_name_lock",
    "expand_group",
    "expand_instance",
    "expand_node",
    "fill_diskparams",
    "fill_hvparams",
    "fill_osparams",
    "instance_spec",
    "lower_os_params",
    "nic_spec",
    "os_state_listed",
    "split_os_name",
]

_WHAT = {"node": "node", "nodegroup": "node group", "instance": "instance"}

#: Ganeti's words for an unknown object, the first line of the error.
_UNKNOWN = {"node": "Node '{}' not known", "nodegroup": "Node group '{}' not found",
            "instance": "Instance '{}' not known"}


def _expand(store: ConfigStore, kind: Literal["node", "nodegroup", "instance"],
            key: str) -> Any:
    found = store.find(kind, key)
    if found is None:
        hint = did_you_mean(key, sorted(o.name for o in store.all(kind)), noun=f"{_WHAT[kind]}s",
                            listing=f"gnt-{'group' if kind == 'nodegroup' else kind} list")
        raise NotFoundError(f"{_UNKNOWN[kind].format(key)}\n{hint}")
    return found


def expand_node(store: ConfigStore, key: str) -> Node:
    """The node called ``key`` or with UUID ``key``; :class:`NotFoundError` otherwise."""
    node: Node = _expand(store, "node", key)
    return node


def expand_group(store: ConfigStore, key: str) -> NodeGroup:
    """The node group called ``key`` or with UUID ``key``."""
    group: NodeGroup = _expand(store, "nodegroup", key)
    return group


def expand_instance(store: ConfigStore, key: str) -> Instance:
    """The instance called ``key`` or with UUID ``key``."""
    instance: Instance = _expand(store, "instance", key)
    return instance


def check_node_online(node: Node, what: str) -> None:
    """Refuse to ``what`` on an offline node, naming it."""
    if node.offline:
        raise OpPrereqError(f"cannot {what}: node {node.name} is offline")


def split_os_name(name: str) -> tuple[str, str]:
    """``"debian+buster"`` -> ``("debian", "buster")``; no variant gives ``""``."""
    base, _, variant = name.partition("+")
    return base, variant


def os_state_listed(entries: Sequence[str], os_name: str) -> bool:
    """Whether the OS of ``os_name`` is in a cluster OS state list (``hidden_os``,
    ``blacklisted_os``). States are per OS (design 2.2): an ``OS+VARIANT`` entry, which
    only an older configuration can hold, counts for its whole OS."""
    base = split_os_name(os_name)[0]
    return any(split_os_name(entry)[0] == base for entry in entries)


def lower_os_params(params: Mapping[str, Any], where: str = "osparams") -> dict[str, Any]:
    """``params`` with their names lower-cased, as OS parameter names are used (design
    2.2: ``TRACK`` in ``parameters.list`` is ``-O track=…``); two names that differ only
    in case are refused, since both would be the script's one ``OSP_`` variable."""
    lowered: dict[str, Any] = {}
    for name, value in params.items():
        key = name.lower()
        if key in lowered:
            twins = sorted(n for n in params if n.lower() == key)
            raise ParameterError(
                f"{where}: {', '.join(map(repr, twins))} name the same OS parameter "
                f"(names are not case-sensitive); give {key!r} once")
        lowered[key] = value
    return lowered


def fill_osparams(store: ConfigStore, os_name: str, own: Mapping[str, Any]) -> dict[str, Any]:
    """OS parameters in the order instance > OS+variant > OS (built-in defaults are the
    OS definition's own, applied by its scripts), by lower-cased name: an instance that
    a Ganeti configuration gave ``TRACK`` overrides the cluster's ``track``."""
    cluster = store.cluster
    base, _variant = split_os_name(os_name)
    return fill_params(
        {}, cluster.osparams.get(base), cluster.osparams.get(os_name) if os_name != base
        else None, {name.lower(): value for name, value in own.items()},
    )


def fill_hvparams(store: ConfigStore, instance: Instance, node: Node | None = None
                  ) -> dict[str, Any]:
    """Hypervisor parameters: cluster ← OS-specific (``os_hvp``) ← group ← instance; a
    global parameter always has the cluster's value (:func:`fill_hv_params`)."""
    cluster = store.cluster
    hv = instance.hypervisor
    node = node or store.get("node", instance.primary_node)
    group = store.get("nodegroup", node.group)
    return fill_hv_params(
        cluster.hvparams.get(hv, {}),
        cluster.os_hvp.get(split_os_name(instance.os)[0], {}).get(hv),
        group.hvparams.get(hv),
        instance.hvparams,
    )


def check_hv_syntax(hypervisor: str, filled: Mapping[str, Any]) -> None:
    """Check a hypervisor's filled parameters together, what no one of them tells alone
    (Ganeti's ``CheckParameterSyntax``): for kvm, the security model and domain. Run
    whenever a layer of them changes (instance create and modify, cluster modify).

    :raises ParameterError: naming the parameters and what is accepted.
    """
    if hypervisor == "kvm":
        check_security_params(filled)


#: Hypervisors whose parameters a node checks (:func:`check_hv_on_nodes`).
NODE_CHECKED_HYPERVISORS = frozenset({"kvm"})


async def check_hv_on_nodes(master: MasterContext, nodes: Sequence[Node], hypervisor: str,
                            filled: Mapping[str, Any]) -> None:
    """Have ``nodes`` check a hypervisor's filled parameters against themselves before
    they are stored (Ganeti's ``ValidateParameters``: for kvm, that the
    ``security_domain`` user exists there). Offline nodes are skipped, as in Ganeti.

    :raises CorralError: the first node's refusal, naming the node, or that it could
        not be asked.
    """
    if hypervisor not in NODE_CHECKED_HYPERVISORS:
        return
    targets = sorted((n for n in nodes if not n.offline), key=lambda n: n.name)
    if not targets:
        return
    results = await master.rpc.call(
        targets, "hypervisor_validate_params",
        {"hypervisor": hypervisor, "hvparams": dict(filled)}, timeout=30.0)
    for node in targets:
        results[node.name].get(f"checking the {hypervisor} hypervisor parameters")


def nic_spec(nic: NIC, index: int, defaults: Mapping[str, Any]) -> NicSpec:
    """What a node needs to know about NIC ``index``, its parameters filled from
    ``defaults`` (the cluster's, then its group's)."""
    params = fill_params(defaults, nic.nicparams)
    return NicSpec(
        index=index, mac=nic.mac, uuid=nic.uuid, ip=nic.ip, mode=params.get("mode", ""),
        link=params.get("link", ""), vlan=params.get("vlan", ""), name=nic.name,
        network=nic.network,
    )


def fill_diskparams(store: ConfigStore, dev_type: str, own: Mapping[str, Any],
                    group: NodeGroup) -> dict[str, Any]:
    """A disk's parameters as a node uses them: the template's built-in defaults ←
    cluster ← node group (``-D template:key=value``) ← the disk's own (Ganeti annotates
    disks the same way before every node call)."""
    specs = DISK_PARAMS.get(dev_type)
    if specs is None:
        return dict(own)
    cluster = store.cluster
    return fill_params(defaults(specs), cluster.diskparams.get(dev_type),
                       group.diskparams.get(dev_type), own)


def disk_node_spec(store: ConfigStore, disk: Disk, index: int, node: Node,
                   logical_id: Sequence[str] | None = None) -> DiskSpec:
    """What ``node`` needs to know about one disk: its filled parameters (see
    :func:`fill_diskparams`, the group being ``node``'s) and, for ``ext`` disks, the
    cluster's ExtStorage search path; ``logical_id`` overrides the disk's own."""
    group = store.get("nodegroup", node.group)
    search_path: list[str] = []
    if disk.dev_type == "ext":
        search_path = list(store.cluster.extstorage_search_path
                           or Paths.DEFAULT_EXTSTORAGE_SEARCH_PATH)
    return DiskSpec(
        uuid=disk.uuid, index=index, dev_type=disk.dev_type, size=disk.size, mode=disk.mode,
        logical_id=list(disk.logical_id if logical_id is None else logical_id),
        name=disk.name, params=fill_diskparams(store, disk.dev_type, disk.params, group),
        search_path=search_path,
    )


def instance_spec(store: ConfigStore, instance: Instance, node: Node | None = None
                  ) -> InstanceSpec:
    """Everything a node needs about ``instance``, parameters filled.

    ``node`` is the node the spec is for when that is not (yet) the primary node,
    e.g. the target of a move; group-level parameters come from its group.
    """
    cluster = store.cluster
    node = node or store.get("node", instance.primary_node)
    group = store.get("nodegroup", node.group)
    disks = [store.get("disk", uuid) for uuid in instance.disks]
    nic_defaults = fill_params(cluster.nicparams.get("default", {}), group.nicparams)
    nics = [nic_spec(nic, index, nic_defaults) for index, nic in enumerate(instance.nics)]
    return InstanceSpec(
        name=instance.name,
        uuid=instance.uuid,
        os=instance.os,
        hypervisor=instance.hypervisor,
        hvparams=fill_hvparams(store, instance, node),
        beparams=fill_params(cluster.beparams.get("default", {}), group.beparams,
                             instance.beparams),
        osparams=fill_osparams(store, instance.os, instance.osparams),
        disk_template=instance.disk_template,
        disks=[disk_node_spec(store, d, i, node) for i, d in enumerate(disks)],
        nics=nics,
        primary_node=node.name,
        admin_state=instance.admin_state,
        network_port=instance.network_port,
        tags=sorted(instance.tags),
    )


#: The lock level of the objects whose lock a job adds for a new name.
_NAME_LOCK_LEVEL = {"instance": LockLevel.INSTANCE, "network": LockLevel.NETWORK}


async def add_name_lock(lu: LogicalUnit[Any], name: str,
                        kind: Literal["instance", "network"] = "instance") -> None:
    """Make sure a lock called ``name`` exists at ``kind``'s level (a new or renamed
    object's), so that a second job for the same name waits for this one and then
    finds the name taken. Another job adding it at the same moment is fine."""
    level = _NAME_LOCK_LEVEL[kind]
    locks = lu.master.locks
    if name not in locks.lockset(level):
        try:
            await locks.add(level, name, owner=lu.owner)
        except CorralError:
            if name not in locks.lockset(level):
                raise


async def drop_name_lock(lu: LogicalUnit[Any], name: str,
                         kind: Literal["instance", "network"] = "instance") -> None:
    """Remove the lock ``name`` of ``kind``'s level unless an object of that kind has
    that name (again)."""
    if lu.master.store.find(kind, name) is None:
        await lu.master.locks.remove(_NAME_LOCK_LEVEL[kind], name, owner=lu.owner)
