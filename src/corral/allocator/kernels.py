"""Many candidate placements at once: htools' node operations and the score update,
vectorised with NumPy over candidate nodes.

The allocator tries an instance on every node (or pair of nodes) of a group, and
balancing tries every move of every instance: in plain Python that is what makes
htools' own tools take minutes on large clusters. Here a :class:`NodeTable` holds the
nodes' numbers as columns; :func:`add_pri` and :func:`add_sec` compute, for an
array of candidate rows, the failure mode of each (htools' checks in htools' order)
and the columns after placing the instance; :func:`metric_matrix` turns columns into
the score's per-node values and :func:`scores` the score of each candidate from the
aggregates of the current cluster (:class:`~corral.allocator.metrics.Stats`), so a
candidate costs O(metrics) and never a pass over all nodes.

These are the same rules as :mod:`corral.allocator.nodeops` (the reference, used to
apply a chosen move); tests compare both on random clusters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from corral.allocator.metrics import METRICS, N_METRICS, SPREAD, WEIGHTS, Stats
from corral.allocator.model import Instance, Node
from corral.allocator.types import FailMode

__all__ = [
    "COLUMNS",
    "OK",
    "Columns",
    "InstVec",
    "NodeTable",
    "Plan",
    "add_pri",
    "add_sec",
    "metric_matrix",
    "node_row",
    "scores",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

#: The failure code of a candidate that fits.
OK = -1

COLUMNS = (
    "t_mem", "mem_base", "i_mem", "f_mem_forth", "t_dsk", "f_dsk", "f_dsk_forth",
    "lo_dsk", "t_cpu", "cpu_speed", "u_cpu", "u_cpu_forth", "vcpu_ratio", "t_sp", "f_sp",
    "f_sp_forth", "inst_sp", "inst_sp_forth", "hi_sp", "excl", "offline", "r_mem",
    "fail_n1", "n_pri", "n_sec", "load0", "load1", "load2", "load3", "pool0", "pool1",
    "pool2", "pool3", "conflicts", "loc_score",
)
_BOOLCOLUMNS = frozenset({"excl", "offline", "fail_n1"})

#: Column arrays of some candidate rows (a mapping from column name to array).
Columns = Mapping[str, Any]

_W = np.array(WEIGHTS, dtype=np.float64)
_SD = np.zeros(N_METRICS, dtype=bool)
_SD[list(SPREAD)] = True
_ONLINE_SUM = np.array([m.online and m.kind == "sum" for m in METRICS])


def node_row(node: Node) -> list[float]:
    """A node's numbers in the order of :data:`COLUMNS`."""
    load, pool = node.util_load, node.util_pool
    return [
        node.t_mem, int(node.t_mem) - node.n_mem - max(0, node.x_mem), node.i_mem,
        node.f_mem_forth, node.t_dsk, node.f_dsk, node.f_dsk_forth, node.lo_dsk, node.t_cpu,
        node.cpu_speed, node.u_cpu, node.u_cpu_forth, node.vcpu_ratio, node.t_sp, node.f_sp,
        node.f_sp_forth, node.inst_sp, node.inst_sp_forth, node.hi_sp, node.excl,
        node.offline, node.r_mem, node.fail_n1, len(node.p_list), len(node.s_list),
        load[0], load[1], load[2], load[3], pool[0], pool[1], pool[2], pool[3],
        sum(node.p_tags.values()) - len(node.p_tags), node.loc_score,
    ]


class NodeTable:
    """The nodes' numbers as columns indexed by node index, kept in step with the
    :class:`~corral.allocator.model.Node` objects by :meth:`refresh`."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        data = np.array([node_row(node) for node in nodes], dtype=np.float64).reshape(
            len(nodes), len(COLUMNS))
        self.cols: dict[str, Any] = {}
        for pos, name in enumerate(COLUMNS):
            column = np.ascontiguousarray(data[:, pos])
            self.cols[name] = column.astype(bool) if name in _BOOLCOLUMNS else column
        self.size = len(nodes)

    def refresh(self, nodes: Sequence[Node]) -> None:
        """Copy changed nodes' numbers into the columns."""
        cols = self.cols
        for node in nodes:
            for name, value in zip(COLUMNS, node_row(node), strict=True):
                cols[name][node.idx] = value

    def take(self, rows: IntArray) -> dict[str, Any]:
        """The columns of ``rows``."""
        return {name: column[rows] for name, column in self.cols.items()}


def _metric(c: Columns, pos: int) -> Any:
    t_mem = c["t_mem"]
    if pos == 0:
        return (c["mem_base"] - c["i_mem"]) / t_mem
    if pos == 1:
        return _pdsk(c["excl"], c["t_sp"], c["f_sp"], c["t_dsk"], c["f_dsk"])
    if pos == 2:
        return np.where(c["fail_n1"], c["n_pri"] + c["n_sec"], 0.0)
    if pos in (3, 19):
        return c["r_mem"] / t_mem
    if pos == 4:
        return c["n_pri"] + c["n_sec"]
    if pos == 5:
        return c["n_pri"]
    if pos == 6:
        return (c["u_cpu"] / c["t_cpu"]) / c["cpu_speed"]
    if 7 <= pos <= 10:
        k = pos - 7
        return c[f"load{k}"] / c[f"pool{k}"]
    if pos == 11:
        return c["conflicts"]
    if pos == 12:
        return c["inst_sp"] / c["hi_sp"]
    if pos == 13:
        return c["f_mem_forth"] / t_mem
    if pos == 14:
        return _pdsk(c["excl"], c["t_sp"], c["f_sp_forth"], c["t_dsk"], c["f_dsk_forth"])
    if pos == 15:
        return (c["u_cpu_forth"] / c["t_cpu"]) / c["cpu_speed"]
    if pos == 16:
        return c["inst_sp_forth"] / c["hi_sp"]
    if pos == 17:
        return c["loc_score"]
    return 0.0


def metric_matrix(c: Columns, only: Sequence[int] | None = None) -> FloatArray:
    """Each row's value of each metric (or of the metrics ``only``): an array
    (metrics x rows...); the map metric (exclusion tags sharing a location) is 0."""
    shape = np.broadcast_shapes(*(np.shape(v) for v in c.values()))
    wanted = range(N_METRICS) if only is None else only
    out = np.zeros((len(wanted), *shape), dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        for row, pos in enumerate(wanted):
            out[row] = _metric(c, pos)
    return out


def _pdsk(excl: Any, t_sp: Any, f_sp: Any, t_dsk: Any, f_dsk: Any) -> Any:
    with np.errstate(divide="ignore", invalid="ignore"):
        by_sp = np.where(t_sp == 0, 1.0, f_sp / t_sp)
        by_dsk = np.where(t_dsk == 0, 1.0, f_dsk / t_dsk)
    return np.where(excl, by_sp, by_dsk)


class InstVec:
    """An instance's numbers for the kernels: of one instance (plain numbers), or of
    many (arrays, shaped to broadcast against the node columns, e.g. (instances, 1)
    against (targets,)). Forthcoming instances are only taken one at a time."""

    __slots__ = (
        "dsk",
        "forthcoming",
        "has_secondary",
        "local",
        "mem",
        "not_offline",
        "su",
        "tsp",
        "uses_memory",
        "uses_sec_mem",
        "util",
        "vcpus",
    )

    def __init__(self, insts: Instance | Sequence[Instance], shape: tuple[int, ...] = ()) -> None:
        if isinstance(insts, Instance):
            inst = insts
            self.mem: Any = inst.mem
            self.dsk: Any = inst.dsk
            self.vcpus: Any = inst.vcpus
            self.su: Any = inst.spindle_use
            self.util: Any = inst.util
            self.uses_memory: Any = inst.uses_memory
            self.local: Any = inst.local_storage
            self.not_offline: Any = inst.not_offline
            self.uses_sec_mem: Any = inst.uses_sec_mem
            self.has_secondary: Any = inst.has_secondary
            total = inst.total_spindles
            self.tsp: Any = np.nan if total is None else float(total)
            self.forthcoming = inst.forthcoming
            return
        if any(inst.forthcoming for inst in insts):
            raise ValueError("forthcoming instances are evaluated one at a time")
        shape = shape or (len(insts),)

        def arr(values: list[Any], dtype: Any = np.float64) -> Any:
            return np.array(values, dtype=dtype).reshape(shape)

        self.mem = arr([i.mem for i in insts])
        self.dsk = arr([i.dsk for i in insts])
        self.vcpus = arr([i.vcpus for i in insts])
        self.su = arr([i.spindle_use for i in insts])
        self.util = tuple(arr([i.util[k] for i in insts]) for k in range(4))
        self.uses_memory = arr([i.uses_memory for i in insts], bool)
        self.local = arr([i.local_storage for i in insts], bool)
        self.not_offline = arr([i.not_offline for i in insts], bool)
        self.uses_sec_mem = arr([i.uses_sec_mem for i in insts], bool)
        self.has_secondary = arr([i.has_secondary for i in insts], bool)
        totals = [i.total_spindles for i in insts]
        self.tsp = arr([np.nan if t is None else float(t) for t in totals])
        self.forthcoming = False

    def take(self, rows: IntArray) -> InstVec:
        """The numbers of some of many instances (rows along the first axis)."""
        new = InstVec.__new__(InstVec)
        for name in ("mem", "dsk", "vcpus", "su", "uses_memory", "local", "not_offline",
                     "uses_sec_mem", "has_secondary", "tsp"):
            setattr(new, name, getattr(self, name)[rows])
        new.util = tuple(u[rows] for u in self.util)
        new.forthcoming = False
        return new


def _vec(inst: Instance | InstVec) -> InstVec:
    return inst if isinstance(inst, InstVec) else InstVec(inst)


def _plus_if(flag: Any, base: Any, delta: Any) -> Any:
    if flag is True:
        return base + delta
    if flag is False:
        return base
    return base + np.where(flag, delta, 0.0)


def _spindle_use(c: Columns, iv: InstVec, key: str) -> Any:
    return np.where(c["excl"], 0.0, _plus_if(iv.local, c[key], iv.su))


def _free_spindles(c: Columns, iv: InstVec, key: str) -> Any:
    tsp = iv.tsp
    after = np.where(np.isnan(tsp), -1.0, c[key] - np.nan_to_num(tsp))
    return np.where(c["excl"], after, 0.0)


def _select(conds: list[Any], codes: list[FailMode]) -> IntArray:
    out: Any = OK
    for cond, code in zip(reversed(conds), reversed(codes), strict=True):
        if cond is False:
            continue
        out = np.where(cond, int(code), out)
    return np.asarray(out, dtype=np.int64)


def add_pri(c: Columns, inst: Instance | InstVec, force: Any = False,
            tag_rejects: BoolArray | None = None,
            tag_conflicts: FloatArray | None = None,
            loc_delta: Any = 0) -> tuple[IntArray, dict[str, Any]]:
    """Place ``inst`` as primary on each row of ``c``: the failure code of each row
    (:data:`OK` if it fits) and the changed columns.

    ``force`` (a bool or one per row) skips the soft checks; ``tag_rejects`` says for
    each row whether it holds a primary with one of the instance's exclusion tags and
    ``tag_conflicts`` how many of its tags are there already (both computed by the
    caller, only for an instance with exclusion tags); ``loc_delta`` is what the
    location score of each row grows by."""
    iv = _vec(inst)
    strict = np.logical_not(force)
    uses_disk = iv.local
    mem, dsk = iv.mem, iv.dsk
    new_mem_forth = c["f_mem_forth"] - mem
    new_dsk_forth = _plus_if(uses_disk, c["f_dsk_forth"], -dsk)
    new_free_sp_forth = _free_spindles(c, iv, "f_sp_forth")
    new_inst_sp_forth = _spindle_use(c, iv, "inst_sp_forth")
    new_ucpu_forth = _plus_if(iv.not_offline, c["u_cpu_forth"], iv.vcpus)
    with np.errstate(divide="ignore", invalid="ignore"):
        new_pcpu_forth = new_ucpu_forth / c["t_cpu"]
    l_cpu = c["vcpu_ratio"]
    lo_dsk, hi_sp, excl = c["lo_dsk"], c["hi_sp"], c["excl"]
    forth_conds = [
        new_mem_forth <= 0,
        uses_disk & (new_dsk_forth <= 0),
        uses_disk & (new_dsk_forth < lo_dsk),
        uses_disk & excl & (new_free_sp_forth < 0),
        uses_disk & (new_inst_sp_forth > hi_sp),
        (l_cpu >= 0) & (l_cpu < new_pcpu_forth),
    ]
    forth_codes = [FailMode.MEM, FailMode.DISK, FailMode.DISK, FailMode.SPINDLES,
                   FailMode.DISK, FailMode.CPU]
    new: dict[str, Any] = {
        "f_mem_forth": new_mem_forth, "f_dsk_forth": new_dsk_forth,
        "f_sp_forth": new_free_sp_forth, "inst_sp_forth": new_inst_sp_forth,
        "u_cpu_forth": new_ucpu_forth,
    }
    conflicts = tag_conflicts if tag_conflicts is not None else 0.0
    if iv.forthcoming:
        fail = _select([strict & cond for cond in forth_conds], forth_codes)
        new["conflicts"] = c["conflicts"] + conflicts
        return fail, new
    new_i_mem = _plus_if(iv.uses_memory, c["i_mem"], mem)
    new_free_mem = c["mem_base"] - new_i_mem
    new_failn1 = new_free_mem <= c["r_mem"]
    new_dsk = _plus_if(uses_disk, c["f_dsk"], -dsk)
    new_free_sp = _free_spindles(c, iv, "f_sp")
    new_inst_sp = _spindle_use(c, iv, "inst_sp")
    new_ucpu = _plus_if(iv.not_offline, c["u_cpu"], iv.vcpus)
    with np.errstate(divide="ignore", invalid="ignore"):
        new_pcpu = new_ucpu / c["t_cpu"]
    rejects = tag_rejects if tag_rejects is not None else False
    conds = [
        new_free_mem <= 0,
        uses_disk & (new_dsk <= 0),
        strict & uses_disk & (new_dsk < lo_dsk),
        uses_disk & excl & (new_free_sp < 0),
        strict & uses_disk & (new_inst_sp > hi_sp),
        strict & new_failn1 & np.logical_not(c["fail_n1"]),
        strict & (l_cpu >= 0) & (l_cpu < new_pcpu),
        (strict & rejects) if rejects is not False else False,
    ] + [strict & cond for cond in forth_conds]
    codes = [FailMode.MEM, FailMode.DISK, FailMode.DISK, FailMode.SPINDLES, FailMode.DISK,
             FailMode.MEM, FailMode.CPU, FailMode.TAGS, *forth_codes]
    fail = _select(conds, codes)
    util = iv.util
    new.update({
        "i_mem": new_i_mem, "f_dsk": new_dsk, "fail_n1": new_failn1, "u_cpu": new_ucpu,
        "inst_sp": new_inst_sp, "f_sp": new_free_sp, "n_pri": c["n_pri"] + 1,
        "load0": c["load0"] + util[0], "load1": c["load1"] + util[1],
        "load2": c["load2"] + util[2], "load3": c["load3"] + util[3],
        "conflicts": c["conflicts"] + conflicts,
        "loc_score": c["loc_score"] + loc_delta,
    })
    return fail, new


def add_sec(c: Columns, inst: Instance | InstVec, peer_mem: Any, force: Any = False,
            ignore_disks: Any = False) -> tuple[IntArray, dict[str, Any]]:
    """Place ``inst`` as secondary on each row of ``c``; ``peer_mem`` is, for each
    row, what it already reserves for the instance's primary node. Returns the failure
    codes and the changed columns (as :func:`add_pri`)."""
    iv = _vec(inst)
    strict = np.logical_not(force)
    needed = _plus_if(iv.uses_sec_mem, 0.0, iv.mem)
    new_peem = peer_mem + needed
    new_dsk_forth = c["f_dsk_forth"] - iv.dsk
    new_free_sp_forth = _free_spindles(c, iv, "f_sp_forth")
    new_inst_sp_forth = _spindle_use(c, iv, "inst_sp_forth")
    lo_dsk, hi_sp, excl = c["lo_dsk"], c["hi_sp"], c["excl"]
    no_sec = np.logical_not(iv.has_secondary)
    forth_conds = [
        no_sec,
        (new_dsk_forth <= 0) | (new_dsk_forth < lo_dsk),
        excl & (new_free_sp_forth < 0),
        new_inst_sp_forth > hi_sp,
        needed >= c["f_mem_forth"],
    ]
    forth_codes = [FailMode.DISK, FailMode.DISK, FailMode.SPINDLES, FailMode.DISK,
                   FailMode.MEM]
    new: dict[str, Any] = {
        "f_dsk_forth": new_dsk_forth, "f_sp_forth": new_free_sp_forth,
        "inst_sp_forth": new_inst_sp_forth,
    }
    if iv.forthcoming:
        return _select([strict & cond for cond in forth_conds], forth_codes), new
    old_mem = c["mem_base"] - c["i_mem"]
    new_dsk = c["f_dsk"] - iv.dsk
    new_free_sp = _free_spindles(c, iv, "f_sp")
    new_inst_sp = _spindle_use(c, iv, "inst_sp")
    new_rmem = np.maximum(c["r_mem"], new_peem)
    new_failn1 = old_mem <= new_rmem
    conds = [
        no_sec,
        np.logical_not(ignore_disks) & (new_dsk <= 0),
        strict & (new_dsk < lo_dsk),
        excl & (new_free_sp < 0),
        strict & (new_inst_sp > hi_sp),
        strict & (needed >= old_mem),
        strict & new_failn1 & np.logical_not(c["fail_n1"]),
    ] + [strict & cond for cond in forth_conds]
    codes = [FailMode.DISK, FailMode.DISK, FailMode.DISK, FailMode.SPINDLES, FailMode.DISK,
             FailMode.MEM, FailMode.MEM, *forth_codes]
    fail = _select(conds, codes)
    new.update({
        "f_dsk": new_dsk, "fail_n1": new_failn1, "r_mem": new_rmem, "inst_sp": new_inst_sp,
        "f_sp": new_free_sp, "n_sec": c["n_sec"] + 1,
        "load2": c["load2"] + iv.util[2],
    })
    return fail, new


def merged(old: Columns, changes: Mapping[str, Any]) -> dict[str, Any]:
    """``old`` with ``changes`` applied (for :func:`metric_matrix`)."""
    out = dict(old)
    out.update(changes)
    return out


def scores(stats: Stats, slots: Sequence[tuple[FloatArray, FloatArray]],
           offline: bool = False) -> FloatArray:
    """The score after each candidate, given for each changed node (slot) its metric
    values before and after, as (metrics x candidates) arrays; ``offline`` says the
    changed nodes are offline ones. The map metric is taken as unchanged."""
    base_vals = np.array(stats.values(), dtype=np.float64)
    k = slots[0][0].shape[1]
    if offline:
        delta = np.zeros((N_METRICS, k))
        for old, new in slots:
            delta += new - old
        vals = np.repeat(base_vals[:, None], k, axis=1)
        for pos in (4, 5):
            vals[pos] = base_vals[pos] + delta[pos]
        return np.asarray(_W @ vals, dtype=np.float64)
    n = float(stats.count)
    sums = np.array(stats.sums, dtype=np.float64)[:, None]
    var = np.array(stats.var, dtype=np.float64)[:, None]
    d = np.zeros((N_METRICS, k))
    e = np.zeros((N_METRICS, k))
    for old, new in slots:
        d += new - old
        e += new * new - old * old
    with np.errstate(invalid="ignore", over="ignore"):
        new_var = var + ((n * e - 2 * sums * d) - d * d) / (n * n)
        sd = np.sqrt(np.maximum(new_var, 0.0))
    vals = np.repeat(base_vals[:, None], k, axis=1)
    vals[_SD] = sd[_SD]
    vals[_ONLINE_SUM] = (sums + d)[_ONLINE_SUM]
    return np.asarray(_W @ vals, dtype=np.float64)


_OFFLINE = (4, 5)


class Plan:
    """Which metrics a change of online nodes can move, with the weights of metrics
    that are always equal added up: without forthcoming instances the "forth" metrics
    of disk, CPU and spindles equal the plain ones (where the nodes' figures say so),
    and with the same utilisation figures for CPU, memory and network their three
    load metrics are equal. Exclusion tags and locations are left out unless
    ``tags``/``locations`` say they matter; the offline counts unless ``offline``.

    :meth:`score` computes scores from deltas of the plan's metrics only, which is
    what keeps scoring hundreds of thousands of candidates cheap."""

    def __init__(self, nodes: Sequence[Node], instances: Sequence[Instance], *,
                 tags: bool = False, locations: bool = False,
                 offline: bool = False) -> None:
        weights = dict(enumerate(WEIGHTS))
        if not any(i.forthcoming for i in instances):
            same = {14: all(n.f_dsk == n.f_dsk_forth and n.f_sp == n.f_sp_forth
                            for n in nodes),
                    15: all(n.u_cpu == n.u_cpu_forth for n in nodes),
                    16: all(n.inst_sp == n.inst_sp_forth for n in nodes)}
            for dup, rep in ((14, 1), (15, 6), (16, 12)):
                if same[dup]:
                    weights[rep] += weights.pop(dup)
        if (all(i.util[0] == i.util[1] == i.util[3] for i in instances)
                and all(n.util_pool[0] == n.util_pool[1] == n.util_pool[3] for n in nodes)):
            weights[7] += weights.pop(8) + weights.pop(10)
        sums = [2, 19] + ([11] if tags else []) + ([17] if locations else [])
        self.sd = [(m, w) for m, w in weights.items() if _SD[m]]
        self.sums = [(m, w) for m, w in weights.items() if m in sums]
        self.offline = offline
        self.idx = [m for m, _ in self.sd] + [m for m, _ in self.sums]
        self.const = [m for m in weights
                      if m not in self.idx and not (offline and m in _OFFLINE)]

    def score(self, stats: Stats, d: FloatArray, e: FloatArray,
              off: FloatArray | None = None) -> FloatArray:
        """Scores from the deltas of the plan's metrics (sum over the changed nodes of
        new - old, and of new² - old²; shape (plan metrics, ...)) and of the offline
        counts (2, ...)."""
        n = float(stats.count)
        base = stats.values()
        const = 0.0
        for m in self.const:
            const += WEIGHTS[m] * base[m]
        out = np.full(d.shape[1:], const)
        inv = 1.0 / (n * n) if n else float("nan")
        with np.errstate(invalid="ignore", over="ignore"):
            for row, (m, w) in enumerate(self.sd):
                dm = d[row]
                nv = ((n * e[row] - (2 * stats.sums[m]) * dm) - dm * dm) * inv + stats.var[m]
                np.maximum(nv, 0.0, out=nv)
                np.sqrt(nv, out=nv)
                nv *= w
                out += nv
            for row, (m, w) in enumerate(self.sums, start=len(self.sd)):
                out += w * (stats.sums[m] + d[row])
            if self.offline:
                for k, m in enumerate(_OFFLINE):
                    out += WEIGHTS[m] * (stats.off_sums[m] + (off[k] if off is not None
                                                               else 0.0))
        return np.asarray(out, dtype=np.float64)

    def deltas(self, slots: Sequence[tuple[FloatArray, FloatArray]]) -> tuple[
            FloatArray, FloatArray]:
        """(D, E) of changed nodes given as (old, new) metric matrices of the plan."""
        d: Any = 0.0
        e: Any = 0.0
        for old, new in slots:
            delta = new - old
            d = d + delta
            e = e + delta * (new + old)
        return np.asarray(d, dtype=np.float64), np.asarray(e, dtype=np.float64)
