"""Node and node-group opcodes, with Ganeti's OP_ID and parameter names.

Parameters Ganeti has but corral does not use are accepted so that existing
clients keep working: ``node_setup`` (corral needs no SSH) is ignored;
``hv_state``, ``disk_state`` and ``ipolicy`` may be absent or empty and are
refused with a clear message when they carry something, since corral keeps no
static resource state and no instance policies.

corral's addition: ``OP_NODE_ADD`` has a ``token`` parameter, the one-time join
token a fresh node daemon prints (and keeps in its ``join-token`` file). The master
proves with it that it talks to the node the administrator meant, and hands that
node the cluster's certificates; no SSH is involved. ``primary_ip`` is required,
since corral does not resolve node names.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import msgspec

from corral.opcodes.base import OpCode, register

__all__ = [
    "AllocPolicyName",
    "OpGroupAdd",
    "OpGroupAssignNodes",
    "OpGroupRemove",
    "OpGroupRename",
    "OpGroupSetParams",
    "OpNodeAdd",
    "OpNodeRemove",
    "OpNodeSetParams",
]

_NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]

#: A node group's instance allocation policy (Ganeti's values).
AllocPolicyName = Literal["preferred", "last_resort", "unallocable"]


@register
class OpNodeAdd(OpCode, tag="OP_NODE_ADD"):
    """Add a node (``gnt-node add``): join its node daemon with ``token``, then record it.

    With ``readd`` the node is already in the configuration (e.g. reinstalled): it
    joins again with its new token and keeps its UUID.
    """

    SUMMARY_FIELD: ClassVar[str | None] = "node_name"

    node_name: _NonEmpty
    primary_ip: str | None = None
    secondary_ip: str | None = None
    readd: bool = False
    group: str | None = None
    master_capable: bool | None = None
    vm_capable: bool | None = None
    ndparams: dict[str, Any] | None = None
    hv_state: dict[str, Any] | None = None
    disk_state: dict[str, Any] | None = None
    node_setup: bool = False
    token: str | None = None
    """corral: the join token the new node's daemon printed."""


@register
class OpNodeRemove(OpCode, tag="OP_NODE_REMOVE"):
    """Remove a node that has no instances; it forgets the cluster."""

    SUMMARY_FIELD: ClassVar[str | None] = "node_name"

    node_name: _NonEmpty
    node_uuid: str | None = None


@register
class OpNodeSetParams(OpCode, tag="OP_NODE_SET_PARAMS"):
    """Change a node's flags and parameters; ``None`` leaves a setting as it is.

    Returns ``[[parameter, new value], ...]`` for what changed (Ganeti's shape).
    """

    SUMMARY_FIELD: ClassVar[str | None] = "node_name"

    node_name: _NonEmpty
    node_uuid: str | None = None
    force: bool = False
    hv_state: dict[str, Any] | None = None
    disk_state: dict[str, Any] | None = None
    master_candidate: bool | None = None
    offline: bool | None = None
    drained: bool | None = None
    auto_promote: bool = False
    master_capable: bool | None = None
    vm_capable: bool | None = None
    secondary_ip: str | None = None
    ndparams: dict[str, Any] | None = None
    powered: bool | None = None
    aggregates: list[str] | None = None
    """corral's: the node's named aggregates: names (or UUIDs) to have exactly, or
    changes ``+NAME``/``-NAME`` (all items one kind or the other)."""
    traits: list[str] | None = None
    """corral's: the node's placement traits, exactly or as ``+T``/``-T`` changes."""


@register
class OpGroupAdd(OpCode, tag="OP_GROUP_ADD"):
    """Add a node group."""

    SUMMARY_FIELD: ClassVar[str | None] = "group_name"

    group_name: _NonEmpty
    alloc_policy: AllocPolicyName | None = None
    ndparams: dict[str, Any] | None = None
    diskparams: dict[str, dict[str, Any]] | None = None
    hv_state: dict[str, Any] | None = None
    disk_state: dict[str, Any] | None = None
    ipolicy: dict[str, Any] | None = None


@register
class OpGroupAssignNodes(OpCode, tag="OP_GROUP_ASSIGN_NODES"):
    """Move nodes into a group."""

    SUMMARY_FIELD: ClassVar[str | None] = "group_name"

    group_name: _NonEmpty
    nodes: list[_NonEmpty]
    force: bool = False
    node_uuids: list[_NonEmpty] | None = None


@register
class OpGroupSetParams(OpCode, tag="OP_GROUP_SET_PARAMS"):
    """Change a group's parameters; returns ``[[parameter, new value], ...]``."""

    SUMMARY_FIELD: ClassVar[str | None] = "group_name"

    group_name: _NonEmpty
    alloc_policy: AllocPolicyName | None = None
    ndparams: dict[str, Any] | None = None
    diskparams: dict[str, dict[str, Any]] | None = None
    hv_state: dict[str, Any] | None = None
    disk_state: dict[str, Any] | None = None
    ipolicy: dict[str, Any] | None = None


@register
class OpGroupRemove(OpCode, tag="OP_GROUP_REMOVE"):
    """Remove an empty node group (never the last one)."""

    SUMMARY_FIELD: ClassVar[str | None] = "group_name"

    group_name: _NonEmpty


@register
class OpGroupRename(OpCode, tag="OP_GROUP_RENAME"):
    """Rename a node group; returns the new name."""

    group_name: _NonEmpty
    new_name: _NonEmpty
