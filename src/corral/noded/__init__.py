"""The node daemon: runs what the master asks on this node, over mutual TLS.

- :mod:`~corral.noded.daemon`: the process (settings, pid file, logging, mlockall).
- :mod:`~corral.noded.server`: the HTTPS server, joined or waiting to join.
- :mod:`~corral.noded.procedures`: the RPC procedures.
- :mod:`~corral.noded.join`: the join token, the bundle, leaving.
"""

from __future__ import annotations

from corral.noded.daemon import NAME, main, run, serve
from corral.noded.procedures import PROCEDURES, dispatch
from corral.noded.server import NodeServer

__all__ = ["NAME", "PROCEDURES", "NodeServer", "dispatch", "main", "run", "serve"]
