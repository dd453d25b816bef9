"""Balancing a node group: hbal's greedy search.

At each step every movable instance of the group is tried with every move its disk
template allows (see :mod:`corral.allocator.moves`) to every online node of the
group; the move that lowers the group's score most is made, and the search goes on
from there until no move helps by at least the minimum gain (or a maximum number of
steps is reached, or the score is within the minimum of what N+1 reservations allow).

htools recomputes the whole score for each of the (instances x nodes x moves)
candidates, which is what makes it slow on large groups. Here the candidates are
scored as an (instances x nodes) array per kind of move, from the nodes' numbers and
the group's aggregates; what a move does to the instance's own nodes is computed once
per instance and kept until those nodes change. Candidates whose scores are equal to
the printed digits are settled by htools' own arithmetic, and among equal candidates
the first in htools' order wins, so the moves are htools' moves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from corral.allocator import kernels
from corral.allocator.metrics import N_METRICS, SPREAD, WEIGHTS, ExactScorer, Stats, node_vector
from corral.allocator.model import NO_NODE, Cluster, Instance, Node
from corral.allocator.moves import FAILOVER, Move, apply_move
from corral.allocator.nodeops import add_pri, check_migration, remove_pri, remove_sec
from corral.allocator.types import FailMode, Mirror

__all__ = ["BalanceOptions", "Balancer", "Step"]

TIE = 1e-9
_KINDS = ("rs", "raf", "rp", "far")
_W = np.array(WEIGHTS, dtype=np.float64)
_SD = np.zeros(N_METRICS, dtype=bool)
_SD[list(SPREAD)] = True
_OFFLINE = [4, 5]


@dataclass
class BalanceOptions:
    """hbal's options that change the search."""

    disk_moves: bool = True          #: not ``--no-disk-moves``
    inst_moves: bool = True          #: not ``--no-instance-moves``
    restricted_migration: bool = False
    force: bool = False              #: ``--ignore-soft-errors``
    evac_mode: bool = False          #: ``-E``: only move instances off offline nodes
    min_gain: float = 0.01           #: ``-g``
    min_gain_limit: float = 0.1      #: ``--min-gain-limit``


@dataclass
class Step:
    """One move of the solution: instance, its new nodes, the move, the score after."""

    inst: int
    pnode: int
    snode: int
    move: Move
    score: float
    #: the instance's nodes before the move
    old_nodes: tuple[int, int] = (NO_NODE, NO_NODE)
    changed: list[Node] = field(default_factory=list, repr=False)
    moved: Instance | None = field(default=None, repr=False)


def possible_moves(mirror: Mirror, use_secondary: bool, opts: BalanceOptions,
                   primary_drained: bool) -> tuple[str, ...]:
    """The kinds of moves hbal tries for an instance (to each target node)."""
    if mirror == Mirror.NONE:
        return ()
    if mirror == Mirror.EXTERNAL:
        return ("fa",) if opts.inst_moves else ()
    if not opts.disk_moves:
        return ()
    if not opts.inst_moves:
        return ("rs",)
    if opts.restricted_migration and not primary_drained:
        return ("rs",)
    if use_secondary and not opts.restricted_migration:
        return ("rs", "raf", "rp", "far")
    if use_secondary:
        return ("rs", "raf", "far")
    return ("rs", "raf")


def _vec(node: Node) -> np.ndarray:
    return np.array(node_vector(node), dtype=np.float64)


class _VecCache:
    """The metric vectors of a cluster's current nodes (a node's until it changes)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.cache: dict[int, np.ndarray] = {}

    def __call__(self, node: Node) -> np.ndarray:
        if self.cluster.nodes[node.idx] is not node:
            return _vec(node)
        vec = self.cache.get(node.idx)
        if vec is None:
            vec = self.cache[node.idx] = _vec(node)
        return vec

    def forget(self, idxs: set[int]) -> None:
        for idx in idxs:
            self.cache.pop(idx, None)


class _Fixed:
    """What the moves of one instance do to its own nodes (valid until they change)."""

    __slots__ = ("dyn_cols", "dyn_old", "failover", "kinds", "ok", "slot")

    def __init__(self) -> None:
        self.kinds: tuple[str, ...] = ()
        #: failover: (D, E, Doff) or None if it does not fit
        self.failover: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        #: per kind: (D, E, Doff) of the fixed nodes
        self.slot: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        #: per kind (raf, rp): the fixed node that becomes a secondary of the target
        self.dyn_cols: dict[str, list[float]] = {}
        self.dyn_old: dict[str, np.ndarray] = {}
        #: per kind: whether the fixed part fits
        self.ok: dict[str, bool] = {}


def _delta(pairs: Sequence[tuple[Node, Node]],
           vec: Callable[[Node], np.ndarray] = _vec) -> tuple[np.ndarray, np.ndarray,
                                                               np.ndarray]:
    d = np.zeros(N_METRICS)
    e = np.zeros(N_METRICS)
    off = np.zeros(2)
    for old, new in pairs:
        a, b = vec(old), _vec(new)
        if old.offline:
            off += b[_OFFLINE] - a[_OFFLINE]
        else:
            d += b - a
            e += b * b - a * a
    return d, e, off


class Balancer:
    """hbal's search on one group of a cluster (the cluster is changed as moves are
    made: give it a copy to keep the original)."""

    def __init__(self, cluster: Cluster, gdx: int | None, opts: BalanceOptions) -> None:
        self.cluster = cluster
        self.opts = opts
        self.nodes = [n.idx for n in cluster.nodes if gdx is None or n.group == gdx]
        in_group = set(self.nodes)
        self.instances = [i.idx for i in cluster.instances if i.pnode in in_group]
        self.stats = Stats(cluster.nodes[i] for i in self.nodes)
        self.exact = ExactScorer([cluster.nodes[i] for i in self.nodes])
        self.score = self.exact.score()
        self.steps: list[Step] = []
        self.targets = [i for i in self.nodes if not cluster.nodes[i].offline]
        self._tpos = {idx: pos for pos, idx in enumerate(self.targets)}
        self._gpos = {idx: pos for pos, idx in enumerate(self.nodes)}
        self._fixed: dict[int, _Fixed] = {}
        self.table = kernels.NodeTable(cluster.nodes)
        self._peers = np.zeros((len(self.nodes), len(self.nodes)))
        for node_idx in self.nodes:
            self._refresh_peers(cluster.nodes[node_idx])
        self._slow = (any(cluster.nodes[i].loc_tags for i in self.nodes)
                      or any(cluster.instances[i].excl_tags or cluster.instances[i].forthcoming
                             for i in self.instances))
        self._mig = any(cluster.nodes[i].mig_tags or cluster.nodes[i].rmig_tags
                        for i in self.nodes)
        insts = cluster.instances
        self.universe = [i for i in self.instances
                         if insts[i].movable and insts[i].auto_balance]
        self._upos = {idx: pos for pos, idx in enumerate(self.universe)}
        self._grid: dict[str, np.ndarray] | None = None
        self._dirty_rows: set[int] = set()
        self._dirty_cols: set[int] = set()
        self._fa: dict[str, Any] | None = None
        self._vcache = _VecCache(cluster)
        self._fa_dirty: set[int] = set()
        self._tgpos = np.array([self._gpos[t] for t in self.targets], dtype=np.int64)
        self._make_plan()

    # -- bookkeeping --------------------------------------------------------------

    def _refresh_peers(self, node: Node) -> None:
        row = self._gpos.get(node.idx)
        if row is None:
            return
        self._peers[row, :] = 0.0
        for pdx, mem in node.peers.items():
            col = self._gpos.get(pdx)
            if col is not None:
                self._peers[row, col] = mem

    def victims(self) -> list[int]:
        """The instances that may move now, in htools' order."""
        insts = self.cluster.instances
        nodes = self.cluster.nodes
        out = []
        for idx in self.instances:
            inst = insts[idx]
            if not (inst.movable and inst.auto_balance):
                continue
            if self.opts.evac_mode and not any(
                    nodes[n].offline for n in inst.all_nodes() if n != NO_NODE):
                continue
            out.append(idx)
        return out

    def _kinds(self, inst: Instance) -> tuple[bool, tuple[str, ...]]:
        nodes = self.cluster.nodes
        online = inst.snode != NO_NODE and inst.snode in self._tpos
        use_secondary = online and self.opts.inst_moves
        drained = nodes[inst.pnode].offline
        kinds = possible_moves(inst.mirror, use_secondary, self.opts, drained)
        return (inst.mirror == Mirror.INTERNAL and use_secondary), kinds

    def _fixed_part(self, idx: int) -> _Fixed:
        cached = self._fixed.get(idx)
        if cached is not None:
            return cached
        fixed = _Fixed()
        inst = self.cluster.instances[idx]
        nodes = self.cluster.nodes
        with_failover, fixed.kinds = self._kinds(inst)
        force = self.opts.force
        if with_failover:
            result = apply_move(nodes, inst, FAILOVER, force)
            if not isinstance(result, FailMode):
                fixed.failover = self._delta_full([(nodes[n.idx], n) for n in result[0]])
        p = nodes[inst.pnode]
        p1 = remove_pri(p, inst)
        if "fa" in fixed.kinds:
            fixed.slot["fa"] = self._delta_full([(p, p1)])
            fixed.ok["fa"] = True
        if inst.snode == NO_NODE or inst.mirror != Mirror.INTERNAL:
            self._fixed[idx] = fixed
            return fixed
        s = nodes[inst.snode]
        s1 = remove_sec(s, inst)
        force_p = p.offline or force
        if "rs" in fixed.kinds:
            p2 = add_pri(p1, inst, True)
            fixed.ok["rs"] = not isinstance(p2, FailMode)
            if not isinstance(p2, FailMode):
                fixed.slot["rs"] = self._delta_full([(p, p2), (s, s1)])
        if "raf" in fixed.kinds:
            fixed.ok["raf"] = True
            fixed.slot["raf"] = self._delta_full([(s, s1)])
            fixed.dyn_cols["raf"] = kernels.node_row(p1)
            fixed.dyn_old["raf"] = self._vcache(p)
        if "rp" in fixed.kinds or "far" in fixed.kinds:
            s3 = add_pri(s1, inst, force_p)
            ok = not isinstance(s3, FailMode) and check_migration(p, s) is None
            if "rp" in fixed.kinds:
                fixed.ok["rp"] = ok
                if ok:
                    assert not isinstance(s3, FailMode)
                    s2 = remove_pri(s3, inst)
                    fixed.slot["rp"] = self._delta_full([(p, p1)])
                    fixed.dyn_cols["rp"] = kernels.node_row(s2)
                    fixed.dyn_old["rp"] = self._vcache(s)
            if "far" in fixed.kinds:
                fixed.ok["far"] = ok
                if ok:
                    assert not isinstance(s3, FailMode)
                    fixed.slot["far"] = self._delta_full([(p, p1), (s, s3)])
        self._fixed[idx] = fixed
        return fixed

    # -- scoring ------------------------------------------------------------------

    def _make_plan(self) -> None:
        """The metrics moves can change here (see :class:`kernels.Plan`)."""
        cluster = self.cluster
        group = set(self.nodes)
        touching = [i for i in cluster.instances if i.pnode in group or i.snode in group]
        nodes = [cluster.nodes[i] for i in self.nodes]
        self.plan = kernels.Plan(nodes, touching, offline=any(n.offline for n in nodes))
        self.plan_idx = self.plan.idx

    def _score(self, d: np.ndarray, e: np.ndarray, off: np.ndarray) -> np.ndarray:
        """Scores from deltas (plan metrics x ...) and offline deltas (2 x ...)."""
        return self.plan.score(self.stats, d, e, off)

    def _delta_full(self, pairs: Sequence[tuple[Node, Node]]) -> tuple[
            np.ndarray, np.ndarray, np.ndarray]:
        return _delta(pairs, self._vcache)

    def _fixed_arrays(self) -> dict[str, Any]:
        """The universe's fixed parts as arrays, refreshed for the dirty rows."""
        n_u = len(self.universe)
        plan = self.plan_idx
        m = len(plan)
        fa = self._fa
        if fa is None:
            insts = self.cluster.instances
            fa = self._fa = {
                "iv": kernels.InstVec([insts[i] for i in self.universe], (n_u, 1)),
                "pnode": np.zeros(n_u, dtype=np.int64), "snode": np.zeros(n_u, dtype=np.int64),
                "pcol": np.zeros(n_u, dtype=np.int64), "scol": np.zeros(n_u, dtype=np.int64),
                "p_off": np.zeros(n_u, dtype=bool), "s_off": np.zeros(n_u, dtype=bool),
                "fo": (np.zeros((m, n_u)), np.zeros((m, n_u)), np.zeros((2, n_u))),
                "fo_ok": np.zeros(n_u, dtype=bool),
            }
            for kind in (*_KINDS, "fa"):
                fa[kind] = (np.zeros((m, n_u)), np.zeros((m, n_u)), np.zeros((2, n_u)))
                fa[kind + "_ok"] = np.zeros(n_u, dtype=bool)
            for kind in ("raf", "rp"):
                fa[kind + "_cols"] = np.zeros((n_u, len(kernels.COLUMNS)))
                fa[kind + "_old"] = np.zeros((m, n_u))
            self._fa_dirty = set(range(n_u))
        nodes = self.cluster.nodes
        insts = self.cluster.instances
        for row in sorted(self._fa_dirty):
            idx = self.universe[row]
            inst = insts[idx]
            fixed = self._fixed_part(idx)
            fa["pnode"][row] = inst.pnode
            fa["snode"][row] = inst.snode
            fa["pcol"][row] = self._gpos[inst.pnode]
            fa["scol"][row] = self._gpos.get(inst.snode, 0)
            fa["p_off"][row] = nodes[inst.pnode].offline
            fa["s_off"][row] = inst.snode != NO_NODE and nodes[inst.snode].offline
            fa["fo_ok"][row] = fixed.failover is not None
            if fixed.failover is not None:
                for arr, val in zip(fa["fo"], fixed.failover, strict=True):
                    arr[:, row] = val[plan] if len(val) != 2 else val
            for kind in (*_KINDS, "fa"):
                ok = kind in fixed.kinds and bool(fixed.ok.get(kind))
                fa[kind + "_ok"][row] = ok
                if ok:
                    for arr, val in zip(fa[kind], fixed.slot[kind], strict=True):
                        arr[:, row] = val[plan] if len(val) != 2 else val
                    if kind in ("raf", "rp"):
                        fa[kind + "_cols"][row] = fixed.dyn_cols[kind]
                        fa[kind + "_old"][:, row] = fixed.dyn_old[kind][plan]
        self._fa_dirty = set()
        return fa

    def _eval(self, kind: str, rows: np.ndarray, cols: np.ndarray) -> tuple[
            np.ndarray, np.ndarray, np.ndarray]:
        """Deltas (plan x rows x cols) and fit (rows x cols) of moves ``kind`` of the
        universe's instances ``rows`` to the targets at positions ``cols``."""
        fa = self._fixed_arrays()
        plan = self.plan_idx
        force = self.opts.force
        t_rows = np.asarray(self.targets, dtype=np.int64)[cols]
        tcols = self.table.take(t_rows)
        t_old = kernels.metric_matrix(tcols, plan)[:, None, :]
        tgpos = self._tgpos[cols]
        iv = fa["iv"].take(rows)
        p_off = fa["p_off"][rows][:, None]
        s_off = fa["s_off"][rows][:, None]
        pcol = fa["pcol"][rows]
        scol = fa["scol"][rows]
        if kind == "fa":
            fail, new = kernels.add_pri(tcols, iv, p_off | force)
            slots = [(t_old, kernels.metric_matrix(kernels.merged(tcols, new), plan))]
            ok = fail == kernels.OK
            if self._mig:
                ok = ok & self._mig_mask(list(fa["pnode"][rows]), t_rows)
        elif kind in ("rs", "far"):
            peer_of = pcol if kind == "rs" else scol
            peer = self._peers[tgpos[None, :], peer_of[:, None]]
            tforce = (s_off | force) if kind == "rs" else (p_off | force)
            fail, new = kernels.add_sec(tcols, iv, peer, tforce)
            slots = [(t_old, kernels.metric_matrix(kernels.merged(tcols, new), plan))]
            ok = fail == kernels.OK
        else:
            tforce = force if kind == "raf" else (p_off | force)
            fail, new = kernels.add_pri(tcols, iv, tforce)
            dyn_src = pcol if kind == "raf" else scol
            peer = self._peers[dyn_src[:, None], tgpos[None, :]]
            dcols_rows = fa[kind + "_cols"][rows]
            dcols = {name: dcols_rows[:, pos][:, None]
                     for pos, name in enumerate(kernels.COLUMNS)}
            for name in ("excl", "offline", "fail_n1"):
                dcols[name] = dcols[name].astype(bool)
            sforce = (s_off | force) if kind == "raf" else (p_off | force)
            dfail, dnew = kernels.add_sec(dcols, iv, peer, sforce)
            d_old = fa[kind + "_old"][:, rows][:, :, None]
            slots = [(t_old, kernels.metric_matrix(kernels.merged(tcols, new), plan)),
                     (d_old, kernels.metric_matrix(kernels.merged(dcols, dnew), plan))]
            ok = (fail == kernels.OK) & (dfail == kernels.OK)
            if self._mig:
                src = fa["pnode"][rows] if kind == "raf" else fa["snode"][rows]
                ok = ok & self._mig_mask(list(src), t_rows)
        fd, fe, _ = fa[kind]
        d = np.repeat(fd[:, rows][:, :, None], len(cols), axis=2)
        e = np.repeat(fe[:, rows][:, :, None], len(cols), axis=2)
        for old, newm in slots:
            delta = newm - old
            d += delta
            e += delta * (newm + old)
        own = ((fa["pnode"][rows][:, None] == t_rows[None, :])
               | (fa["snode"][rows][:, None] == t_rows[None, :]))
        return d, e, ok & ~own & fa[kind + "_ok"][rows][:, None]

    def _refresh_grid(self) -> None:
        """Recompute the candidates whose nodes changed since the last time."""
        n_u = len(self.universe)
        n_t = len(self.targets)
        m = len(self.plan_idx)
        if self._grid is None:
            self._grid = {
                "d": np.zeros((4, m, n_u, n_t)), "e": np.zeros((4, m, n_u, n_t)),
                "ok": np.zeros((4, n_u, n_t), dtype=bool),
            }
            self._dirty_rows = set(range(n_u))
            self._dirty_cols = set()
        grid = self._grid
        fa = self._fixed_arrays()
        rows = np.array(sorted(self._dirty_rows), dtype=np.int64)
        cols_all = np.arange(n_t)
        others = np.array(sorted(set(range(n_u)) - self._dirty_rows), dtype=np.int64)
        cols = np.array(sorted(self._dirty_cols), dtype=np.int64)
        for k, kind in enumerate(_KINDS):
            names = (kind, "fa") if kind == "rs" else (kind,)
            for block_rows, block_cols in ((rows, cols_all), (others, cols)):
                if not len(block_rows) or not len(block_cols):
                    continue
                grid["ok"][k][np.ix_(block_rows, block_cols)] = False
                for name in names:
                    sel = block_rows[fa[name + "_ok"][block_rows]]
                    if not len(sel):
                        continue
                    d, e, ok = self._eval(name, sel, block_cols)
                    ix = np.ix_(sel, block_cols)
                    grid["d"][k][(slice(None), *ix)] = d
                    grid["e"][k][(slice(None), *ix)] = e
                    grid["ok"][k][ix] = ok
        self._dirty_rows = set()
        self._dirty_cols = set()

    def _candidates(self, victims: list[int]) -> np.ndarray:
        """The score of every candidate: (victims, 1 + 4 x targets), inf where not
        allowed, columns in htools' order (failover, then per target rs raf rp far)."""
        n_t = len(self.targets)
        out = np.full((len(victims), 1 + 4 * n_t), np.inf)
        if not victims:
            return out
        if self._slow:
            self._slow_candidates(victims, out)
            return out
        self._refresh_grid()
        grid = self._grid
        assert grid is not None
        fa = self._fixed_arrays()
        rows = np.array([self._upos[i] for i in victims], dtype=np.int64)
        every = len(rows) == len(self.universe)
        full = np.full((len(self.universe), 1 + 4 * n_t), np.inf) if not every else out
        fo_d, fo_e, fo_off = fa["fo"]
        fscore = self._score(fo_d, fo_e, fo_off)
        full[:, 0] = np.where(fa["fo_ok"], fscore, np.inf)
        for k, kind in enumerate(_KINDS):
            ok = grid["ok"][k]
            if not ok.any():
                continue
            off = fa[kind][2]
            if kind == "rs":
                off = np.where(fa["fa_ok"], fa["fa"][2], off)
            scores = self._score(grid["d"][k], grid["e"][k], off[:, :, None])
            scores[~ok] = np.inf
            full[:, 1 + k::4] = scores
        if not every:
            out[:] = full[rows]
        return out

    def _mig_mask(self, sources: list[int], targets: np.ndarray) -> np.ndarray:
        nodes = self.cluster.nodes
        return np.array([[check_migration(nodes[s], nodes[int(t)]) is None for t in targets]
                         for s in sources], dtype=bool).reshape(len(sources), len(targets))

    def _slow_candidates(self, victims: list[int], out: np.ndarray) -> None:
        """Score candidates one by one (clusters with location or exclusion tags)."""
        nodes = self.cluster.nodes
        for row, idx in enumerate(victims):
            inst = self.cluster.instances[idx]
            with_failover, kinds = self._kinds(inst)
            for col, move in self._moves(inst, with_failover, kinds):
                result = apply_move(nodes, inst, move, self.opts.force)
                if isinstance(result, FailMode):
                    continue
                trial = self.stats.copy()
                for node in result[0]:
                    trial.replace(nodes[node.idx], node)
                out[row, col] = trial.score()

    def _moves(self, inst: Instance, with_failover: bool,
               kinds: tuple[str, ...]) -> list[tuple[int, Move]]:
        moves: list[tuple[int, Move]] = []
        if with_failover:
            moves.append((0, FAILOVER))
        for pos, tdx in enumerate(self.targets):
            if tdx in (inst.pnode, inst.snode):
                continue
            for kind in kinds:
                k = 0 if kind == "fa" else _KINDS.index(kind)
                moves.append((1 + 4 * pos + k, (kind, tdx)))
        return moves

    def _move_of(self, col: int) -> Move:
        if col == 0:
            return FAILOVER
        pos, k = divmod(col - 1, 4)
        return (_KINDS[k], self.targets[pos])

    # -- the search ---------------------------------------------------------------

    def best_move(self) -> Step | None:
        """The move that lowers the score most (htools' first among equals), if any
        lowers it."""
        victims = self.victims()
        if not victims:
            return None
        scores = self._candidates(victims)
        low = float(np.min(scores)) if scores.size else np.inf
        if not np.isfinite(low) or low > self.score + TIE:
            return None
        nodes = self.cluster.nodes
        near = np.argwhere(scores <= low + TIE)      # row-major: htools' order
        best: Step | None = None
        best_cv = self.score
        for row, col in near:
            idx = victims[int(row)]
            inst = self.cluster.instances[idx]
            move = self.kind_move(int(col), inst)
            result = apply_move(nodes, inst, move, self.opts.force)
            if isinstance(result, FailMode):   # pragma: no cover - kernels agree
                raise AssertionError(f"move {move} of {inst.name} refused on apply")
            changed, moved = result
            in_group = [n for n in changed if n.idx in self._gpos]
            cv = self.exact.score(in_group)
            if cv < best_cv:
                best = Step(idx, moved.pnode, moved.snode, move, cv,
                            (inst.pnode, inst.snode), changed, moved)
                best_cv = cv
        return best

    def kind_move(self, col: int, inst: Instance) -> Move:
        """The move of candidate column ``col`` for ``inst``."""
        move = self._move_of(col)
        if inst.mirror == Mirror.EXTERNAL and move[0] == "rs":
            return ("fa", move[1])
        return move

    def apply(self, step: Step) -> None:
        """Make a move (changing the cluster)."""
        nodes = self.cluster.nodes
        for node in step.changed:
            if node.idx in self._gpos:
                self.stats.replace(nodes[node.idx], node)
            nodes[node.idx] = node
        self.exact.update([n for n in step.changed if n.idx in self._gpos])
        self.table.refresh(step.changed)
        for node in step.changed:
            self._refresh_peers(node)
        assert step.moved is not None
        self.cluster.instances[step.inst] = step.moved
        changed = {n.idx for n in step.changed}
        self._vcache.forget(changed)
        for idx in list(self._fixed):
            other = self.cluster.instances[idx]
            if other.pnode in changed or other.snode in changed or idx == step.inst:
                del self._fixed[idx]
        for idx in self.universe:
            other = self.cluster.instances[idx]
            if other.pnode in changed or other.snode in changed or idx == step.inst:
                self._dirty_rows.add(self._upos[idx])
                self._fa_dirty.add(self._upos[idx])
        self._dirty_cols |= {self._tpos[i] for i in changed if i in self._tpos}
        self.score = step.score
        self.steps.append(step)

    def step(self) -> Step | None:
        """One round of hbal: the best move if it gains enough (then it is made)."""
        best = self.best_move()
        if best is None:
            return None
        gain = self.score - best.score
        if not (best.score < self.score
                and (self.score > self.opts.min_gain_limit or gain >= self.opts.min_gain)):
            return None
        self.apply(best)
        return best

    def run(self, max_rounds: int = -1, min_score: float = 0.0,
            on_step: Callable[[Step], Any] | None = None) -> list[Step]:
        """Move until no move gains enough, ``max_rounds`` moves were made (-1: no
        limit) or the score is at most ``min_score``."""
        while (max_rounds < 0 or len(self.steps) < max_rounds) and self.score > min_score:
            step = self.step()
            if step is None:
                break
            if on_step is not None:
                on_step(step)
        return self.steps
