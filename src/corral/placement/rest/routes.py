"""The routing table of the ``/placement/`` API and the one entry point,
:func:`handle`: ``(store, request) -> (response, changes)``.

Each path maps methods to ``(first microversion, handler)``; a method asked at an
older microversion is 404 as in Placement (405 for ``DELETE .../inventories`` before
1.5), an unknown path 404, a method the path does not have 405 with ``Allow``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import formatdate
from typing import Final

from corral.errors import PlacementError
from corral.placement.model import PlacementStore
from corral.placement.rest import consumers, names, providers
from corral.placement.rest.context import Call
from corral.placement.rest.protocol import (
    JSON,
    REQUEST_ID_HEADER,
    Changes,
    HttpProblem,
    PlacementRequest,
    PlacementResponse,
    Version,
    accepts_json,
    error_response,
    negotiate,
    version_headers,
)

__all__ = ["ROUTES", "Route", "handle", "match"]

log = logging.getLogger(__name__)

Handler = Callable[[Call], PlacementResponse]

#: First microversion whose answers carry ``Cache-Control`` and ``Last-Modified``.
CACHE_HEADERS_VERSION: Final[Version] = (1, 15)


@dataclass(frozen=True)
class Served:
    """A method of a path: its handler, the first microversion that has it and the
    status an older microversion gets."""

    handler: Handler
    since: Version = (1, 0)
    too_old: int = 404


@dataclass(frozen=True)
class Route:
    """A path template (``{name}`` is one path segment) and its methods."""

    template: str
    methods: dict[str, Served]

    @property
    def pattern(self) -> re.Pattern[str]:
        """The template as a regular expression."""
        regex = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(self.template))
        return re.compile(f"^{regex}$")


_RP = "/resource_providers/{uuid}"
ROUTES: Final[tuple[Route, ...]] = (
    Route("", {"GET": Served(names.root)}),
    Route("/resource_classes", {
        "GET": Served(names.list_resource_classes, (1, 2)),
        "POST": Served(names.create_resource_class, (1, 2))}),
    Route("/resource_classes/{name}", {
        "GET": Served(names.get_resource_class, (1, 2)),
        "PUT": Served(names.update_resource_class, (1, 2)),
        "DELETE": Served(names.delete_resource_class, (1, 2))}),
    Route("/resource_providers", {
        "GET": Served(providers.list_providers),
        "POST": Served(providers.create_provider)}),
    Route(_RP, {
        "GET": Served(providers.get_provider),
        "DELETE": Served(providers.delete_provider),
        "PUT": Served(providers.update_provider)}),
    Route(f"{_RP}/inventories", {
        "GET": Served(providers.get_inventories),
        "POST": Served(providers.create_inventory),
        "PUT": Served(providers.set_inventories),
        "DELETE": Served(providers.delete_inventories, (1, 5), 405)}),
    Route(f"{_RP}/inventories/{{resource_class}}", {
        "GET": Served(providers.get_inventory),
        "PUT": Served(providers.update_inventory),
        "DELETE": Served(providers.delete_inventory)}),
    Route(f"{_RP}/usages", {"GET": Served(providers.provider_usages)}),
    Route(f"{_RP}/aggregates", {
        "GET": Served(providers.get_aggregates, (1, 1)),
        "PUT": Served(providers.set_aggregates, (1, 1))}),
    Route(f"{_RP}/allocations", {"GET": Served(providers.provider_allocations)}),
    Route(f"{_RP}/traits", {
        "GET": Served(providers.get_provider_traits, (1, 6)),
        "PUT": Served(providers.set_provider_traits, (1, 6)),
        "DELETE": Served(providers.delete_provider_traits, (1, 6))}),
    Route("/allocations", {"POST": Served(consumers.post_allocations, (1, 13))}),
    Route("/allocations/{consumer_uuid}", {
        "GET": Served(consumers.get_allocations),
        "PUT": Served(consumers.put_allocations),
        "DELETE": Served(consumers.delete_allocations)}),
    Route("/allocation_candidates", {"GET": Served(consumers.list_candidates, (1, 10))}),
    Route("/traits", {"GET": Served(names.list_traits, (1, 6))}),
    Route("/traits/{name}", {
        "GET": Served(names.get_trait, (1, 6)),
        "PUT": Served(names.put_trait, (1, 6)),
        "DELETE": Served(names.delete_trait, (1, 6))}),
    Route("/usages", {"GET": Served(consumers.total_usages, (1, 9))}),
    Route("/reshaper", {"POST": Served(consumers.reshape, (1, 30))}),
)
_COMPILED: Final = tuple((route, route.pattern) for route in ROUTES)


def match(path: str) -> tuple[Route, dict[str, str]] | None:
    """The route of ``path`` (below the mount point) and its arguments."""
    path = path.rstrip("/") if path != "/" else ""
    for route, pattern in _COMPILED:
        found = pattern.match(path)
        if found is not None:
            return route, found.groupdict()
    return None


#: Writes that take no body: creating a trait, and a resource class from 1.7.
_BODILESS: Final = {("PUT", "/traits/{name}"), ("PUT", "/resource_classes/{name}")}


def _check_media(req: PlacementRequest, route: Route, version: Version) -> None:
    """What Placement checks before a handler runs: a body needs a content type, a
    read must accept JSON, a write of a body must send JSON."""
    if req.body and not req.content_type:
        raise HttpProblem(400, "content-type header required when content-length > 0")
    if req.method == "GET" and not accepts_json(req.accept):
        raise HttpProblem(406, f"Only {JSON} is provided")
    bodiless = (req.method, route.template) in _BODILESS and (
        route.template != "/resource_classes/{name}" or version >= (1, 7))
    if req.method in ("PUT", "POST") and not bodiless and route.template != "":
        ctype = (req.content_type or "").split(";", 1)[0].strip().lower()
        if ctype != JSON:
            raise HttpProblem(415, f"The media type {ctype or 'None'} is not supported, "
                                   f"use {JSON}")


def handle(store: PlacementStore, req: PlacementRequest,
           ) -> tuple[PlacementResponse, Changes]:
    """Answer ``req`` against ``store``: the response and what changed in the store
    (what the caller must persist; a failed call may have changed something only when
    it says so, and then the caller restores the saved state)."""
    try:
        version = negotiate(req.version_header)
    except HttpProblem as problem:
        return error_response(problem, req.request_id, None, req.method,
                              req.accept), Changes()
    call: Call | None = None
    try:
        found = match(req.path)
        if found is None:
            raise HttpProblem(404, "The resource could not be found.")
        route, args = found
        served = route.methods.get(req.method)
        if served is None:
            raise HttpProblem(405, "The method specified is not allowed for this resource.",
                              headers={"Allow": ", ".join(route.methods)})
        if version < served.since:
            raise HttpProblem(served.too_old, "The resource could not be found."
                              if served.too_old == 404 else
                              "The method specified is not allowed for this resource.")
        _check_media(req, route, version)
        call = Call(store, req, version, args)
        response = served.handler(call)
    except HttpProblem as problem:
        return (error_response(problem, req.request_id, version, req.method, req.accept),
                call.changes if call is not None else Changes())
    except PlacementError as err:
        return (error_response(HttpProblem.from_error(err), req.request_id, version,
                               req.method, req.accept),
                call.changes if call is not None else Changes())
    response.headers.update(version_headers(version))
    response.headers[REQUEST_ID_HEADER] = req.request_id
    if version >= CACHE_HEADERS_VERSION and response.status in (200, 201) and response.body:
        # From 1.15 an answer says it must not be cached and when it was made
        # (Placement gives the time of the answer where it tracks no other).
        response.headers["Cache-Control"] = "no-cache"
        response.headers["Last-Modified"] = formatdate(usegmt=True)
    return response, call.changes
