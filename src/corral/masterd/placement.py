"""The master daemon's placement service: the engine, its rows in the configuration,
and the ``Placement`` luxi call that runs one ``/placement/`` REST request.

The configuration rows are the truth (:mod:`corral.placement.saved`): the engine is
built from them at start, and a request that changed something is answered only once
the rows of what it changed are committed (so replicated to the master candidates
like every commit, and found again after a failover). A commit that fails, or a
request that fails after changing part of the engine (the reshaper), rebuilds the
engine from the rows, so engine and rows never disagree: the change is either
committed and applied or refused with nothing changed.
"""

from __future__ import annotations

import logging
from typing import Any

from corral.config import ConfigStore
from corral.errors import InternalError
from corral.luxi import calls
from corral.objects.model import PlacementProvider
from corral.placement.model import PlacementStore
from corral.placement.rest import Changes, PlacementRequest, handle
from corral.placement.saved import load, rows_for

__all__ = ["PlacementService"]

log = logging.getLogger(__name__)


class PlacementService:
    """The placement engine of the cluster, kept in step with its rows."""

    def __init__(self, config: ConfigStore) -> None:
        self.config = config
        self.engine = self._load()

    def _load(self) -> PlacementStore:
        providers = self.config.all("placement_provider")
        self._next_order = max((p.order for p in providers), default=-1) + 1
        engine = load(providers, self.config.all("placement_consumer"),
                      self.config.all("placement_name"))
        log.info("placement: %d provider(s), %d consumer(s) loaded", len(providers),
                 len(engine.consumers()))
        return engine

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


