"""The master daemon's placement service: the engine, its rows in the configuration,
and the ``Placement`` luxi call that runs one ``/placement/`` REST request.

The configuration rows are the truth (:mod:`corral.placement.saved`): the engine is
built from them at start, and a request that changed something is answered only once
the rows of what it changed are committed (so replicated to the master candidates
like every commit, and found again after a failover). A commit that fails, or a
request that fails after changing part of the engine (the reshaper), rebuilds the
engine from the rows, so engine and rows never disagree: the change is either
committed and applied or refused with nothing changed.

Derived data: when a :class:`Derived` is given (the cluster's nodes and instances,
:mod:`corral.masterd.placement_sync`), the engine is built from it first and the saved
rows are added on top (a saved consumer may hold allocations on a node's provider),
and only what it says is REST data is ever written as rows.

Reads (``GET``, ``HEAD``) run in worker threads, off the event loop, so an unlimited
allocation-candidates query over thousands of providers never stalls the master's
other work; several reads run at once. A change runs alone: it waits for the running
reads, and no read starts until it is committed (or refused and rolled back), so a
read never sees a change that is not committed. One shared/exclusive lock
(:class:`~corral.locking.shared.SharedLock`) orders them; code that changes the engine
outside a request (the cluster's sync) holds it exclusively with ``async with
service.lock`` (and must not make a request meanwhile).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, Final, Protocol

import msgspec

from corral import serializer
from corral.config import ConfigStore
from corral.errors import InternalError
from corral.locking.shared import SharedLock
from corral.luxi import calls
from corral.objects.model import PlacementProvider
from corral.placement.model import PlacementStore
from corral.placement.rest import Changes, PlacementRequest, PlacementResponse, handle
from corral.placement.saved import Restored, restore, rows_for

__all__ = ["Derived", "EngineLock", "PlacementService"]

log = logging.getLogger(__name__)

#: Methods that never change the engine: run in worker threads, several at once.
READ_METHODS: Final = frozenset({"GET", "HEAD"})
#: Worker threads for reads: as many as the machines have cores (two). More only
#: share the GIL, and each one more makes the event loop wait longer to get it back.
READERS: Final = 2


class EngineLock:
    """The engine's shared/exclusive lock. ``async with`` holds it exclusively (in the
    current task): no read runs and no other change, for code that changes the engine
    outside a request. Requests take it themselves (:meth:`PlacementService.call`)."""

    def __init__(self) -> None:
        self.shared = SharedLock("placement")

    async def __aenter__(self) -> None:
        await self.shared.acquire()

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        self.shared.release()


class Derived(Protocol):
    """Data the engine shows without keeping it as rows (the cluster's)."""

    def build(self, engine: PlacementStore) -> None:
        """Put the derived data into a fresh engine (before the saved rows)."""

    def saved(self, changes: Changes) -> Changes:
        """The part of ``changes`` that is saved data (rows to write)."""


class PlacementService:
    """The placement engine of the cluster, kept in step with its rows."""

    def __init__(self, config: ConfigStore, derived: Derived | None = None, *,
                 readers: int = READERS) -> None:
        self.config = config
        self.derived = derived
        #: Held exclusively while the engine is changed outside a request.
        self.lock = EngineLock()
        self._readers = ThreadPoolExecutor(readers, thread_name_prefix="placement-read")
        #: Saved rows not in the engine yet (:meth:`restore_left`).
        self.left = Restored()
        self.engine = self._load()

    def _load(self) -> PlacementStore:
        providers = self.config.all("placement_provider")
        self._next_order = max((p.order for p in providers), default=-1) + 1
        engine = PlacementStore()
        if self.derived is not None:
            self.derived.build(engine)
        consumers = self.config.all("placement_consumer")
        self.left = restore(engine, providers, consumers, self.config.all("placement_name"))
        log.info("placement: %d saved provider(s), %d saved consumer(s) loaded",
                 len(providers) - len(self.left.providers),
                 len(consumers) - len(self.left.consumers))
        self._report_left()
        return engine

    def restore_left(self) -> None:
        """Add the saved rows that could not be restored before (their node's provider
        had no inventories yet) once the derived data changed."""
        if not (self.left.providers or self.left.consumers):
            return
        before = len(self.left.providers) + len(self.left.consumers)
        # one a client wrote anew meanwhile is the engine's (and its row) now
        self.left = restore(
            self.engine, [r for r in self.left.providers
                          if self.engine.slot_of(r.uuid) is None],
            [r for r in self.left.consumers if self.engine.consumer(r.uuid) is None], ())
        if len(self.left.providers) + len(self.left.consumers) < before:
            self._report_left()

    def _report_left(self) -> None:
        if self.left.providers or self.left.consumers:
            log.warning("placement: %d saved provider(s) and %d consumer(s) wait for the "
                        "providers or inventories they name: %s", len(self.left.providers),
                        len(self.left.consumers), ", ".join(
                            [r.uuid for r in self.left.providers]
                            + [r.uuid for r in self.left.consumers]))

    async def call(self, args: calls.Placement, *, encoded: bool = False) -> dict[str, Any]:
        """Run one REST request; its answer as ``{"status", "headers", "body"}``.

        ``encoded`` (the luxi method): the body comes as a :class:`msgspec.Raw` of its
        JSON string, encoded in the read's worker thread, so that the luxi answer of a
        multi-megabyte body costs the event loop a copy, not an encoding."""
        req = PlacementRequest(args.method, args.path, args.query, args.version_header,
                               args.body, args.content_type, args.user, args.read_only,
                               args.prefix, args.accept)
        if args.method in READ_METHODS:
            return await self._read(req, encoded)
        async with self.lock:
            response, changes = handle(self.engine, req)
            if changes:
                if response.status >= 400:
                    log.info("placement: %s %s failed after a partial change; reloading "
                             "the engine from the configuration", args.method, args.path)
                    self.engine = self._load()
                else:
                    try:
                        await self._persist(changes)
                    except BaseException:
                        self.engine = self._load()
                        raise
            return _wire(response, encoded)

    async def _read(self, req: PlacementRequest, encoded: bool) -> dict[str, Any]:
        """A read in a worker thread, holding the lock shared until the thread is done
        (also when the caller is cancelled: no change may start under a running read)."""
        owner = object()
        await self.lock.shared.acquire(shared=True, owner=owner)
        try:
            running = asyncio.get_running_loop().run_in_executor(
                self._readers, _answer, self.engine, req, encoded)
        except BaseException:
            self.lock.shared.release(owner=owner)
            raise

        def done(finished: asyncio.Future[dict[str, Any]]) -> None:
            self.lock.shared.release(owner=owner)
            if not finished.cancelled():
                finished.exception()  # retrieved here when the caller was cancelled

        running.add_done_callback(done)
        return await asyncio.shield(running)

    def _order_of(self, rp_uuid: str) -> int | None:
        row = self.config.find("placement_provider", rp_uuid)
        return row.order if isinstance(row, PlacementProvider) else None

    async def _persist(self, changes: Changes) -> None:
        if self.derived is not None:
            changes = self.derived.saved(changes)
        if not changes:
            return
        async with self.config.transaction() as txn:
            rows = rows_for(self.engine, providers=changes.providers,
                            consumers=changes.consumers,
                            resource_classes=changes.resource_classes,
                            traits=changes.traits, order_of=self._order_of,
                            next_order=self._next_order)
            for obj in rows.put:
                if isinstance(obj, PlacementProvider):
                    self._next_order = max(self._next_order, obj.order + 1)
                existing = self.config.find(obj.KIND, obj.uuid)
                if existing is None:
                    txn.add(obj)
                else:
                    obj.serial_no, obj.ctime = existing.serial_no, existing.ctime
                    txn.update(obj)
            for kind, uuid in rows.delete:
                if self.config.find(kind, uuid) is not None:
                    txn.remove(kind, uuid)

    async def save(self, changes: Changes) -> None:
        """Commit the rows of what changed in the engine outside a REST request (what
        the cluster's sync changed of saved data); when that fails, the engine is
        rebuilt."""
        try:
            await self._persist(changes)
        except BaseException:
            self.engine = self._load()
            raise

    def check(self) -> None:
        """Raise :class:`InternalError` when the engine and the rows disagree (tests)."""
        engine, left = self.engine, self.left
        fresh = self._load()
        self.left = left
        mine = [(p.uuid, p.name, p.generation, p.parent_uuid)
                for p in engine.providers()]
        theirs = [(p.uuid, p.name, p.generation, p.parent_uuid) for p in fresh.providers()]
        if sorted(mine) != sorted(theirs):
            raise InternalError(f"placement engine and rows disagree: {mine} != {theirs}")


def _wire(response: PlacementResponse, encoded: bool) -> dict[str, Any]:
    answer = response.to_wire()
    if encoded:
        answer["body"] = msgspec.Raw(serializer.dumps(answer["body"]))
    return answer


def _answer(engine: PlacementStore, req: PlacementRequest, encoded: bool) -> dict[str, Any]:
    """A read's answer (in a worker thread)."""
    response, changes = handle(engine, req)
    if changes:
        raise InternalError(f"placement: {req.method} {req.path} changed the engine")
    return _wire(response, encoded)
