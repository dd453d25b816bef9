"""Opcodes: the typed operations a job is made of, and their reason trail.

:func:`op_from_dict` turns Ganeti's dict form into a validated opcode,
:func:`op_to_dict` turns it back; :data:`REGISTRY` holds every implemented opcode.
"""

# Imported for their @register side effect: every opcode module adds its opcodes.
from corral.opcodes import (  # noqa: F401
    alloc_ops,
    backup_ops,
    instance_change_ops,
    instance_ops,
    move_ops,
    network_ops,
    node_ops,
    os_ops,
    placement_ops,
    storage_ops,
    verify_ops,
)
from corral.opcodes.base import (
    FINAL_JOB_STATUSES,
    REGISTRY,
    OpCode,
    Priority,
    op_from_dict,
    op_summary,
    op_to_dict,
)
from corral.opcodes.ops import (
    TAG_KINDS,
    ListChange,
    OpClusterQuery,
    OpClusterRedistConf,
    OpClusterRenewCrypto,
    OpClusterSetParams,
    OpQuery,
    OpQueryFields,
    OpTagsDel,
    OpTagsGet,
    OpTagsSearch,
    OpTagsSet,
    OpTestDelay,
)
from corral.opcodes.reason import (
    ReasonEntry,
    check_rapi_trail,
    check_submitted_trail,
    opcode_source,
)
from corral.opcodes.verify_ops import (
    OpClusterVerify,
    OpClusterVerifyConfig,
    OpClusterVerifyGroup,
)

__all__ = [
    "FINAL_JOB_STATUSES",
    "REGISTRY",
    "TAG_KINDS",
    "ListChange",
    "OpClusterQuery",
    "OpClusterRedistConf",
    "OpClusterRenewCrypto",
    "OpClusterSetParams",
    "OpClusterVerify",
    "OpClusterVerifyConfig",
    "OpClusterVerifyGroup",
    "OpCode",
    "OpQuery",
    "OpQueryFields",
    "OpTagsDel",
    "OpTagsGet",
    "OpTagsSearch",
    "OpTagsSet",
    "OpTestDelay",
    "Priority",
    "ReasonEntry",
    "check_rapi_trail",
    "check_submitted_trail",
    "op_from_dict",
    "op_summary",
    "op_to_dict",
    "opcode_source",
]
