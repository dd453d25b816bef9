"""The master daemon's placement service: the engine, its rows in the configuration,
and the ``Placement`` luxi call that runs one ``/placement/`` REST request.

The configuration rows are the truth (:mod:`corral.placement.saved`): the engine is
built from them at start, and a request that changed something is answered only once
the rows of what it changed are committed (so replicated to the master candidates
like every commit, and found again after a failover). A commit that fails, or a
request that fails after changing part of the engine (the reshaper), rebuilds the
engine from the rows, so engine and rows never disagree: the change is either
committed and applied or refused with nothing changed.

Reads (``GET``, ``HEAD``) run in worker threads, off the event loop, so an unlimited
allocation-candidates query over thousands of providers never stalls the master's
other work; several reads run at once. A change runs alone: it waits for the running
reads, and no read starts until it is committed (or refused and rolled back), so a
read never sees a change that is not committed. The engine is guarded by one
shared/exclusive lock (:class:`~corral.locking.shared.SharedLock`); any other code that
changes the engine holds it exclusively (:meth:`PlacementService.exclusive`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import msgspec

from corral import serializer
from corral.config import ConfigStore
from corral.errors import InternalError
from corral.locking.shared import SharedLock
from corral.luxi import calls
from corral.objects.model import PlacementProvider
from corral.placement.model import PlacementStore
from corral.placement.rest import Changes, PlacementRequest, PlacementResponse, handle
from corral.placement.saved import load, rows_for

__all__ = ["PlacementService"]

log = logging.getLogger(__name__)

#: Methods that never change the engine: run in worker threads, several at once.
READ_METHODS: Final = frozenset({"GET", "HEAD"})
#: Worker threads for reads: as many as the machines have cores (two). More only
#: share the GIL, and each one more makes the event loop wait longer to get it back.
READERS: Final = 2


class PlacementService:
    """The placement engine of the cluster, kept in step with its rows."""

    def __init__(self, config: ConfigStore, *, readers: int = READERS) -> None:
        self.config = config
        self.engine = self._load()
        self._lock = SharedLock("placement")
        self._readers = ThreadPoolExecutor(readers, thread_name_prefix="placement-read")

    def _load(self) -> PlacementStore:
        providers = self.config.all("placement_provider")
        self._next_order = max((p.order for p in providers), default=-1) + 1
        engine = load(providers, self.config.all("placement_consumer"),
                      self.config.all("placement_name"))
        log.info("placement: %d provider(s), %d consumer(s) loaded", len(providers),
                 len(engine.consumers()))
        return engine

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
        async with self.exclusive():
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
        await self._lock.acquire(shared=True, owner=owner)
        try:
            running = asyncio.get_running_loop().run_in_executor(
                self._readers, _answer, self.engine, req, encoded)
        except BaseException:
            self._lock.release(owner=owner)
            raise

        def done(finished: asyncio.Future[dict[str, Any]]) -> None:
            self._lock.release(owner=owner)
            if not finished.cancelled():
                finished.exception()  # retrieved here when the caller was cancelled

        running.add_done_callback(done)
        return await asyncio.shield(running)

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[PlacementStore]:
        """Hold the engine alone (no read running, no other change): for code that
        changes it outside a REST request. Yields the engine."""
        owner = object()
        await self._lock.acquire(owner=owner)
        try:
            yield self.engine
        finally:
            self._lock.release(owner=owner)

    def _order_of(self, rp_uuid: str) -> int | None:
        row = self.config.find("placement_provider", rp_uuid)
        return row.order if isinstance(row, PlacementProvider) else None

    async def _persist(self, changes: Changes) -> None:
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

    def check(self) -> None:
        """Raise :class:`InternalError` when the engine and the rows disagree (tests)."""
        fresh = self._load()
        mine = [(p.uuid, p.name, p.generation, p.parent_uuid)
                for p in self.engine.providers()]
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
