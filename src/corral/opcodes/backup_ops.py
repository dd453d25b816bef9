"""Opcodes of instance exports (``gnt-backup``), with Ganeti's names and parameters.

An import is not an opcode of its own: it is ``OP_INSTANCE_CREATE`` with
``mode=import``, ``src_node`` and ``src_path``, as in Ganeti.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import msgspec

from corral.opcodes.base import OpCode, register
from corral.opcodes.instance_ops import InstanceOp

__all__ = ["EXPORT_MODES", "OpBackupExport", "OpBackupQuery", "OpBackupRemove"]

#: Ganeti's export modes: to a node of this cluster, or to another cluster.
EXPORT_MODES = ("local", "remote")

_Timeout = Annotated[int, msgspec.Meta(ge=0)]
_NonNegative = Annotated[float, msgspec.Meta(ge=0)]


@register
class OpBackupExport(InstanceOp, tag="OP_BACKUP_EXPORT"):
    """Export an instance's disks and configuration to ``target_node`` (mode
    ``local``), shutting it down for the copy unless ``shutdown`` is false, and
    removing it afterwards with ``remove_instance``."""

    target_node: str | list[Any] | None = None
    target_node_uuid: str | None = None
    compress: str = "none"
    shutdown: bool = True
    shutdown_timeout: _Timeout = 120
    remove_instance: bool = False
    ignore_remove_failures: bool = False
    mode: Literal["local", "remote"] = "local"
    x509_key_name: list[Any] | None = None
    destination_x509_ca: str | None = None
    zero_free_space: bool = False
    zeroing_timeout_fixed: _Timeout | None = None
    zeroing_timeout_per_mib: _NonNegative | None = None
    long_sleep: bool = False


@register
class OpBackupQuery(OpCode, tag="OP_BACKUP_QUERY"):
    """The exports on ``nodes`` (every node when empty): node name → export names,
    or ``false`` for a node that did not answer."""

    SUMMARY_FIELD: ClassVar[str | None] = None

    nodes: list[str] = msgspec.field(default_factory=list)
    use_locking: bool = False


@register
class OpBackupRemove(InstanceOp, tag="OP_BACKUP_REMOVE"):
    """Remove every export of an instance (named by its name, which may be an
    instance that no longer exists)."""
