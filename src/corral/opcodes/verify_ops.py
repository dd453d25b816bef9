"""The cluster verification opcodes, with Ganeti's OP_ID and parameter names.

``OP_CLUSTER_VERIFY`` only submits jobs: one ``OP_CLUSTER_VERIFY_CONFIG`` (unless a
group is named) and one ``OP_CLUSTER_VERIFY_GROUP`` per node group, each depending on
the configuration job; its result is ``{"jobs": [[true, id], ...]}`` as Ganeti's.
The others return true when they found no error (warnings do not count).

``ignore_errors`` takes Ganeti's finding codes (:mod:`corral.objects.verify_codes`),
``skip_checks`` its optional checks (``nplusone_mem``). ``verify_clutter`` (Ganeti's
check of SSH ``authorized_keys``) is accepted and does nothing: corral uses no SSH.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

import msgspec

from corral.objects.verify_codes import ErrorCode, OptionalCheck
from corral.opcodes.base import OpCode, register

__all__ = ["OpClusterVerify", "OpClusterVerifyConfig", "OpClusterVerifyGroup"]

_NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]


class _VerifyParams(OpCode):
    """What every verification opcode takes: how findings are reported."""

    debug_simulate_errors: bool = False
    """Report every check as failed (to see every message a check can give)."""
    error_codes: bool = False
    """Findings in the parseable form ``ERROR:ECODE:kind:item:message``."""
    ignore_errors: list[ErrorCode] = msgspec.field(default_factory=list)
    """Codes whose errors are reported as warnings (and do not fail the check)."""
    verbose: bool = False


@register
class OpClusterVerify(_VerifyParams, tag="OP_CLUSTER_VERIFY"):
    """Submit the jobs that verify the cluster (``gnt-cluster verify``)."""

    skip_checks: list[OptionalCheck] = msgspec.field(default_factory=list)
    group_name: str | None = None
    """Verify only this node group (name or UUID), without the configuration job."""
    verify_clutter: bool = False


@register
class OpClusterVerifyConfig(_VerifyParams, tag="OP_CLUSTER_VERIFY_CONFIG"):
    """Check the configuration itself and the master's certificates."""


@register
class OpClusterVerifyGroup(_VerifyParams, kw_only=True, tag="OP_CLUSTER_VERIFY_GROUP"):
    """Check one node group's nodes and instances against what they run."""

    SUMMARY_FIELD: ClassVar[str | None] = "group_name"

    group_name: _NonEmpty
    skip_checks: list[OptionalCheck] = msgspec.field(default_factory=list)
    verify_clutter: bool = False
