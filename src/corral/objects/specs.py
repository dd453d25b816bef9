"""What the master sends a node about an instance: everything filled in, nothing to look up.

The configuration keeps overrides per layer and refers to nodes and disks by UUID;
a node daemon has no configuration to resolve them against. The master therefore
sends an :class:`InstanceSpec` with the parameters already filled (cluster ← group
← instance; OS parameters in the order instance > OS+variant > OS > built-in), the
disks in order with their cluster-wide paths, and the NICs with their effective
mode and link. Hypervisors, block devices and OS scripts on the node work from it.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["DiskSpec", "InstanceSpec", "NicSpec"]


class DiskSpec(msgspec.Struct, kw_only=True):
    """One disk of an instance as a node sees it."""

    uuid: str
    index: int
    dev_type: str
    """The disk template's device type (``file``, ``sharedfile``, ``plain``, ``rbd``,
    ``ext``, ...)."""
    size: int
    """Size in MiB."""
    mode: str = "rw"
    logical_id: list[str] = msgspec.field(default_factory=list)
    """For file-based disks ``[driver, path]``; the path is cluster-wide (see
    :meth:`corral.paths.Paths.node_path`). ``["rbd", image]`` for Ceph,
    ``[provider, volume]`` for ExtStorage."""
    name: str | None = None
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    """The disk's parameters filled from its template's disk parameters (cluster ←
    node group ← disk): ``pool`` and ``access`` of an ``rbd`` disk; for an ``ext``
    disk ``provider``, ``access`` and the provider parameters given at creation."""
    search_path: list[str] = msgspec.field(default_factory=list)
    """For an ``ext`` disk, the cluster's ExtStorage search path (cluster-wide
    directories, mapped like the OS search path); empty for other templates."""


class NicSpec(msgspec.Struct, kw_only=True):
    """One network interface with its effective parameters."""

    index: int
    mac: str
    uuid: str = ""
    ip: str | None = None
    mode: str = "bridged"
    link: str = ""
    vlan: str = ""
    name: str | None = None
    network: str | None = None


class InstanceSpec(msgspec.Struct, kw_only=True):
    """An instance with filled parameters, as sent to its node daemons."""

    name: str
    uuid: str
    os: str = ""
    """``name`` or ``name+variant``."""
    hypervisor: str = "fake"
    hvparams: dict[str, Any] = msgspec.field(default_factory=dict)
    beparams: dict[str, Any] = msgspec.field(default_factory=dict)
    osparams: dict[str, Any] = msgspec.field(default_factory=dict)
    disk_template: str = "diskless"
    disks: list[DiskSpec] = msgspec.field(default_factory=list)
    nics: list[NicSpec] = msgspec.field(default_factory=list)
    primary_node: str = ""
    """Name of the primary node."""
    admin_state: str = "down"
    network_port: int | None = None
    tags: list[str] = msgspec.field(default_factory=list)
    """The instance's tags (for hooks on the node, such as the kvm NIC hook)."""
