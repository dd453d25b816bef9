"""Logical units: the cluster's operations, one module per area.

They check arguments and prerequisites against a configuration snapshot and change
private copies of objects; they never touch SQLite, sockets or subprocesses.
:data:`LOGICAL_UNITS` maps each implemented ``OP_ID`` to its logical unit.
"""

from __future__ import annotations

from typing import Any

from corral.cmdlib.base import LockRequest, LogicalUnit, MasterContext, QueryResource
from corral.cmdlib.cluster import LUClusterQuery, LUClusterSetParams
from corral.cmdlib.processor import JobOwner, Processor
from corral.cmdlib.query import LUQuery, LUQueryFields
from corral.cmdlib.tags import LUTagsDel, LUTagsGet, LUTagsSearch, LUTagsSet
from corral.cmdlib.test import LUTestDelay

__all__ = [
    "LOGICAL_UNITS",
    "JobOwner",
    "LockRequest",
    "LogicalUnit",
    "MasterContext",
    "Processor",
    "QueryResource",
]

#: ``OP_ID`` -> logical unit class, one per registered opcode.
LOGICAL_UNITS: dict[str, type[LogicalUnit[Any]]] = {
    unit.OP_ID: unit
    for unit in (
        LUTestDelay, LUClusterQuery, LUClusterSetParams, LUTagsGet, LUTagsSearch, LUTagsSet,
        LUTagsDel, LUQuery, LUQueryFields,
    )
}
