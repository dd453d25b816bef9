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

An update too large for one request comes in parts (``session``, ``part``, ``last``;
see :mod:`corral.rpc.chunks`): the parts are staged in a directory beside the
replica (``<replica>.incoming``) and applied together, in one transaction, when the
last one arrives; the answer to an earlier part is ``{"serial": n, "received":
part}``. A part that does not follow the one received before discards the staged
ones, so an interrupted update never touches the replica and is sent again whole.

The arguments are decoded, strictly, into
:class:`~corral.rpc.args.ConfigReplicateArgs` and
:class:`~corral.rpc.args.JobsReplicateArgs` before a procedure runs (a row of the
wrong shape is refused naming the argument and the row).

SQLite and the staging files are never touched on the event loop: each replica
file has one writer thread that runs its updates in the order they came, and the
answer goes back only once the update is committed.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Generic, TypeVar

import msgspec

from corral.config import Replica, Row
from corral.errors import ParameterError
from corral.jobs.store import JobReplica, JobRows
from corral.paths import Paths
from corral.rpc.args import (
    ArchiveRow,
    ConfigReplicateArgs,
    ConfigRow,
    JobRow,
    JobsReplicateArgs,
    MetaRow,
    ReplicateArgs,
)

__all__ = ["close_replicas", "config_replicate", "jobs_replicate"]

T = TypeVar("T")


class _ConfigRows(msgspec.Struct):
    """The rows of one part of a configuration update, as staged."""

    upserts: list[ConfigRow] = msgspec.field(default_factory=list)
    deletes: list[str] = msgspec.field(default_factory=list)


class _JobRowsPart(msgspec.Struct):
    """The rows of one part of a job queue update, as staged."""

    jobs: list[JobRow] = msgspec.field(default_factory=list)
    archive: list[ArchiveRow] = msgspec.field(default_factory=list)
    meta: list[MetaRow] = msgspec.field(default_factory=list)


R = TypeVar("R", Replica, JobReplica)
#: What identifies one update, whichever part carries it.
_Header = tuple[str, bool, int | None, int]


class _Writer(Generic[R]):
    """One replica file: its writer thread, and the parts of an update staged so far.

    Everything but :meth:`run` itself happens on the writer thread.
    """

    def __init__(self, path: Path, opener: Callable[[Path], R]) -> None:
        self.path = path
        self.staging = path.with_name(path.name + ".incoming")
        self._opener: Callable[[Path], R] = opener
        self._thread = ThreadPoolExecutor(max_workers=1,
                                          thread_name_prefix=f"replica-{path.name}")
        self._replica: R | None = None
        self._header: _Header | None = None
        self._next_part = 0

    async def run(self, work: Callable[[R], T]) -> T:
        """``work(replica)`` on the writer thread, after every update asked for before."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._do, work)

    def _do(self, work: Callable[[R], T]) -> T:
        if self._replica is None:
            self._replica = self._opener(self.path)
            self.discard()  # left by a daemon that stopped in the middle of an update
        return work(self._replica)

    def stage(self, header: _Header, part: int, data: bytes) -> None:
        """Keep one part of an update; part 0 starts a new update."""
        if part == 0:
            self.discard()
            self.staging.mkdir(parents=True)
        elif header != self._header or part != self._next_part:
            self.discard()
            raise ParameterError(
                f"replication update {header[0]}: part {part} does not follow what this "
                f"node received; the update is dropped and must be sent again from part 0")
        (self.staging / f"{part:09d}").write_bytes(data)
        self._header, self._next_part = header, part + 1

    @property
    def receiving(self) -> bool:
        """Whether parts of an update are staged."""
        return self._header is not None

    def staged(self) -> Iterator[bytes]:
        """The staged parts, in order."""
        for part in range(self._next_part):
            yield (self.staging / f"{part:09d}").read_bytes()

    def discard(self) -> None:
        """Forget the staged parts."""
        shutil.rmtree(self.staging, ignore_errors=True)
        self._header, self._next_part = None, 0

    def close(self) -> None:
        """Wait for the updates under way, then close the file and the thread."""
        def close() -> None:
            self.discard()
            if self._replica is not None:
                self._replica.close()
                self._replica = None
        self._thread.submit(close).result()
        self._thread.shutdown(wait=True)


#: The writers of this process, by replica file (a node daemon serves one node).
_WRITERS: dict[str, _Writer[Replica]] = {}
_JOB_WRITERS: dict[str, _Writer[JobReplica]] = {}


def _writer(cache: dict[str, _Writer[R]], path: Path, opener: Callable[[Path], R]
            ) -> _Writer[R]:
    writer = cache.get(str(path))
    if writer is None:
        writer = cache[str(path)] = _Writer(path, opener)
    return writer


def close_replicas() -> None:
    """Close every open replica (before a node turns master and opens them itself);
    an update under way is finished first."""
    writers: list[_Writer[Any]] = [*_WRITERS.values(), *_JOB_WRITERS.values()]
    _WRITERS.clear()
    _JOB_WRITERS.clear()
    for writer in writers:
        writer.close()


def _header(update: ReplicateArgs) -> _Header:
    return (update.session or "", update.snapshot, update.base, update.serial)


P = TypeVar("P", _ConfigRows, _JobRowsPart)


def _parts(writer: _Writer[Any], update: ReplicateArgs, rows: P) -> Iterator[P] | None:
    """The rows of the whole update ``rows`` belong to, part by part, once it is
    complete (None until then); just ``rows`` when the update came in one call."""
    if update.session is None:
        if writer.receiving:
            writer.discard()  # the sender gave up that update
        return iter((rows,))
    writer.stage(_header(update), update.part, msgspec.msgpack.encode(rows))
    if not update.last:
        return None
    return (msgspec.msgpack.decode(data, type=type(rows)) for data in writer.staged())


def _apply_config(writer: _Writer[Replica], update: ConfigReplicateArgs,
                  replica: Replica) -> dict[str, Any]:
    parts = _parts(writer, update, _ConfigRows(upserts=update.upserts, deletes=update.deletes))
    if parts is None:
        return {"serial": replica.serial, "received": update.part}
    try:
        upserts: list[Row] = []
        deletes: list[str] = []
        for part in parts:
            upserts.extend(Row(kind, uuid, serial, data.encode())
                           for kind, uuid, serial, data in part.upserts)
            deletes.extend(part.deletes)
        if update.snapshot:
            replica.reset(update.serial, upserts)
            applied = True
        else:
            assert update.base is not None  # ReplicateArgs
            applied = replica.apply(update.base, update.serial, upserts, deletes)
    finally:
        if update.session is not None:
            writer.discard()
    return {"serial": replica.serial, "applied": applied}


async def config_replicate(paths: Paths, args: ConfigReplicateArgs) -> dict[str, Any]:
    """Apply a snapshot or a delta of the master's configuration to this node's
    replica (see the module doc); the replica's serial afterwards."""
    writer = _writer(_WRITERS, paths.config_replica, Replica.open)
    if args.serial_only:
        return {"serial": await writer.run(lambda replica: replica.serial), "applied": True}
    return await writer.run(lambda replica: _apply_config(writer, args, replica))


def _job_rows(parts: Iterator[_JobRowsPart], serial: int) -> Iterator[JobRows]:
    for part in parts:
        yield JobRows(
            upserts=[(job_id, data.encode()) for job_id, data in part.jobs],
            archive=[(job_id, end, data.encode()) for job_id, end, data in part.archive],
            meta=[(key, value) for key, value in part.meta if key != "serial"],
        )
    yield JobRows(upserts=[], archive=[], meta=[("serial", serial)])


def _apply_jobs(writer: _Writer[JobReplica], update: JobsReplicateArgs,
                replica: JobReplica) -> dict[str, Any]:
    parts = _parts(writer, update, _JobRowsPart(jobs=update.jobs, archive=update.archive,
                                                meta=update.meta))
    if parts is None:
        return {"serial": replica.serial, "received": update.part}
    try:
        rows = _job_rows(parts, update.serial)
        if update.snapshot:
            replica.reset(rows)
            applied = True
        else:
            assert update.base is not None  # ReplicateArgs
            applied = replica.apply(update.base, update.serial, rows)
    finally:
        if update.session is not None:
            writer.discard()
    return {"serial": replica.serial, "applied": applied}


async def jobs_replicate(paths: Paths, args: JobsReplicateArgs) -> dict[str, Any]:
    """Apply a snapshot or a delta of the master's job queue to this node's replica
    (see the module doc); the replica's serial afterwards."""
    writer = _writer(_JOB_WRITERS, paths.jobs_replica, JobReplica.open)
    if args.serial_only:
        return {"serial": await writer.run(lambda replica: replica.serial), "applied": True}
    return await writer.run(lambda replica: _apply_jobs(writer, args, replica))
