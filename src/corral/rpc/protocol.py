"""The node RPC wire format, shared by the master's client and the node daemon.

A call is ``POST /rpc/<version>/<procedure>`` with a JSON object of arguments; the
answer is HTTP 200 with ``{"ok": true, "result": ...}`` or
``{"ok": false, "error": {"code", "message"}}`` (:func:`corral.errors.to_wire`).
Transport failures (refused, TLS, timeout) never reach the wire: the client turns
them into an :class:`RpcResult` whose error names the node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corral.errors import CorralError, NodeUnreachableError, RpcError

__all__ = ["CONSOLE_STREAM_PATH", "DEFAULT_HANDOVER_WAIT", "JOIN_PATH", "RPC_VERSION", "RpcResult",
           "rpc_path"]

#: Version of the procedure set; a node refuses calls for another version.
RPC_VERSION = 1

#: Seconds a demoted master lets running opcodes finish before it interrupts them
#: (``master_demote``; ``gnt-cluster master-failover --handover-timeout``).
DEFAULT_HANDOVER_WAIT = 60.0

#: Where a node daemon without a cluster accepts the master's join request.
JOIN_PATH = "/join"

#: Where a node daemon serves an instance's serial console as a WebSocket
#: (``?instance=NAME``; the master's client certificate only).
CONSOLE_STREAM_PATH = f"/stream/{RPC_VERSION}/console"


def rpc_path(procedure: str, version: int = RPC_VERSION) -> str:
    """The URL path of ``procedure``."""
    return f"/rpc/{version}/{procedure}"


@dataclass(frozen=True, slots=True)
class RpcResult:
    """One node's answer to one call: a payload, or an error naming the node."""

    node: str
    payload: Any = None
    error: CorralError | None = None

    @property
    def failed(self) -> bool:
        """Whether the call failed (the node answered an error or did not answer)."""
        return self.error is not None

    @property
    def unreachable(self) -> bool:
        """Whether the node could not be reached at all."""
        return isinstance(self.error, NodeUnreachableError)

    def get(self, what: str) -> Any:
        """The payload; raise the node's error, prefixed with ``what`` and the node name.

        The raised error keeps the class the node raised (an OS script failure stays
        :class:`~corral.errors.OsScriptError`); transport failures are
        :class:`~corral.errors.NodeUnreachableError`.
        """
        if self.error is None:
            return self.payload
        cls = type(self.error) if isinstance(self.error, CorralError) else RpcError
        raise cls(f"{what} failed on node {self.node}: {self.error.message}")
