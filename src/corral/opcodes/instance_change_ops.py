"""Instance opcodes that change an instance besides its life cycle: modify, disks,
migration, failover, move and console; with Ganeti's OP_ID and parameter names.

Every parameter Ganeti 3.0 defines for these opcodes is accepted, so that RAPI bodies
and scripts written for Ganeti decode unchanged; parameters corral does not implement
(ExtStorage, hotplug, allocators, ...) are refused by the logical unit when they are
actually set, with a message saying so.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from corral.opcodes.base import register
from corral.opcodes.instance_ops import InstanceOp

__all__ = [
    "DEVICE_ACTIONS",
    "MAX_DISKS",
    "MAX_NICS",
    "MIGRATION_MODES",
    "MOVE_COMPRESSIONS",
    "InstanceOp",
    "OpInstanceActivateDisks",
    "OpInstanceConsole",
    "OpInstanceDeactivateDisks",
    "OpInstanceFailover",
    "OpInstanceGrowDisk",
    "OpInstanceMigrate",
    "OpInstanceMove",
    "OpInstanceSetParams",
]

#: Most disks and NICs an instance may have (Ganeti's limits).
MAX_DISKS = 16
MAX_NICS = 8

#: Actions of a disk/NIC change in ``OP_INSTANCE_SET_PARAMS``.
DEVICE_ACTIONS = ("add", "remove", "modify")

#: Migration modes (the ``migration_mode`` hypervisor parameter's values).
MIGRATION_MODES = ("live", "non-live")

#: Compression modes Ganeti accepts for moves (corral streams between nodes
#: uncompressed; see the move logical unit).
MOVE_COMPRESSIONS = ("gzip", "gzip-fast", "gzip-slow", "lzop", "none")

_NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]
_Timeout = Annotated[int, msgspec.Meta(ge=0)]
_DiskIndex = Annotated[int, msgspec.Meta(ge=0, lt=MAX_DISKS)]
_Positive = Annotated[int, msgspec.Meta(gt=0)]


@register
class OpInstanceSetParams(InstanceOp, tag="OP_INSTANCE_SET_PARAMS"):
    """Change an instance's parameters, disks and NICs (``gnt-instance modify``).

    ``disks`` and ``nics`` are Ganeti's modification lists: ``[action, index,
    params]`` with action ``add``/``remove``/``modify`` and index a number (``-1``:
    the end), or for ``modify``/``remove`` also a device name or UUID; the older
    two-element form ``[action, params]`` (add/remove at the end) or ``[index,
    params]`` (modify) is accepted too. In ``hvparams``/``beparams``/``osparams`` a
    value of ``None`` or ``"default"`` removes the instance's own setting.
    The result is a list of ``[what, new value]`` pairs.

    ``allow_diskless`` (corral's, not Ganeti's) must be set to remove an instance's
    last disk: Ganeti quietly makes the instance diskless, which loses its data by
    a typo in the disk index; corral asks for it explicitly.
    """

    force: bool = False
    force_variant: bool = False
    allow_diskless: bool = False
    ignore_ipolicy: bool = False
    nics: list[list[Any]] = msgspec.field(default_factory=list)
    disks: list[list[Any]] = msgspec.field(default_factory=list)
    beparams: dict[str, Any] = msgspec.field(default_factory=dict)
    runtime_mem: _Positive | None = None
    hvparams: dict[str, Any] = msgspec.field(default_factory=dict)
    disk_template: str | None = None
    ext_params: dict[str, Any] = msgspec.field(default_factory=dict)
    file_driver: str | None = None
    file_storage_dir: str | None = None
    pnode: str | None = None
    pnode_uuid: str | None = None
    remote_node: str | None = None
    remote_node_uuid: str | None = None
    iallocator: str | None = None
    os_name: str | None = None
    osparams: dict[str, Any] = msgspec.field(default_factory=dict)
    osparams_private: dict[str, Any] | None = None
    wait_for_sync: bool = True
    offline: bool | None = None
    conflicts_check: bool = True
    hotplug: bool = False
    hotplug_if_possible: bool = False
    instance_communication: bool | None = None
    member_of: list[str] | None = None
    """corral's: the instance's placement constraints' ``member_of`` values in place of
    its current ones (``[]`` drops them); ``None`` keeps them."""
    required_traits: list[str] | None = None
    """corral's: the traits its node must have, in place of the current ones."""
    forbidden_traits: list[str] | None = None
    """corral's: the traits its node must not have, in place of the current ones."""


@register
class OpInstanceMigrate(InstanceOp, tag="OP_INSTANCE_MIGRATE"):
    """Move a running instance to another node without stopping it.

    ``mode`` (or the obsolete ``live``) picks live or non-live migration; neither
    means the instance's ``migration_mode`` hypervisor parameter. An instance that
    is not running is failed over instead when ``allow_failover`` is set.
    """

    mode: Literal["live", "non-live"] | None = None
    live: bool | None = None
    target_node: str | None = None
    target_node_uuid: str | None = None
    allow_runtime_changes: bool = True
    ignore_ipolicy: bool = False
    cleanup: bool = False
    iallocator: str | None = None
    allow_failover: bool = False
    ignore_hvversions: bool = False


@register
class OpInstanceFailover(InstanceOp, tag="OP_INSTANCE_FAILOVER"):
    """Stop an instance on its node and start it on another one (shared storage)."""

    shutdown_timeout: _Timeout = 120
    ignore_consistency: bool = False
    target_node: str | None = None
    target_node_uuid: str | None = None
    ignore_ipolicy: bool = False
    cleanup: bool = False
    iallocator: str | None = None


@register
class OpInstanceMove(InstanceOp, tag="OP_INSTANCE_MOVE"):
    """Move an instance to another node by copying its disks' data."""

    target_node: _NonEmpty
    shutdown_timeout: _Timeout = 120
    ignore_ipolicy: bool = False
    target_node_uuid: str | None = None
    compress: str = "none"
    ignore_consistency: bool = False


@register
class OpInstanceConsole(InstanceOp, tag="OP_INSTANCE_CONSOLE"):
    """How to reach a running instance's console (Ganeti's console dict)."""


@register
class OpInstanceActivateDisks(InstanceOp, tag="OP_INSTANCE_ACTIVATE_DISKS"):
    """Make an instance's disks available on its node; returns ``[node, iv_name,
    path]`` per disk."""

    ignore_size: bool = False
    wait_for_sync: bool = False


@register
class OpInstanceDeactivateDisks(InstanceOp, tag="OP_INSTANCE_DEACTIVATE_DISKS"):
    """Release an instance's disks on its node (``force``: even if it runs)."""

    force: bool = False


@register
class OpInstanceGrowDisk(InstanceOp, tag="OP_INSTANCE_GROW_DISK"):
    """Grow disk number ``disk`` by ``amount`` MiB (to ``amount`` if ``absolute``)."""

    disk: _DiskIndex
    amount: Annotated[int, msgspec.Meta(ge=0)]
    wait_for_sync: bool = True
    absolute: bool = False
    ignore_ipolicy: bool = False
