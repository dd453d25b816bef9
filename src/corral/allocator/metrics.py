"""The cluster score: how unbalanced a set of nodes is (lower is better).

It is htools' metric: for every online node a vector of values (free memory and disk
share, VCPU ratio, load, spindles, N+1 failures, conflicting exclusion tags, location
scores, reserved memory share), for every offline node the instances it still holds;
each value is aggregated over the nodes either as a population standard deviation or
as a sum, and the score is the weighted sum of the aggregates (:data:`METRICS`).

:func:`full_score` computes it from scratch exactly as htools does (same order of
operations, so that printed scores are equal to the last digit); :class:`Stats`
keeps the aggregates of a node set and updates them when one node's values change,
which costs O(number of metrics), never O(nodes).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from corral.allocator.model import Node
from corral.allocator.nodeops import pdsk

__all__ = [
    "METRICS",
    "N_METRICS",
    "OFFLINE_METRICS",
    "SPREAD",
    "WEIGHTS",
    "Metric",
    "Stats",
    "full_score",
    "full_values",
    "node_vector",
    "optimal_score",
    "print_stats",
]

_RTOTAL_WEIGHT = 0.25


@dataclass(frozen=True)
class Metric:
    """One component of the score."""

    name: str
    weight: float
    #: "sd" standard deviation, "sum" sum, "map" exclusion pairs sharing a location
    kind: str
    #: whether it is aggregated over online nodes (else over offline ones)
    online: bool = True


#: The components of the score, in htools' order.
METRICS: tuple[Metric, ...] = (
    Metric("free_mem_cv", 0.5, "sd"),
    Metric("free_disk_cv", 0.5, "sd"),
    Metric("n1_cnt", 1, "sum"),
    Metric("reserved_mem_cv", 1, "sd"),
    Metric("offline_all_cnt", 4, "sum", online=False),
    Metric("offline_pri_cnt", 16, "sum", online=False),
    Metric("vcpu_ratio_cv", 0.5, "sd"),
    Metric("cpu_load_cv", 1, "sd"),
    Metric("mem_load_cv", 1, "sd"),
    Metric("disk_load_cv", 1, "sd"),
    Metric("net_load_cv", 1, "sd"),
    Metric("pri_tags_score", 2, "sum"),
    Metric("spindles_cv", 0.5, "sd"),
    Metric("free_mem_cv_forth", 0.5, "sd"),
    Metric("free_disk_cv_forth", 0.5, "sd"),
    Metric("vcpu_ratio_cv_forth", 0.5, "sd"),
    Metric("spindles_cv_forth", 0.5, "sd"),
    Metric("location_score", 1, "sum"),
    Metric("location_exclusion_score", 1, "map"),
    Metric("reserved_mem_rtotal", _RTOTAL_WEIGHT, "sum"),
)
N_METRICS = len(METRICS)
WEIGHTS: tuple[float, ...] = tuple(m.weight for m in METRICS)
#: indices of the standard-deviation metrics
SPREAD: tuple[int, ...] = tuple(i for i, m in enumerate(METRICS) if m.kind == "sd")
#: indices of the metrics aggregated over offline nodes
OFFLINE_METRICS: tuple[int, ...] = tuple(i for i, m in enumerate(METRICS) if not m.online)
_MAP = 18


def node_vector(node: Node) -> list[float]:
    """The node's value for each metric (the map metric holds 0: see :func:`full_values`).

    For an offline node only the offline metrics mean anything."""
    n_pri = len(node.p_list)
    both = float(n_pri + len(node.s_list))
    t_mem = node.t_mem
    unalloc = int(t_mem) - node.n_mem - node.i_mem - (node.x_mem if node.x_mem > 0 else 0)
    load, pool = node.util_load, node.util_pool
    hi_sp = node.hi_sp
    t_cpu = node.t_cpu
    speed = node.cpu_speed
    # a / b where b is never 0 on a sane node; _div gives IEEE's answer when it is
    if t_mem and hi_sp and t_cpu and speed and pool[0] and pool[1] and pool[2] and pool[3]:
        p_rem = node.r_mem / t_mem
        return [
            unalloc / t_mem,
            pdsk(node, node.f_sp, node.f_dsk),
            both if node.fail_n1 else 0.0,
            p_rem,
            both,
            float(n_pri),
            (node.u_cpu / t_cpu) / speed,
            load[0] / pool[0],
            load[1] / pool[1],
            load[2] / pool[2],
            load[3] / pool[3],
            float(sum(node.p_tags.values()) - len(node.p_tags)) if node.p_tags else 0.0,
            node.inst_sp / hi_sp,
            node.f_mem_forth / t_mem,
            pdsk(node, node.f_sp_forth, node.f_dsk_forth),
            (node.u_cpu_forth / t_cpu) / speed,
            node.inst_sp_forth / hi_sp,
            float(node.loc_score),
            0.0,
            p_rem,
        ]
    p_rem = _div(node.r_mem, t_mem)
    return [
        _div(unalloc, t_mem),
        pdsk(node, node.f_sp, node.f_dsk),
        both if node.fail_n1 else 0.0,
        p_rem,
        both,
        float(n_pri),
        _div(_div(node.u_cpu, t_cpu), speed),
        _div(load[0], pool[0]),
        _div(load[1], pool[1]),
        _div(load[2], pool[2]),
        _div(load[3], pool[3]),
        float(sum(node.p_tags.values()) - len(node.p_tags)),
        _div(node.inst_sp, hi_sp),
        _div(node.f_mem_forth, t_mem),
        pdsk(node, node.f_sp_forth, node.f_dsk_forth),
        _div(_div(node.u_cpu_forth, t_cpu), speed),
        _div(node.inst_sp_forth, hi_sp),
        float(node.loc_score),
        0.0,
        p_rem,
    ]


def _div(a: float, b: float) -> float:
    """a/b with IEEE semantics for b == 0 (as htools' Double division)."""
    if b:
        return a / b
    if a > 0:
        return math.inf
    if a < 0:
        return -math.inf
    return math.nan


def full_values(nodes: Sequence[Node]) -> list[float]:
    """Each metric's aggregate over ``nodes``, computed from scratch in htools' order."""
    online = [node for node in nodes if not node.offline]
    offline = [node for node in nodes if node.offline]
    on_vecs = [node_vector(node) for node in online]
    off_vecs = [node_vector(node) for node in offline]
    values: list[float] = []
    for pos, metric in enumerate(METRICS):
        vecs = on_vecs if metric.online else off_vecs
        if metric.kind == "map":
            merged: Counter[tuple[str, str]] = Counter()
            for node in online:
                merged.update(node.inst_map)
            values.append(float(sum(merged.values()) - len(merged)))
        elif metric.kind == "sum":
            total = 0.0
            for vec in vecs:
                total = total + vec[pos]
            values.append(total)
        else:
            values.append(_stddev([vec[pos] for vec in vecs]))
    return values


def _stddev(xs: list[float]) -> float:
    count = 0.0
    total = 0.0
    for x in xs:
        count = count + 1
        total = total + x
    mean = _div(total, count)
    nvar = 0.0
    for x in xs:
        d = x - mean
        nvar = nvar + d * d
    var = _div(nvar, count)
    return math.sqrt(var) if var >= 0 else math.nan


def weighted(values: Iterable[float]) -> float:
    """The score of a list of aggregates (htools sums from the left, from 0)."""
    total = 0.0
    for weight, value in zip(WEIGHTS, values, strict=True):
        total = total + weight * value
    return total


def full_score(nodes: Sequence[Node]) -> float:
    """The score of ``nodes``, from scratch."""
    return weighted(full_values(nodes))


def optimal_score(nodes: Sequence[Node]) -> float:
    """A lower bound of the score that N+1 reservations impose on ``nodes`` (hbal stops
    once it is this close)."""
    if len(nodes) <= 1:
        return 0.0
    mems = [node.t_mem for node in nodes]
    total = sum(mems)
    less_one = total - max(mems)
    if less_one <= 0:
        return 0.0
    drbd_mem = float(sum(sum(node.peers.values()) for node in nodes))
    return _RTOTAL_WEIGHT * (drbd_mem / less_one - drbd_mem / total)


def print_stats(prefix: str, nodes: Sequence[Node]) -> str:
    """The table of metrics hbal -v -v -v and hinfo print."""
    values = full_values(nodes)
    rows = [[m.name, f"{v:.8f}", f"x{m.weight:.2f}"] for m, v in zip(METRICS, values,
                                                                        strict=True)]
    from corral.allocator.textout import format_table
    return format_table(["Field", "Value", "Weight"], rows, [False, True, True], prefix)


class Stats:
    """The aggregates of a set of nodes, updated one node at a time.

    For a standard deviation it keeps the count, the sum and the variance itself (not
    the sum of squares, which loses precision), as htools does.
    """

    __slots__ = ("_score", "_values", "count", "off_sums", "pairs", "sums", "var")

    def __init__(self, nodes: Iterable[Node] = ()) -> None:
        self.count = 0
        self.sums = [0.0] * N_METRICS
        self.var = [0.0] * N_METRICS
        self.off_sums = [0.0] * N_METRICS
        self.pairs: Counter[tuple[str, str]] = Counter()
        self._values: list[float] | None = None
        self._score: float | None = None
        online = []
        for node in nodes:
            vec = node_vector(node)
            if node.offline:
                for pos in OFFLINE_METRICS:
                    self.off_sums[pos] += vec[pos]
            else:
                online.append(vec)
                self.pairs.update(node.inst_map)
        self.count = len(online)
        # as htools computes them (left to right, the variance in two passes), so that
        # updates from here give its numbers
        for pos, metric in enumerate(METRICS):
            if not metric.online or metric.kind == "map":
                continue
            total = 0.0
            for vec in online:
                total = total + vec[pos]
            self.sums[pos] = total
            if metric.kind == "sd" and online:
                mean = total / len(online)
                nvar = 0.0
                for vec in online:
                    d = vec[pos] - mean
                    nvar = nvar + d * d
                self.var[pos] = nvar / len(online)

    def copy(self) -> Stats:
        """An independent copy."""
        new = Stats.__new__(Stats)
        new.count = self.count
        new.sums = list(self.sums)
        new.var = list(self.var)
        new.off_sums = list(self.off_sums)
        new.pairs = Counter(self.pairs)
        new._values = list(self._values) if self._values is not None else None
        new._score = self._score
        return new

    def replace(self, old: Node, new: Node) -> None:
        """Account for a node changing from ``old`` to ``new`` (same online state)."""
        self.replace_vectors(node_vector(old), node_vector(new), old.offline)
        if not old.offline and (old.inst_map or new.inst_map):
            self.pairs.subtract(old.inst_map)
            self.pairs.update(new.inst_map)
            self.pairs = +self.pairs
            self._values = None

    def replace_vectors(self, old: Sequence[float], new: Sequence[float],
                        offline: bool) -> None:
        """Account for one node's metric vector changing from ``old`` to ``new``."""
        self._score = None
        vals = self._values
        if offline:
            for pos in OFFLINE_METRICS:
                self.off_sums[pos] += new[pos] - old[pos]
                if vals is not None:
                    vals[pos] = self.off_sums[pos]
            return
        n = self.count
        sums, var = self.sums, self.var
        for pos in _ONLINE_SUMS:
            if old[pos] != new[pos]:
                sums[pos] += new[pos] - old[pos]
                if vals is not None:
                    vals[pos] = sums[pos]
        for pos in SPREAD:
            x = old[pos]
            y = new[pos]
            if x == y:
                continue
            ds = y - x
            s = sums[pos]
            dnnvar = (n * (y * y - x * x) - 2 * s * ds) - ds * ds
            sums[pos] = s + ds
            v = var[pos] + dnnvar / (n * n)
            var[pos] = v if v > 0 else 0.0
            if vals is not None:
                vals[pos] = math.sqrt(var[pos])

    def values(self) -> list[float]:
        """Each metric's aggregate."""
        if self._values is not None:
            return self._values
        out = []
        for pos, metric in enumerate(METRICS):
            if metric.kind == "map":
                out.append(float(sum(self.pairs.values()) - len(self.pairs)))
            elif not metric.online:
                out.append(self.off_sums[pos])
            elif metric.kind == "sum":
                out.append(self.sums[pos])
            else:
                out.append(math.sqrt(self.var[pos]) if self.count else math.nan)
        self._values = out
        return out

    def score_with(self, old: Sequence[float], new: Sequence[float], offline: bool) -> float:
        """The score if one node's vector changed from ``old`` to ``new`` (nothing is
        changed; the map metric is taken as unchanged)."""
        values = self.values()
        total = self.score()
        n = self.count
        for pos, x, y in zip(_POSITIONS, old, new, strict=False):
            if x == y:
                continue
            kind = _KIND[pos]
            if offline:
                if pos not in OFFLINE_METRICS:
                    continue
                value = self.off_sums[pos] + (y - x)
            elif kind == 0:
                ds = y - x
                s = self.sums[pos]
                v = self.var[pos] + ((n * (y * y - x * x) - 2 * s * ds) - ds * ds) / (n * n)
                value = math.sqrt(v) if v > 0 else 0.0
            elif kind == 1:
                value = self.sums[pos] + (y - x)
            else:
                continue
            total += WEIGHTS[pos] * (value - values[pos])
        return total

    def score(self) -> float:
        """The score of the node set."""
        if self._score is None:
            self._score = weighted(self.values())
        return self._score


_ONLINE_SUMS: tuple[int, ...] = tuple(
    i for i, m in enumerate(METRICS) if m.online and m.kind == "sum")
_POSITIONS = tuple(range(N_METRICS))
#: per metric: 0 standard deviation, 1 sum over online nodes, 2 otherwise
_KIND: tuple[int, ...] = tuple(
    0 if m.kind == "sd" else 1 if (m.online and m.kind == "sum") else 2 for m in METRICS)


class ExactScorer:
    """The score of a node set after some of its nodes change, computed from scratch
    in htools' order of operations (so equal to htools' own to the last bit, which
    decides between placements that are equally good to the printed digits).

    The nodes' values are kept as an array; a score costs O(nodes) array operations,
    so it is used to settle near-ties that the incremental scores cannot."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        import numpy as np

        self._np = np
        self.pos = {node.idx: i for i, node in enumerate(nodes)}
        self.vecs = np.array([node_vector(node) for node in nodes],
                             dtype=np.float64).reshape(len(nodes), N_METRICS)
        self.offline = np.array([node.offline for node in nodes], dtype=bool)
        self.maps = {node.idx: node.inst_map for node in nodes if node.inst_map
                     and not node.offline}

    def update(self, changed: Iterable[Node]) -> None:
        """Take changed nodes into the base set."""
        for node in changed:
            self.vecs[self.pos[node.idx]] = node_vector(node)
            if node.inst_map and not node.offline:
                self.maps[node.idx] = node.inst_map
            else:
                self.maps.pop(node.idx, None)

    def score(self, changed: Iterable[Node] = ()) -> float:
        """The score with ``changed`` nodes replacing theirs."""
        return weighted(self.values(changed))

    def values(self, changed: Iterable[Node] = ()) -> list[float]:
        """Each metric's aggregate with ``changed`` nodes replacing theirs."""
        np = self._np
        vecs = self.vecs
        maps = self.maps
        changed = list(changed)
        if changed:
            vecs = vecs.copy()
            maps = dict(maps)
            for node in changed:
                vecs[self.pos[node.idx]] = node_vector(node)
                if node.inst_map and not node.offline:
                    maps[node.idx] = node.inst_map
                else:
                    maps.pop(node.idx, None)
        online = vecs[~self.offline]
        offline = vecs[self.offline]
        n = float(len(online))
        with np.errstate(invalid="ignore", divide="ignore"):
            if len(online):
                sums = np.cumsum(online, axis=0)[-1]
                centered = online - sums / n
                sd = np.sqrt(np.cumsum(centered * centered, axis=0)[-1] / n)
            else:
                sums = np.zeros(N_METRICS)
                sd = np.full(N_METRICS, math.nan)
        off_sums = np.cumsum(offline, axis=0)[-1] if len(offline) else np.zeros(N_METRICS)
        out = []
        for pos, metric in enumerate(METRICS):
            if metric.kind == "map":
                merged: Counter[tuple[str, str]] = Counter()
                for imap in maps.values():
                    merged.update(imap)
                out.append(float(sum(merged.values()) - len(merged)))
            elif not metric.online:
                out.append(float(off_sums[pos]))
            elif metric.kind == "sum":
                out.append(float(sums[pos]))
            else:
                out.append(float(sd[pos]))
        return out
