"""Transactions: staged changes that are checked, then committed all at once.

A transaction collects additions, updates and removals. :meth:`Transaction.commit`
stamps the changed objects (``serial_no`` + 1 and ``mtime`` now; added objects get
``serial_no`` 1 and ``ctime = mtime = now``), checks the invariants against the
model's indexes, writes the rows in one SQLite transaction and only then installs
the objects in memory. If anything fails, nothing is written and the model is
unchanged. Updates are optimistic: an object whose ``serial_no`` is not the stored
one was changed since it was read and is refused with :class:`SerialConflictError`.

Only the objects a transaction touches are copied, encoded and checked.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Literal, overload

import msgspec

from corral.config import codec, invariants
from corral.config.model import Change
from corral.config.relations import LABELS, check_kind, describe, name_of
from corral.config.storage import Row
from corral.errors import (
    AlreadyExistsError,
    ConfigurationError,
    InternalError,
    NotFoundError,
    ParameterError,
    SerialConflictError,
)
from corral.objects import (
    KINDS,
    Cluster,
    ConfigObject,
    Disk,
    FilterRule,
    Instance,
    Network,
    Node,
    NodeGroup,
)

if TYPE_CHECKING:
    from corral.config.store import ConfigStore

__all__ = ["Transaction"]

_CLASS_KINDS: dict[type[ConfigObject], str] = {cls: kind for kind, cls in KINDS.items()}


def _kind_of(obj: ConfigObject) -> str:
    kind = _CLASS_KINDS.get(type(obj))
    if kind is None:
        raise ParameterError(
            f"a {type(obj).__name__} is not a configuration object kind the store keeps"
        )
    return kind


@dataclass(slots=True)
class _Staged:
    kind: str
    #: The object as the commit will store it; None when removed.
    obj: ConfigObject | None
    #: Added by this transaction (not in the model).
    added: bool


class Transaction:
    """A set of changes to the configuration, committed atomically.

    Use as ``async with store.transaction() as txn:`` on an event loop (the write
    then runs off the loop and the block ends once it is durable, see
    :mod:`corral.config.store`) or ``with store.transaction() as txn:`` elsewhere;
    the block commits when it ends normally and discards everything when it raises.
    Objects passed to :meth:`add` and :meth:`update` belong to the transaction until it ends; after
    a successful commit their ``serial_no``, ``ctime`` and ``mtime`` are set to the
    stored values, so they can be updated again in a later transaction.
    """

    def __init__(self, store: ConfigStore) -> None:
        self._store = store
        self._staged: dict[str, _Staged] = {}
        #: uuid -> serial_no the caller's update was based on.
        self._expected: dict[str, int] = {}
        self._state: Literal["open", "committed", "discarded"] = "open"

    # -- context manager -----------------------------------------------------
    def __enter__(self) -> Transaction:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            if self._state == "open":
                self.commit()
        else:
            self.discard()

    async def __aenter__(self) -> Transaction:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            if self._state == "open":
                await self.commit_async()
        else:
            self.discard()

    def discard(self) -> None:
        """Drop every staged change; the transaction cannot be used afterwards."""
        if self._state == "open":
            self._staged.clear()
            self._state = "discarded"

    def _check_open(self) -> None:
        if self._state != "open":
            raise InternalError(f"the configuration transaction was already {self._state}")

    # -- the transaction's view ----------------------------------------------
    def _lookup(self, kind: str, key: str) -> ConfigObject | None:
        """``kind``/``key`` (UUID or name) as this transaction sees it."""
        check_kind(kind)
        model = self._store._model
        staged = self._staged.get(key)
        if staged is not None and staged.kind == kind:
            return staged.obj
        if staged is None:
            found = model.objects[kind].get(key)
            if found is not None:
                return found
        for entry in self._staged.values():
            if entry.kind == kind and entry.obj is not None and name_of(entry.obj) == key:
                return entry.obj
        found = model.lookup(kind, key)
        if found is not None and found.uuid not in self._staged:
            return found
        return None

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
        """A private deep copy of ``kind``/``key`` (UUID or name) to change and pass to
        :meth:`update`; it includes this transaction's changes so far.

        Raises :class:`NotFoundError` naming the kind and key.
        """
        self._check_open()
        found = self._lookup(kind, key)
        if found is None:
            raise NotFoundError(f"{LABELS[kind]} '{key}' does not exist")
        return codec.clone(kind, found)

    def cluster(self) -> Cluster:
        """A private copy of the cluster object."""
        self._check_open()
        for uuid in self._store._model.objects["cluster"]:
            cluster = self.get("cluster", uuid)
            assert isinstance(cluster, Cluster)
            return cluster
        raise InternalError("the configuration has no cluster object")

    # -- staging -------------------------------------------------------------
    def add(self, obj: ConfigObject) -> None:
        """Stage a new object; its uuid must not be in use by any object."""
        self._check_open()
        kind = _kind_of(obj)
        model = self._store._model
        if obj.uuid in self._staged or obj.uuid in model.kind_of:
            staged = self._staged.get(obj.uuid)
            holder = model.get_any(obj.uuid) if staged is None else staged.obj
            kind_held = model.kind_of[obj.uuid] if staged is None else staged.kind
            what = (describe(kind_held, holder) if holder is not None
                    else "an object removed in this transaction")
            raise AlreadyExistsError(
                f"cannot add {describe(kind, obj)}: uuid {obj.uuid} is already used by {what}"
            )
        self._staged[obj.uuid] = _Staged(kind, obj, added=True)

    def update(self, obj: ConfigObject) -> None:
        """Stage a changed object (a copy from :meth:`get`).

        Raises :class:`SerialConflictError` if the object changed since it was read.
        """
        self._check_open()
        kind = _kind_of(obj)
        model = self._store._model
        staged = self._staged.get(obj.uuid)
        if staged is not None:
            current, current_kind = staged.obj, staged.kind
        else:
            current = model.get_any(obj.uuid)
            current_kind = model.kind_of.get(obj.uuid, kind)
        if current is None:
            raise NotFoundError(f"cannot update {describe(kind, obj)}: it does not exist")
        if current_kind != kind:
            raise ConfigurationError(
                f"cannot update {describe(kind, obj)}: uuid {obj.uuid} belongs to "
                f"{describe(current_kind, current)}"
            )
        if obj is model.get_any(obj.uuid):
            raise InternalError(
                f"{describe(kind, obj)}: update() needs a private copy from Transaction.get(); "
                "objects read from the store are shared and must not be changed"
            )
        if obj.serial_no != current.serial_no:
            raise SerialConflictError(
                f"{describe(kind, current)} was changed since it was read (serial "
                f"{obj.serial_no}, now {current.serial_no}); read it again and retry"
            )
        if staged is None:
            self._expected[obj.uuid] = current.serial_no
        self._staged[obj.uuid] = _Staged(kind, obj, added=staged.added if staged else False)

    def remove(self, kind: str, key: str) -> None:
        """Stage the removal of ``kind``/``key`` (UUID or name)."""
        self._check_open()
        found = self._lookup(kind, key)
        if found is None:
            raise NotFoundError(f"cannot remove {LABELS[kind]} '{key}': it does not exist")
        if kind == "cluster":
            raise ConfigurationError("the cluster object cannot be removed")
        staged = self._staged.get(found.uuid)
        if staged is not None and staged.added:
            del self._staged[found.uuid]
        else:
            self._staged[found.uuid] = _Staged(kind, None, added=False)

    # -- committing ----------------------------------------------------------
    def commit(self) -> int:
        """Check and write every staged change on this thread; return the new
        configuration serial.

        A transaction without changes writes nothing and returns the current serial.
        On error nothing is written, the model is unchanged and the transaction
        stays open (it may be fixed and committed again, or discarded).
        """
        prepared = self._prepare()
        if prepared is None:
            return self._store.serial
        changes, rows = prepared
        serial = self._store._install(changes, rows)
        self._committed(changes)
        return serial

    async def commit_async(self) -> int:
        """Like :meth:`commit`, but the write runs on the store's writer thread, grouped
        with other commits, and this returns once it is durable.

        The changes are checked and installed in the model at once. If the write
        fails, they are taken out of the model again, the transaction is discarded
        and :class:`ConfigStoreError` says so. A caller cancelled while it waits
        leaves the write to finish (or fail and be undone) on its own.
        """
        prepared = self._prepare()
        if prepared is None:
            return self._store.serial
        changes, rows = prepared
        serial, durable = self._store._stage(changes, rows)
        self._state = "committed"
        try:
            await asyncio.shield(durable)  # shared with the other commits of its group
        except BaseException:
            self._state = "discarded"
            raise
        self._committed(changes)
        return serial

    def _prepare(self) -> tuple[dict[str, Change], list[Row]] | None:
        """The checked changes and rows to write; None when nothing changed."""
        self._check_open()
        store = self._store
        store._database()
        if not self._staged:
            self._state = "committed"
            return None
        now = time.time()
        changes: dict[str, Change] = {}
        rows: list[Row] = []
        for uuid, staged in self._staged.items():
            old = None if staged.added else self._based_on(uuid, staged.kind)
            if staged.obj is None:
                changes[uuid] = Change(staged.kind, old, None)
                continue
            stamped = msgspec.structs.replace(
                staged.obj,
                serial_no=old.serial_no + 1 if old is not None else 1,
                ctime=old.ctime if old is not None else now,
                mtime=now,
            )
            data = codec.encode(stamped)
            try:
                fresh = codec.decode(staged.kind, data)
            except msgspec.ValidationError as err:
                raise ConfigurationError(
                    f"{describe(staged.kind, staged.obj)}: invalid value: {err}"
                ) from None
            changes[uuid] = Change(staged.kind, old, fresh)
            rows.append(Row(staged.kind, uuid, fresh.serial_no, data))
        invariants.check(store._model, changes)
        return changes, rows

    def _committed(self, changes: dict[str, Change]) -> None:
        """Give the caller's objects the stored serials and times."""
        for uuid, staged in self._staged.items():
            stored = changes[uuid].new
            if staged.obj is not None and stored is not None:
                staged.obj.serial_no = stored.serial_no
                staged.obj.ctime = stored.ctime
                staged.obj.mtime = stored.mtime
        self._state = "committed"

    def _based_on(self, uuid: str, kind: str) -> ConfigObject:
        """The stored object an update or removal applies to, checking its serial."""
        current = self._store._model.objects[kind].get(uuid)
        if current is None:
            raise SerialConflictError(
                f"{LABELS[kind]} {uuid} was removed since it was read; read it again and retry"
            )
        expected = self._expected.get(uuid)
        if expected is not None and current.serial_no != expected:
            raise SerialConflictError(
                f"{describe(kind, current)} was changed since it was read (serial {expected}, "
                f"now {current.serial_no}); read it again and retry"
            )
        return current
