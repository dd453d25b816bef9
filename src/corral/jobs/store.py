"""SQLite persistence of the job queue with group commit.

Schema::

    jobs(id INTEGER PRIMARY KEY, data BLOB)               -- live jobs (JSON)
    archive(id INTEGER PRIMARY KEY, end_sec INTEGER, data BLOB)
    meta(key TEXT PRIMARY KEY, value)     -- 'last_job_id', 'drained', 'serial'

The file runs in WAL mode with ``synchronous=FULL``. Writers never touch SQLite
themselves: :meth:`JobStore.save` (and the other write requests) mark what changed
and return the future of the *current batch*. The first request of a batch starts a
flush task, which runs on the next turn of the event loop, so every request made in
the same turn joins the batch. The flush encodes the changed jobs on the loop (a
snapshot) and commits them in ONE transaction on a dedicated writer thread; requests
made meanwhile form the next batch. A batch's future resolves only after its COMMIT
has returned, i.e. once the data is durable, so a caller that awaits it (or a
callback on it) can announce the change safely. Many jobs thus share one fsync.

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
    future: asyncio.Future[None]
    jobs: dict[int, Job] = field(default_factory=dict)
    archive: dict[int, Job] = field(default_factory=dict)
    meta: dict[str, object] = field(default_factory=dict)


@dataclass(slots=True)
class JobRows:
    """One committed batch: live jobs written, jobs moved to the archive, meta values."""

    upserts: list[tuple[int, bytes]]
    archive: list[tuple[int, int | None, bytes]]
    meta: list[tuple[str, object]]


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
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="jobstore")
        self._pending: _Batch | None = None
        self._inflight: _Batch | None = None
        self._flusher: asyncio.Task[None] | None = None
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
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._dump)

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
    def _batch(self) -> _Batch:
        if self._closed:
            raise ConfigStoreError(f"job queue {self.path}: the store is closed")
        if self._pending is None:
            self._pending = _Batch(asyncio.get_running_loop().create_future())
            if self._flusher is None:
                self._flusher = asyncio.get_running_loop().create_task(self._flush())
        return self._pending

    def save(self, job: Job) -> asyncio.Future[None]:
        """Request that ``job`` be written; the future resolves once it is durable.

        The job is encoded when the batch is flushed, so the stored state is the
        newest one at that moment (it includes every change requested before).
        """
        batch = self._batch()
        batch.jobs[job.id] = job
        return batch.future

    def set_drained(self, flag: bool) -> asyncio.Future[None]:
        """Request that the drain flag be stored."""
        batch = self._batch()
        batch.meta["drained"] = int(flag)
        return batch.future

    def archive(self, jobs: Iterable[Job]) -> asyncio.Future[None]:
        """Request that ``jobs`` move from the live table to the archive."""
        batch = self._batch()
        for job in jobs:
            batch.jobs.pop(job.id, None)
            batch.archive[job.id] = job
        return batch.future

    def barrier(self) -> asyncio.Future[None]:
        """A future resolving once every write requested so far is durable."""
        batch = self._pending or self._inflight
        if batch is None:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        return batch.future

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        batch: _Batch | None = None
        try:
            while self._pending is not None:
                batch = self._inflight = self._pending
                self._pending = None
                try:
                    serial, stored_last_id, rows = self._rows(batch)
                    await loop.run_in_executor(self._thread, self._commit, rows)
                except asyncio.CancelledError:
                    raise
                except Exception as err:  # the writer's error goes to every requester
                    self._fail(batch, err)
                else:
                    self._serial, self._stored_last_id = serial, stored_last_id
                    batch.future.set_result(None)
                    self._announce(serial, rows)
                finally:
                    self._inflight = None
                batch = None
        finally:
            # After a cancellation (the loop is closing) no requester waits for ever.
            self._flusher = None
            pending, self._pending = self._pending, None
            for left in (batch, pending):
                if left is not None and not left.future.done():
                    left.future.set_exception(ConfigStoreError(
                        f"job queue {self.path}: the writer stopped before this write "
                        "was stored"))

    def _fail(self, batch: _Batch, err: Exception) -> None:
        """Fail every requester of ``batch``; nothing of it is stored (one transaction),
        and the serial and the stored last id stay what the file has."""
        if not isinstance(err, ConfigStoreError):
            err = ConfigStoreError(f"job queue {self.path}: cannot write the jobs: "
                                   f"{type(err).__name__}: {err}")
        batch.future.set_exception(err)
        batch.future.exception()  # marks it retrieved: requesters that drop it are fine

    def _announce(self, serial: int, rows: JobRows) -> None:
        for listener in self._listeners:
            try:
                listener(serial, rows)
            except Exception:  # one broken listener must not stop the writer
                _log.exception("job queue %s: a commit listener failed", self.path)

    def _rows(self, batch: _Batch) -> tuple[int, int, JobRows]:
        """The batch's rows, the serial they carry and the last id stored with them."""
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
        return serial, stored_last_id, rows

    def _commit(self, rows: JobRows) -> None:
        with self._errors("write the jobs"):
            _write_rows(self._conn, rows)

    # -- reads of archived jobs ----------------------------------------------
    async def read_archived(self, ids: Sequence[int]) -> dict[int, Job]:
        """Archived jobs among ``ids`` (read on the writer thread, after earlier writes)."""
        if not ids:
            return {}
        return await asyncio.get_running_loop().run_in_executor(
            self._thread, self._read_archived, list(ids)
        )

    async def read_all_archived(self) -> list[Job]:
        """Every archived job, by id (``gnt-job list --archived``: slow on purpose)."""
        return await asyncio.get_running_loop().run_in_executor(
            self._thread, self._read_all_archived
        )

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
        while self._flusher is not None:
            await asyncio.wait({self._flusher})
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(self._thread, self._conn.close)
        self._thread.shutdown(wait=True)

    def close_sync(self) -> None:
        """Close without an event loop (nothing may be pending)."""
        self._closed = True
        self._conn.close()
        self._thread.shutdown(wait=True)


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
