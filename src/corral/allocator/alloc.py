"""Placing a new instance: on one node, or on a primary and secondary pair.

Every allowed node (or pair in one group) is tried: the instance policy of the node's
group, then htools' node checks; each failure is counted by its reason (the
``FailMem: 3, FailDisk: 1`` of hail's answer). Placements that fit are ranked by the
cluster score after them, and with capacity checks the best one that keeps the
cluster N+1 redundant (see :mod:`corral.allocator.capacity`) wins; the ones ranked
before it count as ``FailN1``. Among equal scores htools keeps the last candidate
tried, and so does this.

On a cluster of several groups, each allocable group is tried and the groups are
ranked by allocation policy (``preferred`` before ``last_resort``) and then by the
score of their best placement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from corral.allocator import kernels
from corral.allocator.capacity import Memo, Redundancy
from corral.allocator.metrics import ExactScorer, Stats, node_vector
from corral.allocator.model import NO_NODE, Cluster, Group, Instance, Node
from corral.allocator.nodeops import add_pri, add_sec, desired_location_score, remove_pri
from corral.allocator.policy import matches_policy
from corral.allocator.textout import fixed
from corral.allocator.types import FailMode

__all__ = [
    "AllocError",
    "AllocOptions",
    "Placement",
    "Solution",
    "alloc_in_group",
    "alloc_list",
    "alloc_multi_group",
    "allocate",
    "allocate_secondary",
    "apply_placement",
    "candidate_nodes",
    "try_alloc",
]


class AllocError(ValueError):
    """An allocation that cannot even be tried (no nodes, an unknown group...)."""


@dataclass
class AllocOptions:
    """What changes how instances are placed."""

    #: ignore soft limits (``--ignore-soft-errors``)
    force: bool = False
    #: check global N+1 redundancy of each placement (hail's default)
    capacity: bool = True
    #: only these node names may receive the instance
    restrict_to: Sequence[str] | None = None
    #: in capacity checks, skip offline nodes (``--accept-existing-errors``)
    accept_existing: bool = False
    #: in capacity checks, skip these groups
    ignore_groups: Sequence[int] = ()
    #: verdicts of capacity checks kept between allocations (see capacity.Memo)
    memo: Memo | None = None


@dataclass
class Placement:
    """A placement that fits: its nodes (primary first), the score after it and the
    changed nodes."""

    nodes: tuple[int, ...]
    score: float
    changed: list[Node]
    inst: Instance


@dataclass
class Solution:
    """The outcome of trying an instance on a set of nodes."""

    failures: list[int] = field(default_factory=lambda: [0] * len(FailMode))
    allocs: int = 0
    best: Placement | None = None
    log: list[str] = field(default_factory=list)

    def fail(self, mode: FailMode, count: int = 1) -> None:
        """Count ``count`` failures of reason ``mode``."""
        self.failures[mode] += count

    @property
    def failure_count(self) -> int:
        """How many candidates did not fit."""
        return sum(self.failures)

    def reasons(self) -> str:
        """``FailMem: 2, FailDisk: 1`` (the non-zero counts, in htools' order)."""
        return ", ".join(f"{FailMode(i).label}: {n}" for i, n in enumerate(self.failures)
                         if n > 0)

    def describe(self, cluster: Cluster) -> str:
        """The line hail reports for this solution."""
        if self.best is None:
            return ("No valid allocation solutions, failure reasons: "
                    + (self.reasons() if self.failure_count else "unknown reasons"))
        names = "/".join(cluster.nodes[i].name for i in self.best.nodes)
        return (f"score: {self.score_text()}, successes {self.allocs}, failures "
                f"{self.failure_count} ({self.reasons()}) for node(s) {names}")

    def score_text(self) -> str:
        """The score of the placement as hail prints it."""
        assert self.best is not None
        return fixed(self.best.score, 8)

    def merge(self, other: Solution) -> None:
        """Add another solution's counts; keep the better placement (the other one
        on equal scores)."""
        for i, n in enumerate(other.failures):
            self.failures[i] += n
        self.allocs += other.allocs
        if other.best is not None and (self.best is None
                                       or not self.best.score < other.best.score):
            self.best = other.best
        self.log = other.log + self.log


def candidate_nodes(cluster: Cluster, node_idxs: Sequence[int], count: int,
                    restrict_to: Sequence[str] | None,
                    drop_unallocable: bool = False) -> list[int] | list[tuple[int, list[int]]]:
    """The nodes (``count`` 1) or primary/secondaries pairs (``count`` 2) an instance
    may go to: online nodes, of allocable groups if ``drop_unallocable``, among
    ``restrict_to`` if given; a pair's nodes are in the same group."""
    allowed = set(restrict_to) if restrict_to is not None else None
    nodes = [cluster.nodes[i] for i in node_idxs]
    nodes = [n for n in nodes if not n.offline
             and (not drop_unallocable or cluster.groups[n.group].allocable)
             and (allowed is None or n.name in allowed)]
    if count == 1:
        return [n.idx for n in nodes]
    if count == 2:
        by_group: dict[int, list[int]] = {}
        for n in nodes:
            by_group.setdefault(n.group, []).append(n.idx)
        pairs = []
        for n in nodes:
            members = by_group[n.group]
            if len(members) > 1:
                pairs.append((n.idx, [i for i in members if i != n.idx]))
        return pairs
    raise AllocError("Unsupported number of nodes, only one or two  supported")


#: Scores closer than this are settled by computing them as htools does.
TIE = 1e-9


class _Context:
    """A cluster being allocated on: its node table and the score of a node set."""

    def __init__(self, cluster: Cluster, scored: Sequence[int],
                 table: kernels.NodeTable | None = None) -> None:
        self.cluster = cluster
        self.table = table if table is not None else kernels.NodeTable(cluster.nodes)
        self.scored = list(scored)
        self.stats = Stats(cluster.nodes[i] for i in self.scored)
        self.has_locations = any(n.loc_tags for n in cluster.nodes)
        self._exact: ExactScorer | None = None
        self._vectors: dict[int, list[float]] = {}
        self._plans: dict[tuple[bool, bool], kernels.Plan] = {}
        self._peers: np.ndarray | None = None

    def plan(self, inst: Instance) -> kernels.Plan:
        """The metrics placing ``inst`` can change (see :class:`kernels.Plan`)."""
        key = (bool(inst.excl_tags), inst.forthcoming)
        found = self._plans.get(key)
        if found is None:
            nodes = [self.cluster.nodes[i] for i in self.scored]
            insts = [*self.cluster.instances, inst]
            found = self._plans[key] = kernels.Plan(nodes, insts, tags=key[0],
                                                    locations=self.has_locations)
        return found

    def peers(self, prow: np.ndarray, srow: np.ndarray) -> np.ndarray:
        """What each secondary of ``srow`` reserves for its primary of ``prow``."""
        nodes = self.cluster.nodes
        if len(nodes) > 2048:
            return np.array([float(nodes[int(s)].peers.get(int(p), 0))
                             for p, s in zip(prow, srow, strict=True)])
        if self._peers is None:
            matrix = np.zeros((len(nodes), len(nodes)))
            for node in nodes:
                for pdx, mem in node.peers.items():
                    matrix[node.idx, pdx] = mem
            self._peers = matrix
        return np.asarray(self._peers[srow, prow], dtype=np.float64)

    def vector(self, idx: int) -> list[float]:
        """The metric vector of node ``idx`` as it is now."""
        vec = self._vectors.get(idx)
        if vec is None:
            vec = self._vectors[idx] = node_vector(self.cluster.nodes[idx])
        return vec

    def exact(self, changed: list[Node]) -> float:
        """The score with ``changed`` nodes, as htools computes it for one node."""
        if self._exact is None:
            self._exact = ExactScorer([self.cluster.nodes[i] for i in self.scored])
        return self._exact.score(changed)

    def exact_pair(self, changed: list[Node]) -> float:
        """The score with ``changed`` nodes, as htools computes it for a pair (updating
        the aggregates twice)."""
        stats = self.stats.copy()
        for node in changed:
            stats.replace(self.cluster.nodes[node.idx], node)
        return stats.score()

    def apply(self, changed: list[Node]) -> None:
        """Put changed nodes into the cluster, the table and the scores."""
        scored = set(self.scored)
        for node in changed:
            if node.idx in scored:
                self.stats.replace(self.cluster.nodes[node.idx], node)
            self.cluster.nodes[node.idx] = node
            self._vectors.pop(node.idx, None)
            if self._peers is not None:
                self._peers[node.idx, :] = 0.0
                for pdx, mem in node.peers.items():
                    self._peers[node.idx, pdx] = mem
        self.table.refresh(changed)
        if self._exact is not None:
            self._exact.update([n for n in changed if n.idx in scored])


def _tag_arrays(nodes: list[Node], rows: np.ndarray,
                inst: Instance) -> tuple[np.ndarray | None, np.ndarray | None]:
    if not inst.excl_tags:
        return None, None
    present = np.array([[tag in nodes[int(r)].p_tags for tag in inst.excl_tags]
                        for r in rows], dtype=bool).reshape(len(rows), len(inst.excl_tags))
    return np.asarray(present.any(axis=1)), present.sum(axis=1).astype(np.float64)


def _loc_delta(ctx: _Context, rows: np.ndarray, inst: Instance) -> np.ndarray | int:
    if not ctx.has_locations:
        return 0
    nodes = ctx.cluster.nodes
    return np.array([inst.location_score + desired_location_score(nodes[int(r)], inst)
                     for r in rows], dtype=np.float64)


def _count_failures(sol: Solution, fail: np.ndarray) -> None:
    bad = fail[fail != kernels.OK]
    if len(bad):
        for code, count in enumerate(np.bincount(bad, minlength=len(FailMode))):
            if count:
                sol.fail(FailMode(code), int(count))


Fits = tuple[np.ndarray, np.ndarray]


#: Below this many candidates, trying them one by one beats setting up arrays.
SCALAR_BELOW = 48


def _scalar(ctx: _Context, inst: Instance, cands: list[tuple[int, ...]], opts: AllocOptions,
            sol: Solution) -> Fits:
    """Try ``inst`` on each candidate (one node, or primary and secondary) one by one;
    count failures, return the scores and nodes of the fits."""
    nodes = ctx.cluster.nodes
    scored = set(ctx.scored)
    values: list[float] = []
    found: list[tuple[int, ...]] = []
    policy: dict[tuple[int, bool], FailMode | None] = {}
    for cand in cands:
        primary = nodes[cand[0]]
        key = (primary.group, primary.excl)
        if key not in policy:
            policy[key] = matches_policy(inst, primary.policy, primary.excl)
        bad = policy[key]
        if bad is not None:
            sol.fail(bad)
            continue
        if len(cand) == 1:
            new_p = add_pri(primary, inst, opts.force)
            if isinstance(new_p, FailMode):
                sol.fail(new_p)
                continue
            new_nodes = [new_p]
        else:
            applied = apply_placement(ctx.cluster, inst, cand, opts.force)
            if isinstance(applied, FailMode):
                sol.fail(applied)
                continue
            new_nodes = applied[0]
        stats = ctx.stats
        changed = [n for n in new_nodes if n.idx in scored]
        if len(changed) == 1:
            value = stats.score_with(ctx.vector(changed[0].idx), node_vector(changed[0]),
                                     changed[0].offline)
        else:
            trial = stats.copy()
            for node in changed:
                trial.replace(nodes[node.idx], node)
            value = trial.score()
        values.append(value)
        found.append(cand)
    width = len(cands[0]) if cands else 1
    return (np.array(values, dtype=np.float64),
            np.array(found, dtype=np.int64).reshape(len(found), width))


def _scalar_pairs(ctx: _Context, inst: Instance, pairs: list[tuple[int, list[int]]],
                  opts: AllocOptions, sol: Solution) -> Fits:
    """:func:`_scalar` for primary/secondary pairs: the primary's half of a placement
    (policy, then the primary's checks) is done once for all its secondaries."""
    nodes = ctx.cluster.nodes
    scored = set(ctx.scored)
    stats = ctx.stats
    values: list[float] = []
    found: list[tuple[int, int]] = []
    policy: dict[tuple[int, bool], FailMode | None] = {}
    for pdx, secs in pairs:
        primary = nodes[pdx]
        key = (primary.group, primary.excl)
        if key not in policy:
            policy[key] = matches_policy(inst, primary.policy, primary.excl)
        bad = policy[key]
        if bad is not None:
            sol.fail(bad, len(secs))
            continue
        halves: dict[int, tuple[Instance, Node | FailMode]] = {}
        for sdx in secs:
            secondary = nodes[sdx]
            # the location score of a pair is the instance's (as apply_placement)
            loc = (len(primary.loc_tags & secondary.loc_tags)
                   if primary.loc_tags and secondary.loc_tags else 0)
            half = halves.get(loc)
            if half is None:
                # the node operations do not read the instance's nodes, only its
                # location score
                placed = inst
                if loc != inst.location_score:
                    placed = inst.copy()
                    placed.location_score = loc
                half = halves[loc] = (placed, add_pri(primary, placed, opts.force))
            placed, new_p = half
            if isinstance(new_p, FailMode):
                if not primary.loc_tags:
                    sol.fail(new_p, len(secs))
                    break
                sol.fail(new_p)
                continue
            new_s = add_sec(secondary, placed, pdx)
            if isinstance(new_s, FailMode):
                sol.fail(new_s)
                continue
            trial = stats.copy()
            for node in (new_p, new_s):
                if node.idx in scored:
                    trial.replace(nodes[node.idx], node)
            values.append(trial.score())
            found.append((pdx, sdx))
    return (np.array(values, dtype=np.float64),
            np.array(found, dtype=np.int64).reshape(len(found), 2))


#: The outcome of a candidate that passes every check (see :func:`outcomes`).
FITS = -1


def outcomes(cluster: Cluster, inst: Instance,
             candidates: list[int] | list[tuple[int, list[int]]], force: bool) -> list[int]:
    """What the checks say of each candidate (as :func:`try_alloc` tries them, before
    scores and capacity checks): the failure mode, or :data:`FITS`."""
    nodes = cluster.nodes
    out: list[int] = []
    policy: dict[tuple[int, bool], FailMode | None] = {}
    for cand in candidates:
        pdx, secs = (cand, None) if isinstance(cand, int) else cand
        primary = nodes[pdx]
        key = (primary.group, primary.excl)
        if key not in policy:
            policy[key] = matches_policy(inst, primary.policy, primary.excl)
        bad = policy[key]
        if secs is None:
            if bad is None:
                new_p = add_pri(primary, inst, force)
                bad = new_p if isinstance(new_p, FailMode) else None
            out.append(FITS if bad is None else int(bad))
            continue
        if bad is not None:
            out.extend([int(bad)] * len(secs))
            continue
        halves: dict[int, tuple[Instance, Node | FailMode]] = {}
        for sdx in secs:
            secondary = nodes[sdx]
            loc = (len(primary.loc_tags & secondary.loc_tags)
                   if primary.loc_tags and secondary.loc_tags else 0)
            half = halves.get(loc)
            if half is None:
                placed = inst
                if loc != inst.location_score:
                    placed = inst.copy()
                    placed.location_score = loc
                half = halves[loc] = (placed, add_pri(primary, placed, force))
            placed, new_p = half
            if isinstance(new_p, FailMode):
                out.append(int(new_p))
                continue
            new_s = add_sec(secondary, placed, pdx)
            out.append(int(new_s) if isinstance(new_s, FailMode) else FITS)
    return out


def _single(ctx: _Context, inst: Instance, rows: list[int], opts: AllocOptions,
            sol: Solution) -> Fits:
    """Try ``inst`` alone on each of ``rows``; count failures, return the scores and
    nodes of the fits (in the order of ``rows``)."""
    if len(rows) < SCALAR_BELOW:
        return _scalar(ctx, inst, [(row,) for row in rows], opts, sol)
    cluster = ctx.cluster
    fit_rows: list[np.ndarray] = []
    fit_scores: list[np.ndarray] = []
    by_group: dict[int, list[int]] = {}
    for row in rows:
        by_group.setdefault(cluster.nodes[row].group, []).append(row)
    for group_rows in by_group.values():
        excl_rows = [r for r in group_rows if cluster.nodes[r].excl]
        plain_rows = [r for r in group_rows if not cluster.nodes[r].excl]
        for subset, excl in ((plain_rows, False), (excl_rows, True)):
            if not subset:
                continue
            policy = cluster.nodes[subset[0]].policy
            bad = matches_policy(inst, policy, excl)
            if bad is not None:
                sol.fail(bad, len(subset))
                continue
            arr = np.array(subset, dtype=np.int64)
            cols = ctx.table.take(arr)
            rejects, conflicts = _tag_arrays(cluster.nodes, arr, inst)
            fail, new = kernels.add_pri(cols, inst, opts.force, rejects, conflicts,
                                        _loc_delta(ctx, arr, inst))
            _count_failures(sol, fail)
            ok = fail == kernels.OK
            if not ok.any():
                continue
            plan = ctx.plan(inst)
            old = kernels.metric_matrix(cols, plan.idx)
            after = kernels.metric_matrix(kernels.merged(cols, new), plan.idx)
            d, e = plan.deltas([(old[:, ok], after[:, ok])])
            fit_scores.append(plan.score(ctx.stats, d, e))
            fit_rows.append(arr[ok])
    if not fit_rows:
        return np.zeros(0), np.zeros((0, 1), dtype=np.int64)
    found = np.concatenate(fit_rows)
    values = np.concatenate(fit_scores)
    order = {row: pos for pos, row in enumerate(rows)}
    by_order = np.argsort(np.array([order[int(r)] for r in found]), kind="stable")
    return values[by_order], found[by_order][:, None]


_CHUNK = 1 << 15


def _pairs(ctx: _Context, inst: Instance, pairs: list[tuple[int, list[int]]],
           opts: AllocOptions, sol: Solution) -> Fits:
    """Try ``inst`` on each primary/secondary pair; count failures, return the scores
    and nodes of the fits (in the order htools tries them)."""
    if sum(len(secs) for _, secs in pairs) < SCALAR_BELOW:
        return _scalar_pairs(ctx, inst, pairs, opts, sol)
    cluster = ctx.cluster
    nodes = cluster.nodes
    fits: list[tuple[np.ndarray, np.ndarray]] = []
    prims = np.array([p for p, _ in pairs], dtype=np.int64)
    pcols = ctx.table.take(prims)
    policy_fail = [matches_policy(inst, nodes[int(p)].policy, nodes[int(p)].excl)
                   for p in prims]
    loc_scored = ctx.has_locations
    if not loc_scored:
        rejects, conflicts = _tag_arrays(nodes, prims, inst)
        pfail, pnew = kernels.add_pri(pcols, inst, opts.force, rejects, conflicts,
                                      _loc_delta(ctx, prims, inst))
        plan = ctx.plan(inst)
        pold_m = kernels.metric_matrix(pcols, plan.idx)
        pnew_m = kernels.metric_matrix(kernels.merged(pcols, pnew), plan.idx)
    start = 0
    while start < len(pairs):
        stop = start
        size = 0
        while stop < len(pairs) and (size == 0 or size + len(pairs[stop][1]) <= _CHUNK):
            size += len(pairs[stop][1])
            stop += 1
        _pair_chunk(ctx, inst, pairs, start, stop, prims, policy_fail, opts, sol, fits,
                    None if loc_scored else (pfail, pold_m, pnew_m))
        start = stop
    if not fits:
        return np.zeros(0), np.zeros((0, 2), dtype=np.int64)
    return (np.concatenate([f[0] for f in fits]), np.concatenate([f[1] for f in fits]))


def _pair_chunk(ctx: _Context, inst: Instance, pairs: list[tuple[int, list[int]]],
                start: int, stop: int, prims: np.ndarray,
                policy_fail: list[FailMode | None], opts: AllocOptions, sol: Solution,
                fits: list[tuple[np.ndarray, np.ndarray]],
                prim_eval: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> None:
    nodes = ctx.cluster.nodes
    p_pos: list[int] = []
    s_rows: list[int] = []
    for pos in range(start, stop):
        if policy_fail[pos] is not None:
            sol.fail(policy_fail[pos], len(pairs[pos][1]))    # type: ignore[arg-type]
            continue
        p_pos.extend([pos] * len(pairs[pos][1]))
        s_rows.extend(pairs[pos][1])
    if not s_rows:
        return
    ppos = np.array(p_pos, dtype=np.int64)
    prow = prims[ppos]
    srow = np.array(s_rows, dtype=np.int64)
    if prim_eval is None:
        # location tags: every pair gives the instance its own location score
        pfail_l = []
        pold_l = []
        pnew_l = []
        for p, s in zip(prow, srow, strict=True):
            trial = inst.copy()
            trial.location_score = len(nodes[int(p)].loc_tags & nodes[int(s)].loc_tags)
            one = np.array([p], dtype=np.int64)
            cols = ctx.table.take(one)
            rej, conf = _tag_arrays(nodes, one, trial)
            f, new = kernels.add_pri(cols, trial, opts.force, rej, conf,
                                     _loc_delta(ctx, one, trial))
            pfail_l.append(f[0])
            plan = ctx.plan(trial)
            pold_l.append(kernels.metric_matrix(cols, plan.idx)[:, 0])
            pnew_l.append(kernels.metric_matrix(kernels.merged(cols, new), plan.idx)[:, 0])
        pfail = np.array(pfail_l)
        pold = np.array(pold_l).T
        pnew = np.array(pnew_l).T
    else:
        pfail = prim_eval[0][ppos]
        pold = prim_eval[1][:, ppos]
        pnew = prim_eval[2][:, ppos]
    scols = ctx.table.take(srow)
    peer = ctx.peers(prow, srow)
    sfail, snew = kernels.add_sec(scols, inst, peer)
    fail = np.where(pfail != kernels.OK, pfail, sfail)
    _count_failures(sol, fail)
    ok = fail == kernels.OK
    if not ok.any():
        return
    plan = ctx.plan(inst)
    sold = kernels.metric_matrix(scols, plan.idx)
    snew_m = kernels.metric_matrix(kernels.merged(scols, snew), plan.idx)
    d, e = plan.deltas([(pold[:, ok], pnew[:, ok]), (sold[:, ok], snew_m[:, ok])])
    values = plan.score(ctx.stats, d, e)
    fits.append((values, np.stack([prow[ok], srow[ok]], axis=1)))


def apply_placement(cluster: Cluster, inst: Instance, node_idxs: tuple[int, ...],
                    force: bool) -> tuple[list[Node], Instance] | FailMode:
    """The changed nodes and the placed instance for a placement (checked again)."""
    placed = inst.copy()
    placed.pnode = node_idxs[0]
    placed.snode = node_idxs[1] if len(node_idxs) > 1 else NO_NODE
    nodes = cluster.nodes
    if len(node_idxs) > 1:
        placed.location_score = len(nodes[node_idxs[0]].loc_tags
                                    & nodes[node_idxs[1]].loc_tags)
    bad = matches_policy(placed, nodes[node_idxs[0]].policy, nodes[node_idxs[0]].excl)
    if bad is not None:
        return bad
    new_p = add_pri(nodes[node_idxs[0]], placed, force)
    if isinstance(new_p, FailMode):
        return new_p
    if len(node_idxs) == 1:
        return [new_p], placed
    new_s = add_sec(nodes[node_idxs[1]], placed, node_idxs[0])
    if isinstance(new_s, FailMode):
        return new_s
    return [new_p, new_s], placed


def _trial(cluster: Cluster, changed: list[Node], inst: Instance) -> Cluster:
    nodes = list(cluster.nodes)
    for node in changed:
        nodes[node.idx] = node
    instances = list(cluster.instances)
    if inst.idx == len(instances):
        instances.append(inst)
    else:
        instances[inst.idx] = inst
    return Cluster(cluster.groups, nodes, instances, cluster.tags, cluster.ipolicy,
                   cluster.hypervisor)


def try_alloc(cluster: Cluster, scored: Sequence[int], inst: Instance, count: int,
              candidates: list[int] | list[tuple[int, list[int]]], opts: AllocOptions,
              ctx: _Context | None = None, redundancy: Redundancy | None = None) -> Solution:
    """Try ``inst`` (whose index is the next free one) on ``candidates`` (from
    :func:`candidate_nodes` for ``count`` nodes), scoring the nodes ``scored``;
    capacity checks, if on, run on the same nodes."""
    if not candidates:
        raise AllocError("No online nodes" if count == 1 else "Not enough online nodes")
    ctx = ctx if ctx is not None else _Context(cluster, scored)
    sol = Solution()
    if count == 1:
        values, found = _single(ctx, inst, candidates, opts, sol)  # type: ignore[arg-type]
    else:
        values, found = _pairs(ctx, inst, candidates, opts, sol)   # type: ignore[arg-type]
    # rank by score; on equal scores the candidate tried last first (as htools)
    ranked = np.lexsort((-np.arange(len(values)), values))
    sol.allocs = len(values)
    if opts.capacity and len(ranked):
        redundancy = redundancy if redundancy is not None else Redundancy(
            cluster, scored, accept_existing=opts.accept_existing,
            ignore_groups=opts.ignore_groups, memo=opts.memo)
    new_inst = inst.copy()
    new_inst.idx = len(cluster.instances)
    dropped = 0
    start = 0
    while start < len(ranked) and sol.best is None:
        # a run of scores equal to the printed digits is ordered by htools' own numbers
        stop = start + 1
        while stop < len(ranked) and values[ranked[stop]] <= values[ranked[start]] + TIE:
            stop += 1
        run = []
        for pos in ranked[start:stop]:
            node_idxs = tuple(int(i) for i in found[pos])
            applied = apply_placement(cluster, new_inst, node_idxs, opts.force)
            if isinstance(applied, FailMode):    # pragma: no cover - kernels agree
                raise AssertionError(f"placement {node_idxs} refused on apply: {applied}")
            changed, placed = applied
            # htools' own number only matters to order a run, or for the one chosen
            exact = 0.0
            if stop - start > 1:
                exact = ctx.exact(changed) if count == 1 else ctx.exact_pair(changed)
            run.append((exact, -int(pos), node_idxs, changed, placed))
        run.sort(key=lambda item: (item[0], item[1]))
        for exact, _, node_idxs, changed, placed in run:
            if opts.capacity:
                assert redundancy is not None
                trial = _trial(cluster, changed, placed)
                groups = {cluster.nodes[i].group for i in node_idxs}
                if not redundancy.check(trial, groups):
                    dropped += 1
                    continue
            if stop - start == 1:
                exact = ctx.exact(changed) if count == 1 else ctx.exact_pair(changed)
            sol.best = Placement(node_idxs, exact, changed, placed)
            break
        start = stop
    if dropped:
        sol.fail(FailMode.N1, dropped)
        sol.allocs -= dropped
    if sol.best is None and opts.capacity:
        sol.allocs = 0
    return sol


def _group_label(group: Group) -> str:
    return f"Group {group.name} ({group.alloc_policy.raw})"


def alloc_in_group(cluster: Cluster, gdx: int, inst: Instance, count: int,
                   opts: AllocOptions) -> Solution:
    """Allocate in group ``gdx`` only, scoring that group (hail with ``group_name``)."""
    group = cluster.groups[gdx]
    nodes = [n.idx for n in cluster.nodes if n.group == gdx]
    if any(network is not None and network not in group.networks
           for network in inst.nic_networks):
        raise AllocError(f"The group {group.name} is not connected to a network "
                         f"required by instance {inst.name}")
    cands = candidate_nodes(cluster, nodes, count, opts.restrict_to)
    sol = try_alloc(cluster, nodes, inst, count, cands, opts)
    sol.log = [f"{_group_label(group)}: {sol.describe(cluster)}"]
    return sol


def alloc_multi_group(cluster: Cluster, inst: Instance, count: int, opts: AllocOptions,
                      allowed_groups: Sequence[int] | None = None,
                      ctx: _Context | None = None,
                      redundancy: Redundancy | None = None) -> tuple[Group | None, Solution,
                                                                      list[str]]:
    """Try every group (or ``allowed_groups``), scoring the whole cluster; the chosen
    group (None if none fits), its solution and the per-group log."""
    everything = list(range(len(cluster.nodes)))
    ctx = ctx if ctx is not None else _Context(cluster, everything)
    if opts.capacity and redundancy is None:
        redundancy = Redundancy(cluster, everything, accept_existing=opts.accept_existing,
                                ignore_groups=opts.ignore_groups, memo=opts.memo)
    net_msgs: list[str] = []
    msgs: list[str] = []
    results: list[tuple[Group, Solution]] = []
    groups = cluster.groups_in_use()
    if allowed_groups is not None:
        groups = [g for g in groups if g in allowed_groups]
    for gdx in groups:
        group = cluster.groups[gdx]
        if any(network is not None and network not in group.networks
               for network in inst.nic_networks):
            net_msgs.append(f"group {group.name} is not connected to a network required by "
                            f"instance {inst.name}")
            continue
        nodes = [n.idx for n in cluster.nodes if n.group == gdx]
        try:
            cands = candidate_nodes(cluster, nodes, count, opts.restrict_to)
            sol = try_alloc(cluster, everything, inst, count, cands, opts, ctx, redundancy)
        except AllocError as err:
            msgs.append(f"Group {group.name}: error {err}")
            continue
        msgs.append(f"{_group_label(group)}: {sol.describe(cluster)}")
        if sol.best is not None and group.allocable:
            results.append((group, sol))
    msgs = net_msgs + msgs
    if not results:
        return None, Solution(), msgs
    # htools sorts the groups it kept in reverse; the sort is stable
    results.reverse()
    results.sort(key=lambda gs: (gs[0].alloc_policy, gs[1].best.score))  # type: ignore[union-attr]
    return results[0][0], results[0][1], msgs


def allocate(cluster: Cluster, inst: Instance, count: int, opts: AllocOptions,
             group_name: str | None = None) -> Solution:
    """Allocate a new instance as hail does: in the named group, else in the best
    group. The solution's log holds hail's info lines."""
    if group_name is not None:
        group = cluster.group_by_name(group_name)
        if group is None:
            raise AllocError(f"Unknown group '{group_name}'")
        return alloc_in_group(cluster, group.idx, inst, count, opts)
    chosen, sol, msgs = alloc_multi_group(cluster, inst, count, opts)
    if chosen is None:
        if not cluster.groups_in_use():
            raise AllocError("no groups for evacuation: allowed groups was Nothing, "
                             "all groups: []")
        raise AllocError(", ".join(msgs))
    sol.log = [f"Selected group: {chosen.name}", *msgs]
    return sol


def alloc_list(cluster: Cluster, requests: Sequence[tuple[Instance, int]],
               group_name: str | None, opts: AllocOptions) -> list[tuple[Instance, Solution]]:
    """Allocate several new instances one after the other (each sees the ones placed
    before it); changes ``cluster``. A failure to find any group fails the whole list
    (:class:`AllocError`), as with htools."""
    results = []
    for inst in requests:
        new = inst[0].copy()
        new.idx = len(cluster.instances)
        sol = allocate(cluster, new, inst[1], opts, group_name)
        if sol.best is not None:
            cluster.replace_nodes(sol.best.changed)
            cluster.instances.append(sol.best.inst)
        results.append((new, sol))
    return results


def allocate_secondary(cluster: Cluster, idx: int, opts: AllocOptions) -> Solution:
    """A secondary node for an instance about to become drbd."""
    inst = cluster.instances[idx]
    if inst.snode >= 0:
        raise AllocError("Instance already has a secondary")
    pdx = inst.pnode
    work = Cluster(cluster.groups, list(cluster.nodes), list(cluster.instances),
                   cluster.tags, cluster.ipolicy, cluster.hypervisor)
    work.nodes[pdx] = remove_pri(cluster.nodes[pdx], inst)
    converted = inst.copy()
    converted.disk_template = "drbd"
    converted.refresh()
    gdx = work.nodes[pdx].group
    secs = [n.idx for n in work.nodes if n.group == gdx and n.idx != pdx]
    everything = list(range(len(work.nodes)))
    sol = try_alloc(work, everything, converted, 2, [(pdx, secs)] if secs else [], opts)
    sol.log = [sol.describe(work)]
    return sol
