"""SQLite persistence of the configuration: one row per object plus a meta table.

Schema (version :data:`corral.CONFIG_SCHEMA_VERSION`)::

    objects(kind TEXT, uuid TEXT PRIMARY KEY, serial INTEGER, json TEXT)
    meta(key TEXT PRIMARY KEY, value)      -- 'schema_version', 'serial'

The database runs in WAL mode with ``synchronous=FULL``: a commit is durable once
:meth:`Database.write` returns, and a crash at any point leaves either the old or
the new rows. Every SQLite or OS error becomes a :class:`ConfigStoreError` naming
the file and what went wrong. Only stdlib :mod:`sqlite3` is used.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from corral.errors import ConfigStoreError

__all__ = ["Commit", "Database", "RawRow", "Row", "sidecar_files"]

_HEADER = b"SQLite format 3\x00"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS objects (
    kind TEXT NOT NULL,
    uuid TEXT NOT NULL PRIMARY KEY,
    serial INTEGER NOT NULL,
    json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
    key TEXT NOT NULL PRIMARY KEY,
    value
);
"""


@dataclass(frozen=True, slots=True)
class RawRow:
    """A row as stored, before decoding (``uuid`` may be missing in old stores)."""

    kind: str
    uuid: str | None
    json: str | bytes


@dataclass(frozen=True, slots=True)
class Row:
    """A row to write."""

    kind: str
    uuid: str
    serial: int
    json: bytes


@dataclass(frozen=True, slots=True)
class Commit:
    """One commit to write: the serial it makes, the rows it writes, the UUIDs it deletes."""

    serial: int
    upserts: Sequence[Row]
    deletes: Sequence[str]


def _create_schema(cur: sqlite3.Cursor, schema_version: int) -> None:
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            cur.execute(statement)
    cur.execute("INSERT INTO meta VALUES ('schema_version', ?)", (schema_version,))
    cur.execute("INSERT INTO meta VALUES ('serial', 0)")


def sidecar_files(path: Path) -> list[Path]:
    """The WAL and shared-memory files SQLite keeps next to ``path``."""
    return [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm")]


def _file_state(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _align_sidecars(path: Path) -> None:
    """Give the WAL files this process made the store's group: SQLite copies the
    store's mode to them but, run by a user other than root, its own primary group,
    which would keep the store's group readers (confd) out of the latest commits."""
    try:
        gid = os.stat(path).st_gid
    except OSError:
        return
    for side in sidecar_files(path):
        with contextlib.suppress(OSError):
            st = os.stat(side)
            if st.st_uid == os.geteuid() and st.st_gid != gid:
                os.chown(side, -1, gid)


class Database:
    """One open configuration database file."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn
        self._immutable_state: tuple[int, int, int] | None = None

    # -- opening -----------------------------------------------------------------
    @classmethod
    def create(cls, path: Path, schema_version: int) -> Database:
        """Create a new, empty store at ``path`` (which must not exist)."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as err:
            raise ConfigStoreError(
                f"configuration store {path}: cannot create: {err.strerror}"
            ) from None
        os.close(fd)
        for stale in sidecar_files(path):
            stale.unlink(missing_ok=True)
        db = cls._connect(path)
        try:
            db.prepare_writes()
            with db._errors("create the schema"), db._transaction() as cur:
                _create_schema(cur, schema_version)
        except BaseException:
            db.close()
            raise
        return db

    @classmethod
    def open(cls, path: Path, *, read_only: bool = False) -> Database:
        """Open an existing store, refusing files that are not SQLite databases.

        ``read_only`` opens it with SQLite's ``mode=ro``: nothing can write through
        the connection, and read permission on the file is enough.
        """
        try:
            with open(path, "rb") as handle:
                header = handle.read(len(_HEADER))
            wanted = os.R_OK if read_only else os.R_OK | os.W_OK
            if not os.access(path, wanted):
                raise PermissionError(13, "Permission denied")
        except OSError as err:
            raise ConfigStoreError(
                f"configuration store {path}: cannot open: {err.strerror or err}"
            ) from None
        if not header:
            raise ConfigStoreError(f"configuration store {path}: the file is empty")
        if header != _HEADER:
            raise ConfigStoreError(
                f"configuration store {path}: not a SQLite database (corrupt or another kind "
                "of file)"
            )
        try:
            db = cls._checked(path, "ro" if read_only else "rw")
        except ConfigStoreError:
            if not read_only or any(p.exists() for p in sidecar_files(path)):
                raise
            # A reader that may not create the WAL files next to a store nobody has
            # open (a daemon reading the master's or noded's file): the file then
            # holds every commit, and is read as it is, checked unchanged afterwards.
            before = _file_state(path)
            db = cls._checked(path, "ro&immutable=1")
            db._immutable_state = before
        if not read_only:
            _align_sidecars(path)
        return db

    @classmethod
    def _checked(cls, path: Path, mode: str) -> Database:
        db = cls._connect(path, mode)
        try:
            with db._errors("check its integrity"):
                problems = [r[0] for r in db._conn.execute("PRAGMA quick_check")]
            if problems != ["ok"]:
                raise ConfigStoreError(
                    f"configuration store {path}: the database is corrupt: "
                    f"{'; '.join(str(p) for p in problems[:5])}"
                )
        except BaseException:
            db.close()
            raise
        return db

    def unchanged_since_open(self) -> bool:
        """Whether a store read as an immutable file (no writer had it open) is still
        as it was when opened: no writer opened it meanwhile. Always true otherwise."""
        if self._immutable_state is None:
            return True
        return (_file_state(self.path) == self._immutable_state
                and not any(p.exists() for p in sidecar_files(self.path)))

    @classmethod
    def _connect(cls, path: Path, mode: str = "rw") -> Database:
        uri = f"{path.absolute().as_uri()}?mode={mode}"
        try:
            # The store's writer thread commits through this connection; the store
            # never uses it from two threads at once.
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=10.0,
                                   check_same_thread=False)
        except sqlite3.Error as err:
            raise ConfigStoreError(f"configuration store {path}: cannot open: {err}") from None
        return cls(path, conn)

    def prepare_writes(self) -> None:
        """Switch to WAL mode with ``synchronous=FULL``.

        Done once a store has been accepted, so that a refused file is left
        byte-for-byte as it was (WAL mode is recorded in the file header).
        """
        with self._errors("configure the connection"):
            mode = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise ConfigStoreError(
                    f"configuration store {self.path}: cannot switch to WAL mode (got {mode!r})"
                )
            self._conn.execute("PRAGMA synchronous=FULL")

    def checkpoint(self) -> None:
        """Copy the WAL into the database file and empty it (the file then stands alone)."""
        with self._errors("checkpoint the write-ahead log"):
            busy, _log, _done = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            raise ConfigStoreError(
                f"configuration store {self.path}: cannot checkpoint the write-ahead log: busy"
            )

    def close(self) -> None:
        """Close the connection (SQLite checkpoints the WAL on the last close)."""
        self._conn.close()

    # -- errors and transactions ---------------------------------------------
    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.DatabaseError as err:
            text = str(err)
            if "not a database" in text:
                text = "not a SQLite database (corrupt or another kind of file)"
            raise ConfigStoreError(
                f"configuration store {self.path}: cannot {doing}: {text}"
            ) from None
        except OSError as err:
            raise ConfigStoreError(
                f"configuration store {self.path}: cannot {doing}: {err}"
            ) from None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Cursor]:
        cur = self._conn.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            yield cur
            cur.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:
                self._conn.rollback()
            raise

    # -- reading -------------------------------------------------------------
    @contextlib.contextmanager
    def read_transaction(self) -> Iterator[None]:
        """Make the reads inside the block see one committed state, even while
        another process commits (the serial and the rows then agree)."""
        with self._errors("start reading"):
            self._conn.execute("BEGIN")
        try:
            yield
        finally:
            if self._conn.in_transaction:
                with self._errors("finish reading"):
                    self._conn.execute("ROLLBACK")

    def _has_table(self, name: str) -> bool:
        row = self._conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
        ).fetchone()
        return row is not None

    def _meta(self, key: str) -> object:
        if not self._has_table("meta"):
            return None
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def _meta_int(self, key: str) -> int:
        value = self._meta(key)
        if value is None:
            return 0
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigStoreError(
                f"configuration store {self.path}: meta value {key!r} is {value!r}, "
                "not a non-negative integer"
            )
        return value

    def schema_version(self) -> int:
        """The stored schema version; 0 when the store predates the meta table."""
        with self._errors("read the schema version"):
            return self._meta_int("schema_version")

    def serial(self) -> int:
        """The stored cluster configuration serial (0 when missing)."""
        with self._errors("read the configuration serial"):
            return self._meta_int("serial")

    def rows(self) -> list[RawRow]:
        """Every object row, undecoded."""
        with self._errors("read the objects"):
            if not self._has_table("objects"):
                raise ConfigStoreError(
                    f"configuration store {self.path}: has no 'objects' table; "
                    "it is not a corral configuration"
                )
            result: list[RawRow] = []
            for kind, uuid, data in self._conn.execute("SELECT kind, uuid, json FROM objects"):
                if not isinstance(kind, str) or not isinstance(data, str | bytes):
                    raise ConfigStoreError(
                        f"configuration store {self.path}: malformed row "
                        f"(kind {kind!r}, uuid {uuid!r})"
                    )
                result.append(RawRow(kind, uuid if isinstance(uuid, str) else None, data))
            return result

    # -- writing -------------------------------------------------------------
    def write(
        self, expected_serial: int, new_serial: int, upserts: Sequence[Row],
        deletes: Sequence[str],
    ) -> None:
        """Write one commit in one SQLite transaction.

        Refuses (nothing written) if the stored serial is not ``expected_serial``,
        which means another process changed the store behind this one's back.
        """
        self.write_group(expected_serial, [Commit(new_serial, upserts, deletes)])

    def write_group(self, expected_serial: int, commits: Sequence[Commit]) -> None:
        """Write several consecutive commits, in order, in ONE SQLite transaction (one
        fsync): all of them are durable when this returns, or none on error.

        Refuses (nothing written) if the stored serial is not ``expected_serial``.
        """
        with self._errors("commit"), self._transaction() as cur:
            stored = self._meta_int("serial")
            if stored != expected_serial:
                raise ConfigStoreError(
                    f"configuration store {self.path}: changed by another process "
                    f"(serial {stored}, expected {expected_serial}); reopen it"
                )
            for commit in commits:
                self._put(cur, commit.upserts, commit.deletes, commit.serial)

    def rebuild(self, schema_version: int, new_serial: int, rows: Sequence[Row]) -> None:
        """Replace the whole content with ``rows`` under the current schema (upgrade)."""
        with self._errors("write the upgraded configuration"), self._transaction() as cur:
            cur.execute("DROP TABLE IF EXISTS objects")
            cur.execute("DROP TABLE IF EXISTS meta")
            _create_schema(cur, schema_version)
            self._put(cur, rows, (), new_serial)

    @staticmethod
    def _put(
        cur: sqlite3.Cursor, upserts: Sequence[Row], deletes: Sequence[str], serial: int
    ) -> None:
        if deletes:
            cur.executemany("DELETE FROM objects WHERE uuid = ?", [(u,) for u in deletes])
        if upserts:
            cur.executemany(
                "INSERT OR REPLACE INTO objects (kind, uuid, serial, json) VALUES (?, ?, ?, ?)",
                [(r.kind, r.uuid, r.serial, r.json.decode()) for r in upserts],
            )
        cur.execute("UPDATE meta SET value = ? WHERE key = 'serial'", (serial,))
