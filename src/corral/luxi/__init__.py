"""luxi: the master daemon's local protocol (JSON messages ended by 0x03 on a Unix socket)."""

from __future__ import annotations

from corral.luxi.client import AsyncClient, Client
from corral.luxi.protocol import EOM, Request
from corral.luxi.server import Dispatcher, LuxiServer

__all__ = ["EOM", "AsyncClient", "Client", "Dispatcher", "LuxiServer", "Request"]
