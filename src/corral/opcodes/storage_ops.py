"""Storage opcodes: storage units, volumes, disk verification and repairs, with Ganeti's
OP_IDs and parameter names.

Ganeti's: ``OP_NODE_QUERY_STORAGE``, ``OP_NODE_MODIFY_STORAGE``,
``OP_REPAIR_NODE_STORAGE`` (storage units, design 2.1), ``OP_NODE_QUERYVOLS``
(``gnt-node volumes``), ``OP_CLUSTER_VERIFY_DISKS`` and ``OP_GROUP_VERIFY_DISKS``,
``OP_INSTANCE_RECREATE_DISKS`` and ``OP_INSTANCE_REPLACE_DISKS``. Design 2.1 also asks
for an instance disk status opcode and a "repair instance" opcode, which Ganeti never
added; corral names them ``OP_INSTANCE_DISK_STATUS`` and ``OP_INSTANCE_REPAIR_DISKS``.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import msgspec

from corral.opcodes.base import OpCode, register
from corral.opcodes.instance_ops import InstanceOp

__all__ = [
    "REPLACE_MODES",
    "STORAGE_TYPES",
    "OpClusterVerifyDisks",
    "OpGroupVerifyDisks",
    "OpInstanceDiskStatus",
    "OpInstanceRecreateDisks",
    "OpInstanceRepairDisks",
    "OpInstanceReplaceDisks",
    "OpNodeModifyStorage",
    "OpNodeQueryStorage",
    "OpNodeQueryvols",
    "OpRepairNodeStorage",
]

_NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]
_DiskIndex = Annotated[int, msgspec.Meta(ge=0, lt=16)]

#: Ganeti's storage types (``constants.STORAGE_TYPES``); corral has units of
#: ``file``, ``sharedfile``, ``lvm-pv`` and ``lvm-vg``.
STORAGE_TYPES = ("blockdev", "diskless", "ext", "file", "gluster", "lvm-pv", "lvm-vg",
                 "rados", "sharedfile")
StorageType = Literal["blockdev", "diskless", "ext", "file", "gluster", "lvm-pv", "lvm-vg",
                      "rados", "sharedfile"]

#: Ganeti's replace-disks modes.
REPLACE_MODES = ("replace_on_primary", "replace_new_secondary", "replace_on_secondary",
                 "replace_auto")
ReplaceMode = Literal["replace_on_primary", "replace_new_secondary", "replace_on_secondary",
                      "replace_auto"]


@register
class OpNodeQueryStorage(OpCode, kw_only=True, tag="OP_NODE_QUERY_STORAGE"):
    """The storage units of a type on nodes (``gnt-node list-storage``): one row of
    ``output_fields`` per unit, nodes and units in name order. No ``storage_type``:
    the storage type of the first enabled disk template."""

    output_fields: list[_NonEmpty]
    storage_type: StorageType | None = None
    nodes: list[_NonEmpty] = msgspec.field(default_factory=list)
    name: _NonEmpty | None = None


@register
class OpNodeModifyStorage(OpCode, kw_only=True, tag="OP_NODE_MODIFY_STORAGE"):
    """Change fields of a storage unit (a physical volume's ``allocatable``)."""

    SUMMARY_FIELD: ClassVar[str | None] = "node_name"

    node_name: _NonEmpty
    storage_type: StorageType
    name: _NonEmpty | None = None
    changes: dict[str, Any]
    node_uuid: _NonEmpty | None = None


@register
class OpRepairNodeStorage(OpCode, tag="OP_REPAIR_NODE_STORAGE"):
    """Repair a storage unit (a volume group's consistency) after checking that the
    instances with disks there keep a good copy elsewhere (``ignore_consistency``:
    only warn)."""

    SUMMARY_FIELD: ClassVar[str | None] = "node_name"

    node_name: _NonEmpty
    storage_type: StorageType
    name: _NonEmpty | None = None
    node_uuid: _NonEmpty | None = None
    ignore_consistency: bool = False


@register
class OpNodeQueryvols(OpCode, kw_only=True, tag="OP_NODE_QUERYVOLS"):
    """The logical volumes on nodes (``gnt-node volumes``): rows of ``output_fields``
    (``node``, ``phys``, ``vg``, ``name``, ``size``, ``instance``) as strings."""

    output_fields: list[_NonEmpty]
    nodes: list[_NonEmpty] = msgspec.field(default_factory=list)


@register
class OpClusterVerifyDisks(OpCode, tag="OP_CLUSTER_VERIFY_DISKS"):
    """Submit one ``OP_GROUP_VERIFY_DISKS`` job per node group (or for ``group_name``);
    answers ``{"jobs": [[true, job id], ...]}``."""

    group_name: _NonEmpty | None = None


@register
class OpGroupVerifyDisks(OpCode, tag="OP_GROUP_VERIFY_DISKS"):
    """Check the disks of the instances of a node group: answers Ganeti's
    ``[{node: error}, [instances whose disks need activating], {instance: [[node,
    volume], ...] missing}]``."""

    SUMMARY_FIELD: ClassVar[str | None] = "group_name"

    group_name: _NonEmpty


#: A disk of ``OP_INSTANCE_RECREATE_DISKS`` with parameters: ``[index, {"size": ..}]``.
#: (The index is checked by the logical unit: msgspec cannot put a constrained integer
#: and an array in one union.)
_RecreateDisk = tuple[int, dict[str, Any]]


@register
class OpInstanceRecreateDisks(InstanceOp, tag="OP_INSTANCE_RECREATE_DISKS"):
    """Create an instance's disks again, empty (all, or those of ``disks``: indexes,
    or ``[index, {"size": ..}]`` pairs that also change a parameter), on its nodes or
    on ``nodes`` (the new primary), for disks lost with a failed node."""

    disks: list[int | _RecreateDisk] = msgspec.field(default_factory=list)
    nodes: list[_NonEmpty] = msgspec.field(default_factory=list)
    node_uuids: list[_NonEmpty] | None = None
    iallocator: _NonEmpty | None = None


@register
class OpInstanceReplaceDisks(InstanceOp, tag="OP_INSTANCE_REPLACE_DISKS"):
    """Replace an instance's disks from their mirror (internally mirrored templates,
    DRBD): on the primary, on the secondary, on a new secondary, or where faulty."""

    mode: ReplaceMode
    disks: list[_DiskIndex] = msgspec.field(default_factory=list)
    remote_node: _NonEmpty | None = None
    remote_node_uuid: _NonEmpty | None = None
    iallocator: _NonEmpty | None = None
    early_release: bool = False
    ignore_ipolicy: bool = False


@register
class OpInstanceDiskStatus(InstanceOp, tag="OP_INSTANCE_DISK_STATUS"):
    """corral (design 2.1, "Instance disk status"): each disk index and node of the
    instance with its status (``ok``, ``degraded``, ``faulty``, ``inactive``,
    ``missing``, ``offline``, ``unknown``)."""


@register
class OpInstanceRepairDisks(InstanceOp, tag="OP_INSTANCE_REPAIR_DISKS"):
    """corral (design 2.1, "Repair instance"): fix what is broken in an instance's
    disks while it keeps a good copy: disks that are there but not active are
    activated, a mirror half that is faulty is replaced from the good one. A disk
    with no good copy left is refused: that data is lost, and ``recreate-disks``
    makes it again, empty."""
