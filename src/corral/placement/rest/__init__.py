"""OpenStack Placement's REST API over the placement engine, without HTTP.

:func:`handle` answers a :class:`PlacementRequest` against a
:class:`~corral.placement.PlacementStore` with a :class:`PlacementResponse` and the
:class:`Changes` it made; the RAPI daemon carries requests to the master daemon,
which owns the store (docs/placement.md, "REST API").
"""

from __future__ import annotations

from corral.placement.rest.protocol import (
    MAX_VERSION,
    MIN_VERSION,
    Changes,
    HttpProblem,
    PlacementRequest,
    PlacementResponse,
    negotiate,
)
from corral.placement.rest.routes import ROUTES, handle, match

__all__ = ["MAX_VERSION", "MIN_VERSION", "ROUTES", "Changes", "HttpProblem",
           "PlacementRequest", "PlacementResponse", "handle", "match", "negotiate"]
