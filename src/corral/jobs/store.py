"""SQLite persistence of the job queue with group commit.

Schema::

    jobs(id INTEGER PRIMARY KEY, data BLOB)               -- live jobs (JSON)
    archive(id INTEGER PRIMARY KEY, end_sec INTEGER, data BLOB)
    meta(key TEXT PRIMARY KEY, value)     -- 'last_job_id', 'drained', 'serial'

The file runs in WAL mode with ``synchronous=FULL``. Writers never touch SQLite
themselves: :meth:`JobStore.save` (and the other write requests) mark what changed
in the *pending batch* of the store's :class:`~corral.utils.groupcommit.GroupWriter`
and return that batch's future. Every request made in the same turn of the event
loop joins the batch; when its write starts, the changed jobs are encoded on the
loop (a snapshot) and committed in ONE transaction on the writer thread, while new
requests form the next batch. A batch's future resolves only after its COMMIT has
returned, i.e. once the data is durable, so a caller that awaits it (or a callback
on it) can announce the change safely. Many jobs thus share one fsync.

A batch that cannot be stored fails its future with :class:`ConfigStoreError` and
leaves no trace: it uses up no serial, and the last job id handed out is stored with
the next batch that is written, so no id is handed out twice.

Every batch bumps the queue's ``serial`` (stored with it) and is then handed to the
commit listeners as :class:`JobRows`: that is what the master candidates' job queue
replicas (:class:`JobReplica`, the same schema) follow, so that a master failover
loses no job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.errors import ConfigStoreError
from corral.jobs.model import Job, decode_job, encode_job
from corral.utils.groupcommit import GroupWriter

__all__ = [
    "JobCommitListener",
    "JobReplica",
    "JobRows",
    "JobStore",
    "StoredQueue",
    "job_row_args",
    "job_snapshot_args",
]

_log = logging.getLogger(__name__)

#: The largest job id SQLite can store (its integers are 64-bit signed): a larger
#: number, which a client may send, names no job.
MAX_JOB_ID = 2**63 - 1

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS jobs (id INTEGER PRIMARY KEY, data BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS archive ("
    " id INTEGER PRIMARY KEY, end_sec INTEGER, data BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value)",
)


@dataclass(slots=True)
class StoredQueue:
    """What :meth:`JobStore.load` finds: live jobs by id, the last id, the drain flag."""

    jobs: list[Job]
    last_id: int
    drained: bool


@dataclass(slots=True)
class _Batch:
    """What one batch changes: jobs to write, jobs to archive, meta values."""

    jobs: dict[int, Job] = field(default_factory=dict)
    archive: dict[int, Job] = field(default_factory=dict)
    meta: dict[str, object] = field(default_factory=dict)


@dataclass(slots=True)
class JobRows:
    """One committed batch: live jobs written, jobs moved to the archive, meta values."""

    upserts: list[tuple[int, bytes]]
    archive: list[tuple[int, int | None, bytes]]
    meta: list[tuple[str, object]]


@dataclass(slots=True)
class _Prepared:
    """A batch's rows and the serial and last job id they store (adopted on success)."""

    serial: int
    stored_last_id: int
    rows: JobRows


#: Called on the event loop after each durable batch with the queue's new serial.
JobCommitListener = Callable[[int, JobRows], None]


def _write_rows(conn: sqlite3.Connection, rows: JobRows, *, reset: bool = False) -> None:
    """Write ``rows`` in one transaction (after emptying every table with ``reset``)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if reset:
            for table in ("jobs", "archive", "meta"):
                conn.execute(f"DELETE FROM {table}")
        _put_rows(conn, rows)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.rollback()
        raise


def _put_rows(conn: sqlite3.Connection, rows: JobRows) -> None:
    if rows.upserts:
        conn.executemany("INSERT OR REPLACE INTO jobs VALUES (?, ?)", rows.upserts)
    if rows.archive:
        conn.executemany("INSERT OR REPLACE INTO archive VALUES (?, ?, ?)", rows.archive)
        conn.executemany("DELETE FROM jobs WHERE id=?", [(row[0],) for row in rows.archive])
    if rows.meta:
        conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", rows.meta)


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), isolation_level=None, timeout=10.0,
                           check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    for statement in _SCHEMA:
        conn.execute(statement)
    return conn


def _dump(conn: sqlite3.Connection) -> tuple[int, JobRows]:
    """Every row of a queue file and its serial."""
    rows = JobRows(
        upserts=list(conn.execute("SELECT id, data FROM jobs ORDER BY id")),
        archive=list(conn.execute("SELECT id, end_sec, data FROM archive ORDER BY id")),
        meta=list(conn.execute("SELECT key, value FROM meta")),
    )
    return _read_serial(conn), rows


def _dump_parts(conn: sqlite3.Connection, limit: int) -> Iterator[JobRows]:
    """Every row of a queue file, in parts of about ``limit`` bytes of job data."""
    part, size = JobRows(upserts=[], archive=[], meta=[]), 0
    for table, rows in (
        ("jobs", conn.execute("SELECT id, data FROM jobs ORDER BY id")),
        ("archive", conn.execute("SELECT id, end_sec, data FROM archive ORDER BY id")),
    ):
        for row in rows:
            if size and size + len(row[-1]) > limit:
                yield part
                part, size = JobRows(upserts=[], archive=[], meta=[]), 0
            (part.upserts if table == "jobs" else part.archive).append(row)
            size += len(row[-1])
    part.meta.extend(conn.execute("SELECT key, value FROM meta"))
    yield part


def _read_serial(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key='serial'").fetchone()
    return int(row[0]) if row else 0


class JobStore:
    """One open job queue database; writes are grouped, commits run on a writer thread."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn
        self._writer: GroupWriter[_Batch, _Prepared] = GroupWriter(
            "jobstore", new_payload=_Batch, prepare=self._rows,
            write=lambda prepared: self._commit(prepared.rows),
            durable=self._durable, failed=self._fail, stopped=self._stopped,
        )
        self._last_id = 0
        self._stored_last_id = 0
        self._closed = False
        self._serial = 0
        self._listeners: list[JobCommitListener] = []

    # -- opening -------------------------------------------------------------
    @classmethod
    def open(cls, path: Path) -> JobStore:
        """Open (creating it if missing) the queue database at ``path``."""
        try:
            conn = _connect(path)
        except sqlite3.Error as err:
            raise ConfigStoreError(f"job queue {path}: cannot open: {err}") from None
        store = cls(path, conn)
        store._last_id = store._stored_last_id = store._read_last_id()
        with store._errors("read the serial"):
            store._serial = _read_serial(conn)
        return store

    def _read_last_id(self) -> int:
        with self._errors("read the last job id"):
            row = self._conn.execute("SELECT value FROM meta WHERE key='last_job_id'").fetchone()
            stored = int(row[0]) if row else 0
            live = self._conn.execute("SELECT max(id) FROM jobs").fetchone()[0] or 0
            archived = self._conn.execute("SELECT max(id) FROM archive").fetchone()[0] or 0
        return max(stored, live, archived)

    def load(self) -> StoredQueue:
        """Every live job (by id), the last id handed out and the drain flag."""
        with self._errors("load the jobs"):
            rows = self._conn.execute("SELECT data FROM jobs ORDER BY id").fetchall()
            drained = self._conn.execute("SELECT value FROM meta WHERE key='drained'").fetchone()
        return StoredQueue(
            jobs=[decode_job(row[0]) for row in rows],
            last_id=self._last_id,
            drained=bool(drained[0]) if drained else False,
        )

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except (sqlite3.Error, OSError) as err:
            raise ConfigStoreError(f"job queue {self.path}: cannot {doing}: {err}") from None

    # -- replication ---------------------------------------------------------
    @property
    def serial(self) -> int:
        """The number of the last batch committed (it grows by one per batch)."""
        return self._serial

    def add_listener(self, listener: JobCommitListener) -> None:
        """Call ``listener(serial, rows)`` after each durable batch; it must not raise."""
        self._listeners.append(listener)

    async def snapshot(self) -> tuple[int, JobRows]:
        """Everything stored (live jobs, archive, meta) and the serial it is at, read on
        the writer thread after earlier writes."""
        await self.barrier()
        return await self._writer.run(self._dump)

    def _dump(self) -> tuple[int, JobRows]:
        with self._errors("read the queue"):
            return _dump(self._conn)

    async def snapshot_parts(self, limit: int) -> AsyncGenerator[tuple[int, JobRows], None]:
        """Everything stored, like :meth:`snapshot`, in parts of about ``limit`` bytes of
        job data (the last part has the meta values), each with the serial they are at.

        The parts come from one read transaction on a connection of their own, so
        they all show the queue at one serial while writes go on, and only one part is
        in memory at a time. Reading starts after every write requested before.
        """
        with contextlib.suppress(ConfigStoreError):  # a failed batch: read what is stored
            await self.barrier()
        loop = asyncio.get_running_loop()
        reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jobsnapshot")
        conn: sqlite3.Connection | None = None
        try:
            opened, serial = await loop.run_in_executor(reader, self._open_reader)
            conn = opened
            parts = _dump_parts(opened, limit)
            while True:
                with self._errors("read the queue"):
                    part = await loop.run_in_executor(reader, next, parts, None)
                if part is None:
                    return
                yield serial, part
        finally:
            if conn is not None:
                reader.submit(conn.close)
            reader.shutdown(wait=False)

    def _open_reader(self) -> tuple[sqlite3.Connection, int]:
        with self._errors("read the queue"):
            conn = sqlite3.connect(f"{self.path.absolute().as_uri()}?mode=ro", uri=True,
                                   isolation_level=None, check_same_thread=False)
            conn.execute("BEGIN")
            return conn, _read_serial(conn)  # the first read fixes what the reads see

    # -- ids -----------------------------------------------------------------
    @property
    def last_id(self) -> int:
        """The highest job id handed out so far."""
        return self._last_id

    def new_id(self) -> int:
        """The next job id; it is stored with the batch that saves the job."""
        self._last_id += 1
        return self._last_id

    # -- write requests (group commit) ---------------------------------------
    def _batch(self) -> tuple[_Batch, asyncio.Future[None]]:
        if self._closed:
            raise ConfigStoreError(f"job queue {self.path}: the store is closed")
        return self._writer.request()

    def save(self, job: Job) -> asyncio.Future[None]:
        """Request that ``job`` be written; the future resolves once it is durable.

        The job is encoded when the batch is flushed, so the stored state is the
        newest one at that moment (it includes every change requested before).
        """
        batch, future = self._batch()
        batch.jobs[job.id] = job
        return future

    def set_drained(self, flag: bool) -> asyncio.Future[None]:
        """Request that the drain flag be stored."""
        batch, future = self._batch()
        batch.meta["drained"] = int(flag)
        return future

    def archive(self, jobs: Iterable[Job]) -> asyncio.Future[None]:
        """Request that ``jobs`` move from the live table to the archive."""
        batch, future = self._batch()
        for job in jobs:
            batch.jobs.pop(job.id, None)
            batch.archive[job.id] = job
        return future

    def barrier(self) -> asyncio.Future[None]:
        """A future resolving once every write requested so far is durable."""
        return self._writer.barrier()

    def _rows(self, batch: _Batch) -> _Prepared:
        """When the batch's write starts: its rows, the serial they carry and the last
        id stored with them (the store adopts both only once they are durable)."""
        serial = self._serial + 1
        meta = [*batch.meta.items(), ("serial", serial)]
        stored_last_id = self._stored_last_id
        if self._last_id > stored_last_id:
            stored_last_id = self._last_id
            meta.append(("last_job_id", stored_last_id))
        archive = []
        for job_id, job in batch.archive.items():
            job.archived = True
            end = job.end_timestamp[0] if job.end_timestamp else None
            archive.append((job_id, end, encode_job(job)))
        rows = JobRows(
            upserts=[(job_id, encode_job(job)) for job_id, job in batch.jobs.items()],
            archive=archive,
            meta=meta,
        )
        return _Prepared(serial, stored_last_id, rows)

    def _commit(self, rows: JobRows) -> None:
        with self._errors("write the jobs"):
            _write_rows(self._conn, rows)

    def _durable(self, _batch: _Batch, prepared: _Prepared) -> None:
        """A batch is stored: adopt its serial and last id, then tell the listeners."""
        self._serial, self._stored_last_id = prepared.serial, prepared.stored_last_id
        for listener in self._listeners:
            try:
                listener(prepared.serial, prepared.rows)
            except Exception:  # one broken listener must not stop the writer
                _log.exception("job queue %s: a commit listener failed", self.path)

    def _fail(self, _batch: _Batch, err: BaseException) -> BaseException:
        """The error a failed batch's requesters get; nothing of it is stored (one
        transaction), and the serial and the stored last id stay what the file has."""
        if isinstance(err, ConfigStoreError):
            return err
        return ConfigStoreError(f"job queue {self.path}: cannot write the jobs: "
                                f"{type(err).__name__}: {err}")

    def _stopped(self) -> BaseException:
        """The error of requesters left when the writer stops (the loop is closing)."""
        return ConfigStoreError(f"job queue {self.path}: the writer stopped before this "
                                "write was stored")

    # -- reads of archived jobs ----------------------------------------------
    async def read_archived(self, ids: Sequence[int]) -> dict[int, Job]:
        """Archived jobs among ``ids`` (read on the writer thread, after earlier writes);
        an id SQLite cannot hold names no job."""
        ids = [job_id for job_id in ids if 0 <= job_id <= MAX_JOB_ID]
        if not ids:
            return {}
        return await self._writer.run(self._read_archived, list(ids))

    async def read_all_archived(self) -> list[Job]:
        """Every archived job, by id (``gnt-job list --archived``: slow on purpose)."""
        return await self._writer.run(self._read_all_archived)

    def _read_all_archived(self) -> list[Job]:
        with self._errors("read archived jobs"):
            return [decode_job(data) for (data,) in
                    self._conn.execute("SELECT data FROM archive ORDER BY id")]

    def _read_archived(self, ids: list[int]) -> dict[int, Job]:
        found: dict[int, Job] = {}
        with self._errors("read archived jobs"):
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                for job_id, data in self._conn.execute(
                    f"SELECT id, data FROM archive WHERE id IN ({marks})", chunk
                ):
                    found[job_id] = decode_job(data)
        return found

    # -- closing -------------------------------------------------------------
    async def close(self) -> None:
        """Wait for outstanding writes, then close the database."""
        await self._writer.drain()
        self._closed = True
        await self._writer.run(self._conn.close)
        self._writer.shutdown()

    def close_sync(self) -> None:
        """Close without an event loop (nothing may be pending)."""
        self._closed = True
        self._conn.close()
        self._writer.shutdown()


class JobReplica:
    """A master candidate's copy of the job queue (the same schema as :class:`JobStore`,
    so a new master opens it as its queue). Each update is one transaction."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn

    @classmethod
    def open(cls, path: Path) -> JobReplica:
        """Open the replica at ``path``, creating an empty one if there is none."""
        try:
            return cls(path, _connect(path))
        except sqlite3.Error as err:
            raise ConfigStoreError(f"job queue replica {path}: cannot open: {err}") from None

    @property
    def serial(self) -> int:
        """The serial of the master's batch the replica is at (0: none yet)."""
        with self._errors("read the serial"):
            return _read_serial(self._conn)

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except (sqlite3.Error, OSError) as err:
            raise ConfigStoreError(f"job queue replica {self.path}: cannot {doing}: "
                                   f"{err}") from None

    def _write(self, rows: JobRows | Iterable[JobRows], *, reset: bool) -> None:
        parts = [rows] if isinstance(rows, JobRows) else rows
        with self._errors("write"):
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                if reset:
                    for table in ("jobs", "archive", "meta"):
                        self._conn.execute(f"DELETE FROM {table}")
                for part in parts:
                    _put_rows(self._conn, part)
                self._conn.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.rollback()
                raise

    def apply(self, base: int, serial: int, rows: JobRows | Iterable[JobRows]) -> bool:
        """Apply the batches from ``base`` to ``serial`` (their ``meta`` carries the new
        serial) in one transaction, ``rows`` being one :class:`JobRows` or the parts of
        one; False, nothing written, when the replica is not at ``base``."""
        current = self.serial
        if current == serial and base <= serial:
            return True
        if current != base or serial <= base:
            return False
        self._write(rows, reset=False)
        return True

    def dump(self) -> tuple[int, JobRows]:
        """Everything the replica holds and its serial."""
        with self._errors("read"):
            return _dump(self._conn)

    def reset(self, rows: JobRows | Iterable[JobRows]) -> None:
        """Replace everything with ``rows`` (a snapshot, its serial in ``meta``; one
        :class:`JobRows` or the parts of one) in one transaction."""
        self._write(rows, reset=True)

    def close(self) -> None:
        """Close the file."""
        self._conn.close()


def job_row_args(rows: JobRows) -> dict[str, Any]:
    """Rows as the ``jobs``/``archive``/``meta`` arguments of ``jobs_replicate``."""
    return {
        "jobs": [[job_id, data.decode()] for job_id, data in rows.upserts],
        "archive": [[job_id, end, data.decode()] for job_id, end, data in rows.archive],
        "meta": [[key, value] for key, value in rows.meta],
    }


def job_snapshot_args(serial: int, rows: JobRows) -> dict[str, Any]:
    """``jobs_replicate`` arguments that replace a replica with ``rows`` at ``serial``."""
    return {"snapshot": True, "serial": serial, **job_row_args(rows)}
