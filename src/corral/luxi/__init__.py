"""luxi: the master daemon's local protocol (JSON messages ended by 0x03 on a Unix socket).

Names load on first use (:mod:`corral.utils.lazy`): a gnt-* tool that takes the
blocking :class:`Client` does not load the server or asyncio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from corral.luxi.async_client import AsyncClient
    from corral.luxi.client import Client
    from corral.luxi.protocol import EOM, Request
    from corral.luxi.server import Dispatcher, LuxiServer

__all__ = ["EOM", "AsyncClient", "Client", "Dispatcher", "LuxiServer", "Request"]

__getattr__, __dir__ = lazy_exports(__name__, {
    "AsyncClient": "async_client",
    "Client": "client",
    "EOM": "protocol",
    "Request": "protocol",
    "Dispatcher": "server",
    "LuxiServer": "server",
})
