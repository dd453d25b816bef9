"""Logical units: the cluster's operations, one module per area.

They check arguments and prerequisites against a configuration snapshot and change
private copies of objects; they never touch SQLite, sockets or subprocesses.
:data:`LOGICAL_UNITS` maps each implemented ``OP_ID`` to its logical unit.
"""

from __future__ import annotations

from typing import Any

from corral.cmdlib import (
    aggregates,
    allocator_ops,
    backup,
    backup_prepare,
    extstorage,
    group,
    instance,
    instance_change,
    move_export,
    network,
    node,
    storage,
)
from corral.cmdlib import os as os_area
from corral.cmdlib.base import LockRequest, LogicalUnit, MasterContext, NodeRpc, QueryResource
from corral.cmdlib.cluster import LUClusterQuery, LUClusterRedistConf, LUClusterSetParams
from corral.cmdlib.cluster_crypto import LUClusterRenewCrypto
from corral.cmdlib.processor import JobOwner, Processor
from corral.cmdlib.query import LUQuery, LUQueryFields
from corral.cmdlib.tags import LUTagsDel, LUTagsGet, LUTagsSearch, LUTagsSet
from corral.cmdlib.test import LUTestDelay
from corral.cmdlib.verify import LUClusterVerify, LUClusterVerifyConfig
from corral.cmdlib.verify_group import LUClusterVerifyGroup

__all__ = [
    "AREAS",
    "LOGICAL_UNITS",
    "JobOwner",
    "LockRequest",
    "LogicalUnit",
    "MasterContext",
    "NodeRpc",
    "Processor",
    "QueryResource",
]

#: The area modules with ``UNITS`` and ``query_resources(ctx)``.
AREAS = (node, group, instance, instance_change, os_area, extstorage, network, storage)

#: ``OP_ID`` -> logical unit class, one per registered opcode.
LOGICAL_UNITS: dict[str, type[LogicalUnit[Any]]] = {
    unit.OP_ID: unit
    for unit in (
        LUTestDelay, LUClusterQuery, LUClusterSetParams, LUClusterRedistConf,
        LUClusterRenewCrypto, LUTagsGet, LUTagsSearch, LUTagsSet, LUTagsDel, LUQuery,
        LUQueryFields, LUClusterVerify, LUClusterVerifyConfig, LUClusterVerifyGroup,
        *allocator_ops.UNITS, *aggregates.UNITS,
        *backup.UNITS,
        *backup_prepare.UNITS,
        *(u for area in AREAS for u in area.UNITS),
    )
}
# OP_BACKUP_EXPORT in mode remote too (inter-cluster moves): the local export's unit
# with the remote mode added.
LOGICAL_UNITS[move_export.LUBackupExportAnywhere.OP_ID] = move_export.LUBackupExportAnywhere
