"""corral's opcodes for the cluster's placement aggregates (Ganeti has none).

A named aggregate is a name the administrator gives to a placement aggregate UUID so
that nodes can be put in it (``OP_NODE_SET_PARAMS`` ``aggregates``) and instances
placed with ``member_of`` by name (see docs/placement.md, "The cluster in the
engine").
"""

from __future__ import annotations

from typing import Annotated, ClassVar

import msgspec

from corral.opcodes.base import OpCode, register

__all__ = ["OpClusterAddAggregate", "OpClusterRemoveAggregate"]

_NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]


@register
class OpClusterAddAggregate(OpCode, tag="OP_CLUSTER_ADD_AGGREGATE"):
    """Name a placement aggregate: a fresh UUID, or ``aggregate_uuid`` (one that a
    placement client already uses)."""

    SUMMARY_FIELD: ClassVar[str | None] = "aggregate_name"

    aggregate_name: _NonEmpty
    aggregate_uuid: str | None = None


@register
class OpClusterRemoveAggregate(OpCode, tag="OP_CLUSTER_REMOVE_AGGREGATE"):
    """Forget a named aggregate (refused while nodes are in it)."""

    SUMMARY_FIELD: ClassVar[str | None] = "aggregate_name"

    aggregate_name: _NonEmpty
