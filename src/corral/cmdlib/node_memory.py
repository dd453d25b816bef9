"""The total memory of nodes, as their node daemons last told it, for checks that only
need a bound (an instance's ``maxmem`` must fit some node of its group).

A node's total memory changes only when its hardware does, so an answer is trusted
for :data:`MEMORY_TTL` seconds and concurrent jobs share one question per node
(:class:`~corral.utils.recent.RecentAnswers`): creating twenty instances at once then
asks each node once, not twenty times (a ``node_info`` call, a few milliseconds of
the node daemon's time each).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from corral.utils.recent import RecentAnswers

if TYPE_CHECKING:
    from corral.cmdlib.base import NodeRpc
    from corral.objects import Node

__all__ = ["MEMORY_TTL", "NodeMemory"]

#: Seconds a node's answer about its total memory is trusted.
MEMORY_TTL = 60.0


class NodeMemory:
    """Total memory (MiB) per node and hypervisor, asked with ``node_info`` when not
    known or older than :data:`MEMORY_TTL`."""

    def __init__(self, ttl: float = MEMORY_TTL) -> None:
        self._answers: RecentAnswers[tuple[str, str], int | None] = RecentAnswers(
            ttl, keep=lambda total: total is not None)

    async def totals(self, rpc: NodeRpc, nodes: Sequence[Node], hypervisor: str, *,
                     timeout: float) -> dict[str, int]:  # noqa: ASYNC109 -- the RPC timeout
        """The total memory of each of ``nodes`` that tells it (node name → MiB);
        nodes that do not answer, or answer without it, are left out."""

        async def ask(node: Node) -> int | None:
            results = await rpc.call([node], "node_info",
                                     {"storage_dirs": [], "hypervisors": [hypervisor]},
                                     timeout=timeout)
            answer = results.get(node.name)
            if answer is None or answer.failed or not isinstance(answer.payload, dict):
                return None
            total = answer.payload.get("memory_total")
            return total if isinstance(total, int) and not isinstance(total, bool) else None

        answers = await asyncio.gather(*(
            self._answers.get((node.name, hypervisor), functools.partial(ask, node))
            for node in nodes))
        return {node.name: total for node, total in zip(nodes, answers, strict=True)
                if total is not None}
