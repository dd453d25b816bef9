"""The ``node`` query resource: ``gnt-node list``, ``/2/nodes?bulk=1``, ``/2/query/node``.

Configuration fields read one snapshot; the live fields (memory, CPUs, the default
storage: the volume group when the first enabled disk template is ``plain``, else the
file storage directory) ask every online VM-capable node's ``node_info`` once per
query, and only when a field or the filter names one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from corral.cmdlib.base import MasterContext, QueryResource
from corral.cmdlib.node_roles import node_role
from corral.cmdlib.query import named_lookup
from corral.objects import Node, NodeGroup, fill_params
from corral.objects.params import ND_PARAMS
from corral.qlang import FieldKind, FieldRegistry, ResultStatus, pick_items
from corral.rpc.protocol import RpcResult

if TYPE_CHECKING:
    from corral.config import ConfigStore
    from corral.objects import Cluster

__all__ = [
    "LIVE_FIELDS",
    "NODE_FIELDS",
    "NodeQueryData",
    "lvm_default",
    "nd_param_fields",
    "query_nodes",
    "query_resources",
]


@dataclass
class NodeQueryData:
    """What node fields read besides the node: the configuration around it and, when
    a live field is wanted, each node's ``node_info`` answer."""

    cluster: Cluster
    groups: dict[str, NodeGroup]
    primaries: dict[str, list[str]]
    secondaries: dict[str, list[str]]
    live: dict[str, RpcResult] | None = None

    @property
    def aggregate_names(self) -> dict[str, str]:
        """Named aggregates by UUID."""
        return {uuid: name for name, uuid in self.cluster.aggregates.items()}

    @classmethod
    def build(cls, store: ConfigStore) -> NodeQueryData:
        """From one configuration snapshot."""
        primaries: dict[str, list[str]] = {}
        secondaries: dict[str, list[str]] = {}
        for inst in store.all("instance"):
            primaries.setdefault(inst.primary_node, []).append(inst.name)
            seen: set[str] = set()
            for disk_uuid in inst.disks:
                disk = store.find("disk", disk_uuid)
                for node_uuid in disk.nodes if disk is not None else ():
                    if node_uuid != inst.primary_node and node_uuid not in seen:
                        seen.add(node_uuid)
                        secondaries.setdefault(node_uuid, []).append(inst.name)
        return cls(cluster=store.cluster, groups={g.uuid: g for g in store.all("nodegroup")},
                   primaries=primaries, secondaries=secondaries)

    def ndparams(self, node: Node) -> dict[str, Any] | ResultStatus:
        """Node parameters filled: cluster ← group ← node."""
        group = self.groups.get(node.group)
        if group is None:
            return ResultStatus.UNAVAIL
        return fill_params(self.cluster.ndparams, group.ndparams, node.ndparams)


NodeGetter = Callable[[NodeQueryData, Node], Any]

#: ParamSpec type -> query field kind (Ganeti's mapping).
_PARAM_KINDS: dict[str, FieldKind] = {
    "string": "other", "maybe-string": "other", "bool": "bool", "int": "number",
    "float": "float", "size": "unit",
}

#: Ganeti's titles of node parameter fields (``ndp/<name>``).
_ND_TITLES = {
    "exclusive_storage": "ExclusiveStorage", "oob_program": "OutOfBandProgram",
    "ovs": "OpenvSwitch", "ovs_link": "OpenvSwitchLink", "ovs_name": "OpenvSwitchName",
    "spindle_count": "SpindleCount",
}


def nd_param_fields(registry: FieldRegistry[Any, Any],
                    filled: Callable[[Any, Any], dict[str, Any] | ResultStatus]) -> None:
    """Add one ``ndp/<name>`` field per node parameter, reading ``filled(ctx, item)``."""
    for name, spec in sorted(ND_PARAMS.items()):
        def get(ctx: Any, item: Any, name: str = name) -> Any:
            values = filled(ctx, item)
            return values if isinstance(values, ResultStatus) else values.get(name)

        registry.add(f"ndp/{name}", _ND_TITLES.get(name, f"ndp/{name}"),
                     _PARAM_KINDS.get(spec.type, "other"), f'The "{name}" node parameter', get)


def _live(key: str | tuple[str, ...], kind: FieldKind) -> NodeGetter:
    """A getter of one value of the node's ``node_info`` answer."""

    def get(ctx: NodeQueryData, node: Node) -> Any:
        if node.offline:
            return ResultStatus.OFFLINE
        if not node.vm_capable:
            return ResultStatus.UNAVAIL
        result = (ctx.live or {}).get(node.name)
        if result is None or result.failed or not isinstance(result.payload, dict):
            return ResultStatus.NODATA
        value: Any = result.payload
        path = (key,) if isinstance(key, str) else key
        for part in path:
            if part == "$storage_dir":
                part = ctx.cluster.file_storage_dir
            if not isinstance(value, dict) or part not in value:
                return ResultStatus.UNAVAIL
            value = value[part]
        if kind == "text":
            return str(value)
        try:
            return int(value)
        except (TypeError, ValueError):
            return ResultStatus.UNAVAIL

    return get


def _memory_node(ctx: NodeQueryData, node: Node) -> Any:
    """``memory_dom0`` when the node reports it; else total less free less what the
    hypervisor's instances hold (``memory_hv``), when reported."""
    value = _live("memory_dom0", "unit")(ctx, node)
    if value is not ResultStatus.UNAVAIL:
        return value
    parts = [_live(key, "unit")(ctx, node) for key in ("memory_total", "memory_free",
                                                        "memory_hv")]
    if any(isinstance(part, ResultStatus) for part in parts):
        return ResultStatus.UNAVAIL
    total, free, held = parts
    return max(0, total - free - held)


def lvm_default(cluster: Cluster) -> bool:
    """Whether the cluster's default storage (its first enabled disk template's) is
    its LVM volume group."""
    first = cluster.enabled_disk_templates[:1]
    return first == ["plain"] and bool(cluster.volume_group_name)


def _default_storage(ctx: NodeQueryData, node: Node, key: str) -> Any:
    """Size or free space of the default storage (Ganeti's dtotal, dfree)."""
    if lvm_default(ctx.cluster):
        return _live(("lvm", "vgs", ctx.cluster.volume_group_name, key), "unit")(ctx, node)
    return _live(("storage", "$storage_dir", key), "unit")(ctx, node)


def _cpu_total(ctx: NodeQueryData, node: Node) -> Any:
    value = _live("cpu_total", "number")(ctx, node)
    return _live("cpu_count", "number")(ctx, node) if value is ResultStatus.UNAVAIL else value


#: Live fields: name -> (title, kind, getter, doc). Values come from ``node_info``.
_LIVE: dict[str, tuple[str, FieldKind, NodeGetter, str]] = {
    "bootid": ("BootID", "text", _live("bootid", "text"),
               "Random UUID renewed for each system reboot, can be used for detecting "
               "reboots by tracking changes"),
    "cnodes": ("CNodes", "number", _live("cpu_nodes", "number"),
               "Number of NUMA domains on node (if exported by hypervisor)"),
    "cnos": ("CNOs", "number", _live("cpu_dom0", "number"),
             "Number of logical processors used by the node OS (dom0 for Xen)"),
    "csockets": ("CSockets", "number", _live("cpu_sockets", "number"),
                 "Number of physical CPU sockets (if exported by hypervisor)"),
    "ctotal": ("CTotal", "number", _cpu_total, "Number of logical processors"),
    "dfree": ("DFree", "unit", lambda c, n: _default_storage(c, n, "free"),
              "Available storage space on the node's default storage: the volume group "
              "when the first enabled disk template is plain, else the file storage "
              "directory"),
    "dtotal": ("DTotal", "unit", lambda c, n: _default_storage(c, n, "size"),
               "Total storage space on the node's default storage: the volume group when "
               "the first enabled disk template is plain, else the file storage "
               "directory"),
    "mfree": ("MFree", "unit", _live("memory_free", "unit"),
              "Memory available for instance allocations"),
    "mnode": ("MNode", "unit", _memory_node,
              "Amount of memory used by node (dom0 for Xen)"),
    "mtotal": ("MTotal", "unit", _live("memory_total", "unit"),
               "Total amount of memory of physical machine"),
}

#: Names of the fields that need the nodes' live answers.
LIVE_FIELDS = frozenset(_LIVE)


def _group_name(ctx: NodeQueryData, node: Node) -> Any:
    group = ctx.groups.get(node.group)
    return ResultStatus.UNAVAIL if group is None else group.name


def _build_fields() -> FieldRegistry[NodeQueryData, Node]:
    reg: FieldRegistry[NodeQueryData, Node] = FieldRegistry("node")
    add = reg.add
    add("name", "Node", "text", "Node name", lambda _c, n: n.name)
    add("uuid", "UUID", "text", "Node UUID", lambda _c, n: n.uuid)
    add("pip", "PrimaryIP", "text", "Primary IP address", lambda _c, n: n.primary_ip)
    add("sip", "SecondaryIP", "text", "Secondary IP address",
        lambda _c, n: n.secondary_ip or n.primary_ip)
    add("tags", "Tags", "other", "Tags", lambda _c, n: sorted(n.tags))
    add("aggregates", "Aggregates", "other",
        "Named placement aggregates the node is in (its group is one too)",
        lambda c, n: sorted(c.aggregate_names.get(u, u) for u in n.aggregates))
    add("aggregates.uuid", "AggregateUUIDs", "other",
        "UUIDs of the named placement aggregates the node is in",
        lambda _c, n: list(n.aggregates))
    add("traits", "Traits", "other", "Placement traits of the node",
        lambda _c, n: list(n.traits))
    add("master", "IsMaster", "bool", "Whether node is master",
        lambda c, n: n.uuid == c.cluster.master_node)
    add("group", "Group", "text", "Node group", _group_name)
    add("group.uuid", "GroupUUID", "text", "UUID of node group", lambda _c, n: n.group)
    add("powered", "Powered", "bool", "Whether node is thought to be powered on",
        lambda _c, _n: ResultStatus.UNAVAIL)
    add("ndparams", "NodeParameters", "other", "Merged node parameters",
        lambda c, n: c.ndparams(n))
    add("custom_ndparams", "CustomNodeParameters", "other", "Custom node parameters",
        lambda _c, n: dict(n.ndparams))
    nd_param_fields(reg, lambda c, n: c.ndparams(n))
    add("disk_state", "DiskState", "other",
        "Static disk resource state; corral keeps none, so never available",
        lambda _c, _n: ResultStatus.UNAVAIL)
    add("hv_state", "HypervisorState", "other",
        "Static hypervisor resource state; corral keeps none, so never available",
        lambda _c, _n: ResultStatus.UNAVAIL)
    add("spfree", "SpFree", "number",
        "Free spindles, with exclusive storage only; corral has no exclusive storage, "
        "so there is no data", lambda _c, _n: ResultStatus.NODATA)
    add("sptotal", "SpTotal", "number",
        "All spindles, with exclusive storage only; corral has no exclusive storage, "
        "so there is no data", lambda _c, _n: ResultStatus.NODATA)
    add("role", "Role", "text",
        'Node role; "M" for master, "C" for master candidate, "R" for regular, '
        '"D" for drained, "O" for offline',
        lambda c, n: node_role(n, c.cluster.master_node))
    for prefix, title, word, attr in (("p", "Pri", "primary", "primaries"),
                                      ("s", "Sec", "secondary", "secondaries")):
        def count(c: NodeQueryData, n: Node, attr: str = attr) -> int:
            return len(getattr(c, attr).get(n.uuid, ()))

        def names(c: NodeQueryData, n: Node, attr: str = attr) -> list[str]:
            return sorted(getattr(c, attr).get(n.uuid, ()))

        add(f"{prefix}inst_cnt", f"{prefix.upper()}inst", "number",
            f"Number of instances with this node as {word}", count)
        add(f"{prefix}inst_list", f"{title}Instances", "other",
            f"List of instances with this node as {word}", names)
    add("drained", "Drained", "bool", "Whether node is drained", lambda _c, n: n.drained)
    add("master_candidate", "MasterC", "bool", "Whether node is a master candidate",
        lambda _c, n: n.master_candidate)
    add("master_capable", "MasterCapable", "bool",
        "Whether node can become a master candidate", lambda _c, n: n.master_capable)
    add("offline", "Offline", "bool", "Whether node is marked offline", lambda _c, n: n.offline)
    add("serial_no", "SerialNo", "number",
        "Node object serial number, incremented on each modification",
        lambda _c, n: n.serial_no)
    add("vm_capable", "VMCapable", "bool", "Whether node can host instances",
        lambda _c, n: n.vm_capable)
    for name, (title, kind, getter, doc) in _LIVE.items():
        add(name, title, kind, doc, getter)
    add("ctime", "CTime", "timestamp", "Creation timestamp", lambda _c, n: n.ctime)
    add("mtime", "MTime", "timestamp", "Modification timestamp", lambda _c, n: n.mtime)
    return reg


#: The fields of the ``node`` resource (``gnt-node list``, ``/2/nodes?bulk=1``).
NODE_FIELDS = _build_fields()


def _mentions(qfilter: Any, names: frozenset[str]) -> bool:
    """Whether a list-form filter refers to one of ``names`` (anywhere in it)."""
    if isinstance(qfilter, str):
        return qfilter in names
    if isinstance(qfilter, list):
        return any(_mentions(part, names) for part in qfilter)
    return False


async def query_nodes(master: MasterContext, fields: list[str], qfilter: Any
                      ) -> dict[str, Any]:
    """Answer a ``node`` query; live fields ask every online VM-capable node once."""
    store = master.store
    data = NodeQueryData.build(store)
    nodes, qfilter = pick_items(store.all("node"), qfilter, lambda node: node.name,
                                named_lookup(store, "node"))
    if LIVE_FIELDS.intersection(fields) or _mentions(qfilter, LIVE_FIELDS):
        cluster = store.cluster
        targets = [n for n in nodes if not n.offline and n.vm_capable]
        args: dict[str, Any] = {"storage_dirs": [cluster.file_storage_dir],
                                "hypervisors": list(cluster.enabled_hypervisors)}
        if lvm_default(cluster):
            args["volume_groups"] = [cluster.volume_group_name]
        data.live = await master.rpc.call(targets, "node_info", args) if targets else {}
    return NODE_FIELDS.query(nodes, fields, qfilter, data)


def query_resources(ctx: MasterContext) -> dict[str, QueryResource]:
    """The query resources this area answers (``OP_QUERY`` / luxi ``Query``)."""

    async def query(fields: list[str], qfilter: Any) -> dict[str, Any]:
        return await query_nodes(ctx, fields, qfilter)

    return {"node": QueryResource(query=query, query_fields=NODE_FIELDS.query_fields)}
