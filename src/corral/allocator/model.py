"""The cluster as the allocator sees it: node groups, nodes, instances.

The model is htools': a node has its total, node-reserved and free memory, total and
free disk, physical CPUs and spindles, the lists of its primary and secondary
instances, and for N+1 redundancy the memory its secondaries would need if each of
their primary nodes failed (``peers``, ``r_mem``). An instance has memory, disk,
VCPUs, spindle use, disk template, run state and its primary and secondary node.

Node and instance indices are positions in :attr:`Cluster.nodes` and
:attr:`Cluster.instances` (the order they were read in), which is also the order in
which every algorithm visits them, so that results do not depend on dictionary order.

A :class:`Node` is changed by the functions of :mod:`corral.allocator.nodeops`, which
return a changed copy (or the reason the change does not fit), so that a trial move
never disturbs the cluster it is tried on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from corral.allocator.types import (
    DEFAULT_IPOLICY,
    LOCAL_STORAGE_TEMPLATES,
    MOVABLE_TEMPLATES,
    AllocPolicy,
    IPolicy,
    Mirror,
    mirror_of,
    uses_memory_status,
)

__all__ = [
    "BASE_UTIL",
    "NO_NODE",
    "ZERO_UTIL",
    "Cluster",
    "Group",
    "Instance",
    "LoadError",
    "Node",
]

#: The node index of "no secondary node".
NO_NODE = -1

#: Utilisation (cpu, memory, disk, network) an instance is assumed to have when no
#: dynamic data is given, and a node's capacity for it.
BASE_UTIL: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0)
ZERO_UTIL: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)


#: The default of :attr:`Instance.disks`: one disk of the instance's whole size.
_ONE_DISK: tuple[tuple[int, int | None], ...] = ((-1, None),)


class LoadError(ValueError):
    """Cluster data that cannot be used: the message says what and where."""


@dataclass(slots=True)
class Group:
    """A node group."""

    name: str
    uuid: str
    alloc_policy: AllocPolicy = AllocPolicy.PREFERRED
    networks: tuple[str, ...] = ()
    ipolicy: IPolicy = DEFAULT_IPOLICY
    tags: tuple[str, ...] = ()
    idx: int = -1

    @property
    def allocable(self) -> bool:
        """Whether new instances may be placed in this group."""
        return self.alloc_policy != AllocPolicy.UNALLOCABLE


@dataclass(slots=True)
class Instance:
    """An instance (sizes in MiB)."""

    name: str
    mem: int
    dsk: int
    vcpus: int
    run_st: str = "running"
    pnode: int = NO_NODE
    snode: int = NO_NODE
    disk_template: str = "plain"
    spindle_use: int = 1
    tags: tuple[str, ...] = ()
    auto_balance: bool = True
    forthcoming: bool = False
    #: (size, spindles or None) of each disk (by default one disk of ``dsk``)
    disks: tuple[tuple[int, int | None], ...] = _ONE_DISK
    #: networks of the NICs (None where a NIC names no network)
    nic_networks: tuple[str | None, ...] = ()
    util: tuple[float, float, float, float] = BASE_UTIL
    idx: int = -1
    alias: str = ""
    excl_tags: tuple[str, ...] = ()
    dsrd_loc_tags: frozenset[str] = frozenset()
    location_score: int = 0
    #: whether hbal may move the instance (its template allows it, and it is
    #: neither excluded nor split between groups)
    movable: bool = field(default=True, init=False)
    # derived from the fields above (see refresh())
    uses_memory: bool = field(default=True, init=False)
    local_storage: bool = field(default=True, init=False)
    not_offline: bool = field(default=True, init=False)
    uses_sec_mem: bool = field(default=True, init=False)
    mirror: Mirror = field(default=Mirror.NONE, init=False)

    def __post_init__(self) -> None:
        if not self.alias:
            self.alias = self.name
        if self.disks is _ONE_DISK:
            self.disks = ((self.dsk, None),)
        self.movable = self.disk_template in MOVABLE_TEMPLATES
        self.refresh()

    def refresh(self) -> None:
        """Recompute the derived flags after the run state or template changed."""
        self.uses_memory = (not self.forthcoming) and uses_memory_status(self.run_st)
        self.local_storage = self.disk_template in LOCAL_STORAGE_TEMPLATES
        self.not_offline = self.run_st != "ADMIN_offline"
        self.uses_sec_mem = self.not_offline and self.auto_balance
        self.mirror = mirror_of(self.disk_template)

    @property
    def has_secondary(self) -> bool:
        """Whether the instance keeps its disks on a secondary node (drbd)."""
        return self.disk_template == "drbd"

    @property
    def running(self) -> bool:
        """Whether htools counts the instance as running (migrate, not failover)."""
        return self.run_st in ("running", "ERROR_up")

    @property
    def total_spindles(self) -> int | None:
        """The spindles of all disks, or None if a disk does not say."""
        total = 0
        for _, spindles in self.disks:
            if spindles is None:
                return None
            total += spindles
        return total

    def all_nodes(self) -> list[int]:
        """The instance's nodes: primary, and secondary for drbd."""
        if self.disk_template == "drbd":
            return [self.pnode, self.snode]
        return [self.pnode]

    def copy(self) -> Instance:
        """A copy that can be changed independently."""
        new: Instance = _copy_instance(self)
        return new


class Node:
    """A node and what its instances use of it.

    Memory and disk in MiB. ``f_mem`` is the free memory the node reported (it already
    excludes running instances); ``i_mem`` the memory of the primary instances that
    hold it; ``x_mem`` what the node misses beyond both (computed once when loading).
    The ``*_forth`` fields count forthcoming instances as well.
    """

    __slots__ = (
        "alias",
        "cpu_speed",
        "excl",
        "f_dsk",
        "f_dsk_forth",
        "f_mem",
        "f_mem_forth",
        "f_sp",
        "f_sp_forth",
        "fail_n1",
        "group",
        "hi_cpu",
        "hi_sp",
        "hypervisor",
        "i_mem",
        "idx",
        "inst_map",
        "inst_sp",
        "inst_sp_forth",
        "is_master",
        "lo_dsk",
        "loc_score",
        "loc_tags",
        "m_dsk",
        "mig_tags",
        "n_cpu",
        "n_mem",
        "name",
        "offline",
        "p_list",
        "p_list_forth",
        "p_tags",
        "peers",
        "policy",
        "r_mem",
        "rmig_tags",
        "s_list",
        "s_list_forth",
        "t_cpu",
        "t_dsk",
        "t_mem",
        "t_sp",
        "tags",
        "u_cpu",
        "u_cpu_forth",
        "util_load",
        "util_load_forth",
        "util_pool",
        "vcpu_ratio",
        "x_mem",
    )

    name: str
    alias: str
    idx: int
    group: int
    offline: bool
    is_master: bool
    tags: tuple[str, ...]
    excl: bool
    hypervisor: str | None
    t_mem: float
    n_mem: int
    f_mem: int
    i_mem: int
    x_mem: int
    f_mem_forth: int
    t_dsk: float
    f_dsk: int
    f_dsk_forth: int
    m_dsk: float
    lo_dsk: int
    t_cpu: float
    cpu_speed: float
    n_cpu: int
    u_cpu: int
    u_cpu_forth: int
    vcpu_ratio: float
    hi_cpu: int
    t_sp: int
    f_sp: int
    f_sp_forth: int
    inst_sp: float
    inst_sp_forth: float
    hi_sp: float
    p_list: list[int]
    s_list: list[int]
    p_list_forth: list[int]
    s_list_forth: list[int]
    peers: dict[int, int]
    r_mem: int
    fail_n1: bool
    util_pool: tuple[float, float, float, float]
    util_load: tuple[float, float, float, float]
    util_load_forth: tuple[float, float, float, float]
    p_tags: dict[str, int]
    policy: IPolicy
    mig_tags: frozenset[str]
    rmig_tags: frozenset[str]
    loc_tags: frozenset[str]
    loc_score: int
    inst_map: dict[tuple[str, str], int]

    def __init__(self, name: str, t_mem: float, n_mem: int, f_mem: int, t_dsk: float,
                 f_dsk: int, t_cpu: float, n_cpu: int, offline: bool, t_sp: int, f_sp: int,
                 group: int, excl: bool = False) -> None:
        self.name = name
        self.alias = name
        self.idx = -1
        self.group = group
        self.offline = offline
        self.is_master = False
        self.tags = ()
        self.excl = excl
        self.hypervisor = None
        self.t_mem = t_mem
        self.n_mem = n_mem
        self.f_mem = f_mem
        self.i_mem = 0
        self.x_mem = 0
        self.f_mem_forth = f_mem
        self.t_dsk = t_dsk
        self.f_dsk = f_dsk
        self.f_dsk_forth = f_dsk
        self.m_dsk = 0.0
        self.lo_dsk = 0
        self.t_cpu = t_cpu
        self.cpu_speed = 1.0
        self.n_cpu = n_cpu
        self.u_cpu = n_cpu
        self.u_cpu_forth = n_cpu
        self.t_sp = t_sp
        self.f_sp = f_sp
        self.f_sp_forth = f_sp
        self.inst_sp = 0.0
        self.inst_sp_forth = 0.0
        self.p_list = []
        self.s_list = []
        self.p_list_forth = []
        self.s_list_forth = []
        self.peers = {}
        self.r_mem = 0
        self.fail_n1 = True
        self.util_pool = BASE_UTIL
        self.util_load = ZERO_UTIL
        self.util_load_forth = ZERO_UTIL
        self.p_tags = {}
        self.mig_tags = frozenset()
        self.rmig_tags = frozenset()
        self.loc_tags = frozenset()
        self.loc_score = 0
        self.inst_map = {}
        self.set_policy(DEFAULT_IPOLICY)

    def set_policy(self, policy: IPolicy) -> None:
        """Take the policy of the node's group (it caps VCPUs and spindles)."""
        self.policy = policy
        self.vcpu_ratio = policy.vcpu_ratio
        self.hi_cpu = math.floor(policy.vcpu_ratio * self.t_cpu)
        self.hi_sp = policy.spindle_ratio * self.t_sp

    def set_max_cpu(self, ratio: float) -> None:
        """Override the CPU over-commit ratio (``--max-cpu``)."""
        self.policy = self.policy.with_vcpu_ratio(ratio)
        self.vcpu_ratio = ratio
        self.hi_cpu = math.floor(ratio * self.t_cpu)

    def set_min_disk(self, ratio: float) -> None:
        """Keep ``ratio`` of the disk free (``--min-disk``)."""
        self.m_dsk = ratio
        self.lo_dsk = math.floor(ratio * self.t_dsk)

    # -- derived values -------------------------------------------------------------

    @property
    def unallocated_mem(self) -> int:
        """Memory not given to instances by the records, less what the node misses."""
        return int(self.t_mem) - self.n_mem - self.i_mem - max(0, self.x_mem)

    @property
    def avail_mem(self) -> int:
        """Memory free for a new instance after the N+1 reservation."""
        return max(0, self.unallocated_mem - self.r_mem)

    @property
    def avail_disk(self) -> int:
        """Disk free for a new instance above the reserved minimum."""
        return 0 if self.f_dsk < self.lo_dsk else self.f_dsk - self.lo_dsk

    @property
    def avail_cpu(self) -> int:
        """VCPUs that may still be given out under the over-commit ratio."""
        return self.hi_cpu - self.u_cpu if self.hi_cpu >= self.u_cpu else 0

    @property
    def missing_mem(self) -> int:
        """Recorded free memory minus reported free memory."""
        return int(self.t_mem) - self.n_mem - self.i_mem - self.f_mem

    @property
    def conflicting_primaries(self) -> int:
        """Primary instances sharing an exclusion tag with another one."""
        return sum(self.p_tags.values()) - len(self.p_tags)

    def copy(self) -> Node:
        """A copy whose lists and maps can be changed independently."""
        new: Node = _copy_node(self)
        return new

    def __repr__(self) -> str:
        return f"<Node {self.name} #{self.idx}>"


def _make_copier(cls: type, containers: dict[str, str]) -> Any:
    # trial moves copy nodes and instances all the time: a function with one
    # assignment per field is several times faster than a loop over the slots
    lines = ["def copy(self):", "    new = new_object(cls)"]
    for name in cls.__slots__:   # type: ignore[attr-defined]
        kind = containers.get(name)
        value = f"{kind}(self.{name})" if kind else f"self.{name}"
        lines.append(f"    new.{name} = {value}")
    lines.append("    return new")
    namespace: dict[str, Any] = {"cls": cls, "new_object": object.__new__}
    exec("\n".join(lines), namespace)
    return namespace["copy"]


_copy_node = _make_copier(Node, {
    "p_list": "list", "s_list": "list", "p_list_forth": "list", "s_list_forth": "list",
    "peers": "dict", "p_tags": "dict", "inst_map": "dict"})
_copy_instance = _make_copier(Instance, {})


@dataclass
class Cluster:
    """Groups, nodes and instances, with the cluster's tags and instance policy."""

    groups: list[Group] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    instances: list[Instance] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    ipolicy: IPolicy = DEFAULT_IPOLICY
    #: the cluster's enabled hypervisors as an iallocator request lists them
    hypervisor: str | None = None

    def group_by_name(self, name: str) -> Group | None:
        """The group called ``name`` (or with that UUID), if any."""
        for group in self.groups:
            if name in (group.name, group.uuid):
                return group
        return None

    def node_by_name(self, name: str) -> Node | None:
        """The node called ``name``, if any."""
        for node in self.nodes:
            if node.name == name:
                return node
        return None

    def instance_by_name(self, name: str) -> Instance | None:
        """The instance called ``name``, if any."""
        for inst in self.instances:
            if inst.name == name:
                return inst
        return None

    def group_nodes(self, gdx: int) -> list[Node]:
        """The nodes of group ``gdx``, in index order."""
        return [node for node in self.nodes if node.group == gdx]

    def group_instances(self, gdx: int) -> list[Instance]:
        """The instances whose primary node is in group ``gdx``, in index order."""
        return [inst for inst in self.instances if self.nodes[inst.pnode].group == gdx]

    def groups_in_use(self) -> list[int]:
        """The indices of the groups that have nodes, in index order."""
        return sorted({node.group for node in self.nodes})

    def instance_group(self, inst: Instance) -> int | None:
        """The group of an instance, or None if its nodes are in different groups."""
        pgroup = self.nodes[inst.pnode].group
        if inst.snode != NO_NODE and self.nodes[inst.snode].group != pgroup:
            return None
        return pgroup

    def split_instances(self) -> list[Instance]:
        """Instances whose nodes are in different groups."""
        return [inst for inst in self.instances if self.instance_group(inst) is None]

    def replace_nodes(self, changed: Iterable[Node]) -> None:
        """Put changed copies of nodes in their places."""
        for node in changed:
            self.nodes[node.idx] = node

    def copy(self) -> Cluster:
        """A copy whose nodes and instances can be changed independently (groups are
        shared: nothing changes them)."""
        return Cluster(list(self.groups), [node.copy() for node in self.nodes],
                       [inst.copy() for inst in self.instances], list(self.tags),
                       self.ipolicy, self.hypervisor)

    def fork(self) -> Cluster:
        """A cluster whose node and instance lists can be changed independently,
        sharing the nodes and instances themselves: the engine replaces a node or
        instance that changes, never changes one in place."""
        return Cluster(list(self.groups), list(self.nodes), list(self.instances),
                       list(self.tags), self.ipolicy, self.hypervisor)

    def subset(self, node_idxs: Sequence[int]) -> list[Node]:
        """The nodes with the given indices."""
        return [self.nodes[idx] for idx in node_idxs]
