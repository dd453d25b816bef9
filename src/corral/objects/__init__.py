"""Configuration objects and their parameters (model layer)."""

from __future__ import annotations

from corral.objects import params
from corral.objects.model import (
    KINDS,
    NIC,
    AdminState,
    AllocPolicy,
    Cluster,
    ConfigObject,
    Disk,
    FilterRule,
    Instance,
    Network,
    NetworkLink,
    NicMode,
    Node,
    NodeGroup,
    default_cluster_params,
    new_uuid,
)
from corral.objects.params import fill_params

__all__ = [
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
    "default_cluster_params",
    "fill_params",
    "new_uuid",
    "params",
]
