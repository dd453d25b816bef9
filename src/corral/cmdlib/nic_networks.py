"""NICs on networks: which network a NIC names, the mode and link it gets from the
network's connection to the instance's node group, and its address from the pool.

Instance creation and modification use one :class:`NicNetworks` per request. It
keeps the addresses the request has handed out so far, so that two NICs asking for
``ip=pool`` get different addresses; the configuration invariants check the result
again when the instance is committed (an address outside the subnet, or reserved,
never reaches the configuration). An exclusive lock on the networks involved keeps
two requests from taking the same free address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from corral.cmdlib.network import expand_network
from corral.errors import OpPrereqError, ParameterError
from corral.objects import NIC, Instance, Network, Node, NodeGroup
from corral.objects.network_pool import AddressPool

if TYPE_CHECKING:
    from corral.config import ConfigStore

__all__ = ["NicNetworks", "change_nic", "check_networks_reach", "network_lock_names",
           "none_word"]


def none_word(value: Any) -> Any:
    """None for the words that mean "no value" (None, ``""``, ``none``)."""
    if value is None or (isinstance(value, str) and value.lower() in ("", "none")):
        return None
    return value


def network_lock_names(store: ConfigStore, nics: Iterable[dict[str, Any]]) -> list[str]:
    """Names of the existing networks the NIC definitions name (their lock names)."""
    names = set()
    for nic in nics:
        value = none_word(nic.get("network")) if isinstance(nic, dict) else None
        if isinstance(value, str):
            found = store.find("network", value)
            if found is not None:
                names.add(found.name)
    return sorted(names)


class NicNetworks:
    """Network decisions for the NICs of one instance on one node group."""

    def __init__(self, store: ConfigStore, group: NodeGroup, node_name: str,
                 feedback: Any, *, instance_uuid: str | None = None,
                 conflicts_check: bool = True) -> None:
        self.store = store
        self.group = group
        self.node_name = node_name
        self.feedback = feedback
        self.instance_uuid = instance_uuid
        self.conflicts_check = conflicts_check
        #: Addresses taken by this request, per network UUID.
        self.taken: dict[str, set[str]] = {}

    def network(self, value: Any, where: str) -> Network | None:
        """The network a NIC names (name or UUID), None for none; it must be connected
        to the group."""
        value = none_word(value)
        if value is None:
            return None
        if not isinstance(value, str):
            raise ParameterError(f"{where}: network must be a network name, got {value!r}")
        net = expand_network(self.store, value)
        if net.uuid not in self.group.networks:
            raise ParameterError(
                f"No netparams found for network {net.name}. Probably not connected to "
                f"node's {self.node_name} nodegroup: connect it to node group "
                f"{self.group.name} first (gnt-network connect)")
        return net

    def netparams(self, net: Network, index: int, given: dict[str, Any]) -> dict[str, Any]:
        """The NIC parameters of a NIC on ``net``: its connection's mode, link, vlan."""
        if any(none_word(given.get(k)) is not None for k in ("mode", "link", "bridge")):
            raise ParameterError(
                f"NIC {index}: If network is given, no mode or link is allowed to be passed "
                f"(they come from the connection of network {net.name} to node group "
                f"{self.group.name})")
        link = self.group.networks[net.uuid]
        params = {"mode": link.mode, "link": link.link, "vlan": link.vlan}
        self.feedback(f"NIC/{index} inherits netparams "
                      f"{[link.link, link.mode, link.vlan]}")
        return params

    def _pool(self, net: Network) -> AddressPool:
        used = [nic.ip for inst in self.store.all("instance") if inst.uuid != self.instance_uuid
                for nic in inst.nics if nic.network == net.uuid and nic.ip]
        used.extend(self.taken.get(net.uuid, ()))
        return AddressPool(net.name, net.network, net.ext_reservations, used)

    def address(self, net: Network | None, value: Any, index: int) -> str | None:
        """The IP of NIC ``index``: none, from the pool (``pool``) or the one given,
        which must be free in the NIC's network (or in no network's subnet)."""
        value = none_word(value)
        if value is None:
            return None
        if not isinstance(value, str):
            raise ParameterError(f"NIC {index}: invalid IP address {value!r}")
        if value.lower() == "pool":
            if net is None:
                raise ParameterError(
                    f"NIC {index}: if ip=pool, parameter network must be passed too")
            try:
                address = self._pool(net).next_free()
            except OpPrereqError as err:
                raise OpPrereqError(f"Unable to get a free IP for NIC {index} from the "
                                    f"address pool: {err}") from None
            self.feedback(f"Chose IP {address} from network {net.name}")
        else:
            try:
                address = str(ipaddress.ip_address(value))
            except ValueError:
                raise ParameterError(f"NIC {index}: invalid IP address {value!r}") from None
            if net is not None:
                pool = self._pool(net)
                if not pool.contains(address) or pool.is_reserved(address):
                    raise OpPrereqError(
                        f"IP address {address} already in use or does not belong to network "
                        f"{net.name} ({net.network}; {pool.free_count} addresses free)")
            elif self.conflicts_check:
                self._refuse_network_address(address)
        if net is not None:
            self.taken.setdefault(net.uuid, set()).add(address)
        return address

    def keep(self, net: Network, address: str) -> None:
        """An address a NIC keeps on ``net`` in this request: no other NIC gets it."""
        self.taken.setdefault(net.uuid, set()).add(address)

    def _refuse_network_address(self, address: str) -> None:
        ip = ipaddress.ip_address(address)
        for net in self.store.all("network"):
            if net.uuid in self.group.networks and ip in ipaddress.ip_network(net.network):
                raise OpPrereqError(
                    f"The requested IP address ({address}) belongs to network {net.name}, "
                    "but the target NIC does not. Give the NIC network="
                    f"{net.name}, or another address")


def change_nic(nets: NicNetworks, nic: NIC, index: int, values: dict[str, Any]
               ) -> list[list[Any]]:
    """Apply the ``network`` and ``ip`` of a NIC change (add or modify) to ``nic``;
    returns the ``[field, new value]`` entries of what changed."""
    store = nets.store
    changes: list[list[Any]] = []
    if "network" in values:
        net = nets.network(values["network"], f"NIC {index}")
        if net is not None:
            nic.nicparams = nets.netparams(net, index, values)
        new_uuid = net.uuid if net is not None else None
        if new_uuid != nic.network:
            nic.network = new_uuid
            changes.append([f"nic.network/{index}", net.name if net is not None else None])
    else:
        net = store.find("network", nic.network) if nic.network else None
    if "ip" in values:
        wanted = none_word(values["ip"])
        same = (isinstance(wanted, str) and wanted.lower() != "pool" and nic.ip is not None
                and _canonical(wanted) == nic.ip and "network" not in values)
        if not same:
            nic.ip = nets.address(net, values["ip"], index)
            changes.append([f"nic.ip/{index}", nic.ip])
    elif "network" in values and nic.ip:
        # The NIC keeps its address: it must suit the new network (or none).
        old, nic.ip = nic.ip, None
        nic.ip = nets.address(net, old, index)
    return changes


def _canonical(address: str) -> str | None:
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return None


def check_networks_reach(store: ConfigStore, instance: Instance, node: Node) -> None:
    """Refuse to place ``instance`` on ``node`` when the node's group is not connected
    to a network one of its NICs is on (its NICs would have no mode and link there)."""
    group = store.get("nodegroup", node.group)
    for index, nic in enumerate(instance.nics):
        if nic.network and nic.network not in group.networks:
            net = store.find("network", nic.network)
            name = net.name if net is not None else nic.network
            raise OpPrereqError(
                f"cannot place instance {instance.name} on node {node.name}: NIC {index} is "
                f"on network {name}, which node group {group.name} is not connected to "
                f"(gnt-network connect {name} {group.name})")
