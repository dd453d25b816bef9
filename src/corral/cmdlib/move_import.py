"""The destination's part of an inter-cluster move: instance create with mode
``remote-import`` (design 2.2).

Before anything is made, the values the third party brought from the source cluster
are checked with this cluster's domain secret (:mod:`corral.cmdlib.move_checks`):
the handshake, the signed certificate (signature, validity) and the source instance
name. A refusal fails the job at once, naming the check that failed.
"""

from __future__ import annotations

from typing import Any

from corral.cmdlib.backup_prepare import read_domain_secret
from corral.cmdlib.base import LogicalUnit
from corral.cmdlib.move_checks import RemoteImportSource, check_remote_import
from corral.errors import OpPrereqError

__all__ = ["remote_import_prereq"]


async def remote_import_prereq(lu: LogicalUnit[Any]) -> RemoteImportSource:
    """Check the source values of a ``remote-import`` creation; the checked source."""
    op = lu.op
    secret = await read_domain_secret(lu.master.paths or getattr(lu.master.rpc, "paths", None))
    source = check_remote_import(secret, op.source_handshake, op.source_x509_ca,
                                 op.source_instance_name)
    lu.feedback(f"Source certificate of {source.instance_name} verified (signed with this "
                "cluster's domain secret, valid)")
    raise OpPrereqError(
        "instance creation mode 'remote-import': the source's handshake and certificate "
        "are valid, but the disk transfer between clusters is not available in this "
        "version yet; nothing was created")
