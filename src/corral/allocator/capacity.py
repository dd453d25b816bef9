"""Global N+1 redundancy: could every node be evacuated within its group?

This is htools' capacity check (hail and hspace run it unless told
``--no-capacity-checks``). For a node, its drbd instances fail over to their
secondaries, its instances on shared storage fail over to the best node of the group,
and its instances that cannot move (plain, file) are re-created on the best other
node of the group, largest first; "best" by the cluster score, and every placement
ignores soft limits. The cluster is redundant if every node can be evacuated so.

Simulating that for every node after every trial allocation is what makes htools slow
on large clusters. :func:`can_evacuate` first tries a bound that proves success
without simulating: after the failovers, if the group's other nodes can take at least
as many instances of the largest size as there are instances to place, no choice of
targets can run out of room (each node that refuses an instance has taken at least
its share already). Only when the bound fails does it simulate, exactly as htools
does. :class:`Redundancy` also keeps the verdict of each group of an unchanged
cluster, since a trial allocation changes only the group it lands in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from corral.allocator import kernels
from corral.allocator.metrics import Stats
from corral.allocator.model import Cluster, Instance, Node
from corral.allocator.moves import FAILOVER, apply_move
from corral.allocator.nodeops import add_pri, check_migration, remove_pri
from corral.allocator.policy import matches_policy
from corral.allocator.types import EVAC_MOVABLE_TEMPLATES, FailMode

__all__ = ["Redundancy", "can_evacuate", "redundant"]


def _guaranteed(room: int, size: int) -> float:
    """How many instances of at most ``size`` a node with ``room`` surely takes
    (it takes one while room - size > 0)."""
    if size <= 0:
        return math.inf
    if room <= 0:
        return 0
    return math.ceil(room / size) - 1


def _bound_holds(cluster: Cluster, node: Node, targets: Sequence[int],
                 mem_delta: dict[int, int], to_place: list[Instance]) -> bool:
    """Whether the instances surely fit on ``targets`` whatever nodes they go to."""
    if not to_place:
        return True
    m_max = max((inst.mem for inst in to_place if inst.uses_memory and not inst.forthcoming),
                default=0)
    d_max = max((inst.dsk for inst in to_place
                 if inst.local_storage and not inst.forthcoming), default=0)
    total = 0.0
    need = len(to_place)
    for idx in targets:
        target = cluster.nodes[idx]
        if target.excl:
            return False
        mem_room = target.unallocated_mem - mem_delta.get(idx, 0)
        total += min(_guaranteed(mem_room, m_max), _guaranteed(target.f_dsk, d_max))
        if total >= need:
            return True
    return False


def can_evacuate(cluster: Cluster, ndx: int, scored: Sequence[int] | None = None) -> bool:
    """Whether node ``ndx`` could be evacuated (see the module text). ``scored`` are
    the nodes whose score picks where non-movable instances are re-created (htools:
    the nodes the check runs on; default all)."""
    node = cluster.nodes[ndx]
    instances = cluster.instances
    pri = [instances[idx] for idx in reversed(node.p_list)]
    drbd = [inst for inst in pri if inst.disk_template == "drbd"]
    shared = [inst for inst in pri
              if inst.disk_template != "drbd" and inst.disk_template in EVAC_MOVABLE_TEMPLATES]
    fixed = [inst for inst in pri if inst.disk_template != "drbd"
             and inst.disk_template not in EVAC_MOVABLE_TEMPLATES]
    fixed.sort(key=lambda inst: -inst.mem)
    targets = [other.idx for other in cluster.nodes
               if other.group == node.group and other.idx != ndx]
    # the policy of the group decides whether an instance can be re-created at all
    if fixed and targets:
        policy = cluster.nodes[targets[0]].policy
        for inst in fixed:
            if matches_policy(inst, policy, cluster.nodes[targets[0]].excl) is not None:
                return False
    # quick exit: failovers of drbd instances only need their secondaries' memory
    mem_delta: dict[int, int] = {}
    simple = not node.excl and not node.mig_tags
    for inst in drbd:
        snode = cluster.nodes[inst.snode]
        if snode.excl or snode.mig_tags or snode.rmig_tags:
            simple = False
        if inst.uses_memory:
            mem_delta[inst.snode] = mem_delta.get(inst.snode, 0) + inst.mem
    if simple:
        for sdx, delta in mem_delta.items():
            snode = cluster.nodes[sdx]
            if snode.unallocated_mem - delta <= 0 or snode.f_dsk <= 0:
                return False
        if drbd and not node.offline and node.f_dsk <= 0:
            return False
        if (not any(cluster.nodes[t].mig_tags or cluster.nodes[t].rmig_tags for t in targets)
                and _bound_holds(cluster, node, targets, mem_delta, shared + fixed)):
            return True
    return _simulate(cluster, ndx, drbd, shared, fixed, targets, scored)


def _simulate(cluster: Cluster, ndx: int, drbd: list[Instance], shared: list[Instance],
              fixed: list[Instance], targets: list[int],
              scored: Sequence[int] | None) -> bool:
    """Evacuate node ``ndx`` step by step as htools does; True if every step fits."""
    nodes: list[Node] = list(cluster.nodes)
    insts = list(cluster.instances)
    for inst in drbd:
        current = insts[inst.idx]
        result = apply_move(nodes, current, FAILOVER, force=True)
        if isinstance(result, FailMode):
            return False
        changed, moved = result
        for new in changed:
            nodes[new.idx] = new
        insts[inst.idx] = moved
    if not shared and not fixed:
        return True
    if not targets:
        return False
    group_rows = [n.idx for n in nodes if n.group == nodes[ndx].group]
    scored_rows = list(scored) if scored is not None else list(range(len(nodes)))
    table = kernels.NodeTable(nodes)
    rows = np.array(targets, dtype=np.int64)
    if shared:
        gstats = Stats(nodes[i] for i in group_rows)
        for inst in shared:
            current = insts[inst.idx]
            source = nodes[ndx]
            left = remove_pri(source, current)
            base = gstats.copy()
            base.replace(source, left)
            best = _best_target(table, rows, current, base, nodes,
                                lambda t, src=source: check_migration(src, nodes[t]) is None)
            if best is None:
                return False
            placed = add_pri(nodes[best], current, force=True)
            assert not isinstance(placed, FailMode)
            gstats.replace(source, left)
            gstats.replace(nodes[best], placed)
            nodes[ndx] = left
            nodes[best] = placed
            table.refresh([left, placed])
            moved = current.copy()
            moved.pnode = best
            insts[inst.idx] = moved
    sstats = Stats(nodes[i] for i in scored_rows)
    for inst in fixed:
        copy = inst.copy()
        copy.idx = len(insts)
        insts.append(copy)
        best = _best_target(table, rows, copy, sstats, nodes, None)
        if best is None:
            return False
        placed = add_pri(nodes[best], copy, force=True)
        assert not isinstance(placed, FailMode)
        if best in scored_rows:
            sstats.replace(nodes[best], placed)
        nodes[best] = placed
        table.refresh([placed])
    return True


def _best_target(table: kernels.NodeTable, rows: np.ndarray, inst: Instance, stats: Stats,
                 nodes: list[Node], allowed: object) -> int | None:
    cols = table.take(rows)
    fail, new = kernels.add_pri(cols, inst, force=True,
                                tag_rejects=None, tag_conflicts=_tag_conflicts(nodes, rows,
                                                                               inst))
    ok = fail == kernels.OK
    if callable(allowed):
        ok &= np.array([bool(allowed(int(t))) for t in rows])
    if not ok.any():
        return None
    old = kernels.metric_matrix(cols)
    after = kernels.metric_matrix(kernels.merged(cols, new))
    offline = cols["offline"]
    score = np.full(len(rows), np.inf)
    online = ok & ~offline
    if online.any():
        score[online] = kernels.scores(stats, [(old[:, online], after[:, online])])
    off = ok & offline
    if off.any():
        score[off] = kernels.scores(stats, [(old[:, off], after[:, off])], offline=True)
    # htools keeps the last of equally good targets
    order = np.flatnonzero(ok)
    values = score[order]
    best = order[len(values) - 1 - int(np.argmin(values[::-1]))]
    return int(rows[best])


def _tag_conflicts(nodes: list[Node], rows: np.ndarray, inst: Instance) -> np.ndarray | None:
    if not inst.excl_tags:
        return None
    return np.array([float(sum(1 for tag in inst.excl_tags if tag in nodes[int(r)].p_tags))
                     for r in rows])


def redundant(cluster: Cluster, node_idxs: Sequence[int] | None = None, *,
              accept_existing: bool = False, ignore_groups: Sequence[int] = ()) -> bool:
    """Whether every node (of ``node_idxs``, default all) can be evacuated."""
    scored = list(node_idxs) if node_idxs is not None else list(range(len(cluster.nodes)))
    for idx in scored:
        node = cluster.nodes[idx]
        if accept_existing and node.offline:
            continue
        if node.group in ignore_groups:
            continue
        if not can_evacuate(cluster, idx, scored):
            return False
    return True


class Redundancy:
    """The capacity check of many trial allocations on one cluster: the verdict of
    each group of the unchanged cluster is computed once, and a trial allocation is
    checked on the groups it changes."""

    def __init__(self, cluster: Cluster, node_idxs: Sequence[int] | None = None, *,
                 accept_existing: bool = False, ignore_groups: Sequence[int] = ()) -> None:
        self.scored = (list(node_idxs) if node_idxs is not None
                       else list(range(len(cluster.nodes))))
        self.accept_existing = accept_existing
        self.ignore_groups = set(ignore_groups)
        self._base = cluster
        self._group_ok: dict[int, bool] = {}

    def _check_group(self, cluster: Cluster, gdx: int) -> bool:
        for idx in self.scored:
            node = cluster.nodes[idx]
            if node.group != gdx or node.group in self.ignore_groups:
                continue
            if self.accept_existing and node.offline:
                continue
            if not can_evacuate(cluster, idx, self.scored):
                return False
        return True

    def base_ok(self, gdx: int) -> bool:
        """Whether group ``gdx`` of the unchanged cluster is redundant."""
        if gdx not in self._group_ok:
            self._group_ok[gdx] = self._check_group(self._base, gdx)
        return self._group_ok[gdx]

    def check(self, trial: Cluster, changed_groups: set[int]) -> bool:
        """Whether ``trial`` (the cluster after an allocation that changed the nodes of
        ``changed_groups``) is redundant."""
        groups = {self._base.nodes[idx].group for idx in self.scored}
        for gdx in sorted(groups - changed_groups):
            if not self.base_ok(gdx):
                return False
        return all(self._check_group(trial, gdx) for gdx in sorted(changed_groups & groups))
