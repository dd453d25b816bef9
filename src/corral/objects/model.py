"""The configuration objects: cluster, node groups, nodes, instances, disks, NICs, networks,
filters.

Every object has a persistent ``uuid`` that never changes (design 2.1), a ``serial_no``
bumped by each committed change, ``ctime``/``mtime`` in seconds since the epoch and a
list of ``tags``. Objects refer to each other by UUID, never by name, so renames touch
one object. Field names follow Ganeti's configuration where Ganeti has the field.

Objects are plain msgspec Structs: cheap to copy, to encode and to validate. The
configuration store hands out shared instances to readers; code that wants to change
one takes a copy through a transaction (see :mod:`corral.config`).
"""

from __future__ import annotations

import time
import uuid as _uuid
from typing import Any, ClassVar, Literal

import msgspec

from corral.objects import params as P
from corral.objects.ipolicy import default_policy

__all__ = [
    "DEFAULT_COMPRESSION_TOOLS",
    "KINDS",
    "NIC",
    "AdminState",
    "AllocPolicy",
    "Cluster",
    "ConfigObject",
    "Disk",
    "FilterRule",
    "Instance",
    "Network",
    "NetworkLink",
    "NicMode",
    "Node",
    "NodeGroup",
    "PlacementConsumer",
    "PlacementName",
    "PlacementProvider",
    "default_cluster_params",
    "new_uuid",
    "placement_name_uuid",
]

#: ``compression_tools`` of a new cluster: Ganeti 3.0's list (``gnt-cluster info``)
#: and zstd, much faster than gzip at a similar ratio (corral.impexp runs them).
DEFAULT_COMPRESSION_TOOLS: tuple[str, ...] = ("gzip", "gzip-fast", "gzip-slow", "zstd")

AdminState = Literal["up", "down", "offline"]
AllocPolicy = Literal["preferred", "last_resort", "unallocable"]
DiskMode = Literal["rw", "ro"]
NicMode = Literal["bridged", "routed", "openvswitch"]


def new_uuid() -> str:
    """A fresh random UUID in its canonical text form."""
    return str(_uuid.uuid4())


def _now() -> float:
    return time.time()


class ConfigObject(msgspec.Struct, kw_only=True):
    """Fields every configuration object has."""

    #: The kind under which the store keeps objects of this class.
    KIND: ClassVar[str] = ""

    uuid: str = msgspec.field(default_factory=new_uuid)
    serial_no: int = 1
    ctime: float = msgspec.field(default_factory=_now)
    mtime: float = msgspec.field(default_factory=_now)
    tags: list[str] = msgspec.field(default_factory=list)


class NIC(ConfigObject, kw_only=True):
    """A network interface of an instance; lives inside its instance."""

    name: str | None = None
    mac: str = ""
    ip: str | None = None
    network: str | None = None
    """UUID of the :class:`Network` the NIC is on (its IP then comes from that pool)."""
    #: Overrides of the cluster's NIC parameters (``mode``, ``link``, ``vlan``).
    nicparams: dict[str, Any] = msgspec.field(default_factory=dict)


class Disk(ConfigObject, kw_only=True):
    """A virtual disk; a top-level object referenced by its instance."""

    KIND: ClassVar[str] = "disk"

    name: str | None = None
    dev_type: str = "plain"
    size: int = 0
    """Size in MiB."""
    mode: DiskMode = "rw"
    logical_id: list[str] = msgspec.field(default_factory=list)
    iv_name: str = ""
    nodes: list[str] = msgspec.field(default_factory=list)
    """UUIDs of the nodes that hold this disk's data."""
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    spindles: int | None = None


class Instance(ConfigObject, kw_only=True):
    """A virtual machine."""

    KIND: ClassVar[str] = "instance"

    name: str
    primary_node: str
    """UUID of the node the instance runs on."""
    os: str = ""
    hypervisor: str = "fake"
    hvparams: dict[str, Any] = msgspec.field(default_factory=dict)
    beparams: dict[str, Any] = msgspec.field(default_factory=dict)
    osparams: dict[str, Any] = msgspec.field(default_factory=dict)
    admin_state: AdminState = "down"
    disk_template: str = "diskless"
    disks: list[str] = msgspec.field(default_factory=list)
    """UUIDs of the instance's disks, in order."""
    nics: list[NIC] = msgspec.field(default_factory=list)
    network_port: int | None = None
    last_reason: list[list[Any]] = msgspec.field(default_factory=list)
    """The reason trail (``[source, text, timestamp_ns]`` entries) of the opcode that
    last changed the instance's state; ``gnt-instance info`` shows it."""
    member_of: list[str] = msgspec.field(default_factory=list)
    """Placement constraints kept for the instance's life: Placement's ``member_of``
    values (``A``, ``in:A,B``, ``!A``, ``!in:A,B``) with every aggregate as its UUID, so
    that renaming an aggregate changes nothing (see docs/placement.md, "Constraints
    kept by the instance")."""
    required_traits: list[str] = msgspec.field(default_factory=list)
    """Traits the instance's primary node must have, sorted."""
    forbidden_traits: list[str] = msgspec.field(default_factory=list)
    """Traits its primary node must not have, sorted."""


class Node(ConfigObject, kw_only=True):
    """A physical machine running corral-noded."""

    KIND: ClassVar[str] = "node"

    name: str
    primary_ip: str
    secondary_ip: str = ""
    group: str
    """UUID of the node group."""
    master_candidate: bool = True
    offline: bool = False
    drained: bool = False
    master_capable: bool = True
    vm_capable: bool = True
    ndparams: dict[str, Any] = msgspec.field(default_factory=dict)
    aggregates: list[str] = msgspec.field(default_factory=list)
    """UUIDs of the cluster's named aggregates (:attr:`Cluster.aggregates`) the node is
    in, sorted; its group is an aggregate too without being listed here (see
    docs/placement.md, "The cluster in the engine")."""
    traits: list[str] = msgspec.field(default_factory=list)
    """Placement traits of the node (standard os-traits names or ``CUSTOM_*``), sorted."""


class NetworkLink(msgspec.Struct, kw_only=True):
    """How a node group reaches a network: the netparams of its connection."""

    mode: NicMode = "bridged"
    link: str = ""
    vlan: str = ""


class NodeGroup(ConfigObject, kw_only=True):
    """A set of nodes; parameters set here override the cluster's for its members."""

    KIND: ClassVar[str] = "nodegroup"

    name: str
    alloc_policy: AllocPolicy = "preferred"
    ndparams: dict[str, Any] = msgspec.field(default_factory=dict)
    hvparams: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)
    beparams: dict[str, Any] = msgspec.field(default_factory=dict)
    nicparams: dict[str, Any] = msgspec.field(default_factory=dict)
    diskparams: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)
    networks: dict[str, NetworkLink] = msgspec.field(default_factory=dict)
    """The networks connected to the group, by network UUID, with the NIC mode and link
    that instances of the group get on them (Ganeti's group ``networks``)."""
    ipolicy: dict[str, Any] = msgspec.field(default_factory=dict)
    """The group's own instance policy: only the keys it overrides of the cluster's
    (see :mod:`corral.objects.ipolicy`)."""


class Network(ConfigObject, kw_only=True):
    """An IPv4 network with an address pool that NICs take their IPs from.

    Addresses used by NICs are not stored here: the NICs that name the network hold
    them, so the two cannot disagree. The pool's other reservations (the network and
    broadcast addresses, the gateway, what the administrator set aside) are
    ``ext_reservations``. :mod:`corral.objects.network_pool` computes with both.
    """

    KIND: ClassVar[str] = "network"

    name: str
    network: str
    """The IPv4 subnet in CIDR notation (``10.0.0.0/24``)."""
    gateway: str | None = None
    network6: str | None = None
    gateway6: str | None = None
    mac_prefix: str | None = None
    """Three octets (``aa:00:01``) for the MACs of NICs on the network; None: the
    cluster's prefix."""
    ext_reservations: list[str] = msgspec.field(default_factory=list)
    """Externally reserved addresses, sorted by address."""


class FilterRule(ConfigObject, kw_only=True):
    """A job filter rule (seed 000): predicates decide, the action says what happens."""

    KIND: ClassVar[str] = "filter"

    watermark: int = 0
    priority: int = 0
    predicates: list[Any] = msgspec.field(default_factory=list)
    action: str | list[Any] = "CONTINUE"
    reason_trail: list[list[Any]] = msgspec.field(default_factory=list)


class PlacementProvider(ConfigObject, kw_only=True):
    """A placement resource provider as saved (``/placement/``, docs/placement.md): the
    master daemon's placement engine is rebuilt from these rows at start."""

    KIND: ClassVar[str] = "placement_provider"

    name: str
    parent_uuid: str | None = None
    generation: int = 0
    #: Resource class -> the inventory's fields (``total``, ``reserved``, ...).
    inventories: dict[str, dict[str, float]] = msgspec.field(default_factory=dict)
    traits: list[str] = msgspec.field(default_factory=list)
    aggregates: list[str] = msgspec.field(default_factory=list)
    #: Creation order among providers (candidates are listed in it).
    order: int = 0


class PlacementConsumer(ConfigObject, kw_only=True):
    """A placement consumer (what holds allocations) as saved; ``uuid`` is the
    consumer's."""

    KIND: ClassVar[str] = "placement_consumer"

    project_id: str
    user_id: str
    consumer_type: str = "UNKNOWN"
    generation: int = 1
    #: Provider uuid -> resource class -> amount.
    allocations: dict[str, dict[str, int]] = msgspec.field(default_factory=dict)


class PlacementName(ConfigObject, kw_only=True):
    """A custom placement resource class or trait; its ``uuid`` is derived from
    ``kind`` and ``name`` (:func:`placement_name_uuid`)."""

    KIND: ClassVar[str] = "placement_name"

    kind: Literal["resource_class", "trait"]
    name: str


def placement_name_uuid(kind: str, name: str) -> str:
    """The uuid of the :class:`PlacementName` row of custom ``kind`` ``name``."""
    return str(_uuid.uuid5(_uuid.NAMESPACE_URL, f"corral:placement:{kind}:{name}"))


#: The disk templates a new cluster enables.
DEFAULT_DISK_TEMPLATES = ("file", "sharedfile", "diskless")


def default_cluster_params() -> dict[str, Any]:
    """Every cluster-level parameter family filled with the built-in defaults."""
    return {
        "hvparams": {hv: P.defaults(specs) for hv, specs in P.HV_PARAMS.items()},
        "beparams": {"default": P.defaults(P.BE_PARAMS)},
        "nicparams": {"default": P.defaults(P.NIC_PARAMS)},
        "ndparams": P.defaults(P.ND_PARAMS),
        "diskparams": {dt: P.defaults(specs) for dt, specs in P.DISK_PARAMS.items()},
    }


def _dflt(key: str) -> Any:
    return msgspec.field(default_factory=lambda: default_cluster_params()[key])


class Cluster(ConfigObject, kw_only=True):
    """The cluster-wide settings; exactly one per configuration."""

    KIND: ClassVar[str] = "cluster"

    name: str
    master_node: str
    """UUID of the master node."""
    master_netdev: str = ""
    master_ip: str = ""
    enabled_hypervisors: list[str] = msgspec.field(default_factory=lambda: ["fake"])
    enabled_disk_templates: list[str] = msgspec.field(
        default_factory=lambda: list(DEFAULT_DISK_TEMPLATES)
    )
    hvparams: dict[str, dict[str, Any]] = _dflt("hvparams")
    os_hvp: dict[str, dict[str, dict[str, Any]]] = msgspec.field(default_factory=dict)
    beparams: dict[str, dict[str, Any]] = _dflt("beparams")
    nicparams: dict[str, dict[str, Any]] = _dflt("nicparams")
    ndparams: dict[str, Any] = _dflt("ndparams")
    diskparams: dict[str, dict[str, Any]] = _dflt("diskparams")
    osparams: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)
    """OS parameters per ``os`` or ``os+variant``."""
    hidden_os: list[str] = msgspec.field(default_factory=list)
    blacklisted_os: list[str] = msgspec.field(default_factory=list)
    uid_pool: list[tuple[int, int]] = msgspec.field(default_factory=list)
    default_iallocators: list[str] = msgspec.field(default_factory=lambda: ["corral"])
    """Allocators tried in turn when a request names none; a new cluster has the
    built-in one, ``corral``."""
    default_iallocator_params: dict[str, Any] = msgspec.field(default_factory=dict)
    compression_tools: list[str] = msgspec.field(
        default_factory=lambda: list(DEFAULT_COMPRESSION_TOOLS))
    """Tools a disk transfer may compress with (Ganeti's ``compression_tools``)."""
    iallocator_timeout: float = 300.0
    """Seconds an allocator may take before it is stopped and its request fails."""
    candidate_pool_size: int = 10
    max_running_jobs: int = 20
    max_tracked_jobs: int = 25
    #: Seconds after which the watcher archives a finished job (Ganeti's watcher
    #: option ``--job-age``, cluster-wide here).
    job_archive_age: int = 6 * 3600
    file_storage_dir: str = ""
    shared_file_storage_dir: str = ""
    volume_group_name: str = ""
    mac_prefix: str = "aa:00:00"
    os_search_path: list[str] = msgspec.field(default_factory=list)
    iallocator_search_path: list[str] = msgspec.field(default_factory=list)
    """Directories searched for iallocator plugins; empty: Ganeti's
    (:data:`corral.paths.Paths.DEFAULT_IALLOCATOR_SEARCH_PATH`)."""
    ipolicy: dict[str, Any] = msgspec.field(
        default_factory=lambda: default_policy(DEFAULT_DISK_TEMPLATES))
    """The instance policy, complete (see :mod:`corral.objects.ipolicy`)."""
    extstorage_search_path: list[str] = msgspec.field(default_factory=list)
    """Where nodes look for ExtStorage providers (empty: Ganeti's places and
    ``/srv/corral/extstorage``, :attr:`corral.paths.Paths.DEFAULT_EXTSTORAGE_SEARCH_PATH`)."""
    #: TCP port of every node daemon (Ganeti's noded uses 1811).
    noded_port: int = 1811
    aggregates: dict[str, str] = msgspec.field(default_factory=dict)
    """The named placement aggregates: name -> aggregate UUID (``gnt-cluster
    add-aggregate``); nodes name the UUIDs they are in (:attr:`Node.aggregates`)."""

    @property
    def default_hypervisor(self) -> str:
        """The first enabled hypervisor, used when an instance names none."""
        return self.enabled_hypervisors[0] if self.enabled_hypervisors else ""


#: Top-level kinds in the order the store loads them (referenced kinds first).
KINDS: dict[str, type[ConfigObject]] = {
    "cluster": Cluster,
    "nodegroup": NodeGroup,
    "node": Node,
    "disk": Disk,
    "network": Network,
    "instance": Instance,
    "filter": FilterRule,
    "placement_provider": PlacementProvider,
    "placement_consumer": PlacementConsumer,
    "placement_name": PlacementName,
}
