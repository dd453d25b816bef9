"""Running logical units without daemons: a real store and lock manager, a scripted
node RPC that records every call, and a stand-in for the job queue's context."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from corral.cmdlib import AREAS, LOGICAL_UNITS, MasterContext, Processor
from corral.cmdlib.base import RpcArgs
from corral.config import ConfigStore
from corral.errors import CorralError, NodeUnreachableError
from corral.locking import LockAttemptStrategy, LockManager
from corral.objects import Node
from corral.opcodes import op_from_dict
from corral.rpc.protocol import RpcResult

__all__ = ["FakeRpc", "JobCtx", "RpcCall", "make_processor", "run_op"]

#: A handler answers one call on one node: ``handler(node, args) -> payload`` (raise a
#: CorralError to make that node's result fail).
Handler = Callable[[Node, Mapping[str, Any]], Any]


@dataclass
class RpcCall:
    """One recorded call on one node."""

    node: str
    procedure: str
    args: Mapping[str, Any]


@dataclass
class FakeRpc:
    """A NodeRpc whose nodes answer through ``handlers`` (default: ``None`` payload)."""

    handlers: dict[str, Handler] = field(default_factory=dict)
    calls: list[RpcCall] = field(default_factory=list)
    down: set[str] = field(default_factory=set)
    """Names of nodes that do not answer."""
    joined: list[tuple[str, str]] = field(default_factory=list)

    def procedures(self, node: str | None = None) -> list[str]:
        """The procedures called so far (on ``node`` only, if given), in order."""
        return [c.procedure for c in self.calls if node is None or c.node == node]

    async def call(
        self, nodes: Sequence[Node], procedure: str, args: RpcArgs, *,
        timeout: float = 60.0,  # noqa: ASYNC109 - mirrors NodeRpc
    ) -> dict[str, RpcResult]:
        """Answer for every node through the handler of ``procedure``."""
        results: dict[str, RpcResult] = {}
        for node in nodes:
            node_args = args(node) if callable(args) else args
            self.calls.append(RpcCall(node.name, procedure, node_args))
            if node.offline or node.name in self.down:
                results[node.name] = RpcResult(
                    node.name, error=NodeUnreachableError(f"node {node.name} is down"))
                continue
            handler = self.handlers.get(procedure)
            try:
                payload = handler(node, node_args) if handler else None
            except CorralError as err:
                results[node.name] = RpcResult(node.name, error=err)
            else:
                results[node.name] = RpcResult(node.name, payload=payload)
        return results

    async def join(
        self, node: Node, token: str, *, timeout: float = 30.0,  # noqa: ASYNC109
    ) -> RpcResult:
        """Record the join; a token of ``"bad"`` is refused."""
        self.joined.append((node.name, token))
        if token == "bad":
            return RpcResult(node.name, error=CorralError("invalid join token"))
        return RpcResult(node.name, payload=None)


class JobCtx:
    """Records what the processor tells the queue about one opcode."""

    def __init__(self, job_id: int = 1, priority: int = 0) -> None:
        self.job_id = job_id
        self.index = 0
        self.priority = priority
        self.log: list[Any] = []

    def feedback(self, message: Any, log_type: str = "message") -> None:
        """Keep a job log line."""
        self.log.append(message)

    def running(self) -> None:
        """The opcode got its locks."""


def make_processor(store: ConfigStore, rpc: FakeRpc) -> tuple[Processor, MasterContext]:
    """A processor over ``store`` with every area's units and query resources."""
    locks = LockManager(
        nodes=[n.name for n in store.all("node")],
        nodegroups=[g.name for g in store.all("nodegroup")],
        instances=[i.name for i in store.all("instance")],
    )
    ctx = MasterContext(store=store, locks=locks, rpc=rpc)
    for area in AREAS:
        ctx.queries.update(area.query_resources(ctx))

    def fast() -> LockAttemptStrategy:
        return LockAttemptStrategy(first_timeout=0.01, attempts=2, max_pause=0)

    return Processor(ctx, LOGICAL_UNITS, strategy=fast), ctx


def run_op(processor: Processor, data: dict[str, Any], ctx: JobCtx | None = None) -> Any:
    """Run one opcode (Ganeti's dict form) to its result."""
    return asyncio.run(processor.execute(op_from_dict(data), ctx or JobCtx()))
