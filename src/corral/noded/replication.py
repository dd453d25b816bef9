"""The node side of configuration replication: the ``config_replicate`` procedure.

A master candidate's node daemon keeps :class:`corral.config.Replica` at
:attr:`Paths.config_replica` and applies what the master pushes after each commit
(see :mod:`corral.masterd.replication`). One call carries one of:

* ``{"serial_only": true}``: only report the replica's serial;
* ``{"snapshot": true, "serial": S, "upserts": rows}``: replace everything;
* ``{"base": B, "serial": S, "upserts": rows, "deletes": uuids}``: the delta from
  serial B to S, applied only if the replica is at B.

Rows are ``[kind, uuid, serial, json]``. The answer is ``{"serial": n, "applied":
bool}``: ``applied`` false means the delta did not fit and a snapshot is wanted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from corral.config import Replica, Row
from corral.errors import ParameterError
from corral.paths import Paths

__all__ = ["config_replicate"]

_RowTuple = tuple[str, str, int, str]


class _Update(msgspec.Struct, forbid_unknown_fields=True):
    serial: int = 0
    base: int | None = None
    snapshot: bool = False
    serial_only: bool = False
    upserts: list[_RowTuple] = msgspec.field(default_factory=list)
    deletes: list[str] = msgspec.field(default_factory=list)


#: Open replicas of this process, by file (a node daemon serves one node).
_OPEN: dict[str, Replica] = {}


def _replica(paths: Paths) -> Replica:
    key = str(paths.config_replica)
    replica = _OPEN.get(key)
    if replica is None:
        replica = _OPEN[key] = Replica.open(paths.config_replica)
    return replica


async def config_replicate(paths: Paths, args: Mapping[str, Any]) -> dict[str, Any]:
    """Apply a snapshot or a delta of the master's configuration to this node's
    replica (see the module doc); the replica's serial afterwards."""
    try:
        update = msgspec.convert(dict(args), _Update)
    except msgspec.ValidationError as err:
        raise ParameterError(f"procedure config_replicate: invalid arguments: {err}") from None
    replica = _replica(paths)
    if update.serial_only:
        return {"serial": replica.serial, "applied": True}
    rows = [Row(kind, uuid, serial, data.encode()) for kind, uuid, serial, data in update.upserts]
    if update.snapshot:
        replica.reset(update.serial, rows)
        applied = True
    elif update.base is None:
        raise ParameterError("procedure config_replicate: a delta needs 'base' (the serial "
                             "it applies to); or send a snapshot")
    else:
        applied = replica.apply(update.base, update.serial, rows, update.deletes)
    return {"serial": replica.serial, "applied": applied}
