"""Configuration objects and their parameters (model layer)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral.utils.lazy import lazy_exports

if TYPE_CHECKING:
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

# Names load on first use: parameter checks (objects.params) need no msgspec, the
# configuration objects (objects.model) do. ``params`` is a submodule, imported as one.
__getattr__, __dir__ = lazy_exports(__name__, {
    **dict.fromkeys(("KINDS", "NIC", "AdminState", "AllocPolicy", "Cluster",
                     "ConfigObject", "Disk", "FilterRule", "Instance", "Network",
                     "NetworkLink", "NicMode", "Node", "NodeGroup",
                     "default_cluster_params", "new_uuid"), "model"),
    "fill_params": "params",
    "params": "params",
})
