"""Network operations: add, remove, change, connect to and disconnect from node
groups; the ``network`` query resource.

A network is an IPv4 subnet with an address pool (:mod:`corral.objects.network_pool`).
Connecting it to a node group records the NIC mode and link that instances of the
group get on it; NICs name the network and take their address from its pool. Locks
follow Ganeti's: the network at the network level, the group at the group level and,
for the checks that look at a group's instances, those instances shared.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from corral.cmdlib.base import LockRequest, LogicalUnit, MasterContext, QueryResource
from corral.cmdlib.common import add_name_lock, drop_name_lock, expand_group
from corral.cmdlib.query import named_lookup
from corral.cmdlib.tags import check_tag
from corral.errors import (
    AlreadyExistsError,
    NotFoundError,
    OpPrereqError,
    ParameterError,
    did_you_mean,
)
from corral.locking import LockLevel
from corral.objects import Instance, Network, NetworkLink, NodeGroup
from corral.objects.network_pool import (
    AddressPool,
    check_mac_prefix,
    initial_reservations,
    parse_address,
    parse_subnet,
    parse_subnet6,
)
from corral.objects.params import NIC_MODES
from corral.opcodes.network_ops import (
    OpNetworkAdd,
    OpNetworkConnect,
    OpNetworkDisconnect,
    OpNetworkQuery,
    OpNetworkRemove,
    OpNetworkSetParams,
)
from corral.qlang import FieldRegistry, ResultStatus, pick_items

if TYPE_CHECKING:
    from corral.config import ConfigStore

__all__ = [
    "NETWORK_FIELDS",
    "UNITS",
    "LUNetworkAdd",
    "LUNetworkConnect",
    "LUNetworkDisconnect",
    "LUNetworkQuery",
    "LUNetworkRemove",
    "LUNetworkSetParams",
    "NetworkQueryData",
    "expand_network",
    "network_pool",
    "query_resources",
]


def expand_network(store: ConfigStore, key: str) -> Network:
    """The network called ``key`` or with UUID ``key``; Ganeti's "not found" first."""
    found = store.find("network", key)
    if found is None:
        hint = did_you_mean(key, [n.name for n in store.all("network")],
                            noun="networks", listing="gnt-network list")
        raise NotFoundError(f"Network '{key}' not found\n{hint}")
    return found


def network_users(store: ConfigStore, network: Network) -> list[Instance]:
    """The instances with a NIC on ``network``, by name."""
    return [i for i in store.all("instance")
            if any(n.network == network.uuid for n in i.nics)]


def network_pool(store: ConfigStore, network: Network) -> AddressPool:
    """The address pool of ``network`` with the addresses its NICs use."""
    used = [nic.ip for inst in network_users(store, network) for nic in inst.nics
            if nic.network == network.uuid and nic.ip]
    return AddressPool(network.name, network.network, network.ext_reservations, used)


def _conflicts(instances: list[Instance], test: Any) -> list[str]:
    """``inst: nicN/ip`` for every NIC of ``instances`` that ``test`` picks."""
    found = []
    for inst in instances:
        nics = [f"nic{i}/{nic.ip}" for i, nic in enumerate(inst.nics) if nic.ip and test(nic)]
        if nics:
            found.append(f"{inst.name}: {', '.join(nics)}")
    return found


def _raise_conflicts(lu: LogicalUnit[Any], network: str, action: str, group: str,
                     conflicts: list[str]) -> None:
    if not conflicts:
        return
    lu.feedback(f" - WARNING: IP addresses from network '{network}', which is about to "
                f"{action} node group '{group}', are in use: {', '.join(conflicts)}")
    raise OpPrereqError(
        "Conflicting IP addresses found; remove/modify the corresponding network "
        f"interfaces ({'; '.join(conflicts)})")


def _group_instances(store: ConfigStore, group: NodeGroup) -> list[Instance]:
    nodes = {n.uuid for n in store.all("node") if n.group == group.uuid}
    return [i for i in store.all("instance") if i.primary_node in nodes]


class _OneNetwork(LogicalUnit[Any]):
    """An LU about one existing network, locked exclusively."""

    def expand_names(self) -> None:
        """The network by name or UUID."""
        net = expand_network(self.master.store, self.op.network_name)
        self._uuid, self._name = net.uuid, net.name

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The network, exclusively."""
        return {LockLevel.NETWORK: LockRequest([self._name])}

    def _network(self) -> Network:
        net = self.master.store.find("network", self._uuid)
        if net is None:
            raise NotFoundError(f"network {self._name} was removed while waiting for its lock")
        return net


class LUNetworkAdd(LogicalUnit[OpNetworkAdd]):
    """``OP_NETWORK_ADD``: a new network, its pool reserving the network and broadcast
    addresses, the gateway and the addresses given."""

    OP_ID = "OP_NETWORK_ADD"

    def check_arguments(self) -> None:
        """Subnet, gateway, IPv6 settings, MAC prefix, reservations and tags valid."""
        op = self.op
        name = op.network_name
        parse_subnet(op.network, name)
        self._gateway = (parse_address(op.gateway, 4, "gateway")
                         if op.gateway is not None else None)
        self._reserved = initial_reservations(op.network, self._gateway, name)
        self._network6 = parse_subnet6(op.network6) if op.network6 else None
        self._gateway6 = parse_address(op.gateway6, 6, "IPv6 gateway") if op.gateway6 else None
        self._mac_prefix = check_mac_prefix(op.mac_prefix) if op.mac_prefix else None
        self._extra = [parse_address(ip) for ip in op.add_reserved_ips or ()]
        for tag in op.tags or ():
            check_tag(tag)

    async def prepare(self) -> None:
        """Add the new network's lock, so that a second add of the name waits for this
        one and then finds the name taken."""
        await add_name_lock(self, self.op.network_name, "network")

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The new network's lock."""
        return {LockLevel.NETWORK: LockRequest([self.op.network_name])}

    def check_prereq(self) -> None:
        """The name must be new."""
        existing = self.master.store.find("network", self.op.network_name)
        if existing is not None:
            raise AlreadyExistsError(
                f"Desired network name '{existing.name}' already exists as a network "
                f"(UUID: {existing.uuid})")

    async def abort(self) -> None:
        """Drop the name's lock unless a network of that name exists."""
        await drop_name_lock(self, self.op.network_name, "network")

    async def execute(self) -> None:
        """Record the network with its pool."""
        op = self.op
        pool = AddressPool(op.network_name, op.network, self._reserved)
        if op.conflicts_check:
            # Node and master addresses inside the subnet are never handed to NICs.
            cluster = self.master.store.cluster
            for node in self.master.store.all("node"):
                for ip in {node.primary_ip, node.secondary_ip} - {""}:
                    if pool.contains(ip) and not pool.is_reserved(ip):
                        pool.reserve_external(ip)
                        self.feedback(f"Reserved IP address of node '{node.name}' ({ip})")
            if cluster.master_ip and pool.contains(cluster.master_ip) \
                    and not pool.is_reserved(cluster.master_ip):
                pool.reserve_external(cluster.master_ip)
                self.feedback(f"Reserved cluster master IP address ({cluster.master_ip})")
        for ip in self._extra:
            if not pool.contains(ip):
                raise OpPrereqError(f"Cannot reserve IP address '{ip}': {pool.subnet} does "
                                    f"not contain {ip}")
            if not pool.is_reserved(ip):
                pool.reserve_external(ip)
        if op.dry_run:
            await self.abort()
            return None
        net = Network(name=op.network_name, network=str(pool.subnet), gateway=self._gateway,
                      network6=self._network6, gateway6=self._gateway6,
                      mac_prefix=self._mac_prefix, ext_reservations=pool.external_list(),
                      tags=list(dict.fromkeys(op.tags or ())))
        async with self.master.store.transaction() as txn:
            txn.add(net)
        return None


class LUNetworkRemove(_OneNetwork):
    """``OP_NETWORK_REMOVE``: remove a network no group is connected to."""

    OP_ID = "OP_NETWORK_REMOVE"
    op: OpNetworkRemove

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """Every group (shared, to see their connections) and the network."""
        return {LockLevel.NODEGROUP: LockRequest([g.name for g in
                                                  self.master.store.all("nodegroup")],
                                                 shared=True),
                LockLevel.NETWORK: LockRequest([self._name])}

    def check_prereq(self) -> None:
        """No group is connected to it (then no NIC uses it either)."""
        net = self._network()
        groups = [g.name for g in self.master.store.all("nodegroup") if net.uuid in g.networks]
        if groups:
            self.feedback(f" - WARNING: Network '{net.name}' is connected to the following "
                          f"node groups: {', '.join(groups)}")
            raise OpPrereqError(
                f"Network still connected\ndisconnect network '{net.name}' from "
                f"{', '.join(groups)} first (gnt-network disconnect)")
        users = network_users(self.master.store, net)
        if users:
            raise OpPrereqError(
                f"Network '{net.name}' is still used by instances: "
                f"{', '.join(i.name for i in users)}")

    async def execute(self) -> None:
        """Remove it and its lock."""
        if self.op.dry_run:
            return None
        async with self.master.store.transaction() as txn:
            txn.remove("network", self._uuid)
        await self.master.locks.remove(LockLevel.NETWORK, self._name, owner=self.owner)
        return None


class LUNetworkSetParams(_OneNetwork):
    """``OP_NETWORK_SET_PARAMS``: gateway, IPv6 settings, MAC prefix, reservations."""

    OP_ID = "OP_NETWORK_SET_PARAMS"
    op: OpNetworkSetParams

    def check_arguments(self) -> None:
        """Something to change, each value valid; gateway and reservations apart."""
        op = self.op
        if (op.gateway and (op.add_reserved_ips or op.remove_reserved_ips)):
            raise ParameterError("Cannot modify gateway and reserved ips at once")
        if all(v is None for v in (op.gateway, op.network6, op.gateway6, op.mac_prefix,
                                   op.add_reserved_ips, op.remove_reserved_ips)):
            raise ParameterError(
                "Please give at least one of the parameters: gateway, network6, gateway6, "
                "mac_prefix, add_reserved_ips, remove_reserved_ips")
        none = ("", "none")
        self._gateway = (None if op.gateway is None or op.gateway.lower() in none
                         else parse_address(op.gateway, 4, "gateway"))
        self._network6 = (None if op.network6 is None or op.network6.lower() in none
                          else parse_subnet6(op.network6))
        self._gateway6 = (None if op.gateway6 is None or op.gateway6.lower() in none
                          else parse_address(op.gateway6, 6, "IPv6 gateway"))
        self._mac_prefix = (None if op.mac_prefix is None or op.mac_prefix.lower() in none
                            else check_mac_prefix(op.mac_prefix))
        self._add = [parse_address(ip) for ip in op.add_reserved_ips or ()]
        self._remove = [parse_address(ip) for ip in op.remove_reserved_ips or ()]

    def check_prereq(self) -> None:
        """A new gateway must be free in the pool."""
        net = self._network()
        self._pool = network_pool(self.master.store, net)
        gateway = self._gateway
        if gateway is not None and gateway != net.gateway:
            if not self._pool.contains(gateway):
                raise OpPrereqError(f"Gateway IP address '{gateway}' is not in network "
                                    f"'{net.name}' ({net.network})")
            if self._pool.is_reserved(gateway):
                raise OpPrereqError(f"Gateway IP address '{gateway}' is already reserved")

    async def execute(self) -> None:
        """Apply; addresses that cannot be (un)reserved are warned about and skipped."""
        op = self.op
        pool = self._pool
        async with self.master.store.transaction() as txn:
            net = txn.get("network", self._uuid)
            if op.gateway is not None and self._gateway != net.gateway:
                if net.gateway is not None:
                    pool.release_external(net.gateway)
                if self._gateway is not None:
                    pool.reserve_external(self._gateway)
                net.gateway = self._gateway
            elif op.gateway is not None:
                self.feedback(f" - WARNING: Gateway is already {net.gateway}")
            for ip in self._add:
                try:
                    pool.reserve_external(ip)
                except ParameterError as err:
                    self.feedback(f" - WARNING: Cannot reserve IP address {ip}: {err}")
            for ip in self._remove:
                if ip == net.gateway:
                    self.feedback(" - WARNING: Cannot unreserve Gateway's IP")
                    continue
                try:
                    pool.release_external(ip)
                except ParameterError as err:
                    self.feedback(f" - WARNING: Cannot release IP address {ip}: {err}")
            net.ext_reservations = pool.external_list()
            if op.network6 is not None:
                net.network6 = self._network6
            if op.gateway6 is not None:
                net.gateway6 = self._gateway6
            if op.mac_prefix is not None:
                net.mac_prefix = self._mac_prefix
            if op.dry_run:
                txn.discard()
                return None
            txn.update(net)
        return None


class _GroupAndNetwork(LogicalUnit[Any]):
    """Connect and disconnect: a group and a network, the group's instances shared."""

    def _checks_instances(self) -> bool:
        """Whether the group's instances are looked at (and so locked)."""
        return True

    def expand_names(self) -> None:
        """The network and the group, by name or UUID."""
        store = self.master.store
        net = expand_network(store, self.op.network_name)
        group = expand_group(store, self.op.group_name)
        self._net_uuid, self._net_name = net.uuid, net.name
        self._group_uuid, self._group_name = group.uuid, group.name
        self._instances = ([i.name for i in _group_instances(store, group)]
                           if self._checks_instances() else [])

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The group exclusively, its instances and the network shared."""
        locks = {LockLevel.NODEGROUP: LockRequest([self._group_name]),
                 LockLevel.NETWORK: LockRequest([self._net_name], shared=True)}
        if self._instances:
            locks[LockLevel.INSTANCE] = LockRequest(self._instances, shared=True)
        return locks

    def _current(self) -> tuple[Network, NodeGroup, list[Instance]]:
        store = self.master.store
        net = store.find("network", self._net_uuid)
        group = store.find("nodegroup", self._group_uuid)
        if net is None or group is None:
            gone = f"network {self._net_name}" if net is None else f"group {self._group_name}"
            raise NotFoundError(f"{gone} was removed while waiting for its lock")
        instances = _group_instances(store, group) if self._checks_instances() else []
        if sorted(i.name for i in instances) != sorted(self._instances):
            raise OpPrereqError(f"the instances of node group {group.name} changed while "
                                "waiting for locks; retry")
        return net, group, instances


class LUNetworkConnect(_GroupAndNetwork):
    """``OP_NETWORK_CONNECT``: instances of the group may use the network, with the
    given NIC mode and link."""

    OP_ID = "OP_NETWORK_CONNECT"
    op: OpNetworkConnect

    def _checks_instances(self) -> bool:
        return self.op.conflicts_check

    def check_arguments(self) -> None:
        """The NIC mode must be one of Ganeti's."""
        if self.op.network_mode not in NIC_MODES:
            raise ParameterError(f"invalid NIC mode {self.op.network_mode!r}; valid: "
                                 f"{', '.join(NIC_MODES)}")

    def check_prereq(self) -> None:
        """Warn when already connected; else no NIC of the group in the subnet."""
        net, group, instances = self._current()
        self._connected = net.uuid in group.networks
        if self._connected:
            self.feedback(f" - WARNING: Network '{net.name}' is already mapped to group "
                          f"'{group.name}'")
            return
        if self.op.conflicts_check:
            subnet = ipaddress.ip_network(net.network)
            _raise_conflicts(
                self, net.name, "connect to", group.name,
                _conflicts(instances, lambda nic: ipaddress.ip_address(nic.ip) in subnet))

    async def execute(self) -> None:
        """Record the connection in the group."""
        if self._connected or self.op.dry_run:
            return None
        async with self.master.store.transaction() as txn:
            group = txn.get("nodegroup", self._group_uuid)
            group.networks[self._net_uuid] = NetworkLink(
                mode=self.op.network_mode, link=self.op.network_link,
                vlan=self.op.network_vlan)
            txn.update(group)
        return None


class LUNetworkDisconnect(_GroupAndNetwork):
    """``OP_NETWORK_DISCONNECT``: refused while a NIC of the group is on the network."""

    OP_ID = "OP_NETWORK_DISCONNECT"
    op: OpNetworkDisconnect

    def check_prereq(self) -> None:
        """Warn when not connected; else no NIC of the group on the network."""
        net, group, instances = self._current()
        self._connected = net.uuid in group.networks
        if not self._connected:
            self.feedback(f" - WARNING: Network '{net.name}' is not mapped to group "
                          f"'{group.name}'")
            return
        _raise_conflicts(self, net.name, "disconnect from", group.name,
                         _conflicts(instances, lambda nic: nic.network == net.uuid))

    async def execute(self) -> None:
        """Remove the connection from the group."""
        if not self._connected or self.op.dry_run:
            return None
        async with self.master.store.transaction() as txn:
            group = txn.get("nodegroup", self._group_uuid)
            group.networks.pop(self._net_uuid, None)
            txn.update(group)
        return None


# -- query -----------------------------------------------------------------------------


@dataclass
class NetworkQueryData:
    """What network fields need beyond the network: groups, instances, used addresses."""

    groups: list[NodeGroup]
    instances: dict[str, list[str]] = field(default_factory=dict)
    used: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def build(cls, store: ConfigStore) -> NetworkQueryData:
        """From one configuration snapshot."""
        data = cls(groups=store.all("nodegroup"))
        for inst in store.all("instance"):
            for nic in inst.nics:
                if nic.network:
                    names = data.instances.setdefault(nic.network, [])
                    if inst.name not in names:
                        names.append(inst.name)
                    if nic.ip:
                        data.used.setdefault(nic.network, []).append(nic.ip)
        return data

    def pool(self, net: Network) -> AddressPool:
        """The network's pool."""
        return AddressPool(net.name, net.network, net.ext_reservations,
                           self.used.get(net.uuid, ()))

    def group_list(self, net: Network) -> list[list[str]]:
        """``[group, mode, link, vlan]`` per connected group."""
        return [[g.name, g.networks[net.uuid].mode, g.networks[net.uuid].link,
                 g.networks[net.uuid].vlan] for g in self.groups if net.uuid in g.networks]


def _or_unavail(value: str | None) -> str | ResultStatus:
    """Unset optional values are "not available" (``-`` in lists, null in RAPI)."""
    return ResultStatus.UNAVAIL if value is None else value


def _build_fields() -> FieldRegistry[NetworkQueryData, Network]:
    reg: FieldRegistry[NetworkQueryData, Network] = FieldRegistry("network")
    add = reg.add
    add("name", "Network", "text", "Name", lambda _c, n: n.name)
    add("network", "Subnet", "text", "IPv4 subnet", lambda _c, n: n.network)
    add("gateway", "Gateway", "other", "IPv4 gateway", lambda _c, n: _or_unavail(n.gateway))
    add("network6", "IPv6Subnet", "other", "IPv6 subnet",
        lambda _c, n: _or_unavail(n.network6))
    add("gateway6", "IPv6Gateway", "other", "IPv6 gateway",
        lambda _c, n: _or_unavail(n.gateway6))
    add("mac_prefix", "MacPrefix", "other", "MAC address prefix",
        lambda _c, n: _or_unavail(n.mac_prefix))
    add("free_count", "FreeCount", "number", "Number of available addresses",
        lambda c, n: c.pool(n).free_count)
    add("reserved_count", "ReservedCount", "number", "Number of reserved addresses",
        lambda c, n: c.pool(n).reserved_count)
    add("map", "Map", "text", "Actual mapping", lambda c, n: c.pool(n).usage_map())
    add("external_reservations", "ExternalReservations", "text", "External reservations",
        lambda c, n: ", ".join(c.pool(n).external_list()))
    add("group_list", "GroupList", "other",
        "List of nodegroups (group name, NIC mode, NIC link)", lambda c, n: c.group_list(n))
    add("group_cnt", "NodeGroups", "number", "Number of nodegroups",
        lambda c, n: len(c.group_list(n)))
    add("inst_list", "InstanceList", "other", "List of instances",
        lambda c, n: sorted(c.instances.get(n.uuid, ())))
    add("inst_cnt", "Instances", "number", "Number of instances",
        lambda c, n: len(c.instances.get(n.uuid, ())))
    add("tags", "Tags", "other", "Tags", lambda _c, n: sorted(n.tags))
    add("serial_no", "SerialNo", "number",
        "Network object serial number, incremented on each modification",
        lambda _c, n: n.serial_no)
    add("uuid", "UUID", "text", "Network UUID", lambda _c, n: n.uuid)
    add("ctime", "CTime", "timestamp", "Creation timestamp", lambda _c, n: n.ctime)
    add("mtime", "MTime", "timestamp", "Modification timestamp", lambda _c, n: n.mtime)
    return reg


#: The fields of the ``network`` resource (``gnt-network list``, ``/2/networks?bulk=1``).
NETWORK_FIELDS = _build_fields()


class LUNetworkQuery(LogicalUnit[OpNetworkQuery]):
    """``OP_NETWORK_QUERY``: rows of the requested fields for the named networks (all
    when none are named), the old query form Ganeti still accepts."""

    OP_ID = "OP_NETWORK_QUERY"
    USES_BGL = False

    async def execute(self) -> list[list[Any]]:
        """One list of values per network."""
        store = self.master.store
        nets = ([expand_network(store, n) for n in self.op.names] if self.op.names
                else store.all("network"))
        answer = NETWORK_FIELDS.query(nets, list(self.op.output_fields), None,
                                      NetworkQueryData.build(store))
        return [[cell[1] for cell in row] for row in answer["data"]]


#: The logical units of this area.
UNITS: tuple[type[LogicalUnit[Any]], ...] = (
    LUNetworkAdd, LUNetworkRemove, LUNetworkSetParams, LUNetworkConnect, LUNetworkDisconnect,
    LUNetworkQuery,
)


def query_resources(ctx: MasterContext) -> dict[str, QueryResource]:
    """The query resources this area answers (``OP_QUERY`` / luxi ``Query``)."""

    async def query(fields: list[str], qfilter: Any) -> dict[str, Any]:
        store = ctx.store
        nets, rest = pick_items(store.all("network"), qfilter, lambda net: net.name,
                                named_lookup(store, "network"))
        return NETWORK_FIELDS.query(nets, fields, rest, NetworkQueryData.build(store))

    return {"network": QueryResource(query=query, query_fields=NETWORK_FIELDS.query_fields)}
