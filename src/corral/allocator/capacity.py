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

from collections.abc import Callable, Sequence

import numpy as np

from corral.allocator.metrics import ExactScorer, Stats, node_vector
from corral.allocator.model import Cluster, Instance, Node
from corral.allocator.nodeops import add_pri, add_sec, check_migration, remove_pri, remove_sec
from corral.allocator.policy import matches_policy
from corral.allocator.types import EVAC_MOVABLE_TEMPLATES, FailMode

__all__ = ["Memo", "Redundancy", "can_evacuate", "redundant"]

#: Scores closer than this are settled by computing them as htools does.
TIE = 1e-9


def _bounds(group: _GroupInfo, ndx: int, mem_delta: dict[int, int],
            to_place: list[Instance]) -> bool | None:
    """Whether ``to_place`` (in order) surely fit on the other nodes of the group
    whatever targets they go to (True), surely do not (False), or only a simulation
    can tell (None)."""
    placeable = [inst for inst in to_place if not inst.forthcoming]
    if not placeable:
        return True
    if group.excl:
        return None
    keep = group.idxs != ndx
    if not keep.any():
        return False
    rooms = group.rooms.copy()
    for idx, delta in mem_delta.items():
        rooms[group.pos[idx]] -= delta
    sizes = [inst.mem if inst.uses_memory else 0 for inst in placeable]
    dsizes = [inst.dsk if inst.local_storage else 0 for inst in placeable]
    return _room_bounds(rooms[keep], group.disks[keep], sizes, dsizes)


def _room_bounds(rooms: np.ndarray, disks: np.ndarray, sizes: Sequence[int],
                 dsizes: Sequence[int]) -> bool | None:
    """The bounds of :func:`_bounds` on targets with free memory ``rooms`` and free
    disk ``disks``, for instances of ``sizes`` memory and ``dsizes`` disk (in order).

    A target takes an instance while its room stays above zero, and can never take
    more than its room. Each target surely takes as many instances of the largest
    size as leave it room; if those add up to the number of instances, no choice of
    targets can fail. If every target refused an instance of size s, each would have
    at most s left: when the rooms of the targets with disk to spare, less what was
    placed before, stay above (targets x s) at every step, no choice can fail either.
    """
    if not sizes:
        return True
    if sum(sizes) > float(np.maximum(rooms - 1, 0).sum()):
        return False
    # rooms only shrink as instances are placed: one that fits no target now never will
    for size, dsize in set(zip(sizes, dsizes, strict=True)):
        fits = rooms > size
        if dsize:
            fits &= disks > dsize
        if not fits.any():
            return False
    d_total = sum(dsizes)
    if d_total and d_total > float(np.maximum(disks - 1, 0).sum()):
        return False
    surely = np.minimum(_guaranteed(rooms, max(sizes)), _guaranteed(disks, max(dsizes)))
    if float(surely.sum()) >= len(sizes):
        return True
    usable = rooms[(rooms > 0) & ((disks > d_total) if d_total else True)]
    count = len(usable)
    left = float(usable.sum())
    for size in sizes:
        if left <= count * size:
            return None
        left -= size
    return True


def _guaranteed(rooms: np.ndarray, size: int) -> np.ndarray:
    """How many instances of at most ``size`` targets with ``rooms`` surely take
    (a target takes one while room - size stays above zero)."""
    if size <= 0:
        return np.where(rooms > 0, np.inf, 0.0)
    return np.where(rooms > 0, np.ceil(rooms / size) - 1, 0.0)


def can_evacuate(cluster: Cluster, ndx: int, scored: Sequence[int] | None = None,
                 base: _Base | None = None) -> bool:
    """Whether node ``ndx`` could be evacuated (see the module text). ``scored`` are
    the nodes whose score picks where non-movable instances are re-created (htools:
    the nodes the check runs on; default all); ``base`` is what the checks of the
    other nodes of the same cluster share."""
    base = base if base is not None else _Base(cluster)
    node = cluster.nodes[ndx]
    instances = cluster.instances
    pri = [instances[idx] for idx in reversed(node.p_list)]
    drbd = [inst for inst in pri if inst.disk_template == "drbd"]
    shared = [inst for inst in pri
              if inst.disk_template != "drbd" and inst.disk_template in EVAC_MOVABLE_TEMPLATES]
    fixed = [inst for inst in pri if inst.disk_template != "drbd"
             and inst.disk_template not in EVAC_MOVABLE_TEMPLATES]
    fixed.sort(key=lambda inst: -inst.mem)
    group = base.group(node.group)
    targets = [idx for idx in group.order if idx != ndx]
    # the policy of the group decides whether an instance can be re-created at all
    if fixed and targets:
        first = cluster.nodes[targets[0]]
        for inst in fixed:
            if not base.fits_policy(inst, first):
                return False
    # failovers of drbd instances only need their secondaries' memory
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
        if not group.mig:
            verdict = _bounds(group, ndx, mem_delta, shared + fixed)
            if verdict is not None:
                return verdict
    return _simulate(base, ndx, drbd, shared, fixed, targets, scored)


def _shape(inst: Instance) -> tuple[object, ...]:
    return (inst.mem, inst.dsk, inst.vcpus, inst.spindle_use, inst.util, inst.uses_memory,
            inst.local_storage, inst.not_offline, inst.forthcoming, inst.excl_tags,
            inst.total_spindles, inst.location_score, inst.dsrd_loc_tags)


class _GroupInfo:
    """A group's nodes (in index order) with their free memory and disk as arrays."""

    def __init__(self, nodes: list[Node]) -> None:
        self.order = [node.idx for node in nodes]
        self.idxs = np.array(self.order, dtype=np.int64)
        self.pos = {idx: pos for pos, idx in enumerate(self.order)}
        self.rooms = np.array([node.unallocated_mem for node in nodes], dtype=np.float64)
        self.disks = np.array([node.f_dsk for node in nodes], dtype=np.float64)
        self.excl = any(node.excl for node in nodes)
        self.mig = any(node.mig_tags or node.rmig_tags for node in nodes)
        #: the nodes themselves: a node changes by being replaced, so this identifies
        #: the group's state (see :class:`Memo`)
        self.nodes = tuple(nodes)


class _Base:
    """What the simulations of one capacity check share: the node vectors, trial
    placements and aggregates of the unchanged cluster they all start from."""

    def __init__(self, cluster: Cluster, memo: Memo | None = None,
                 parent: _Base | None = None) -> None:
        self.cluster = cluster
        self.memo = memo
        self.groups: dict[int, _GroupInfo] = {}
        self.vecs: dict[int, list[float]] = {}
        self.trials: dict[tuple[int, tuple[object, ...]], tuple[Node, list[float]] | None] = {}
        self.stats: dict[tuple[int, ...], Stats] = {}
        self.policy: dict[tuple[object, ...], bool] = {}
        #: a base of the same cluster before a few nodes changed (a trial's cluster
        #: before the trial): what it computed for the other nodes is reused
        self.parent = parent
        self.changed: set[int] = set()
        if parent is not None:
            if len(parent.cluster.nodes) != len(cluster.nodes):
                self.parent = None
            else:
                self.changed = {idx for idx, (a, b) in enumerate(
                    zip(cluster.nodes, parent.cluster.nodes, strict=True)) if a is not b}
                self.policy = parent.policy

    def group(self, gdx: int) -> _GroupInfo:
        info = self.groups.get(gdx)
        if info is None:
            info = self.groups[gdx] = _GroupInfo(
                [node for node in self.cluster.nodes if node.group == gdx])
        return info

    def vec(self, idx: int) -> list[float]:
        if self.parent is not None and idx not in self.changed:
            return self.parent.vec(idx)
        vec = self.vecs.get(idx)
        if vec is None:
            vec = self.vecs[idx] = node_vector(self.cluster.nodes[idx])
        return vec

    def trials_of(self, idx: int) -> dict[tuple[int, tuple[object, ...]],
                                          tuple[Node, list[float]] | None]:
        """Where trial placements on node ``idx`` as it is here are kept."""
        if self.parent is not None and idx not in self.changed:
            return self.parent.trials_of(idx)
        return self.trials

    def _stats(self, key: tuple[int, ...]) -> Stats:
        stats = self.stats.get(key)
        if stats is None:
            if self.parent is not None:
                stats = self.parent._stats(key).copy()
                nodes = self.cluster.nodes
                in_key = set(key) if self.changed else ()
                for idx in sorted(self.changed):
                    if idx in in_key:
                        stats.replace_vectors(self.parent.vec(idx), self.vec(idx),
                                              nodes[idx].offline)
            else:
                stats = Stats(self.cluster.nodes[i] for i in key)
            self.stats[key] = stats
        return stats

    def stats_of(self, scored: Sequence[int]) -> Stats:
        return self._stats(tuple(scored)).copy()

    def fits_policy(self, inst: Instance, target: Node) -> bool:
        key = (_shape(inst), inst.disk_template, len(inst.disks), tuple(inst.disks),
               id(target.policy), target.excl)
        found = self.policy.get(key)
        if found is None:
            found = self.policy[key] = matches_policy(inst, target.policy, target.excl) is None
        return found


class _Sim:
    """The nodes of one evacuation being simulated, with the aggregates of the node
    set that scores it and the vectors of the current nodes."""

    def __init__(self, base: _Base, nodes: list[Node], scored: Sequence[int]) -> None:
        self.base = base
        self.nodes = nodes
        self.scored = list(scored)
        self.in_scored = set(self.scored)
        self.stats = base.stats_of(self.scored)
        base_nodes = base.cluster.nodes
        for idx in self.scored:
            if nodes[idx] is not base_nodes[idx]:
                self.stats.replace_vectors(base.vec(idx), node_vector(nodes[idx]),
                                           nodes[idx].offline)
        self.vecs: dict[int, list[float]] = {}
        self.trials: dict[tuple[int, tuple[object, ...]], tuple[Node, list[float]] | None] = {}

    def vec(self, idx: int) -> list[float]:
        if self.nodes[idx] is self.base.cluster.nodes[idx]:
            return self.base.vec(idx)
        vec = self.vecs.get(idx)
        if vec is None:
            vec = self.vecs[idx] = node_vector(self.nodes[idx])
        return vec

    def place(self, idx: int, new: Node, vec: list[float] | None = None) -> None:
        new_vec = vec if vec is not None else node_vector(new)
        if idx in self.in_scored:
            self.stats.replace_vectors(self.vec(idx), new_vec, new.offline)
        self.nodes[idx] = new
        self.vecs[idx] = new_vec
        for key in [k for k in self.trials if k[0] == idx]:
            del self.trials[key]

    def trial(self, idx: int, inst: Instance) -> tuple[Node, list[float]] | None:
        """The node ``idx`` with ``inst`` added (forced), or None if it does not fit."""
        key = (idx, _shape(inst))
        at_base = self.nodes[idx] is self.base.cluster.nodes[idx]
        trials = self.base.trials_of(idx) if at_base else self.trials
        if key not in trials:
            new = add_pri(self.nodes[idx], inst, force=True)
            trials[key] = None if isinstance(new, FailMode) else (new, node_vector(new))
        return trials[key]

    def best(self, targets: Sequence[int], inst: Instance, stats: Stats,
             allowed: Callable[[int], bool] | None = None) -> tuple[int, Node, list[float]] | None:
        """The target whose placement scores best (the last of equal ones)."""
        found: list[tuple[float, int, Node, list[float]]] = []
        for idx in targets:
            if allowed is not None and not allowed(idx):
                continue
            trial = self.trial(idx, inst)
            if trial is None:
                continue
            new, vec = trial
            if idx in self.in_scored:
                value = stats.score_with(self.vec(idx), vec, new.offline)
            else:
                value = stats.score()
            found.append((value, idx, new, vec))
        if not found:
            return None
        low = min(item[0] for item in found)
        near = [item for item in found if item[0] <= low + TIE]
        if len(near) > 1:
            exact = ExactScorer([self.nodes[i] for i in self.scored])
            near = [(exact.score([new]) if idx in self.in_scored else exact.score(), idx, new,
                     vec) for _, idx, new, vec in near]
            low = min(item[0] for item in near)
            near = [item for item in near if item[0] == low]
        _, idx, new, vec = near[-1]
        return idx, new, vec


def _simulate(base: _Base, ndx: int, drbd: list[Instance], shared: list[Instance],
              fixed: list[Instance], targets: list[int],
              scored: Sequence[int] | None) -> bool:
    """Evacuate node ``ndx`` step by step as htools does; True if every step fits."""
    cluster = base.cluster
    nodes: list[Node] = list(cluster.nodes)
    insts = cluster.instances
    if drbd:
        failed_over = _failovers(base, ndx, drbd)
        if failed_over is None:
            return False
        for new in failed_over:
            nodes[new.idx] = new
    if not shared and not fixed:
        return True
    if not targets:
        return False
    group_rows = [n.idx for n in nodes if n.group == nodes[ndx].group]
    if shared:
        gsim = _Sim(base, nodes, group_rows)
        for inst in shared:
            current = insts[inst.idx]
            source = gsim.nodes[ndx]
            gsim.place(ndx, remove_pri(source, current))

            def may_migrate(tdx: int, src: Node = source) -> bool:
                return check_migration(src, gsim.nodes[tdx]) is None

            choice = gsim.best(targets, current, gsim.stats, may_migrate)
            if choice is None:
                return False
            gsim.place(*choice)
        nodes = gsim.nodes
    sim = _Sim(base, nodes, scored if scored is not None else range(len(nodes)))
    sizes = [inst.mem if inst.uses_memory and not inst.forthcoming else 0 for inst in fixed]
    dsizes = [inst.dsk if inst.local_storage and not inst.forthcoming else 0
              for inst in fixed]
    plain_targets = not any(sim.nodes[t].excl for t in targets)
    for pos, inst in enumerate(fixed):
        if plain_targets and pos and (sizes[pos] < sizes[pos - 1]
                                      or dsizes[pos] != dsizes[pos - 1]):
            # the rest may now be provably placeable (or not) whatever the choices
            verdict = _room_bounds(
                np.array([sim.nodes[t].unallocated_mem for t in targets], dtype=np.float64),
                np.array([sim.nodes[t].f_dsk for t in targets], dtype=np.float64),
                sizes[pos:], dsizes[pos:])
            if verdict is not None:
                return verdict
        choice = sim.best(targets, inst, sim.stats)
        if choice is None:
            return False
        sim.place(*choice)
    return True


def _failovers(base: _Base, ndx: int, drbd: list[Instance]) -> list[Node] | None:
    """The nodes after failing over the drbd instances ``drbd`` of node ``ndx`` one by
    one (None if one does not fit). They depend only on that node, the instances'
    secondaries and the instances, so the memo keeps them for other checks."""
    nodes = base.cluster.nodes
    cache = base.memo.failovers if base.memo is not None else None
    key: tuple[object, ...] = ()
    if cache is not None:
        key = (ndx, nodes[ndx], *(nodes[inst.snode] for inst in drbd),
               *(id(inst) for inst in drbd))
        if key in cache:
            return cache[key][0]
    # htools' failover move (moves.apply_move), forced, on one private copy per node
    own: dict[int, Node] = {}
    result: list[Node] | None = None
    for inst in drbd:
        pdx, sdx = inst.pnode, inst.snode
        if check_migration(own.get(pdx, nodes[pdx]), own.get(sdx, nodes[sdx])) is not None:
            break
        prim = own.get(pdx)
        if prim is None:
            prim = own[pdx] = nodes[pdx].copy()
        sec = own.get(sdx)
        if sec is None:
            sec = own[sdx] = nodes[sdx].copy()
        remove_pri(prim, inst, inplace=True)
        remove_sec(sec, inst, inplace=True)
        if isinstance(add_pri(sec, inst, True, inplace=True), FailMode):
            break
        if isinstance(add_sec(prim, inst, sdx, True, ignore_disks=prim.offline,
                              inplace=True), FailMode):
            break
    else:
        result = list(own.values())
    if cache is not None:
        if len(cache) >= base.memo.size:    # type: ignore[union-attr]
            del cache[next(iter(cache))]
        cache[key] = (result, drbd)       # the instances stay alive with their ids
    return result


class Memo:
    """Verdicts of :func:`can_evacuate` kept between checks: a node's verdict depends
    on the nodes of its group (which are replaced, never changed, when instances move),
    so it is reused while none of them changed. Bounded (oldest forgotten first)."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self.verdicts: dict[tuple[object, ...], bool] = {}
        #: per group, the node whose evacuation failed last: checked first next time
        self.last_failed: dict[int, int] = {}
        #: the capacity check's base of the last cluster checked (see Redundancy)
        self.root: _Base | None = None
        #: the nodes after failing over a node's drbd instances (see _failovers)
        self.failovers: dict[tuple[object, ...], tuple[list[Node] | None, object]] = {}

    def key(self, base: _Base, ndx: int, scored: Sequence[int]) -> tuple[object, ...]:
        return (ndx, len(scored), base.group(base.cluster.nodes[ndx].group).nodes)

    def get(self, key: tuple[object, ...]) -> bool | None:
        return self.verdicts.get(key)

    def put(self, key: tuple[object, ...], verdict: bool) -> None:
        if len(self.verdicts) >= self.size:
            del self.verdicts[next(iter(self.verdicts))]
        self.verdicts[key] = verdict


def _check(cluster: Cluster, idx: int, scored: Sequence[int], base: _Base,
           memo: Memo | None) -> bool:
    if memo is None:
        return can_evacuate(cluster, idx, scored, base)
    key = memo.key(base, idx, scored)
    verdict = memo.get(key)
    if verdict is None:
        verdict = can_evacuate(cluster, idx, scored, base)
        memo.put(key, verdict)
    return verdict


def redundant(cluster: Cluster, node_idxs: Sequence[int] | None = None, *,
              accept_existing: bool = False, ignore_groups: Sequence[int] = (),
              memo: Memo | None = None) -> bool:
    """Whether every node (of ``node_idxs``, default all) can be evacuated; ``memo``
    keeps verdicts between calls on clusters that share nodes."""
    scored = list(node_idxs) if node_idxs is not None else list(range(len(cluster.nodes)))
    base = _Base(cluster, memo)
    for idx in scored:
        node = cluster.nodes[idx]
        if accept_existing and node.offline:
            continue
        if node.group in ignore_groups:
            continue
        if not _check(cluster, idx, scored, base, memo):
            return False
    return True


class Redundancy:
    """The capacity check of many trial allocations on one cluster: the verdict of
    each group of the unchanged cluster is computed once, and a trial allocation is
    checked on the groups it changes."""

    def __init__(self, cluster: Cluster, node_idxs: Sequence[int] | None = None, *,
                 accept_existing: bool = False, ignore_groups: Sequence[int] = (),
                 memo: Memo | None = None) -> None:
        self.scored = (list(node_idxs) if node_idxs is not None
                       else list(range(len(cluster.nodes))))
        self.accept_existing = accept_existing
        self.ignore_groups = set(ignore_groups)
        self.memo = memo
        self._base = cluster
        self._root_base: _Base | None = None
        self._group_ok: dict[int, bool] = {}

    def _check_group(self, cluster: Cluster, gdx: int) -> bool:
        if gdx in self.ignore_groups:
            return True
        base = _Base(cluster, self.memo, self._root())
        nodes = cluster.nodes
        order = [idx for idx in self.scored if nodes[idx].group == gdx
                 and not (self.accept_existing and nodes[idx].offline)]
        # every node must pass, so the order is free: the nodes the trial changed and
        # the one that failed last time are the likeliest to fail, and go first
        first = [idx for idx in order if nodes[idx] is not self._base.nodes[idx]]
        last = self.memo.last_failed.get(gdx) if self.memo is not None else None
        if last is not None and last in order and last not in first:
            first.append(last)
        if first:
            chosen = set(first)
            order = first + [idx for idx in order if idx not in chosen]
        for idx in order:
            if not _check(cluster, idx, self.scored, base, self.memo):
                if self.memo is not None:
                    self.memo.last_failed[gdx] = idx
                return False
        return True

    def _root(self) -> _Base:
        """The base of the unchanged cluster, kept in the memo for the next checks
        while the cluster's nodes stay the same."""
        if self._root_base is None:
            memo = self.memo
            kept = memo.root if memo is not None else None
            nodes = self._base.nodes
            insts = self._base.instances
            if (kept is not None and len(kept.cluster.nodes) == len(nodes)
                    and len(kept.cluster.instances) == len(insts)
                    and all(a is b for a, b in zip(kept.cluster.nodes, nodes, strict=True))
                    and all(a is b for a, b in zip(kept.cluster.instances, insts,
                                                   strict=True))):
                self._root_base = kept
            else:
                # a fork: the cluster checked may change in place later, the root not
                self._root_base = _Base(self._base.fork(), memo)
                if memo is not None:
                    memo.root = self._root_base
        return self._root_base

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
