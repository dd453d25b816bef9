"""The opcode that prepares an instance's export, with Ganeti's OP_ID and parameters.

``OP_BACKUP_PREPARE`` mode ``remote`` is the first step of an inter-cluster move
(design 2.2): the source cluster makes a key for the move on the instance's primary
node and answers the signed certificate, the signed key name and its handshake
(:mod:`corral.cmdlib.backup_prepare`).
"""

from __future__ import annotations

from typing import Literal

from corral.opcodes.base import register
from corral.opcodes.instance_ops import InstanceOp

__all__ = ["EXPORT_MODES", "OpBackupPrepare"]

#: Ganeti's export modes: into an export directory of this cluster, or to another one.
EXPORT_MODES = ("local", "remote")


@register
class OpBackupPrepare(InstanceOp, tag="OP_BACKUP_PREPARE"):
    """Prepare the export of an instance: nothing to do for ``local``; for ``remote``
    a key for the move, answered as ``{"handshake", "x509_key_name", "x509_ca"}``."""

    mode: Literal["local", "remote"]
