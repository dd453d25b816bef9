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
and only what it says is REST data is ever written as rows. ``lock`` is held by
whoever changes the engine outside a request (the cluster's sync) and around each
request (:meth:`corral.masterd.methods.MasterMethods.placement`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from corral.config import ConfigStore
from corral.errors import InternalError
from corral.luxi import calls
from corral.objects.model import PlacementProvider
from corral.placement.model import PlacementStore
from corral.placement.rest import Changes, PlacementRequest, handle
from corral.placement.saved import Restored, restore, rows_for

__all__ = ["Derived", "PlacementService"]

log = logging.getLogger(__name__)


class Derived(Protocol):
    """Data the engine shows without keeping it as rows (the cluster's)."""

    def build(self, engine: PlacementStore) -> None:
        """Put the derived data into a fresh engine (before the saved rows)."""

    def saved(self, changes: Changes) -> Changes:
        """The part of ``changes`` that is saved data (rows to write)."""


class PlacementService:
    """The placement engine of the cluster, kept in step with its rows."""

    def __init__(self, config: ConfigStore, derived: Derived | None = None) -> None:
        self.config = config
        self.derived = derived
        #: Held while the engine is changed outside a request, and around requests.
        self.lock = asyncio.Lock()
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

    async def call(self, args: calls.Placement) -> dict[str, Any]:
        """Run one REST request; its answer as ``{"status", "headers", "body"}``."""
        req = PlacementRequest(args.method, args.path, args.query, args.version_header,
                               args.body, args.content_type, args.user, args.read_only,
                               args.prefix, args.accept)
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
        return response.to_wire()

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


