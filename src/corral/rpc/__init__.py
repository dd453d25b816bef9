"""Node RPC: the wire format and the master's client (wiring layer).

- :mod:`~corral.rpc.protocol`: paths, versions, :class:`RpcResult`.
- :mod:`~corral.rpc.client`: :class:`RpcClient`, calling many node daemons at once.
- :mod:`~corral.rpc.args`: one msgspec Struct per procedure's arguments, the contract
  the node decodes and the master checks against.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from corral.rpc.client import RpcClient, Target, node_client_context
    from corral.rpc.protocol import JOIN_PATH, RPC_VERSION, RpcResult, rpc_path

__all__ = [
    "JOIN_PATH",
    "RPC_VERSION",
    "RpcClient",
    "RpcResult",
    "Target",
    "node_client_context",
    "rpc_path",
]

# Names load on first use: the protocol's constants need no HTTP client (aiohttp).
__getattr__, __dir__ = lazy_exports(__name__, {
    **dict.fromkeys(("RpcClient", "Target", "node_client_context"), "client"),
    **dict.fromkeys(("JOIN_PATH", "RPC_VERSION", "RpcResult", "rpc_path"), "protocol"),
})
