"""The monitoring daemon's HTTP API: Ganeti's (protocol version 1), plus ``/metrics``.

``GET /`` answers the protocol versions (``[1]``), ``/1`` ``null``,
``/1/list/collectors`` the collectors as ``[name, category, kind]`` (``default`` for
no category), ``/1/report/all`` every collector's report and
``/1/report/<category>/<name>`` one (``?verbose=1`` is accepted; every report is
complete already). An unknown report is 404 ``Unable to produce a report for the
requested resource``, any other unknown path 404 ``Resource not found``, as Ganeti's
daemon answers. ``GET /metrics`` is the node's Prometheus metrics
(:mod:`corral.mond.metrics`).

Reports are computed on request, off the event loop where they read files or run
LVM's tools, and kept for :data:`CACHE_SECONDS` (``mond.json``'s ``cache``) so that
many monitoring systems polling at once cost one collection. A collector that fails
answers 500 naming it (and the failure is logged), never the whole daemon.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from aiohttp import web
from msgspec.json import encode as dumps

from corral.errors import unexpected
from corral.mond.collectors import Collector, report
from corral.mond.metrics import CONTENT_TYPE, node_metrics
from corral.paths import Paths

__all__ = ["API_VERSION", "CACHE_SECONDS", "MondApp"]

log = logging.getLogger("corral.mond")

#: The protocol version served (Ganeti's latest: 1).
API_VERSION = 1
#: How long a report is reused.
CACHE_SECONDS = 1.0

_NO_REPORT = "Unable to produce a report for the requested resource"
_NOT_FOUND = "Resource not found"


def _json(data: Any) -> web.Response:
    return web.Response(body=dumps(data), content_type="application/json")


class MondApp:
    """The API over a list of collectors."""

    def __init__(self, paths: Paths, collectors: list[Collector], *,
                 cache_seconds: float = CACHE_SECONDS) -> None:
        self.paths = paths
        self.collectors = collectors
        self.cache_seconds = cache_seconds
        self._cache: dict[str, tuple[float, dict[str, Any]]] = {}

    def application(self) -> web.Application:
        """The aiohttp application."""
        app = web.Application()
        app.router.add_get("/", self._versions)
        app.router.add_get("/1", self._null)
        app.router.add_get("/1/list/collectors", self._list)
        app.router.add_get("/1/report/all", self._all)
        app.router.add_get("/1/report/{category}/{name}", self._one)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_route("*", "/1/report/{tail:.*}", self._no_report)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        return app

    async def collect(self, collector: Collector) -> dict[str, Any]:
        """The collector's report, fresh or at most ``cache_seconds`` old."""
        cached = self._cache.get(collector.name)
        now = time.monotonic()
        if cached is not None and now - cached[0] < self.cache_seconds:
            return cached[1]
        result = await report(collector)
        self._cache[collector.name] = (now, result)
        return result

    async def _safe_collect(self, collector: Collector) -> dict[str, Any]:
        try:
            return await self.collect(collector)
        except Exception as err:
            incident = unexpected(err, log, f"collector {collector.name}", "corral-mond")
            raise web.HTTPInternalServerError(
                text=f"collector {collector.name} failed: {incident.message}") from None

    async def _versions(self, request: web.Request) -> web.Response:
        return _json([API_VERSION])

    async def _null(self, request: web.Request) -> web.Response:
        return _json(None)

    async def _list(self, request: web.Request) -> web.Response:
        return _json([[c.name, c.category_name, c.kind] for c in self.collectors])

    async def _all(self, request: web.Request) -> web.Response:
        return _json([await self._safe_collect(c) for c in self.collectors])

    async def _one(self, request: web.Request) -> web.Response:
        category, name = request.match_info["category"], request.match_info["name"]
        for collector in self.collectors:
            if collector.name == name and collector.category_name == category:
                return _json(await self._safe_collect(collector))
        return await self._no_report(request)

    async def _metrics(self, request: web.Request) -> web.Response:
        body = await node_metrics(self.paths)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    async def _no_report(self, request: web.Request) -> web.Response:
        return web.Response(status=404, text=_NO_REPORT)

    async def _not_found(self, request: web.Request) -> web.Response:
        return web.Response(status=404, text=_NOT_FOUND)
