"""What one can learn about instances: the ``instance`` query resource (Ganeti's
instance fields, ``gnt-instance list``) and ``OP_INSTANCE_QUERY_DATA`` (``gnt-instance
info``).

Names, kinds and titles are Ganeti 3.0's (``gnt-instance list-fields``), including the
numbered fields (``disk.size/0`` .. ``disk.size/15``, ``nic.mac/0`` .. ``nic.mac/7``)
and the legacy aliases (``vcpus``, ``ip``, ``mac``, ``sda_size``, ...).

Most fields come from the configuration. The live ones (``oper_state``, ``oper_ram``,
``oper_vcpus``, ``status``) need the nodes: they are fetched with one
``all_instances_info`` call on the online primary nodes involved, and only when a
requested field or the filter needs them. When the filter uses configuration fields
only, it is applied first so that only the survivors' nodes are asked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from corral.cmdlib.aggregates import aggregate_label, describe_constraints, instance_constraints
from corral.cmdlib.base import LogicalUnit, MasterContext, QueryResource
from corral.cmdlib.common import expand_instance, fill_osparams, instance_spec, split_os_name
from corral.cmdlib.query import named_lookup
from corral.objects import Disk, Instance, Node, NodeGroup, fill_params
from corral.objects.params import BE_PARAMS, HV_PARAMS, ParamSpec, fill_hv_params
from corral.opcodes.instance_ops import OpInstanceQueryData
from corral.placement.constraints import value_text
from corral.qlang import FieldKind, FieldRegistry, ResultStatus, pick_items

if TYPE_CHECKING:
    from corral.config import ConfigStore

__all__ = [
    "INSTANCE_FIELDS",
    "LIVE_FIELDS",
    "MAX_DISKS",
    "MAX_NICS",
    "InstanceQueryContext",
    "LUInstanceQueryData",
    "fetch_live",
    "filled_beparams",
    "filled_hvparams",
    "filter_fields",
    "instance_resource",
    "instance_status",
    "is_shut_down",
]

#: Numbered disk and NIC fields go up to these counts (Ganeti's limits).
MAX_DISKS = 16
MAX_NICS = 8

#: Fields whose values come from the nodes.
LIVE_FIELDS = frozenset({"oper_state", "oper_ram", "oper_vcpus", "status"})

#: Hypervisor states that mean "defined but not running".
_SHUTDOWN_STATES = frozenset({"shutdown", "stopped"})

_UNAVAIL = ResultStatus.UNAVAIL
_NODATA = ResultStatus.NODATA


def is_shut_down(info: dict[str, Any]) -> bool:
    """Whether a hypervisor's instance info describes a stopped (not running) guest."""
    return str(info.get("state", "")) in _SHUTDOWN_STATES


def filled_hvparams(store: ConfigStore, instance: Instance, node: Node | None = None,
                    *, skip_globals: bool = True) -> dict[str, Any]:
    """Hypervisor parameters cluster ← OS ← group ← instance; without the global-only
    ones (which are not the instance's business) unless ``skip_globals`` is False, and
    then with the cluster's value (:func:`~corral.objects.params.fill_hv_params`)."""
    cluster = store.cluster
    hv = instance.hypervisor
    node = node or store.find("node", instance.primary_node)
    group = store.find("nodegroup", node.group) if node is not None else None
    result = fill_hv_params(
        cluster.hvparams.get(hv, {}),
        cluster.os_hvp.get(split_os_name(instance.os)[0], {}).get(hv),
        group.hvparams.get(hv) if group is not None else None,
        instance.hvparams,
    )
    if skip_globals:
        specs = HV_PARAMS.get(hv, {})
        result = {k: v for k, v in result.items() if not (k in specs and specs[k].global_only)}
    return result


def filled_beparams(store: ConfigStore, instance: Instance, node: Node | None = None
                    ) -> dict[str, Any]:
    """Backend parameters cluster ← group ← instance."""
    node = node or store.find("node", instance.primary_node)
    group = store.find("nodegroup", node.group) if node is not None else None
    return fill_params(store.cluster.beparams.get("default", {}),
                       group.beparams if group is not None else None, instance.beparams)


def _filled_nicparams(store: ConfigStore, instance: Instance, node: Node | None
                      ) -> list[dict[str, Any]]:
    group = store.find("nodegroup", node.group) if node is not None else None
    defaults = fill_params(store.cluster.nicparams.get("default", {}),
                           group.nicparams if group is not None else None)
    return [fill_params(defaults, nic.nicparams) for nic in instance.nics]


@dataclass(slots=True)
class _Row:
    """Per-instance values computed once per query (filled parameters, objects)."""

    node: Node | None
    group: NodeGroup | None
    disks: list[Disk]
    hvparams: dict[str, Any]
    beparams: dict[str, Any]
    osparams: dict[str, Any]
    nicparams: list[dict[str, Any]]


@dataclass
class InstanceQueryContext:
    """What instance field getters read: the configuration and the nodes' answers."""

    store: ConfigStore
    #: Instance UUID -> the hypervisor's info dict, for instances found running.
    live: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: UUIDs of nodes that are offline (not asked).
    offline_nodes: set[str] = field(default_factory=set)
    #: UUIDs of nodes that were asked and did not answer (offline ones included).
    bad_nodes: set[str] = field(default_factory=set)
    #: Instances found running on a node other than their primary node.
    wrong_node: set[str] = field(default_factory=set)
    _rows: dict[str, _Row] = field(default_factory=dict)

    def row(self, inst: Instance) -> _Row:
        """The per-instance values of ``inst`` (computed on first use)."""
        row = self._rows.get(inst.uuid)
        if row is None:
            store = self.store
            node = store.find("node", inst.primary_node)
            group = store.find("nodegroup", node.group) if node is not None else None
            disks = [d for d in (store.find("disk", u) for u in inst.disks) if d is not None]
            row = self._rows[inst.uuid] = _Row(
                node=node, group=group, disks=disks,
                hvparams=filled_hvparams(store, inst, node),
                beparams=filled_beparams(store, inst, node),
                osparams=fill_osparams(store, inst.os, inst.osparams),
                nicparams=_filled_nicparams(store, inst, node),
            )
        return row


def instance_status(ctx: InstanceQueryContext, inst: Instance) -> str:
    """Ganeti's instance status: ``running``, ``ADMIN_down``, ``ERROR_up``, ..."""
    if inst.primary_node in ctx.offline_nodes:
        return "ERROR_nodeoffline"
    if inst.primary_node in ctx.bad_nodes:
        return "ERROR_nodedown"
    info = ctx.live.get(inst.uuid)
    if info:
        if inst.uuid in ctx.wrong_node:
            return "ERROR_wrongnode"
        if is_shut_down(info):
            if inst.admin_state != "up":
                return "ADMIN_down"
            return "USER_down" if _user_shutdown_allowed(ctx, inst) else "ERROR_down"
        return "running" if inst.admin_state == "up" else "ERROR_up"
    if inst.admin_state == "up":
        return "ERROR_down"
    if inst.admin_state == "down":
        return "ADMIN_down"
    return "ADMIN_offline"


def _user_shutdown_allowed(ctx: InstanceQueryContext, inst: Instance) -> bool:
    """Whether a guest that powered itself off is ``USER_down`` rather than
    ``ERROR_down``: as Ganeti, any hypervisor but kvm, and kvm with ``user_shutdown``
    (Ganeti also wants the cluster's ``enabled_user_shutdown``, which corral lacks)."""
    if inst.hypervisor != "kvm":
        return True
    value = ctx.row(inst).hvparams.get("user_shutdown", False)
    return value is True or str(value).lower() in ("true", "yes", "on", "1")


def _oper_state(ctx: InstanceQueryContext, inst: Instance) -> Any:
    if inst.primary_node in ctx.bad_nodes:
        return _NODATA
    return bool(ctx.live.get(inst.uuid))


def _live_value(name: str) -> Callable[[InstanceQueryContext, Instance], Any]:
    def get(ctx: InstanceQueryContext, inst: Instance) -> Any:
        if inst.primary_node in ctx.bad_nodes:
            return _NODATA
        info = ctx.live.get(inst.uuid)
        if info and name in info:
            return info[name]
        return _UNAVAIL
    return get


Getter = Callable[[InstanceQueryContext, Instance], Any]

#: Fields of instances (``gnt-instance list``, RAPI ``/2/query/instance``).
INSTANCE_FIELDS: FieldRegistry[InstanceQueryContext, Instance] = FieldRegistry("instance")
_F = INSTANCE_FIELDS


def _add(name: str, title: str, kind: FieldKind, doc: str, getter: Getter, *,
         aliases: Iterable[str] = ()) -> None:
    _F.add(name, title, kind, doc, getter)
    for alias in aliases:
        _F.add(alias, title, kind, doc, getter)


def _node_name(ctx: InstanceQueryContext, inst: Instance) -> Any:
    node = ctx.row(inst).node
    return node.name if node is not None else _UNAVAIL


def _group_name(ctx: InstanceQueryContext, inst: Instance) -> Any:
    group = ctx.row(inst).group
    return group.name if group is not None else _UNAVAIL


def _group_uuid(ctx: InstanceQueryContext, inst: Instance) -> Any:
    node = ctx.row(inst).node
    return node.group if node is not None else _UNAVAIL


def _disk_usage(ctx: InstanceQueryContext, inst: Instance) -> int:
    # File-based disks use their size on the node (sparse files may use less);
    # diskless instances use nothing.
    return sum(d.size for d in ctx.row(inst).disks)


# -- configuration fields ---------------------------------------------------
_add("name", "Instance", "text", "Instance name", lambda _c, i: i.name)
_add("uuid", "UUID", "text", "Instance UUID", lambda _c, i: i.uuid)
_add("os", "OS", "text", "Operating system (name or name+variant)", lambda _c, i: i.os)
_add("hypervisor", "Hypervisor", "text", "Hypervisor name", lambda _c, i: i.hypervisor)
_add("disk_template", "Disk_template", "text", "Disk template of the instance",
     lambda _c, i: i.disk_template)
_add("network_port", "Network_port", "other",
     "Network port of the instance's console, if its hypervisor uses one",
     lambda _c, i: i.network_port)
_add("serial_no", "SerialNo", "number",
     "Instance object serial number, incremented on each modification",
     lambda _c, i: i.serial_no)
_add("ctime", "CTime", "timestamp", "Creation timestamp", lambda _c, i: i.ctime)
_add("mtime", "MTime", "timestamp", "Modification timestamp", lambda _c, i: i.mtime)
_add("tags", "Tags", "other", "Tags", lambda _c, i: sorted(i.tags))
_add("member_of", "MemberOf", "other",
     "Placement constraints: member_of values, aggregates by name (UUID if unnamed)",
     lambda c, i: [value_text(v, aggregate_label(c.store)) for v in i.member_of])
_add("member_of.uuid", "MemberOfUUIDs", "other",
     "Placement constraints: member_of values, aggregates by UUID",
     lambda _c, i: list(i.member_of))
_add("required_traits", "RequiredTraits", "other",
     "Placement constraints: traits the primary node must have",
     lambda _c, i: list(i.required_traits))
_add("forbidden_traits", "ForbiddenTraits", "other",
     "Placement constraints: traits the primary node must not have",
     lambda _c, i: list(i.forbidden_traits))
_add("pnode", "Primary_node", "text", "Primary node", _node_name)
_add("pnode.group", "PrimaryNodeGroup", "text", "Node group of the primary node",
     _group_name)
_add("pnode.group.uuid", "PrimaryNodeGroupUUID", "text",
     "Node group UUID of the primary node", _group_uuid)
_add("snodes", "Secondary_Nodes", "other",
     "Secondary nodes (none for the disk templates corral has)", lambda _c, _i: [])
_add("snodes.group", "SecondaryNodesGroups", "other", "Node groups of the secondary nodes",
     lambda _c, _i: [])
_add("snodes.group.uuid", "SecondaryNodesGroupsUUID", "other",
     "Node group UUIDs of the secondary nodes", lambda _c, _i: [])
_add("admin_state", "InstanceState", "text",
     "Desired state of the instance: up, down or offline", lambda _c, i: i.admin_state)
_add("admin_up", "Autostart", "bool", "Whether the instance should be running",
     lambda _c, i: i.admin_state == "up")
_add("forthcoming", "Forthcoming", "bool",
     "Whether the instance only reserves resources (never, in corral)", lambda _c, _i: False)
_add("admin_state_source", "InstanceStateSource", "text",
     "Who set the desired state last: admin (corral has no user-initiated changes of it)",
     lambda _c, _i: "admin")
_add("disks_active", "DisksActive", "bool",
     "Whether the disks should be active: while the instance is to run (corral does not "
     "record disks activated on their own)", lambda _c, i: i.admin_state == "up")
_add("console", "Console", "other",
     "How to reach the console; never available in a query here, ask gnt-instance "
     "console", lambda _c, _i: _UNAVAIL)

# -- live fields -------------------------------------------------------------
_add("oper_state", "Running", "bool", "Whether the instance actually runs", _oper_state)
_add("oper_ram", "Memory", "unit", "Memory the hypervisor gives the instance (MiB)",
     _live_value("memory"))
_add("oper_vcpus", "VCPUs", "number", "Virtual CPUs the hypervisor gives the instance",
     _live_value("vcpus"))
_add(
    "status", "Status", "text",
    "Instance status: \"running\" (should run and does), \"ADMIN_down\" (stopped as "
    "wanted), \"ERROR_up\" (runs but should not), \"ERROR_down\" (should run but does "
    "not), \"ERROR_wrongnode\" (runs on another node than its primary), "
    "\"ERROR_nodedown\" (primary node did not answer), \"ERROR_nodeoffline\" (primary "
    "node is offline), \"ADMIN_offline\" (marked offline), \"USER_down\" (shut down "
    "from inside; not reported by corral yet)",
    instance_status,
)

# -- parameters --------------------------------------------------------------
_add("hvparams", "HypervisorParameters", "other", "Hypervisor parameters (filled)",
     lambda c, i: c.row(i).hvparams)
_add("beparams", "BackendParameters", "other", "Backend parameters (filled)",
     lambda c, i: c.row(i).beparams)
_add("osparams", "OpSysParameters", "other", "OS parameters (filled)",
     lambda c, i: c.row(i).osparams)
_add("custom_hvparams", "CustomHypervisorParameters", "other",
     "Hypervisor parameters set on the instance", lambda _c, i: dict(i.hvparams))
_add("custom_beparams", "CustomBackendParameters", "other",
     "Backend parameters set on the instance", lambda _c, i: dict(i.beparams))
_add("custom_osparams", "CustomOpSysParameters", "other",
     "OS parameters set on the instance", lambda _c, i: dict(i.osparams))
_add("custom_nicparams", "CustomNicParameters", "other",
     "NIC parameters set on each network interface",
     lambda _c, i: [dict(n.nicparams) for n in i.nics])

_HV_TITLES = {
    "acpi": "ACPI", "boot_order": "Boot_order", "cdrom_image_path": "CDROM_image_path",
    "cpu_type": "cpu_type", "disk_type": "Disk_type", "initrd_path": "Initrd_path",
    "kernel_path": "Kernel_path", "nic_type": "NIC_type", "vnc_bind_address":
    "VNC_bind_address",
}
_BE_TITLES = {"auto_balance": "Auto_balance", "maxmem": "ConfigMaxMem",
              "minmem": "ConfigMinMem", "vcpus": "ConfigVCPUs"}
#: Query kinds of parameter types; Ganeti gives string parameters the kind "other".
_TYPE_KINDS: dict[str, FieldKind] = {
    "string": "other", "maybe-string": "other", "bool": "bool", "int": "number",
    "float": "float", "size": "unit",
}
#: Ganeti's parameters of the hypervisors corral does not have (xen, lxc): their
#: fields exist, as in Ganeti, and are never available (as for an instance of another
#: hypervisor there).
_FOREIGN_HV_PARAMS: dict[str, tuple[str, FieldKind]] = {
    "blockdev_prefix": ("hv/blockdev_prefix", "other"),
    "bootloader_args": ("hv/bootloader_args", "other"),
    "bootloader_path": ("hv/bootloader_path", "other"),
    "cpu_cap": ("hv/cpu_cap", "number"), "cpu_weight": ("hv/cpu_weight", "number"),
    "cpuid": ("hv/cpuid", "other"), "device_model": ("hv/device_model", "other"),
    "devices": ("hv/devices", "other"), "drop_capabilities": ("hv/drop_capabilities", "other"),
    "extra_cgroups": ("hv/extra_cgroups", "other"), "extra_config": ("hv/extra_config", "other"),
    "init_script": ("hv/init_script", "other"), "num_ttys": ("hv/num_ttys", "number"),
    "pae": ("PAE", "bool"), "pci_pass": ("pci_pass", "other"),
    "startup_timeout": ("hv/startup_timeout", "number"),
    "use_bootloader": ("hv/use_bootloader", "bool"), "vif_script": ("hv/vif_script", "other"),
    "vif_type": ("hv/vif_type", "other"), "viridian": ("hv/viridian", "bool"),
}


def _hv_param(name: str) -> Getter:
    return lambda c, i: c.row(i).hvparams.get(name, _UNAVAIL)


def _be_param(name: str) -> Getter:
    return lambda c, i: c.row(i).beparams.get(name)


_hv_specs: dict[str, ParamSpec] = {}
for _specs in HV_PARAMS.values():
    for _name, _spec in _specs.items():
        if not _spec.global_only:
            _hv_specs.setdefault(_name, _spec)
for _name in sorted(_hv_specs):
    _add(f"hv/{_name}", _HV_TITLES.get(_name, f"hv/{_name}"), _TYPE_KINDS[_hv_specs[_name].type],
         f"The hypervisor parameter {_name!r}", _hv_param(_name))
for _name, (_title, _kind) in sorted(_FOREIGN_HV_PARAMS.items()):
    if _name not in _hv_specs:
        _add(f"hv/{_name}", _title, _kind,
             f"The hypervisor parameter {_name!r} of Xen or LXC, which corral does not "
             "have; never available", lambda _c, _i: _UNAVAIL)
for _name in sorted(BE_PARAMS):
    _add(f"be/{_name}", _BE_TITLES.get(_name, f"be/{_name}"),
         _TYPE_KINDS[BE_PARAMS[_name].type], f"The backend parameter {_name!r}",
         _be_param(_name),
         aliases={"vcpus": ["vcpus"], "maxmem": ["be/memory"]}.get(_name, []))

# -- disks -------------------------------------------------------------------
_add("disk_usage", "DiskUsage", "unit",
     "Disk space the instance uses on its node (MiB); not what the instance sees",
     _disk_usage)
_add("disk.count", "Disks", "number", "Number of disks", lambda _c, i: len(i.disks))
_add("disk.sizes", "Disk_sizes", "other", "List of disk sizes (MiB)",
     lambda c, i: [d.size for d in c.row(i).disks])
_add("disk.spindles", "Disk_spindles", "other", "List of disk spindles",
     lambda c, i: [d.spindles for d in c.row(i).disks])
_add("disk.names", "Disk_names", "other", "List of disk names",
     lambda c, i: [d.name for d in c.row(i).disks])
_add("disk.uuids", "Disk_UUIDs", "other", "List of disk UUIDs",
     lambda _c, i: list(i.disks))


def _disk_attr(index: int, attr: str) -> Getter:
    def get(ctx: InstanceQueryContext, inst: Instance) -> Any:
        disks = ctx.row(inst).disks
        if index >= len(disks):
            return _UNAVAIL
        value = getattr(disks[index], attr)
        return _UNAVAIL if value is None else value
    return get


for _i in range(MAX_DISKS):
    _add(f"disk.size/{_i}", f"Disk/{_i}", "unit", f"Size of disk {_i} (MiB)",
         _disk_attr(_i, "size"), aliases={0: ["sda_size"], 1: ["sdb_size"]}.get(_i, []))
    _add(f"disk.spindles/{_i}", f"DiskSpindles/{_i}", "number", f"Spindles of disk {_i}",
         _disk_attr(_i, "spindles"))
    _add(f"disk.name/{_i}", f"DiskName/{_i}", "text", f"Name of disk {_i}",
         _disk_attr(_i, "name"))
    _add(f"disk.uuid/{_i}", f"DiskUUID/{_i}", "text", f"UUID of disk {_i}",
         _disk_attr(_i, "uuid"))

# -- NICs --------------------------------------------------------------------


def _bridges(ctx: InstanceQueryContext, inst: Instance) -> list[Any]:
    return [p.get("link") if p.get("mode") == "bridged" else None
            for p in ctx.row(inst).nicparams]


def _vlans(ctx: InstanceQueryContext, inst: Instance) -> list[Any]:
    return [p.get("vlan") if p.get("mode") in ("bridged", "openvswitch") else None
            for p in ctx.row(inst).nicparams]


_add("nic.count", "NICs", "number", "Number of network interfaces",
     lambda _c, i: len(i.nics))
_add("nic.macs", "NIC_MACs", "other", "List of the network interfaces' MAC addresses",
     lambda _c, i: [n.mac for n in i.nics])
_add("nic.ips", "NIC_IPs", "other", "List of the network interfaces' IP addresses",
     lambda _c, i: [n.ip for n in i.nics])
_add("nic.names", "NIC_Names", "other", "List of the network interfaces' names",
     lambda _c, i: [n.name for n in i.nics])
_add("nic.uuids", "NIC_UUIDs", "other", "List of the network interfaces' UUIDs",
     lambda _c, i: [n.uuid for n in i.nics])
_add("nic.modes", "NIC_modes", "other", "List of the network interfaces' modes",
     lambda c, i: [p.get("mode") for p in c.row(i).nicparams])
_add("nic.links", "NIC_links", "other", "List of the network interfaces' links",
     lambda c, i: [p.get("link") for p in c.row(i).nicparams])
_add("nic.vlans", "NIC_VLANs", "other", "List of the network interfaces' VLANs", _vlans)
_add("nic.bridges", "NIC_bridges", "other",
     "List of the network interfaces' bridges (bridged mode only)", _bridges)
_add("nic.networks", "NIC_networks", "other", "List of the network interfaces' networks",
     lambda _c, i: [n.network for n in i.nics])
_add("nic.networks.names", "NIC_networks_names", "other",
     "List of the names of the network interfaces' networks",
     lambda c, i: [_network_name(c.store, n.network) for n in i.nics])


def _network_name(store: ConfigStore, uuid: str | None) -> str | None:
    """The name of the network with ``uuid`` (None for no network)."""
    net = store.find("network", uuid) if uuid else None
    return net.name if net is not None else None


def _network_info(store: ConfigStore, uuid: str | None) -> dict[str, Any] | None:
    """What ``gnt-instance info`` shows of a NIC's network (Ganeti's ``netinfo``)."""
    net = store.find("network", uuid) if uuid else None
    if net is None:
        return None
    return {"name": net.name, "uuid": net.uuid, "network": net.network,
            "gateway": net.gateway, "network6": net.network6, "gateway6": net.gateway6,
            "mac_prefix": net.mac_prefix}


def _nic_value(index: int, get_value: Callable[[InstanceQueryContext, Instance, int], Any]
               ) -> Getter:
    def get(ctx: InstanceQueryContext, inst: Instance) -> Any:
        if index >= len(inst.nics):
            return _UNAVAIL
        value = get_value(ctx, inst, index)
        return _UNAVAIL if value is None else value
    return get


def _nic_attr(attr: str) -> Callable[[InstanceQueryContext, Instance, int], Any]:
    return lambda _c, inst, index: getattr(inst.nics[index], attr)


def _nic_param(name: str, modes: tuple[str, ...] | None = None
               ) -> Callable[[InstanceQueryContext, Instance, int], Any]:
    def get(ctx: InstanceQueryContext, inst: Instance, index: int) -> Any:
        params = ctx.row(inst).nicparams[index]
        if modes is not None and params.get("mode") not in modes:
            return None
        return params.get(name)
    return get


for _i in range(MAX_NICS):
    _first = _i == 0
    _add(f"nic.ip/{_i}", f"NicIP/{_i}", "text", f"IP address of network interface {_i}",
         _nic_value(_i, _nic_attr("ip")), aliases=["ip"] if _first else [])
    _add(f"nic.mac/{_i}", f"NicMAC/{_i}", "text", f"MAC address of network interface {_i}",
         _nic_value(_i, _nic_attr("mac")), aliases=["mac"] if _first else [])
    _add(f"nic.name/{_i}", f"NicName/{_i}", "text", f"Name of network interface {_i}",
         _nic_value(_i, _nic_attr("name")))
    _add(f"nic.uuid/{_i}", f"NicUUID/{_i}", "text", f"UUID of network interface {_i}",
         _nic_value(_i, _nic_attr("uuid")))
    _add(f"nic.mode/{_i}", f"NicMode/{_i}", "text", f"Mode of network interface {_i}",
         _nic_value(_i, _nic_param("mode")), aliases=["nic_mode"] if _first else [])
    _add(f"nic.link/{_i}", f"NicLink/{_i}", "text", f"Link of network interface {_i}",
         _nic_value(_i, _nic_param("link")), aliases=["nic_link"] if _first else [])
    _add(f"nic.bridge/{_i}", f"NicBridge/{_i}", "text",
         f"Bridge of network interface {_i} (bridged mode only)",
         _nic_value(_i, _nic_param("link", ("bridged",))),
         aliases=["bridge"] if _first else [])
    _add(f"nic.vlan/{_i}", f"NicVLAN/{_i}", "text",
         f"VLAN of network interface {_i} (openvswitch mode only)",
         _nic_value(_i, _nic_param("vlan", ("openvswitch",))))
    _add(f"nic.network/{_i}", f"NicNetwork/{_i}", "text",
         f"Network of network interface {_i}", _nic_value(_i, _nic_attr("network")),
         aliases=["nic_network"] if _first else [])
    _add(f"nic.network.name/{_i}", f"NicNetworkName/{_i}", "text",
         f"Network name of network interface {_i}",
         _nic_value(_i, lambda c, inst, x: _network_name(c.store, inst.nics[x].network)))


# -- answering ---------------------------------------------------------------

def filter_fields(qfilter: Any) -> set[str]:
    """The field names a list-form filter refers to."""
    found: set[str] = set()

    def walk(expr: Any) -> None:
        if not isinstance(expr, list) or not expr:
            return
        op = expr[0]
        if op in ("|", "&"):
            for sub in expr[1:]:
                walk(sub)
        elif op == "!":
            if len(expr) > 1:
                walk(expr[1])
        elif len(expr) > 1 and isinstance(expr[1], str):
            found.add(expr[1])

    walk(qfilter)
    return found


async def fetch_live(ctx: MasterContext, qctx: InstanceQueryContext,
                     instances: list[Instance]) -> None:
    """Ask the online primary nodes of ``instances`` which instances they run (one
    ``all_instances_info`` call) and record the answers in ``qctx``."""
    store = ctx.store
    nodes: dict[str, Node] = {}
    hypervisors: set[str] = set()
    for inst in instances:
        node = store.find("node", inst.primary_node)
        if node is None:
            continue
        hypervisors.add(inst.hypervisor)
        if node.offline:
            qctx.offline_nodes.add(node.uuid)
            qctx.bad_nodes.add(node.uuid)
        else:
            nodes[node.uuid] = node
    if not nodes:
        return
    results = await ctx.rpc.call(
        list(nodes.values()), "all_instances_info", {"hypervisors": sorted(hypervisors)},
        timeout=30)
    by_name = {inst.name: inst for inst in instances}
    for node in nodes.values():
        result = results.get(node.name)
        if result is None or result.failed or not isinstance(result.payload, dict):
            qctx.bad_nodes.add(node.uuid)
            continue
        for name, info in result.payload.items():
            found = by_name.get(name)
            if found is None or not isinstance(info, dict):
                continue
            if found.primary_node != node.uuid:
                qctx.wrong_node.add(found.uuid)
                qctx.live.setdefault(found.uuid, info)
            else:
                qctx.live[found.uuid] = info


def instance_resource(ctx: MasterContext) -> QueryResource:
    """The ``instance`` query resource over ``ctx``'s configuration and nodes."""

    # Rows hold what the configuration alone decides (filled parameters, the node,
    # group and disks); they stay valid until the next commit, so queries share them
    # for as long as the configuration serial does not change.
    rows_by_serial: dict[int, dict[str, _Row]] = {}

    async def query(fields: list[str], qfilter: Any) -> dict[str, Any]:
        serial = ctx.store.serial
        rows = rows_by_serial.get(serial)
        if rows is None:
            rows_by_serial.clear()
            rows = rows_by_serial[serial] = {}
        qctx = InstanceQueryContext(ctx.store, _rows=rows)
        instances, qfilter = pick_items(ctx.store.all("instance"), qfilter,
                                        lambda inst: inst.name,
                                        named_lookup(ctx.store, "instance"))
        in_filter = filter_fields(qfilter)
        needs_live = bool(LIVE_FIELDS & (set(fields) | in_filter))
        if needs_live:
            if qfilter and not (LIVE_FIELDS & in_filter):
                # The filter needs configuration only: ask just the survivors' nodes.
                test = INSTANCE_FIELDS.compile(qfilter, qctx)
                instances = [inst for inst in instances if test(inst)]
            await fetch_live(ctx, qctx, instances)
        return INSTANCE_FIELDS.query(instances, fields, qfilter, qctx)

    return QueryResource(query=query, query_fields=INSTANCE_FIELDS.query_fields)


# -- gnt-instance info ---------------------------------------------------------

class LUInstanceQueryData(LogicalUnit[OpInstanceQueryData]):
    """``OP_INSTANCE_QUERY_DATA``: what ``gnt-instance info`` shows, keyed by name."""

    OP_ID = "OP_INSTANCE_QUERY_DATA"
    USES_BGL = False

    def expand_names(self) -> None:
        """Every named instance must exist (all instances when none is named)."""
        store = self.master.store
        if self.op.instances:
            self.wanted = [expand_instance(store, key) for key in self.op.instances]
        else:
            self.wanted = store.all("instance")

    async def execute(self) -> dict[str, Any]:
        """Configuration data, plus each instance's run state and its disks' status on
        their nodes unless ``static``."""
        live: dict[str, dict[str, Any] | None] = {}
        statuses: dict[tuple[str, str], list[Any] | None] = {}
        if not self.op.static:
            live = await self._run_states()
            statuses = await self._disk_statuses()
        return {inst.name: self._describe(inst, live, statuses) for inst in self.wanted}

    async def _disk_statuses(self) -> dict[tuple[str, str], list[Any] | None]:
        """``(disk uuid, node uuid)`` -> Ganeti's status of that disk there, for the
        disks on nodes that are online (one ``blockdev_find`` per node)."""
        from corral.cmdlib.disk_status import disk_nodes, ganeti_status, node_disk_status
        store = self.master.store
        wanted = []
        for inst in self.wanted:
            for index, disk_uuid in enumerate(inst.disks):
                disk = store.get("disk", disk_uuid)
                for node_uuid in disk_nodes(inst, disk):
                    node = store.get("node", node_uuid)
                    if not node.offline:
                        wanted.append((inst, index, disk, node))
        entries = await node_disk_status(self.master, wanted) if wanted else []
        return {(e.disk.uuid, e.node.uuid): ganeti_status(e) for e in entries}

    async def _run_states(self) -> dict[str, dict[str, Any] | None]:
        store = self.master.store
        by_node: dict[str, list[Instance]] = {}
        for inst in self.wanted:
            by_node.setdefault(inst.primary_node, []).append(inst)
        nodes = []
        for node_uuid in by_node:
            node = store.get("node", node_uuid)
            if node.offline:
                self.feedback(f"Warning: primary node {node.name} is offline; static "
                              "information only for its instances")
            else:
                nodes.append(node)
        if not nodes:
            return {}
        hypervisors = sorted({inst.hypervisor for inst in self.wanted})
        results = await self.master.rpc.call(nodes, "all_instances_info",
                                             {"hypervisors": hypervisors}, timeout=60)
        live: dict[str, dict[str, Any] | None] = {}
        for node in nodes:
            payload = results[node.name].get("listing instances")
            payload = payload if isinstance(payload, dict) else {}
            for inst in by_node[node.uuid]:
                live[inst.uuid] = payload.get(inst.name)
        return live

    def _describe(self, inst: Instance, live: dict[str, dict[str, Any] | None],
                  statuses: dict[tuple[str, str], list[Any] | None]) -> dict[str, Any]:
        store = self.master.store
        node = store.get("node", inst.primary_node)
        group = store.get("nodegroup", node.group)
        spec = instance_spec(store, inst, node)
        run_state: str | None = None
        if inst.uuid in live:
            info = live[inst.uuid]
            if info:
                run_state = "down" if is_shut_down(info) else "up"
            else:
                run_state = "offline" if inst.admin_state == "offline" else "down"
        disks = []
        for disk_uuid in inst.disks:
            disk = store.get("disk", disk_uuid)
            disks.append({
                "iv_name": disk.iv_name, "dev_type": disk.dev_type,
                "logical_id": list(disk.logical_id), "drbd_info": None,
                "pstatus": statuses.get((disk.uuid, inst.primary_node)),
                "sstatus": None, "children": [], "mode": disk.mode, "size": disk.size,
                "spindles": disk.spindles, "name": disk.name, "uuid": disk.uuid,
            })
        nics = [[n.name, n.uuid, n.ip, n.mac, n.mode, n.link, n.vlan, n.network,
                 _network_info(store, n.network)] for n in spec.nics]
        return {
            "name": inst.name,
            "config_state": inst.admin_state,
            "run_state": run_state,
            "pnode": node.name,
            "pnode_group_uuid": group.uuid,
            "pnode_group_name": group.name,
            "snodes": [],
            "snodes_group_uuids": [],
            "snodes_group_names": [],
            "os": inst.os,
            "nics": nics,
            "disk_template": inst.disk_template,
            "disks": disks,
            "hypervisor": inst.hypervisor,
            "network_port": inst.network_port,
            "hv_instance": dict(inst.hvparams),
            "hv_actual": filled_hvparams(store, inst, node),
            "be_instance": dict(inst.beparams),
            "be_actual": spec.beparams,
            "os_instance": dict(inst.osparams),
            "os_actual": spec.osparams,
            "serial_no": inst.serial_no,
            "mtime": inst.mtime,
            "ctime": inst.ctime,
            "uuid": inst.uuid,
            "tags": sorted(inst.tags),
            "last_reason": [list(entry) for entry in inst.last_reason],
            "placement": describe_constraints(store, instance_constraints(inst)),
        }
