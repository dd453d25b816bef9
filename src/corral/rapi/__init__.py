"""The Remote API daemon (wiring layer): Ganeti's RAPI v2 over HTTPS, talking luxi.

- :mod:`~corral.rapi.routes`: the one table of resources (path, methods, access,
  arguments, bodies, responses), dispatched by :mod:`~corral.rapi.server` and
  published by :mod:`~corral.rapi.openapi`;
- :mod:`~corral.rapi.handlers`: thin handlers, one module per resource family;
- :mod:`~corral.rapi.users`: the RAPI users file (Ganeti's format);
- :mod:`~corral.rapi.auth`: HTTP Basic authentication against it;
- :mod:`~corral.rapi.daemon`: the ``corral-rapi`` process.
"""

from __future__ import annotations

from corral.rapi.auth import Users
from corral.rapi.luxi_pool import LuxiPool
from corral.rapi.routes import ROUTES, document
from corral.rapi.server import build_app

__all__ = ["ROUTES", "LuxiPool", "Users", "build_app", "document"]
