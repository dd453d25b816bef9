"""The iallocator request: the cluster as Ganeti's protocol describes it, plus the
typed question (``allocate``, ``relocate``, ``change-group``, ``node-evacuate``,
``multi-allocate``).

The input is what Ganeti 3.0 writes for its plugins (recorded from a real cluster in
``tests/data/iallocator/``): version 2, the cluster's name, tags, enabled hypervisors
and instance policy, the node groups by UUID (with their effective policy), the nodes
by name (their configuration and, for the online VM-capable ones, the live memory,
disk and CPUs their node daemons report), the instances by name, and the request.

Live data comes in as the node daemons' answers (:class:`NodeLive`); everything else
is read from one configuration snapshot. The builder is pure: the master gathers the
answers and runs the plugin (:mod:`corral.iallocator.runner`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from corral.objects import fill_params
from corral.objects.ipolicy import group_policy

if TYPE_CHECKING:
    from corral.config import ConfigStore
    from corral.objects import Cluster, Disk, Instance, Node, NodeGroup

__all__ = [
    "EVAC_MODES",
    "IALLOCATOR_VERSION",
    "MODES",
    "REPORTED_STORAGE",
    "ClusterView",
    "NodeLive",
    "ReportedStorage",
    "allocate_request",
    "build_input",
    "change_group_request",
    "disk_space",
    "multi_allocate_request",
    "node_evacuate_request",
    "relocate_request",
    "reported_storage",
    "required_nodes",
]

#: The protocol version Ganeti 3.0 speaks.
IALLOCATOR_VERSION: Final = 2
#: The request types, Ganeti's names.
MODES: Final = ("allocate", "relocate", "change-group", "node-evacuate", "multi-allocate")
#: Node evacuation modes.
EVAC_MODES: Final = ("primary-only", "secondary-only", "all")



@dataclass(frozen=True, slots=True)
class ReportedStorage:
    """Where the nodes measure a disk template's space: a directory (``node_info``'s
    ``storage_dirs``) or an LVM volume group (its ``volume_groups``)."""

    kind: Literal["dir", "vg"]
    name: str

    def node_info_args(self) -> dict[str, list[str]]:
        """What ``node_info`` must be asked for this storage to be in its answer."""
        if self.kind == "dir":
            return {"storage_dirs": [self.name]}
        return {"volume_groups": [self.name]}

    def space(self, info: Mapping[str, Any]) -> tuple[int, int]:
        """Size and free space (MiB) in a ``node_info`` answer; ``(0, 0)`` when the
        node could not tell (a volume group it lacks): it then fits no disk. A volume
        group's free space is that of its allocatable physical volumes, what creating
        a volume may use."""
        if self.kind == "dir":
            space = (info.get("storage") or {}).get(self.name)
            free_keys: tuple[str, ...] = ("free",)
        else:
            space = ((info.get("lvm") or {}).get("vgs") or {}).get(self.name)
            free_keys = ("allocatable_free", "free")
        if not isinstance(space, Mapping):
            return 0, 0
        return _number(space, "size"), _number(space, *free_keys)


#: Disk templates whose space the nodes report, and where (Ganeti reports file
#: storage and the cluster's LVM volume group, its ``STS_REPORT``); the others count
#: as 0. A template that comes later adds its entry here.
REPORTED_STORAGE: dict[str, Callable[[Cluster], ReportedStorage | None]] = {
    "file": lambda cluster: ReportedStorage("dir", cluster.file_storage_dir),
    "plain": lambda cluster: (ReportedStorage("vg", cluster.volume_group_name)
                              if cluster.volume_group_name else None),
}
#: Disk templates whose disks live on two nodes (a primary and a secondary).
INTERNALLY_MIRRORED: Final = frozenset({"drbd"})
#: Extra space each disk of these templates takes besides its size (DRBD metadata).
_DISK_OVERHEAD: Final[Mapping[str, int]] = {"drbd": 128}
#: Templates whose disks take no space on the nodes.
_NO_SPACE: Final = frozenset({"diskless", "blockdev"})


@dataclass(frozen=True, slots=True)
class NodeLive:
    """What one node's daemon answered: ``node_info`` (memory, CPUs, storage) and
    ``all_instances_info`` (the instances running there); ``None`` when not asked."""

    info: Mapping[str, Any] | None = None
    instances: Mapping[str, Any] = field(default_factory=dict)


def reported_storage(cluster: Cluster, disk_template: str) -> ReportedStorage | None:
    """Where the space reported for ``disk_template`` is measured (None: nowhere)."""
    reported = REPORTED_STORAGE.get(disk_template)
    return reported(cluster) if reported is not None else None


def required_nodes(disk_template: str) -> int:
    """How many nodes an instance of ``disk_template`` needs: 2 with a secondary."""
    return 2 if disk_template in INTERNALLY_MIRRORED else 1


def disk_space(disks: Sequence[Mapping[str, Any]]) -> int:
    """The space (MiB) disks need on their node, by template (Ganeti's rule)."""
    total = 0
    for disk in disks:
        dev_type = str(disk.get("dev_type", ""))
        if dev_type not in _NO_SPACE:
            total += int(disk.get("size") or 0) + _DISK_OVERHEAD.get(dev_type, 0)
    return total


# -- the typed requests ------------------------------------------------------------


def allocate_request(*, name: str, disk_template: str, disks: Sequence[Mapping[str, Any]],
                     nics: Sequence[Mapping[str, Any]], vcpus: int, memory: int,
                     spindle_use: int, os: str, tags: Sequence[str], hypervisor: str,
                     group_name: str | None = None) -> dict[str, Any]:
    """An ``allocate`` request (also an item of ``multi-allocate``): each disk dict gets
    the template as ``dev_type``."""
    disk_list = [{**disk, "dev_type": disk_template} for disk in disks]
    return {
        "name": name, "disk_template": disk_template, "group_name": group_name,
        "tags": list(tags), "os": os, "vcpus": vcpus, "memory": memory,
        "spindle_use": spindle_use, "disks": disk_list,
        "disk_space_total": disk_space(disk_list), "nics": [dict(nic) for nic in nics],
        "required_nodes": required_nodes(disk_template), "hypervisor": hypervisor,
        "type": "allocate",
    }


def multi_allocate_request(requests: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A ``multi-allocate`` request of several ``allocate`` ones."""
    return {"instances": [{k: v for k, v in request.items() if k != "type"}
                          for request in requests], "type": "multi-allocate"}


def relocate_request(store: ConfigStore, instance: Instance, relocate_from: Sequence[str]
                     ) -> dict[str, Any]:
    """A ``relocate`` request: a new node for ``instance`` instead of the nodes named
    in ``relocate_from``."""
    disks = [{"size": d.size, "dev_type": d.dev_type}
             for d in (store.get("disk", uuid) for uuid in instance.disks)]
    return {"name": instance.name, "disk_space_total": disk_space(disks),
            "required_nodes": 1, "relocate_from": list(relocate_from), "type": "relocate"}


def node_evacuate_request(instances: Sequence[str], evac_mode: str) -> dict[str, Any]:
    """A ``node-evacuate`` request for the named instances."""
    return {"instances": list(instances), "evac_mode": evac_mode, "type": "node-evacuate"}


def change_group_request(instances: Sequence[str], target_groups: Sequence[str]
                         ) -> dict[str, Any]:
    """A ``change-group`` request: move the instances to one of ``target_groups``."""
    return {"instances": list(instances), "target_groups": list(target_groups),
            "type": "change-group"}


# -- the cluster -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterView:
    """The objects a request is built from, taken from the store in one go (cheap: its
    lists and a dict of disks), so that the building itself can run in a worker
    thread while the event loop goes on (the objects are never changed in place)."""

    cluster: Cluster
    groups: Mapping[str, NodeGroup]
    nodes: Sequence[Node]
    instances: Sequence[Instance]
    disks: Mapping[str, Disk]

    @classmethod
    def of(cls, store: ConfigStore) -> ClusterView:
        """The store's objects now."""
        return cls(cluster=store.cluster,
                   groups={group.uuid: group for group in store.all("nodegroup")},
                   nodes=store.all("node"), instances=store.all("instance"),
                   disks={disk.uuid: disk for disk in store.all("disk")})


@dataclass(slots=True)
class _Described:
    """An instance's entry in an earlier input, with the objects it was made from: it
    is reused while they are the very same objects (the store replaces an object it
    changes, never changes it in place), which turns the largest part of a request on a
    big cluster into a lookup per instance."""

    #: The instance, the cluster, its primary node and group, its disks and their nodes.
    made_from: tuple[Any, ...]
    beparams: dict[str, Any]
    entry: dict[str, Any]

    @staticmethod
    def key(inst: Instance, cluster: Cluster, view: ClusterView,
            nodes: Mapping[str, Node]) -> tuple[Any, ...]:
        node = nodes.get(inst.primary_node)
        disks = tuple(view.disks.get(uuid) for uuid in inst.disks)
        others = tuple(nodes.get(uuid) for disk in disks if disk is not None
                       for uuid in disk.nodes if uuid != inst.primary_node)
        group = view.groups.get(node.group) if node is not None else None
        return (inst, cluster, node, group, *disks, *others)

    def same(self, key: tuple[Any, ...]) -> bool:
        """Whether ``key`` holds the very objects this entry was made from."""
        return len(key) == len(self.made_from) and all(
            a is b for a, b in zip(key, self.made_from, strict=True))


#: The entries of the latest input, by instance UUID (only the current instances: an
#: input replaces the whole map, so nothing stale is kept alive).
_described: dict[str, _Described] = {}


def build_input(source: ConfigStore | ClusterView, live: Mapping[str, NodeLive],
                request: Mapping[str, Any], *, disk_template: str | None = None
                ) -> dict[str, Any]:
    """The whole input of a plugin for ``request``.

    ``live`` holds the answers of the online VM-capable nodes by name; any other node
    gets only its configuration (as Ganeti gives offline nodes).
    ``disk_template`` picks the storage whose space the nodes report (default: the
    request's, else the cluster's first enabled one). Built in one pass over the
    objects, with every group's filled parameters computed once and the entries of
    unchanged instances taken from the previous input (:class:`_Described`); the result
    shares them, so it is read, never changed.
    """
    view = source if isinstance(source, ClusterView) else ClusterView.of(source)
    cluster = view.cluster
    template = (disk_template or request.get("disk_template")
                or (cluster.enabled_disk_templates or ["diskless"])[0])
    be_defaults = cluster.beparams.get("default", {})
    nic_defaults = cluster.nicparams.get("default", {})
    group_be = {uuid: fill_params(be_defaults, g.beparams) for uuid, g in view.groups.items()}
    group_nic = {uuid: fill_params(nic_defaults, g.nicparams)
                 for uuid, g in view.groups.items()}
    group_nd = {uuid: fill_params(cluster.ndparams, g.ndparams)
                for uuid, g in view.groups.items()}
    node_group = {node.uuid: node.group for node in view.nodes}
    node_names = {node.uuid: node.name for node in view.nodes}
    nodes_by_uuid = {node.uuid: node for node in view.nodes}
    beparams: dict[str, dict[str, Any]] = {}
    by_primary: dict[str, list[Instance]] = {}
    instances: dict[str, Any] = {}
    global _described
    before, described = _described, {}
    for inst in view.instances:
        group_uuid = node_group.get(inst.primary_node, "")
        key = _Described.key(inst, cluster, view, nodes_by_uuid)
        old = before.get(inst.uuid)
        if old is None or not old.same(key):
            be = fill_params(group_be.get(group_uuid, be_defaults), inst.beparams)
            old = _Described(key, be, _instance(view, inst, be, group_nic.get(
                group_uuid, nic_defaults), node_names))
        described[inst.uuid] = old
        beparams[inst.uuid] = old.beparams
        instances[inst.name] = old.entry
        by_primary.setdefault(inst.primary_node, []).append(inst)
    _described = described
    storage = reported_storage(cluster, template)
    data: dict[str, Any] = {
        "version": IALLOCATOR_VERSION,
        "cluster_name": cluster.name,
        "cluster_tags": list(cluster.tags),
        "enabled_hypervisors": list(cluster.enabled_hypervisors),
        "ipolicy": cluster.ipolicy,
        "nodegroups": {
            uuid: {"name": group.name, "alloc_policy": group.alloc_policy,
                   "networks": list(group.networks),
                   "ipolicy": group_policy(cluster.ipolicy, group.ipolicy),
                   "tags": list(group.tags)}
            for uuid, group in view.groups.items()},
    }
    node_data: dict[str, Any] = {}
    for node in view.nodes:
        static = {
            "tags": list(node.tags),
            "primary_ip": node.primary_ip,
            "secondary_ip": node.secondary_ip or node.primary_ip,
            "offline": node.offline,
            "drained": node.drained,
            "master_candidate": node.master_candidate,
            "group": node.group,
            "master_capable": node.master_capable,
            "vm_capable": node.vm_capable,
            "ndparams": fill_params(group_nd.get(node.group, cluster.ndparams),
                                    node.ndparams),
        }
        answer = live.get(node.name)
        if answer is None or answer.info is None or node.offline or not node.vm_capable:
            node_data[node.name] = static
            continue
        dynamic = _dynamic_node(answer, by_primary.get(node.uuid, []), beparams, storage)
        node_data[node.name] = {**dynamic, **static}
    data["nodes"] = node_data
    data["instances"] = instances
    data["request"] = dict(request)
    return data


def _number(info: Mapping[str, Any], *keys: str) -> int:
    for key in keys:
        value = info.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value)
    return 0


def _dynamic_node(answer: NodeLive, primaries: Sequence[Instance],
                  beparams: Mapping[str, Mapping[str, Any]],
                  storage: ReportedStorage | None) -> dict[str, Any]:
    info = answer.info or {}
    total = _number(info, "memory_total")
    free = _number(info, "memory_free")
    reserved = (_number(info, "memory_dom0") if "memory_dom0" in info
                else max(0, total - free - _number(info, "memory_hv")))
    # Memory of instances that should run but use less than their maximum (or are
    # down although marked up) is counted as taken, as Ganeti does.
    pri_memory = pri_up_memory = 0
    for inst in primaries:
        maxmem = int(beparams[inst.uuid].get("maxmem", 0))
        pri_memory += maxmem
        if inst.admin_state == "up":
            running = answer.instances.get(inst.name)
            used = _number(running, "memory") if isinstance(running, Mapping) else 0
            free -= max(0, maxmem - used)
            pri_up_memory += maxmem
    disk_total, disk_free = storage.space(info) if storage is not None else (0, 0)
    return {
        "total_memory": total,
        "reserved_memory": reserved,
        "free_memory": free,
        "total_disk": disk_total,
        "free_disk": disk_free,
        "total_spindles": 0,
        "free_spindles": 0,
        "total_cpus": _number(info, "cpu_total", "cpu_count"),
        "reserved_cpus": _number(info, "cpu_dom0", "cpu_total", "cpu_count"),
        "i_pri_memory": pri_memory,
        "i_pri_up_memory": pri_up_memory,
    }


def _instance(view: ClusterView, inst: Instance, be: Mapping[str, Any],
              nic_defaults: Mapping[str, Any], node_names: Mapping[str, str]
              ) -> dict[str, Any]:
    nics: list[dict[str, Any]] = []
    for nic in inst.nics:
        filled = fill_params(nic_defaults, nic.nicparams) if nic.nicparams else nic_defaults
        entry = {"mac": nic.mac, "ip": nic.ip, "mode": filled.get("mode"),
                 "link": filled.get("link")}
        if filled.get("mode") == "bridged":
            entry["bridge"] = filled.get("link")
        nics.append(entry)
    disks = [view.disks[uuid] for uuid in inst.disks if uuid in view.disks]
    secondaries: list[str] = []
    for disk in disks:
        for node_uuid in disk.nodes:
            if node_uuid != inst.primary_node and node_uuid not in secondaries:
                secondaries.append(node_uuid)
    disk_list = [{"dev_type": d.dev_type, "size": d.size, "mode": d.mode,
                  "spindles": d.spindles} for d in disks]
    return {
        "tags": list(inst.tags),
        "admin_state": inst.admin_state,
        "vcpus": be.get("vcpus"),
        "memory": be.get("maxmem"),
        "spindle_use": be.get("spindle_use"),
        "os": inst.os,
        "nodes": [node_names.get(uuid, uuid) for uuid in [inst.primary_node, *secondaries]],
        "nics": nics,
        "disks": disk_list,
        "disk_template": inst.disk_template if disks else "diskless",
        "disks_active": inst.admin_state == "up",
        "hypervisor": inst.hypervisor,
        "disk_space_total": disk_space(disk_list),
    }
