"""The nodes' total memory as the master keeps it: one node_info question per node for
many concurrent jobs, asked again once the answer is old, silent nodes left out."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from corral.cmdlib.node_memory import NodeMemory
from corral.errors import NodeUnreachableError
from corral.objects import Node
from corral.rpc.protocol import RpcResult


class CountingRpc:
    """Answers node_info with each node's memory after a short delay, counting calls."""

    def __init__(self, memory: dict[str, int | None]) -> None:
        self.memory = memory
        self.calls: list[list[str]] = []

    async def call(self, nodes: Sequence[Node], procedure: str, args: Any, *,
                   timeout: float = 60.0) -> dict[str, RpcResult]:  # noqa: ASYNC109
        assert procedure == "node_info"
        self.calls.append([n.name for n in nodes])
        await asyncio.sleep(0.01)
        results = {}
        for node in nodes:
            total = self.memory[node.name]
            results[node.name] = (
                RpcResult(node.name, {"memory_total": total}) if total is not None
                else RpcResult(node.name, error=NodeUnreachableError(f"{node.name} down")))
        return results


def _node(name: str) -> Node:
    return Node(name=name, primary_ip="127.0.0.1", secondary_ip="127.0.0.1", group="g")


async def test_concurrent_jobs_share_one_question_per_node() -> None:
    rpc = CountingRpc({"n1": 4096, "n2": 8192, "n3": None})
    memory = NodeMemory()
    nodes = [_node("n1"), _node("n2"), _node("n3")]
    answers = await asyncio.gather(*(memory.totals(rpc, nodes, "fake", timeout=5)
                                     for _ in range(20)))
    assert all(answer == {"n1": 4096, "n2": 8192} for answer in answers)
    assert sorted(rpc.calls) == [["n1"], ["n2"], ["n3"]]
    # Known nodes are not asked again; the silent one is.
    assert await memory.totals(rpc, nodes, "fake", timeout=5) == {"n1": 4096, "n2": 8192}
    assert rpc.calls[3:] == [["n3"]]


async def test_an_old_answer_is_asked_again() -> None:
    rpc = CountingRpc({"n1": 4096})
    memory = NodeMemory(ttl=0.0)
    assert await memory.totals(rpc, [_node("n1")], "fake", timeout=5) == {"n1": 4096}
    rpc.memory["n1"] = 2048
    assert await memory.totals(rpc, [_node("n1")], "fake", timeout=5) == {"n1": 2048}
    assert len(rpc.calls) == 2
