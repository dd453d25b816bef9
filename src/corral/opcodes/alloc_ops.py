"""Opcodes that ask an allocator (Ganeti's OP_IDs and parameters): running one for a
test (``OP_TEST_ALLOCATOR``), evacuating and migrating a node's instances, moving an
instance to another node group, and creating several instances at once.

All but the test submit jobs of their own, one per instance, and answer Ganeti's
``{"jobs": [[success, job id or error], ...]}``; multi-allocation adds the instances
it could place (``allocatable``) and those it could not (``failed``).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import msgspec

from corral.opcodes.base import OpCode, register

__all__ = [
    "EvacMode",
    "OpInstanceChangeGroup",
    "OpInstanceMultiAlloc",
    "OpNodeEvacuate",
    "OpNodeMigrate",
    "OpTestAllocator",
]

_NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]
_Count = Annotated[int, msgspec.Meta(ge=0)]

#: Which instances a node evacuation moves (Ganeti's words).
EvacMode = Literal["primary-only", "secondary-only", "all"]
_AllocatorMode = Literal["allocate", "relocate", "multi-allocate", "allocate-secondary",
                         "node-evacuate", "change-group"]


@register
class OpTestAllocator(OpCode, tag="OP_TEST_ALLOCATOR"):
    """Build an allocator request and return it (``direction`` ``in``) or run allocator
    ``iallocator`` on it and return its answer unchecked (``out``); the result is
    the text. ``name`` is the new instance (allocate; ``name0``, ``name1``, ... for
    multi-allocate) or the instance to relocate."""

    SUMMARY_FIELD: ClassVar[str | None] = "iallocator"

    direction: Literal["in", "out"]
    mode: _AllocatorMode
    name: _NonEmpty
    nics: list[dict[str, Any]] | None = None
    disks: list[Any] | None = None
    hypervisor: str | None = None
    iallocator: _NonEmpty | None = None
    tags: list[_NonEmpty] = msgspec.field(default_factory=list)
    memory: _Count | None = None
    vcpus: _Count | None = None
    os: _NonEmpty | None = None
    disk_template: str | None = None
    instances: list[_NonEmpty] | None = None
    evac_mode: EvacMode | None = None
    target_groups: list[_NonEmpty] | None = None
    spindle_use: _Count = 1
    count: _Count = 1
    group_name: _NonEmpty | None = None


@register
class OpNodeEvacuate(OpCode, tag="OP_NODE_EVACUATE"):
    """Move a node's primary and/or secondary instances away, one job per instance, to
    the nodes an allocator chooses (``remote_node``: a new secondary for mirrored
    instances)."""

    SUMMARY_FIELD: ClassVar[str | None] = "node_name"

    node_name: _NonEmpty
    mode: EvacMode
    early_release: bool = False
    node_uuid: str | None = None
    remote_node: _NonEmpty | None = None
    remote_node_uuid: str | None = None
    iallocator: _NonEmpty | None = None
    ignore_soft_errors: bool | None = None


@register
class OpNodeMigrate(OpCode, tag="OP_NODE_MIGRATE"):
    """Migrate every primary instance of a node away, one job per instance (to
    ``target_node``, or where an allocator says)."""

    SUMMARY_FIELD: ClassVar[str | None] = "node_name"

    node_name: _NonEmpty
    node_uuid: str | None = None
    mode: Literal["live", "non-live"] | None = None
    live: bool | None = None
    target_node: _NonEmpty | None = None
    target_node_uuid: str | None = None
    allow_runtime_changes: bool = True
    ignore_ipolicy: bool = False
    iallocator: _NonEmpty | None = None


@register
class OpInstanceChangeGroup(OpCode, tag="OP_INSTANCE_CHANGE_GROUP"):
    """Move an instance to another node group (one of ``target_groups``, or any other)
    with the jobs an allocator plans."""

    SUMMARY_FIELD: ClassVar[str | None] = "instance_name"

    instance_name: str
    instance_uuid: str | None = None
    early_release: bool = False
    iallocator: _NonEmpty | None = None
    target_groups: list[_NonEmpty] | None = None


@register
class OpInstanceMultiAlloc(OpCode, tag="OP_INSTANCE_MULTI_ALLOC"):
    """Place several new instances at once (an allocator's ``multi-allocate``) and
    create each one that fits in a job of its own; ``instances`` are the parameters
    of ``OP_INSTANCE_CREATE`` opcodes (with or without their ``OP_ID``)."""

    opportunistic_locking: bool = False
    iallocator: _NonEmpty | None = None
    instances: list[Any] = msgspec.field(default_factory=list)
