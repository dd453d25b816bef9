"""The node side of replication: the ``config_replicate`` and ``jobs_replicate``
procedures.

A master candidate's node daemon keeps :class:`corral.config.Replica` at
:attr:`Paths.config_replica` and :class:`corral.jobs.store.JobReplica` at
:attr:`Paths.jobs_replica`, and applies what the master pushes (see
:mod:`corral.masterd.replication`). One call carries one of:

* ``{"serial_only": true}``: only report the replica's serial;
* ``{"snapshot": true, "serial": S, ...}``: replace everything;
* ``{"base": B, "serial": S, ...}``: the delta from serial B to S, applied only if
  the replica is at B.

Configuration rows are ``upserts: [[kind, uuid, serial, json]]`` plus ``deletes:
[uuid]``; job queue rows are ``jobs: [[id, json]]``, ``archive: [[id, end_sec,
json]]`` and ``meta: [[key, value]]``. The answer is ``{"serial": n, "applied":
bool}``: ``applied`` false means the delta did not fit and a snapshot is wanted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from corral.config import Replica, Row
from corral.errors import ParameterError
from corral.jobs.store import JobReplica, JobRows
from corral.paths import Paths

__all__ = ["close_replicas", "config_replicate", "jobs_replicate"]

_RowTuple = tuple[str, str, int, str]
T = TypeVar("T")


class _Update(msgspec.Struct, forbid_unknown_fields=True):
    serial: int = 0
    base: int | None = None
    snapshot: bool = False
    serial_only: bool = False
    upserts: list[_RowTuple] = msgspec.field(default_factory=list)
    deletes: list[str] = msgspec.field(default_factory=list)


class _JobUpdate(msgspec.Struct, forbid_unknown_fields=True):
    serial: int = 0
    base: int | None = None
    snapshot: bool = False
    serial_only: bool = False
    jobs: list[tuple[int, str]] = msgspec.field(default_factory=list)
    archive: list[tuple[int, int | None, str]] = msgspec.field(default_factory=list)
    meta: list[tuple[str, Any]] = msgspec.field(default_factory=list)


#: Open replicas of this process, by file (a node daemon serves one node).
_OPEN: dict[str, Replica] = {}
_OPEN_JOBS: dict[str, JobReplica] = {}

R = TypeVar("R", Replica, JobReplica)


def _opened(cache: dict[str, R], path: Path, opener: Callable[[Path], R]) -> R:
    replica = cache.get(str(path))
    if replica is None:
        replica = cache[str(path)] = opener(path)
    return replica


def close_replicas() -> None:
    """Close every open replica (before a node turns master and opens them itself)."""
    for replica in _OPEN.values():
        replica.close()
    for job_replica in _OPEN_JOBS.values():
        job_replica.close()
    _OPEN.clear()
    _OPEN_JOBS.clear()


def _convert(procedure: str, args: Mapping[str, Any], kind: type[T]) -> T:
    try:
        return msgspec.convert(dict(args), kind)
    except msgspec.ValidationError as err:
        raise ParameterError(f"procedure {procedure}: invalid arguments: {err}") from None


async def config_replicate(paths: Paths, args: Mapping[str, Any]) -> dict[str, Any]:
    """Apply a snapshot or a delta of the master's configuration to this node's
    replica (see the module doc); the replica's serial afterwards."""
    update = _convert("config_replicate", args, _Update)
    replica = _opened(_OPEN, paths.config_replica, Replica.open)
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


async def jobs_replicate(paths: Paths, args: Mapping[str, Any]) -> dict[str, Any]:
    """Apply a snapshot or a delta of the master's job queue to this node's replica
    (see the module doc); the replica's serial afterwards."""
    update = _convert("jobs_replicate", args, _JobUpdate)
    replica = _opened(_OPEN_JOBS, paths.jobs_replica, JobReplica.open)
    if update.serial_only:
        return {"serial": replica.serial, "applied": True}
    rows = JobRows(
        upserts=[(job_id, data.encode()) for job_id, data in update.jobs],
        archive=[(job_id, end, data.encode()) for job_id, end, data in update.archive],
        meta=[*((key, value) for key, value in update.meta if key != "serial"),
              ("serial", update.serial)],
    )
    if update.snapshot:
        replica.reset(rows)
        applied = True
    elif update.base is None:
        raise ParameterError("procedure jobs_replicate: a delta needs 'base' (the serial "
                             "it applies to); or send a snapshot")
    else:
        applied = replica.apply(update.base, update.serial, rows)
    return {"serial": replica.serial, "applied": applied}
