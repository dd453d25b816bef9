"""Node roles and the master candidate pool.

A node is the master, a master candidate, regular, drained or offline (Ganeti's
roles ``M``, ``C``, ``R``, ``D``, ``O``); at most one of the flags
``master_candidate``, ``drained``, ``offline`` is set. The cluster keeps
``candidate_pool_size`` candidates when it has enough *eligible* nodes (master
capable, neither offline nor drained); the master always counts. The node logical
units (:mod:`corral.cmdlib.node`) decide when to promote; this module counts and
promotes.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from typing import TYPE_CHECKING

from corral.objects import Node

if TYPE_CHECKING:
    from corral.config import ConfigStore
    from corral.config.transaction import Transaction

__all__ = [
    "ROLE_FLAGS",
    "candidate_stats",
    "is_eligible",
    "node_role",
    "nodes_after",
    "promote_candidates",
]

#: The role flags, in Ganeti's order (``OP_NODE_SET_PARAMS`` results name them so).
ROLE_FLAGS = ("master_candidate", "drained", "offline")


def node_role(node: Node, master_uuid: str) -> str:
    """Ganeti's one-letter role: M(aster), C(andidate), D(rained), O(ffline), R(egular)."""
    if node.uuid == master_uuid:
        return "M"
    if node.master_candidate:
        return "C"
    if node.drained:
        return "D"
    if node.offline:
        return "O"
    return "R"


def is_eligible(node: Node) -> bool:
    """Whether ``node`` may be a master candidate: master capable, neither offline nor
    drained."""
    return node.master_capable and not node.offline and not node.drained


def candidate_stats(nodes: Iterable[Node], exclude: Container[str] = ()) -> tuple[int, int]:
    """``(candidates, eligible)`` among ``nodes`` whose UUID is not in ``exclude``."""
    current = eligible = 0
    for node in nodes:
        if node.uuid in exclude:
            continue
        current += node.master_candidate
        eligible += is_eligible(node)
    return current, eligible


def promote_candidates(txn: Transaction, nodes: Sequence[Node], pool_size: int,
                       exclude: Container[str] = ()) -> list[str]:
    """Promote eligible nodes (by name order) until the pool holds ``pool_size``
    candidates or no eligible node is left; return their names.

    ``nodes`` are all nodes as they will be after the change being made in ``txn``;
    nodes whose UUID is in ``exclude`` (one just demoted) are neither counted nor
    promoted.
    """
    current, eligible = candidate_stats(nodes, exclude)
    wanted = min(pool_size, eligible)
    promoted: list[str] = []
    for node in sorted(nodes, key=lambda n: n.name):
        if current >= wanted:
            break
        if node.master_candidate or not is_eligible(node) or node.uuid in exclude:
            continue
        copy = txn.get("node", node.uuid)
        copy.master_candidate = True
        txn.update(copy)
        promoted.append(node.name)
        current += 1
    return promoted


def nodes_after(store: ConfigStore, changed: Iterable[Node] = (),
                removed: Container[str] = ()) -> list[Node]:
    """Every node as it will be: ``changed`` copies replace theirs, ``removed`` go."""
    replaced = {node.uuid: node for node in changed}
    result = [replaced.pop(n.uuid, n) for n in store.all("node") if n.uuid not in removed]
    return result + list(replaced.values())
