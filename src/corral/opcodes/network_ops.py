"""Network opcodes, with Ganeti's OP_IDs and parameter names.

``OP_NETWORK_CONNECT`` takes the NIC mode and link of the connection as
``network_mode``/``network_link`` (and ``network_vlan``), as Ganeti does;
``conflicts_check`` makes connect and add refuse a subnet that addresses of
instances' NICs without a network already fall in.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

import msgspec

from corral.opcodes.base import OpCode, register

__all__ = [
    "NicModeName",
    "OpNetworkAdd",
    "OpNetworkConnect",
    "OpNetworkDisconnect",
    "OpNetworkQuery",
    "OpNetworkRemove",
    "OpNetworkSetParams",
]

_NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]

#: A NIC mode (Ganeti's values).
NicModeName = Literal["bridged", "routed", "openvswitch"]


@register
class OpNetworkAdd(OpCode, tag="OP_NETWORK_ADD"):
    """Add a network with an IPv4 address pool."""

    SUMMARY_FIELD: ClassVar[str | None] = "network_name"

    network_name: _NonEmpty
    network: _NonEmpty
    gateway: str | None = None
    network6: str | None = None
    gateway6: str | None = None
    mac_prefix: str | None = None
    add_reserved_ips: list[_NonEmpty] | None = None
    conflicts_check: bool = True
    #: Ganeti's RAPI client sends null when it has no tags.
    tags: list[str] | None = None


@register
class OpNetworkRemove(OpCode, tag="OP_NETWORK_REMOVE"):
    """Remove a network that no group is connected to."""

    SUMMARY_FIELD: ClassVar[str | None] = "network_name"

    network_name: _NonEmpty
    force: bool = False


@register
class OpNetworkSetParams(OpCode, tag="OP_NETWORK_SET_PARAMS"):
    """Change a network's gateway, IPv6 settings, MAC prefix or reservations."""

    SUMMARY_FIELD: ClassVar[str | None] = "network_name"

    network_name: _NonEmpty
    gateway: str | None = None
    network6: str | None = None
    gateway6: str | None = None
    mac_prefix: str | None = None
    add_reserved_ips: list[_NonEmpty] | None = None
    remove_reserved_ips: list[_NonEmpty] | None = None


@register
class OpNetworkConnect(OpCode, tag="OP_NETWORK_CONNECT"):
    """Connect a network to a node group with a NIC mode and link."""

    SUMMARY_FIELD: ClassVar[str | None] = "network_name"

    group_name: _NonEmpty
    network_name: _NonEmpty
    network_mode: NicModeName
    network_link: str
    network_vlan: str = ""
    conflicts_check: bool = True


@register
class OpNetworkDisconnect(OpCode, tag="OP_NETWORK_DISCONNECT"):
    """Disconnect a network from a node group no instance of which uses it."""

    SUMMARY_FIELD: ClassVar[str | None] = "network_name"

    group_name: _NonEmpty
    network_name: _NonEmpty


@register
class OpNetworkQuery(OpCode, tag="OP_NETWORK_QUERY"):
    """Fields of networks (Ganeti's old query opcode; OP_QUERY serves the same)."""

    output_fields: list[_NonEmpty]
    names: list[str] = msgspec.field(default_factory=list)
    use_locking: bool = False
