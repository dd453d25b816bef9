"""OS definition and ExtStorage provider opcodes, with Ganeti's OP_ID and parameter
names."""

from __future__ import annotations

from typing import Annotated

import msgspec

from corral.opcodes.base import OpCode, register

__all__ = ["OpExtStorageDiagnose", "OpOsDiagnose"]

_NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]


@register
class OpOsDiagnose(OpCode, tag="OP_OS_DIAGNOSE"):
    """The OS definitions found on the nodes: one row of ``output_fields`` per OS.

    As in Ganeti, hidden, blacklisted and invalid OSes are left out unless the
    ``hidden``, ``blacklisted`` or ``valid`` field is asked for; ``names`` limits the
    answer to those OSes (all when empty).
    """

    output_fields: list[_NonEmpty]
    names: list[_NonEmpty] = msgspec.field(default_factory=list)


@register
class OpExtStorageDiagnose(OpCode, tag="OP_EXT_STORAGE_DIAGNOSE"):
    """The ExtStorage providers found on the nodes: one row of ``output_fields`` per
    provider (fields ``name``, ``node_status``, ``nodegroup_status``, ``parameters``);
    ``names`` limits the answer to those providers (all when empty)."""

    output_fields: list[_NonEmpty]
    names: list[_NonEmpty] = msgspec.field(default_factory=list)
