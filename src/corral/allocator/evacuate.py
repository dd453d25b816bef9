"""Moving existing instances: node evacuation, group change, relocation.

This is htools' evacuation. An instance leaves a node by the moves its disk template
allows: a drbd instance fails over (``primary-only``), gets a new secondary
(``secondary-only``) or both (``all``: new secondary = future primary, failover, new
secondary); an instance on shared storage fails over to another node; plain and file
instances cannot move. Among the nodes that can take it, the one leaving its group
with the best score wins (the last one tried on a tie, as htools). A group change
first picks the target group as an allocation would, then moves the instance there
as ``all``.

Each moved instance comes with the job that moves it: a list of opcodes (migrate,
failover, replace-disks) in Ganeti's JSON form.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from corral.allocator.alloc import AllocOptions, alloc_multi_group
from corral.allocator.metrics import ExactScorer, Stats
from corral.allocator.model import NO_NODE, Cluster, Instance, Node
from corral.allocator.moves import FAILOVER, Move, apply_move
from corral.allocator.types import FailMode, Mirror

__all__ = [
    "EvacError",
    "EvacOutcome",
    "change_group",
    "move_opcodes",
    "node_evacuate",
    "relocate",
]

TIE = 1e-9


class EvacError(ValueError):
    """An evacuation that cannot be done; the message says why."""


def _migrate(name: str, target: str | None) -> dict[str, Any]:
    op: dict[str, Any] = {"OP_ID": "OP_INSTANCE_MIGRATE", "instance_name": name}
    if target is not None:
        op["target_node"] = target
    op.update({"allow_runtime_changes": False, "ignore_ipolicy": False, "cleanup": False,
               "allow_failover": True, "ignore_hvversions": True})
    return op


def _failover(name: str, target: str | None) -> dict[str, Any]:
    op: dict[str, Any] = {"OP_ID": "OP_INSTANCE_FAILOVER", "instance_name": name,
                          "shutdown_timeout": 120, "ignore_consistency": False}
    if target is not None:
        op["target_node"] = target
    op.update({"ignore_ipolicy": False, "cleanup": False})
    return op


def _replace(name: str, node: str) -> dict[str, Any]:
    return {"OP_ID": "OP_INSTANCE_REPLACE_DISKS", "instance_name": name,
            "early_release": False, "ignore_ipolicy": False,
            "mode": "replace_new_secondary", "disks": [], "remote_node": node}


def move_opcodes(cluster: Cluster, inst: Instance, move: Move) -> list[dict[str, Any]]:
    """The opcodes of one move (htools' translation: a failover migrates, a
    forthcoming instance is failed over)."""
    kind, tdx = move
    name = inst.name
    mig = _failover if inst.forthcoming else _migrate
    target = cluster.nodes[tdx].name if tdx >= 0 else ""
    if kind == "f":
        return [mig(name, None)]
    if kind == "fa":
        return [mig(name, target)]
    if kind == "rp":
        return [mig(name, None), _replace(name, target), mig(name, None)]
    if kind == "rs":
        return [_replace(name, target)]
    if kind == "raf":
        return [_replace(name, target), mig(name, None)]
    if kind == "far":
        return [mig(name, None), _replace(name, target)]
    raise ValueError(f"unknown move kind {kind!r}")


@dataclass
class EvacOutcome:
    """What an evacuation did: moved instances (index, group, nodes), failed ones
    (index, reason) and one job (list of opcodes) per moved instance."""

    moved: list[tuple[int, int, list[int]]] = field(default_factory=list)
    failed: list[tuple[int, str]] = field(default_factory=list)
    jobs: list[list[dict[str, Any]]] = field(default_factory=list)

    def result(self, cluster: Cluster) -> list[Any]:
        """The iallocator ``result``: moved, failed, jobs."""
        moved = [[cluster.instances[i].name, cluster.groups[g].name,
                  [cluster.nodes[n].name for n in ns]] for i, g, ns in self.moved]
        failed = [[cluster.instances[i].name, msg] for i, msg in self.failed]
        return [moved, failed, self.jobs]

    def info(self) -> str:
        """The iallocator ``info`` after "Request successful: "."""
        return (f"{len(self.failed)} instances failed to move and {len(self.moved)} were "
                "moved successfully")


def _group_rows(cluster: Cluster, gdx: int) -> list[int]:
    return [n.idx for n in cluster.nodes if n.group == gdx]


def _apply(cluster: Cluster, changed: list[Node], inst: Instance) -> None:
    for node in changed:
        cluster.nodes[node.idx] = node
    cluster.instances[inst.idx] = inst


def _one_node_only(cluster: Cluster, inst: Instance, gdx: int, avail: Sequence[int],
                   force: bool) -> tuple[list[Node], Instance, Move]:
    """Change the secondary (drbd) or the primary (shared storage) to the best node of
    ``avail``, scoring group ``gdx``."""
    if inst.mirror == Mirror.NONE:
        raise EvacError("Can't relocate/evacuate non-mirrored instances")
    kind = "rs" if inst.mirror == Mirror.INTERNAL else "fa"
    group = set(_group_rows(cluster, gdx))
    stats = Stats(cluster.nodes[i] for i in sorted(group))
    candidates: list[tuple[float, int, list[Node], Instance]] = []
    messages = []
    for tdx in avail:
        result = apply_move(cluster.nodes, inst, (kind, tdx), force)
        if isinstance(result, FailMode):
            messages.append(f" Node {cluster.nodes[tdx].name} failed: {result.label};")
            continue
        changed, moved = result
        trial = stats.copy()
        for node in changed:
            if node.idx in group:
                trial.replace(cluster.nodes[node.idx], node)
        candidates.append((trial.score(), tdx, changed, moved))
    if not candidates:
        raise EvacError("Can't find any good node: " + "".join(messages))
    return _pick(cluster, group, candidates, kind)


def _pick(cluster: Cluster, group: set[int],
          candidates: list[tuple[float, int, list[Node], Instance]],
          kind: str) -> tuple[list[Node], Instance, Move]:
    """The best candidate, near-ties settled by htools' own numbers (the last one
    tried wins a tie)."""
    low = min(c[0] for c in candidates)
    scorer = ExactScorer([cluster.nodes[i] for i in sorted(group)])
    best: tuple[int, list[Node], Instance] | None = None
    best_cv = 0.0
    for value, tdx, changed, moved in candidates:
        if value > low + TIE:
            continue
        cv = scorer.score([n for n in changed if n.idx in group])
        if best is None or not best_cv < cv:
            best, best_cv = (tdx, changed, moved), cv
    assert best is not None
    return best[1], best[2], (kind, best[0])


def _drbd_all(cluster: Cluster, inst: Instance, gdx: int, avail: Sequence[int],
              force: bool) -> tuple[list[Node], Instance, list[Move]]:
    """Move a drbd instance to a new pair of nodes of ``avail`` (three moves)."""
    group = set(_group_rows(cluster, gdx))
    stats = Stats(cluster.nodes[i] for i in sorted(group))
    near: list[tuple[float, list[Node], Instance, list[Move]]] = []
    low = float("inf")
    error = "no nodes available"
    primary = cluster.nodes[inst.pnode]
    for tp in avail:
        for ts in avail:
            if tp == ts:
                continue
            nodes = list(cluster.nodes)
            current = inst
            moves: list[Move] = []
            failed = None
            steps: list[tuple[Move, str]] = []
            if primary.offline:
                steps.append((FAILOVER, "Failing over to the secondary"))
            steps += [(("rs", tp), "Changing secondary to new primary"),
                      (FAILOVER, "Failing over to new primary"),
                      (("rs", ts), "Changing secondary to final secondary")]
            for move, what in steps:
                result = apply_move(nodes, current, move, force)
                if isinstance(result, FailMode):
                    failed = f"{what}: {result.label}"
                    break
                changed, current = result
                for node in changed:
                    nodes[node.idx] = node
                moves.append(move)
            if failed is not None:
                if low == float("inf"):
                    error = f"Allocation failed: {failed}"
                continue
            changed_all = [node for node in nodes if node is not cluster.nodes[node.idx]]
            trial = stats.copy()
            for node in changed_all:
                if node.idx in group:
                    trial.replace(cluster.nodes[node.idx], node)
            value = trial.score()
            if value < low - TIE:
                near = []
            if value <= low + TIE:
                near.append((value, changed_all, current, moves))
                low = min(low, value)
    if not near:
        raise EvacError(f"Can't find any good nodes for relocation: {error}")
    scorer = ExactScorer([cluster.nodes[i] for i in sorted(group)])
    best: tuple[list[Node], Instance, list[Move]] | None = None
    best_cv = 0.0
    for value, changed_all, moved, moves in near:
        if value > low + TIE:
            continue
        cv = scorer.score([n for n in changed_all if n.idx in group])
        if best is None or not best_cv < cv:
            best, best_cv = (changed_all, moved, moves), cv
    assert best is not None
    return best


def _evac_instance(cluster: Cluster, inst: Instance, mode: str, gdx: int,
                   avail: Sequence[int], force: bool) -> list[dict[str, Any]]:
    """Move one instance (htools' nodeEvacInstance), changing ``cluster``; the job."""
    template = inst.disk_template
    if template in ("plain", "file"):
        raise EvacError(f"Instances of type {template} cannot be relocated")
    if template != "drbd":
        if mode == "secondary-only":
            raise EvacError(f"Instances with disk template '{template}' can't execute "
                            "change secondary")
        changed, moved, move = _one_node_only(cluster, inst, gdx, avail, force)
        _apply(cluster, changed, moved)
        return move_opcodes(cluster, inst, move)
    if mode == "primary-only":
        result = apply_move(cluster.nodes, inst, FAILOVER, force)
        if isinstance(result, FailMode):
            raise EvacError(result.label)
        _apply(cluster, *result)
        return move_opcodes(cluster, inst, FAILOVER)
    if mode == "secondary-only":
        changed, moved, move = _one_node_only(cluster, inst, gdx, avail, force)
        _apply(cluster, changed, moved)
        return move_opcodes(cluster, inst, move)
    changed_all, moved, moves = _drbd_all(cluster, inst, gdx, avail, force)
    _apply(cluster, changed_all, moved)
    jobs: list[dict[str, Any]] = []
    for move in moves:
        jobs.extend(move_opcodes(cluster, inst, move))
    return jobs


def _nodes_to_evacuate(cluster: Cluster, mode: str, idxs: Sequence[int]) -> set[int]:
    out: set[int] = set()
    for idx in idxs:
        inst = cluster.instances[idx]
        drbd_sec = {inst.snode} if inst.disk_template == "drbd" else set()
        if mode == "primary-only":
            out.add(inst.pnode)
        elif mode == "secondary-only":
            out |= drbd_sec
        else:
            out.add(inst.pnode)
            out |= drbd_sec
    out.discard(NO_NODE)
    return out


def _record(cluster: Cluster, outcome: EvacOutcome, idx: int,
            job: list[dict[str, Any]]) -> None:
    inst = cluster.instances[idx]
    outcome.moved.append((idx, cluster.nodes[inst.pnode].group, inst.all_nodes()))
    outcome.jobs.append(job)


def node_evacuate(cluster: Cluster, idxs: Sequence[int], mode: str,
                  force: bool = False) -> EvacOutcome:
    """Move instances off their nodes (``mode``: ``primary-only``, ``secondary-only``
    or ``all``); changes ``cluster`` as the moves would."""
    excluded = _nodes_to_evacuate(cluster, mode, idxs)
    excluded |= {n.idx for n in cluster.nodes if n.offline}
    originals = [cluster.instances[idx] for idx in idxs]
    outcome = EvacOutcome()
    for inst in originals:
        gdx = cluster.nodes[inst.pnode].group
        avail = [n for n in _group_rows(cluster, gdx)
                 if n not in excluded and n != inst.pnode]
        try:
            job = _evac_instance(cluster, inst, mode, gdx, avail, force)
        except EvacError as err:
            outcome.failed.append((inst.idx, str(err)))
            continue
        _record(cluster, outcome, inst.idx, job)
    return outcome


def change_group(cluster: Cluster, idxs: Sequence[int], target_groups: Sequence[int],
                 opts: AllocOptions) -> EvacOutcome:
    """Move instances to other groups (``target_groups``, or any group they are not
    in); changes ``cluster`` as the moves would."""
    evac_groups = {cluster.nodes[cluster.instances[i].pnode].group for i in idxs}
    targets = [g for g in (list(target_groups) if target_groups
                           else list(range(len(cluster.groups))))
               if g not in evac_groups]
    offline = {n.idx for n in cluster.nodes if n.offline}
    originals = [cluster.instances[idx] for idx in idxs]
    outcome = EvacOutcome()
    for inst in originals:
        count = 2 if inst.disk_template == "drbd" else 1
        chosen, _, msgs = alloc_multi_group(cluster, inst, count, opts, targets)
        if chosen is None:
            message = (", ".join(msgs) if any(g in cluster.groups_in_use() for g in targets)
                       else "no groups for evacuation: allowed groups was "
                       f"{targets}, all groups: {cluster.groups_in_use()}")
            outcome.failed.append((inst.idx, message))
            continue
        avail = [n for n in _group_rows(cluster, chosen.idx) if n not in offline]
        try:
            job = _evac_instance(cluster, inst, "all", chosen.idx, avail, False)
        except EvacError as err:
            outcome.failed.append((inst.idx, str(err)))
            continue
        _record(cluster, outcome, inst.idx, job)
    return outcome


def relocate(cluster: Cluster, idx: int, required: int, relocate_from: Sequence[int],
             force: bool = False) -> list[int]:
    """The new node of an instance that must leave ``relocate_from`` (its secondary for
    drbd, its primary on shared storage)."""
    if required != 1:
        raise EvacError(f"Exchange {required} nodes mode is not implemented")
    inst = cluster.instances[idx]
    if inst.mirror == Mirror.NONE:
        raise EvacError("Can't relocate non-mirrored instances")
    internal = inst.mirror == Mirror.INTERNAL
    expected = inst.snode if internal else inst.pnode
    if list(relocate_from) != [expected]:
        kind = "secondary" if internal else "primary"
        raise EvacError(f"Unsupported request: excluded nodes not equal to instance's "
                        f"{kind}({expected} versus {list(relocate_from)})")
    outcome = node_evacuate(cluster, [idx], "secondary-only" if internal else "primary-only",
                            force)
    if outcome.failed:
        raise EvacError(outcome.failed[0][1])
    moved = cluster.instances[idx]
    if internal:
        if moved.snode == inst.snode:
            raise EvacError("Internal error: instance didn't change secondary node?!")
        return [moved.snode]
    if moved.pnode == inst.pnode:
        raise EvacError("Internal error: instance didn't change primary node?!")
    return [moved.pnode]
