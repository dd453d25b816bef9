"""Reading an iallocator request (Ganeti's ``doc/iallocator.rst`` protocol).

A request is one JSON object: the cluster (``cluster_tags``, ``nodegroups`` by UUID,
``nodes`` and ``instances`` by name, ``enabled_hypervisors``, ``ipolicy``) and the
``request`` itself, whose ``type`` is ``allocate``, ``relocate``, ``change-group``,
``node-evacuate``, ``multi-allocate`` or ``allocate-secondary``. :func:`parse`
builds the allocator's cluster from it the way hail does (offline, drained or not
VM-capable nodes take no instances and report nothing) and returns the typed request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from corral.allocator.load import finish, update_tags
from corral.allocator.model import NO_NODE, Cluster, Group, Instance, LoadError, Node
from corral.allocator.types import (
    DEFAULT_IPOLICY,
    DISK_TEMPLATES,
    IPolicy,
    PolicyError,
    alloc_policy_from_raw,
)

__all__ = [
    "REQUEST_TYPES",
    "AllocateRequest",
    "ChangeGroupRequest",
    "MultiAllocateRequest",
    "NodeEvacuateRequest",
    "RelocateRequest",
    "Request",
    "RequestError",
    "SecondaryRequest",
    "parse",
]

REQUEST_TYPES = ("allocate", "relocate", "change-group", "node-evacuate", "multi-allocate",
                 "allocate-secondary")
EVAC_MODES = ("primary-only", "secondary-only", "all")


class RequestError(LoadError):
    """A request that cannot be read: the message says what and where."""


@dataclass
class AllocateRequest:
    """Place a new instance (``allocate``)."""

    inst: Instance
    required_nodes: int
    group_name: str | None = None
    restrict_to: list[str] | None = None


@dataclass
class RelocateRequest:
    """Move an instance off some nodes (``relocate``)."""

    inst: int
    required_nodes: int
    relocate_from: list[int]


@dataclass
class ChangeGroupRequest:
    """Move instances to other groups (``change-group``)."""

    instances: list[int]
    target_groups: list[int]


@dataclass
class NodeEvacuateRequest:
    """Move instances off their nodes (``node-evacuate``)."""

    instances: list[int]
    mode: str


@dataclass
class MultiAllocateRequest:
    """Place several new instances (``multi-allocate``)."""

    instances: list[tuple[Instance, int]]
    group_name: str | None = None


@dataclass
class SecondaryRequest:
    """Find a secondary node for an instance being converted to drbd."""

    inst: int


Request = (AllocateRequest | RelocateRequest | ChangeGroupRequest | NodeEvacuateRequest
           | MultiAllocateRequest | SecondaryRequest)


@dataclass
class Parsed:
    """A request read: the cluster, the request and warnings about the data."""

    cluster: Cluster
    request: Request
    kind: str
    warnings: list[str] = field(default_factory=list)


def _get(obj: Mapping[str, Any], key: str, what: str) -> Any:
    if type(obj) is not dict and not isinstance(obj, Mapping):
        raise RequestError(f"{what}: expected an object")
    if key not in obj:
        raise RequestError(f"{what}: key '{key}' is missing")
    return obj[key]


def _number(obj: Mapping[str, Any], key: str, what: str, kind: type = int) -> Any:
    value = _get(obj, key, what)
    if type(value) is int:
        return value if kind is int else float(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RequestError(f"{what}: key '{key}' must be a number, got {value!r}")
    if kind is int:
        if isinstance(value, float) and not value.is_integer():
            raise RequestError(f"{what}: key '{key}' must be an integer, got {value!r}")
        return int(value)
    return float(value)


def _string_list(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RequestError(f"{what}: expected a list of strings, got {value!r}")
    return list(value)


def _bool(obj: Mapping[str, Any], key: str, what: str) -> bool:
    value = _get(obj, key, what)
    if not isinstance(value, bool):
        raise RequestError(f"{what}: key '{key}' must be true or false, got {value!r}")
    return value


def _base_instance(name: str, data: Mapping[str, Any]) -> Instance:
    what = f"invalid data for instance '{name}'"
    disk_total = _number(data, "disk_space_total", what)
    disks_raw = _get(data, "disks", what)
    if not isinstance(disks_raw, list):
        raise RequestError(f"{what}: key 'disks' must be a list of disks")
    disks = []
    for disk in disks_raw:
        size = _number(disk, "size", what)
        spindles = disk.get("spindles") if isinstance(disk, Mapping) else None
        if spindles is not None and (isinstance(spindles, bool)
                                     or not isinstance(spindles, int)):
            raise RequestError(f"{what}: a disk's spindles must be an integer")
        disks.append((size, spindles))
    mem = _number(data, "memory", what)
    vcpus = _number(data, "vcpus", what)
    tags = _string_list(_get(data, "tags", what), f"{what}: tags")
    template = _get(data, "disk_template", what)
    if template not in DISK_TEMPLATES:
        raise RequestError(f"{what}: unknown disk template {template!r}; known: "
                           + ", ".join(DISK_TEMPLATES))
    spindle_use = _number(data, "spindle_use", what)
    nics = _get(data, "nics", what)
    if not isinstance(nics, list):
        raise RequestError(f"{what}: key 'nics' must be a list")
    networks = tuple(nic.get("network") if isinstance(nic, Mapping) else None
                     for nic in nics)
    state = data.get("admin_state", "up")
    status = {"up": "running", "down": "ADMIN_down", "offline": "ADMIN_offline"}.get(state)
    if status is None:
        raise RequestError(f"{what}: admin_state must be up, down or offline, "
                           f"got {state!r}")
    forthcoming = data.get("forthcoming", False)
    return Instance(name, mem, disk_total, vcpus, status, NO_NODE, NO_NODE, template,
                    spindle_use, tuple(tags), True, bool(forthcoming), tuple(disks),
                    networks)


def _groups(data: Any) -> tuple[list[Group], dict[str, int]]:
    if not isinstance(data, Mapping):
        raise RequestError("invalid iallocator message: nodegroups must be an object")
    groups: list[Group] = []
    index: dict[str, int] = {}
    for uuid, raw in data.items():
        what = f"invalid data for group '{uuid}'"
        name = _get(raw, "name", what)
        try:
            policy = alloc_policy_from_raw(_get(raw, "alloc_policy", what))
            ipolicy = IPolicy.from_json(_get(raw, "ipolicy", what), f"{what}: ipolicy")
        except PolicyError as err:
            raise RequestError(f"{what}: {err}") from None
        networks = _string_list(_get(raw, "networks", what), f"{what}: networks")
        tags = _string_list(_get(raw, "tags", what), f"{what}: tags")
        index[uuid] = len(groups)
        groups.append(Group(name, uuid, policy, tuple(networks), ipolicy, tuple(tags),
                            len(groups)))
    return groups, index


def _node(name: str, data: Mapping[str, Any], groups: dict[str, int]) -> Node:
    what = f"invalid data for node '{name}'"
    offline = _bool(data, "offline", what)
    drained = _bool(data, "drained", what)
    guuid = _get(data, "group", what)
    if guuid not in groups:
        raise RequestError(f"Unknown group '{guuid}' for node {name}")
    vm_capable = data.get("vm_capable", True)
    ndparams = _get(data, "ndparams", what)
    excl = _bool(ndparams, "exclusive_storage", f"{what}: ndparams")
    live = not offline and bool(vm_capable)

    def live_value(key: str, default: Any, kind: type = int) -> Any:
        return _number(data, key, what, kind) if live else default

    if excl:
        t_sp = live_value("total_spindles", 0)
    else:
        t_sp = _number(ndparams, "spindle_count", f"{what}: ndparams")
    node = Node(name, live_value("total_memory", 0.0, float),
                live_value("reserved_memory", 0), live_value("free_memory", 0),
                live_value("total_disk", 0.0, float), live_value("free_disk", 0),
                live_value("total_cpus", 0.0, float), live_value("reserved_cpus", 0),
                (not live) or drained, t_sp, live_value("free_spindles", 0),
                groups[guuid], excl)
    node.tags = tuple(_string_list(data.get("tags", []), f"{what}: tags"))
    return node


def _instances(cluster: Cluster, data: Any) -> None:
    if not isinstance(data, Mapping):
        raise RequestError("invalid iallocator message: instances must be an object")
    names = {node.name: node.idx for node in cluster.nodes}
    for name, raw in data.items():
        inst = _base_instance(name, raw)
        nodes = _get(raw, "nodes", f"invalid data for instance '{name}'")
        if not isinstance(nodes, list) or not nodes:
            raise RequestError(f"empty node list for instance {name}")
        for node_name in nodes[:2]:
            if node_name not in names:
                raise RequestError(f"Unknown node '{node_name}' for instance {name}")
        inst.pnode = names[nodes[0]]
        inst.snode = names[nodes[1]] if len(nodes) > 1 else NO_NODE
        inst.idx = len(cluster.instances)
        cluster.instances.append(inst)


def _lookup(items: Sequence[Any], name: str, what: str) -> int:
    for pos, item in enumerate(items):
        if name in (item.name, getattr(item, "uuid", None)):
            return pos
    raise RequestError(f"{what} '{name}' not found")


def parse(data: Any, static_kvm_memory: int = 4096, finish_cluster: bool = True) -> Parsed:
    """Read a request (already decoded from JSON) as hail does; ``static_kvm_memory``
    replaces the reserved memory of nodes when the first enabled hypervisor is kvm
    (hail's ``--static-kvm-node-memory``, default 4096; 0 keeps the nodes' own).
    Without ``finish_cluster`` the cluster is left as read (for the tools' ``-I``,
    which finish it with their own options)."""
    if not isinstance(data, Mapping):
        raise RequestError("invalid iallocator message: expected a JSON object")
    request = _get(data, "request", "invalid iallocator message")
    if not isinstance(request, Mapping):
        raise RequestError("invalid iallocator message: request must be an object")
    groups, group_index = _groups(_get(data, "nodegroups", "invalid iallocator message"))
    cluster = Cluster(groups=groups)
    raw_nodes = _get(data, "nodes", "invalid iallocator message")
    if not isinstance(raw_nodes, Mapping):
        raise RequestError("invalid iallocator message: nodes must be an object")
    for name, raw in raw_nodes.items():
        node = _node(name, raw, group_index)
        node.idx = len(cluster.nodes)
        cluster.nodes.append(node)
    _instances(cluster, _get(data, "instances", "invalid iallocator message"))
    cluster.tags = _string_list(_get(data, "cluster_tags", "invalid iallocator message"),
                                "cluster_tags")
    hypervisors = _get(data, "enabled_hypervisors", "invalid iallocator message")
    if isinstance(hypervisors, list) and hypervisors:
        cluster.hypervisor = str(hypervisors[0])
        for node in cluster.nodes:
            node.hypervisor = cluster.hypervisor
    # hail does not read the cluster's policy (groups carry theirs)
    cluster.ipolicy = DEFAULT_IPOLICY
    warnings = (finish(cluster, static_kvm_memory=static_kvm_memory) if finish_cluster
                else [])
    kind = _get(request, "type", "invalid request dict")
    what = "invalid request dict"
    parsed: Request
    if kind == "allocate":
        name = _get(request, "name", what)
        if not isinstance(name, str):
            raise RequestError(f"{what}: key 'name' must be a string")
        inst = _base_instance(name, request)
        update_tags(cluster, inst)
        group = request.get("group_name")
        restrict = request.get("restrict-to-nodes")
        parsed = AllocateRequest(inst, _number(request, "required_nodes", what), group,
                                 _string_list(restrict, f"{what}: restrict-to-nodes")
                                 if restrict is not None else None)
    elif kind == "relocate":
        idx = _lookup(cluster.instances, _get(request, "name", what), "Instance")
        from_nodes = [_lookup(cluster.nodes, n, "Node") for n in
                      _string_list(_get(request, "relocate_from", what),
                                   f"{what}: relocate_from")]
        parsed = RelocateRequest(idx, _number(request, "required_nodes", what), from_nodes)
    elif kind == "change-group":
        insts = [_lookup(cluster.instances, n, "Instance") for n in
                 _string_list(_get(request, "instances", what), f"{what}: instances")]
        targets = [_lookup(cluster.groups, g, "Group") for g in
                   _string_list(_get(request, "target_groups", what),
                                f"{what}: target_groups")]
        parsed = ChangeGroupRequest(insts, targets)
    elif kind == "node-evacuate":
        insts = [_lookup(cluster.instances, n, "Instance") for n in
                 _string_list(_get(request, "instances", what), f"{what}: instances")]
        mode = _get(request, "evac_mode", what)
        if mode not in EVAC_MODES:
            raise RequestError(f"{what}: evac_mode must be one of {', '.join(EVAC_MODES)}, "
                               f"got {mode!r}")
        parsed = NodeEvacuateRequest(insts, mode)
    elif kind == "multi-allocate":
        raw_insts = _get(request, "instances", what)
        if not isinstance(raw_insts, list):
            raise RequestError(f"{what}: key 'instances' must be a list")
        entries = []
        for raw in raw_insts:
            name = _get(raw, "name", what)
            inst = _base_instance(name, raw)
            update_tags(cluster, inst)
            entries.append((inst, _number(raw, "required_nodes", what)))
        parsed = MultiAllocateRequest(entries, request.get("group_name"))
    elif kind == "allocate-secondary":
        parsed = SecondaryRequest(_lookup(cluster.instances, _get(request, "name", what),
                                          "Instance"))
    else:
        raise RequestError(f"Invalid request type '{kind}'; known types: "
                           + ", ".join(REQUEST_TYPES))
    return Parsed(cluster, parsed, kind, warnings)
