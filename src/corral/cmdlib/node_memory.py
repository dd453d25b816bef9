"""The total memory of nodes, as their node daemons last told it, for checks that only
need a bound (an instance's ``maxmem`` must fit some node of its group).

A node's total memory changes only when its hardware does, so an answer is trusted
for :data:`MEMORY_TTL` seconds and concurrent jobs share one question per node:
creating twenty instances at once then asks each node once, not twenty times (the
question is a ``node_info`` call, a few milliseconds of the node daemon's time each).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from corral.rpc.protocol import RpcResult

if TYPE_CHECKING:
    from corral.cmdlib.base import NodeRpc
    from corral.objects import Node

__all__ = ["MEMORY_TTL", "NodeMemory"]

#: Seconds a node's answer about its total memory is trusted.
MEMORY_TTL = 60.0

_Key = tuple[str, str]


class NodeMemory:
    """Total memory (MiB) per node and hypervisor, asked with ``node_info`` when not
    known or older than :data:`MEMORY_TTL`."""

    def __init__(self, ttl: float = MEMORY_TTL) -> None:
        self.ttl = ttl
        self._known: dict[_Key, tuple[float, int]] = {}
        self._asking: dict[_Key, asyncio.Future[dict[str, RpcResult]]] = {}

    async def totals(self, rpc: NodeRpc, nodes: Sequence[Node], hypervisor: str, *,
                     timeout: float) -> dict[str, int]:  # noqa: ASYNC109 -- the RPC timeout
        """The total memory of each of ``nodes`` that tells it (node name → MiB);
        nodes that do not answer, or answer without it, are left out."""
        now = time.monotonic()
        totals: dict[str, int] = {}
        missing: list[Node] = []
        for node in nodes:
            known = self._known.get((node.name, hypervisor))
            if known is not None and now - known[0] < self.ttl:
                totals[node.name] = known[1]
            else:
                missing.append(node)
        to_ask = [n for n in missing if (n.name, hypervisor) not in self._asking]
        if to_ask:
            asking = asyncio.ensure_future(rpc.call(
                to_ask, "node_info", {"storage_dirs": [], "hypervisors": [hypervisor]},
                timeout=timeout))
            keys = [(n.name, hypervisor) for n in to_ask]
            for key in keys:
                self._asking[key] = asking
            asking.add_done_callback(lambda done: self._learn(done, keys))
        # Taken before the first await, so every question is still in flight here.
        waits = {self._asking[(n.name, hypervisor)] for n in missing}
        for asked in waits:
            with contextlib.suppress(Exception):
                await asyncio.shield(asked)
        for node in missing:
            known = self._known.get((node.name, hypervisor))
            if known is not None:
                totals[node.name] = known[1]
        return totals

    def _learn(self, done: asyncio.Future[dict[str, RpcResult]], keys: list[_Key]) -> None:
        """Keep what a finished ``node_info`` call told about ``keys``."""
        for key in keys:
            self._asking.pop(key, None)
        if done.cancelled() or done.exception() is not None:
            return
        results = done.result()
        now = time.monotonic()
        for name, hypervisor in keys:
            answer = results.get(name)
            if answer is None or answer.failed or not isinstance(answer.payload, dict):
                continue
            total = answer.payload.get("memory_total")
            if isinstance(total, int) and not isinstance(total, bool):
                self._known[(name, hypervisor)] = (now, total)
