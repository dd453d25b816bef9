"""The configuration store: the in-memory model backed by its SQLite file.

Readers use :meth:`ConfigStore.get`, :meth:`~ConfigStore.find`,
:meth:`~ConfigStore.all` and :attr:`~ConfigStore.cluster`. They return the
**shared** objects of the model: never mutate them. To change something, open a
transaction, take a private copy with :meth:`Transaction.get` and pass it to
:meth:`Transaction.update`.

The store is not thread-safe: use it from one thread (the master daemon's event
loop). A commit waits for the disk (``synchronous=FULL``). On an event loop, commit
with ``async with store.transaction() as txn:``: the write then runs on the store's
writer thread (:class:`~corral.utils.groupcommit.GroupWriter`) while the loop goes
on, commits made meanwhile share one SQLite transaction and one fsync, and the
block ends only once its commit is durable. Such a commit is installed in the model
at once, so the next transaction is checked against it; :attr:`ConfigStore.serial`
and :meth:`ConfigStore.rows` (what replicas follow) stay at what is on disk. If a
write fails, its commit and every commit queued behind it are undone in memory and
each of their callers gets the error, so the model again matches the file. Outside
an event loop, ``with store.transaction() as txn:`` writes on the calling thread.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, overload

from corral import CONFIG_SCHEMA_VERSION
from corral.config import invariants
from corral.config.codec import encode
from corral.config.model import Change, Model
from corral.config.relations import LABELS, check_kind
from corral.config.storage import Commit, Database, RawRow, Row, sidecar_files
from corral.config.transaction import Transaction
from corral.config.upgrade import Upgraded, upgrade
from corral.errors import (
    ClusterExistsError,
    ConfigStoreError,
    ConfigurationError,
    InternalError,
    NotFoundError,
)
from corral.objects import (
    Cluster,
    ConfigObject,
    Disk,
    FilterRule,
    Instance,
    Network,
    Node,
    NodeGroup,
)
from corral.utils.files import fsync_dir
from corral.utils.gcpause import collector_paused
from corral.utils.groupcommit import GroupWriter

__all__ = ["CommitListener", "ConfigStore"]

#: Called after every commit with the new serial, the rows written and the UUIDs
#: deleted (what a replica needs to follow).
CommitListener = Callable[[int, Sequence[Row], Sequence[str]], None]


@dataclass(frozen=True, slots=True)
class _Staged:
    """A commit installed in the model whose write is not durable yet."""

    commit: Commit
    changes: Mapping[str, Change]


class ConfigStore:
    """The cluster configuration: objects in memory, persisted in SQLite.

    Create one with :meth:`create` (``gnt-cluster init``) or :meth:`open`.
    """

    def __init__(self, path: Path, db: Database, model: Model, serial: int) -> None:
        #: The SQLite file.
        self.path = path
        self._db: Database | None = db
        self._model = model
        #: The serial on disk.
        self._serial = serial
        #: The serial of the model: ahead of ``_serial`` by the commits in ``_staged``.
        self._head = serial
        self._staged: list[_Staged] = []
        self._listeners: list[CommitListener] = []
        self._writer: GroupWriter[list[_Staged], list[_Staged]] = GroupWriter(
            "configstore", new_payload=list, prepare=list, write=self._write_group,
            durable=self._durable, failed=self._undo, chained=True,
        )

    # -- life cycle ----------------------------------------------------------
    @classmethod
    def create(cls, path: Path, cluster: Cluster, nodegroup: NodeGroup, node: Node) -> ConfigStore:
        """Create a new store holding ``cluster``, its first ``nodegroup`` and ``node``.

        Raises :class:`ClusterExistsError`, touching nothing, if ``path`` exists.
        The file appears complete or not at all: it is built under a temporary name
        and linked into place.
        """
        path = Path(path)
        if path.exists() or path.is_symlink():
            raise ClusterExistsError(
                f"a cluster configuration already exists at {path}; nothing was changed"
            )
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            db = Database.create(tmp, CONFIG_SCHEMA_VERSION)
            store = cls(tmp, db, Model(), 0)
            try:
                with store.transaction() as txn:
                    txn.add(nodegroup)
                    txn.add(node)
                    txn.add(cluster)
                db.checkpoint()
            finally:
                store.close()
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise ClusterExistsError(
                    f"a cluster configuration already exists at {path}; nothing was changed"
                ) from None
            except OSError as err:
                raise ConfigStoreError(
                    f"configuration store {path}: cannot create: {err.strerror or err}"
                ) from None
            fsync_dir(path.parent)
        finally:
            for leftover in (tmp, *sidecar_files(tmp)):
                leftover.unlink(missing_ok=True)
        return cls.open(path)

    @classmethod
    def open(cls, path: Path) -> ConfigStore:
        """Open the store at ``path``, upgrading older formats in place.

        Raises :class:`ConfigStoreError` naming the file if it is missing,
        unreadable, corrupt, inconsistent or written by a newer corral.
        """
        path = Path(path)
        # Loading builds tens of thousands of long-lived objects; the cyclic garbage
        # collector would rescan them over and over (half the time at 10,000 instances).
        with collector_paused():
            return cls._load(path)

    @classmethod
    def _load(cls, path: Path) -> ConfigStore:
        db = Database.open(path)
        try:
            version = check_schema_version(path, db.schema_version())
            serial = db.serial()
            model, result = build_model(path, db.rows())
            db.prepare_writes()
            if version < CONFIG_SCHEMA_VERSION:
                serial += 1
                db.rebuild(CONFIG_SCHEMA_VERSION, serial, [
                    _row(kind, obj) for kind, obj in result.objects.values()
                ])
            elif result.changed or result.stale_rows:
                db.write(serial, serial + 1, [
                    _row(*result.objects[uuid]) for uuid in sorted(result.changed)
                ], result.stale_rows)
                serial += 1
        except BaseException:
            db.close()
            raise
        return cls(path, db, model, serial)

    def close(self) -> None:
        """Close the file; the store cannot be used afterwards.

        A write under way on the writer thread finishes first; call :meth:`drain`
        before, on the event loop, to wait for every requested commit.
        """
        self._writer.shutdown()
        if self._db is not None:
            self._db.close()
            self._db = None

    async def drain(self) -> None:
        """Wait until every commit requested so far is durable (or has failed)."""
        await self._writer.drain()

    def __enter__(self) -> ConfigStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- reading -------------------------------------------------------------
    @property
    def serial(self) -> int:
        """The cluster configuration serial on disk: bumped by one by every commit."""
        return self._serial

    @property
    def cluster(self) -> Cluster:
        """The cluster object (shared: do not mutate)."""
        for obj in self._model.objects["cluster"].values():
            assert isinstance(obj, Cluster)
            return obj
        raise InternalError("the configuration has no cluster object")

    @property
    def master_name(self) -> str:
        """The master node's name."""
        return self.get("node", self.cluster.master_node).name

    @overload
    def find(self, kind: Literal["cluster"], key: str) -> Cluster | None: ...
    @overload
    def find(self, kind: Literal["nodegroup"], key: str) -> NodeGroup | None: ...
    @overload
    def find(self, kind: Literal["node"], key: str) -> Node | None: ...
    @overload
    def find(self, kind: Literal["disk"], key: str) -> Disk | None: ...
    @overload
    def find(self, kind: Literal["instance"], key: str) -> Instance | None: ...
    @overload
    def find(self, kind: Literal["filter"], key: str) -> FilterRule | None: ...
    @overload
    def find(self, kind: Literal["network"], key: str) -> Network | None: ...
    @overload
    def find(self, kind: str, key: str) -> ConfigObject | None: ...

    def find(self, kind: str, key: str) -> ConfigObject | None:
        """The object of ``kind`` whose UUID or name is ``key``, or None (shared: do not mutate)."""
        check_kind(kind)
        return self._model.lookup(kind, key)

    @overload
    def get(self, kind: Literal["cluster"], key: str) -> Cluster: ...
    @overload
    def get(self, kind: Literal["nodegroup"], key: str) -> NodeGroup: ...
    @overload
    def get(self, kind: Literal["node"], key: str) -> Node: ...
    @overload
    def get(self, kind: Literal["disk"], key: str) -> Disk: ...
    @overload
    def get(self, kind: Literal["instance"], key: str) -> Instance: ...
    @overload
    def get(self, kind: Literal["filter"], key: str) -> FilterRule: ...
    @overload
    def get(self, kind: Literal["network"], key: str) -> Network: ...
    @overload
    def get(self, kind: str, key: str) -> ConfigObject: ...

    def get(self, kind: str, key: str) -> ConfigObject:
        """Like :meth:`find` but raises :class:`NotFoundError` naming kind and key."""
        found = self.find(kind, key)
        if found is None:
            raise NotFoundError(f"{LABELS[kind]} '{key}' does not exist")
        return found

    @overload
    def all(self, kind: Literal["cluster"]) -> list[Cluster]: ...
    @overload
    def all(self, kind: Literal["nodegroup"]) -> list[NodeGroup]: ...
    @overload
    def all(self, kind: Literal["node"]) -> list[Node]: ...
    @overload
    def all(self, kind: Literal["disk"]) -> list[Disk]: ...
    @overload
    def all(self, kind: Literal["instance"]) -> list[Instance]: ...
    @overload
    def all(self, kind: Literal["filter"]) -> list[FilterRule]: ...
    @overload
    def all(self, kind: Literal["network"]) -> list[Network]: ...
    @overload
    def all(self, kind: str) -> list[Any]: ...

    def all(self, kind: str) -> list[Any]:
        """Every object of ``kind`` sorted by name (by UUID when unnamed); shared objects."""
        check_kind(kind)
        return self._model.sorted(kind)

    def count(self, kind: str) -> int:
        """How many objects of ``kind`` there are."""
        check_kind(kind)
        return len(self._model.objects[kind])

    def rows(self) -> list[Row]:
        """Every object as the row the store keeps of it: a full snapshot at
        :attr:`serial` (without commits still being written), as a replica is
        seeded with."""
        durable: dict[str, Change] = {}
        for staged in self._staged:
            for uuid, change in staged.changes.items():
                durable.setdefault(uuid, change)
        rows = [_row(kind, obj) for kind, objects in self._model.objects.items()
                for obj in objects.values() if obj.uuid not in durable]
        rows.extend(_row(change.kind, change.old) for change in durable.values()
                    if change.old is not None)
        return rows

    # -- changing ------------------------------------------------------------
    def add_listener(self, listener: CommitListener) -> None:
        """Call ``listener`` after every commit (from the committing code, once the
        commit is durable); it must not raise and must not commit."""
        self._listeners.append(listener)

    def transaction(self) -> Transaction:
        """A new transaction; use it as ``async with store.transaction() as txn:`` on
        an event loop, ``with store.transaction() as txn:`` elsewhere.

        It commits when the block ends normally and discards its changes when the
        block raises.
        """
        self._database()
        return Transaction(self)

    def _database(self) -> Database:
        if self._db is None:
            raise InternalError(f"configuration store {self.path} is closed")
        return self._db

    def _install(self, changes: Mapping[str, Change], rows: Sequence[Row]) -> int:
        """Persist checked changes on this thread, then apply them to the model; the
        new serial."""
        if self._writer.busy:
            raise InternalError(
                f"configuration store {self.path}: a blocking commit while commits are "
                "being written; commit with 'async with store.transaction()'"
            )
        deletes = [uuid for uuid, change in changes.items() if change.new is None]
        new_serial = self._serial + 1
        self._database().write(self._serial, new_serial, rows, deletes)
        self._model.apply(changes)
        self._serial = self._head = new_serial
        for listener in self._listeners:
            listener(new_serial, rows, deletes)
        return new_serial

    def _stage(self, changes: Mapping[str, Change], rows: Sequence[Row]
               ) -> tuple[int, asyncio.Future[None]]:
        """Apply checked changes to the model and queue their write; the new serial and
        the future of its durable write (see the module's docstring)."""
        self._database()
        deletes = [uuid for uuid, change in changes.items() if change.new is None]
        staged = _Staged(Commit(self._head + 1, rows, deletes), changes)
        batch, future = self._writer.request()
        self._model.apply(changes)
        self._head = staged.commit.serial
        self._staged.append(staged)
        batch.append(staged)
        return self._head, future

    def _write_group(self, group: list[_Staged]) -> None:
        """On the writer thread: the group's commits in one SQLite transaction."""
        self._database().write_group(group[0].commit.serial - 1, [s.commit for s in group])

    def _durable(self, group: list[_Staged], _written: list[_Staged]) -> None:
        del self._staged[:len(group)]
        self._serial = group[-1].commit.serial
        for staged in group:
            commit = staged.commit
            for listener in self._listeners:
                listener(commit.serial, commit.upserts, commit.deletes)

    def _undo(self, group: list[_Staged], err: BaseException) -> BaseException:
        """A group's write failed: take every commit not on disk out of the model again
        (newest first) and tell the callers."""
        for staged in reversed(self._staged):
            self._model.apply({uuid: Change(change.kind, change.new, change.old)
                               for uuid, change in staged.changes.items()})
        self._staged.clear()
        self._head = self._serial
        reason = err.message if isinstance(err, ConfigStoreError) else (
            f"configuration store {self.path}: cannot commit: {err}")
        return ConfigStoreError(
            f"{reason}; nothing of this commit (serial {group[0].commit.serial}) or any "
            f"later one was kept: the configuration stays at serial {self._serial}"
        )


def check_schema_version(path: Path, version: int) -> int:
    """``version``, unless the store at ``path`` was written by a newer corral."""
    if version > CONFIG_SCHEMA_VERSION:
        raise ConfigStoreError(
            f"configuration store {path} has schema version {version}, newer than version "
            f"{CONFIG_SCHEMA_VERSION} which this corral understands; upgrade corral"
        )
    return version


def build_model(path: Path, rows: list[RawRow]) -> tuple[Model, Upgraded]:
    """The model of the rows read from the store at ``path``, upgraded (in memory) and
    with every invariant checked; also what the upgrade changed."""
    result = upgrade(path, rows)
    changes = {uuid: Change(kind, None, obj) for uuid, (kind, obj) in result.objects.items()}
    model = Model()
    try:
        invariants.check(model, changes)
    except ConfigurationError as err:
        raise ConfigStoreError(
            f"configuration store {path}: the configuration is inconsistent: {err}"
        ) from None
    model.apply(changes)
    return model, result


def _row(kind: str, obj: ConfigObject) -> Row:
    return Row(kind, obj.uuid, obj.serial_no, encode(obj))


