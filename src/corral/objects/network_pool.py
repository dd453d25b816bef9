"""The IPv4 address pool of a network: which addresses are taken, which are free.

An address of a network's subnet is *reserved* when a NIC on the network uses it or
when it is externally reserved (the network and broadcast addresses, the gateway,
and what the administrator set aside with ``--add-reserved-ips``). The pool is a
view computed from the :class:`~corral.objects.Network` and the addresses its NICs
use; changes go back into the network's ``ext_reservations`` or into the NICs, in
the transaction of the operation that makes them, so the configuration never holds
a pool that disagrees with its instances.

Ganeti's limits apply: subnets from /16 (65536 addresses) to /30.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from corral.errors import OpPrereqError, ParameterError

__all__ = [
    "MAX_PREFIX",
    "MIN_PREFIX",
    "AddressPool",
    "check_mac_prefix",
    "initial_reservations",
    "parse_address",
    "parse_subnet",
    "parse_subnet6",
]

#: The largest subnet a pool may have (Ganeti's limit): a /16.
MIN_PREFIX = 16
#: The smallest subnet a pool may have: a /30.
MAX_PREFIX = 30

_MAC_PREFIX_RE = re.compile(r"^[0-9a-f]{2}:[0-9a-f]{2}:[0-9a-f]{2}$")


def parse_subnet(value: str, name: str = "") -> ipaddress.IPv4Network:
    """An IPv4 subnet in CIDR notation with no host bits set, /16 to /30."""
    label = f"network '{name}'" if name else "the network"
    try:
        net = ipaddress.IPv4Network(value, strict=True)
    except ValueError as exc:
        raise ParameterError(
            f"invalid IPv4 subnet {value!r} for {label}: {exc}; expected CIDR notation "
            "such as 192.0.2.0/24") from None
    if not MIN_PREFIX <= net.prefixlen <= MAX_PREFIX:
        raise ParameterError(
            f"cannot create an IP address pool for {label}: {value} has "
            f"{net.num_addresses} addresses; the subnet must be a /{MIN_PREFIX} to a "
            f"/{MAX_PREFIX}")
    return net


def parse_subnet6(value: str) -> str:
    """An IPv6 subnet in canonical CIDR notation."""
    try:
        return str(ipaddress.IPv6Network(value, strict=True))
    except ValueError as exc:
        raise ParameterError(f"invalid IPv6 subnet {value!r}: {exc}") from None


def parse_address(value: str, version: int = 4, what: str = "IP address") -> str:
    """An IPv4 (or IPv6) address in canonical form."""
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        address = None
    if address is None or address.version != version:
        raise ParameterError(f"invalid {what} {value!r}: expected an IPv{version} address")
    return str(address)


def check_mac_prefix(value: str) -> str:
    """A MAC prefix of three hex octets, lower case (Ganeti's first line kept)."""
    prefix = value.strip().lower()
    if not _MAC_PREFIX_RE.match(prefix):
        raise ParameterError(
            f"Invalid MAC address prefix '{value}': expected three hex octets such as "
            "aa:00:01")
    return prefix


class AddressPool:
    """The addresses of one network's subnet with the used and reserved ones marked."""

    def __init__(self, name: str, subnet: str, ext_reservations: Iterable[str],
                 used: Iterable[str] = ()) -> None:
        self.name = name
        self.subnet = parse_subnet(subnet, name)
        self.external: set[int] = {self._index(a) for a in ext_reservations}
        self.used: set[int] = {self._index(a) for a in used if self.contains(a)}

    # -- questions ---------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Number of addresses in the subnet."""
        return self.subnet.num_addresses

    def contains(self, address: str) -> bool:
        """Whether ``address`` is in the subnet."""
        try:
            return ipaddress.IPv4Address(address) in self.subnet
        except ValueError:
            return False

    def is_reserved(self, address: str, *, external: bool | None = None) -> bool:
        """Whether ``address`` is taken: by a NIC (``external=False``), externally
        (``True``) or either (``None``)."""
        index = self._index(address)
        if external is None:
            return index in self.used or index in self.external
        return index in (self.external if external else self.used)

    @property
    def reserved_count(self) -> int:
        """Addresses taken by NICs or reserved externally."""
        return len(self.used | self.external)

    @property
    def free_count(self) -> int:
        """Addresses still free."""
        return self.size - self.reserved_count

    def usage_map(self) -> str:
        """One character per address: ``X`` taken, ``.`` free (Ganeti's ``map``)."""
        taken = self.used | self.external
        return "".join("X" if i in taken else "." for i in range(self.size))

    def external_list(self) -> list[str]:
        """The externally reserved addresses, in address order."""
        return [str(self.subnet[i]) for i in sorted(self.external)]

    def next_free(self, exclude: Iterable[str] = ()) -> str:
        """The lowest free address not in ``exclude``; a full pool raises
        :class:`OpPrereqError` naming the network."""
        skip = {self._index(a) for a in exclude if self.contains(a)}
        taken = self.used | self.external | skip
        for index in range(self.size):
            if index not in taken:
                return str(self.subnet[index])
        raise OpPrereqError(
            f"network {self.name} ({self.subnet}) is full: all {self.size} addresses are "
            f"used or reserved (see 'gnt-network info {self.name}')")

    # -- changes (to write back into the network) ----------------------------------------

    def reserve_external(self, address: str) -> None:
        """Reserve ``address`` externally; it must be in the subnet and not taken."""
        index = self._index(address)
        if index in self.external:
            raise ParameterError(f"IP address {address} is already reserved in network "
                                 f"{self.name}")
        if index in self.used:
            raise ParameterError(f"IP address {address} is used by an instance's NIC in "
                                 f"network {self.name}")
        self.external.add(index)

    def release_external(self, address: str) -> None:
        """Release an external reservation of ``address``."""
        index = self._index(address)
        if index not in self.external:
            raise ParameterError(f"IP address {address} is not externally reserved in "
                                 f"network {self.name}")
        self.external.discard(index)

    def _index(self, address: str) -> int:
        try:
            ip = ipaddress.IPv4Address(address)
        except ValueError:
            raise ParameterError(f"invalid IP address {address!r}: expected an IPv4 "
                                 "address") from None
        if ip not in self.subnet:
            raise ParameterError(f"{self.subnet} does not contain {address}")
        return int(ip) - int(self.subnet.network_address)


def initial_reservations(subnet: str, gateway: str | None, name: str = "") -> list[str]:
    """The external reservations of a new network: its network and broadcast
    addresses and the gateway."""
    net = parse_subnet(subnet, name)
    addresses = {net.network_address, net.broadcast_address}
    if gateway is not None:
        gw = ipaddress.IPv4Address(gateway)
        if gw not in net:
            raise ParameterError(
                f"Cannot create IP address pool for network '{name}': {net} does not "
                f"contain {gateway}")
        addresses.add(gw)
    return [str(a) for a in sorted(addresses)]
