"""Allocation on a dedicated cluster (htools' ``Dedicated``): hail's way when every
node of the groups it may use has exclusive storage.

Such nodes are meant for instances of the policy's sizes, so the score is not the
cluster's balance but what a placement costs in future placements. For each minimum
spec of the group's policy (largest disk first) a *test instance* of that size; a
node's *allocation vector* counts how many of each fit on it one after the other; the
metric of a placement is, per test instance, how many fewer fit on its nodes after it
(lost allocations), then the free disk left on them. Metrics compare as tuples, lowest
wins (the last one tried among equals); no capacity (N+1) checks.

Counting how many test instances fit one after the other is done per check (each
check fails from some count on) and confirmed with the node operation itself, instead
of placing them one by one (thousands on a large node).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from corral.allocator.alloc import (
    AllocError,
    AllocOptions,
    Placement,
    Solution,
    candidate_nodes,
)
from corral.allocator.model import NO_NODE, Cluster, Instance, Node
from corral.allocator.nodeops import add_pri, add_sec
from corral.allocator.policy import matches_policy
from corral.allocator.types import AllocPolicy, FailMode, IPolicy

__all__ = [
    "alloc_list_dedicated",
    "allocate_dedicated",
    "allocation_count",
    "count_by_checks",
    "count_one_by_one",
    "is_dedicated",
    "show_metric",
    "test_instances",
]

#: (lost allocations per test instance, free disk left)
Metric = tuple[tuple[int, ...], int]

#: Counts beyond this are not searched (a node would need exabytes).
_HUGE = 1 << 40


def is_dedicated(cluster: Cluster, group_name: str | None = None) -> bool:
    """Whether every node of the groups an allocation may use (the named group, else
    the allocable ones) has exclusive storage."""
    groups = {g.idx for g in cluster.groups
              if (g.name == group_name if group_name is not None
                  else g.alloc_policy != AllocPolicy.UNALLOCABLE)}
    return all(node.excl or node.group not in groups for node in cluster.nodes)


def test_instances(policy: IPolicy) -> list[Instance]:
    """The test instances of a policy: one of each minimum spec, largest disk first."""
    specs = sorted((pair.min for pair in policy.minmax), key=lambda s: -s.disk_size)
    return [Instance("minimalspecinstance", spec.memory_size, spec.disk_size,
                     spec.cpu_count, "running", NO_NODE, NO_NODE, "plain",
                     spec.spindle_use, (), False, False, ()) for spec in specs]


# -- how many fit, one after the other --------------------------------------------


def _first(fails: Callable[[int], bool]) -> int:
    """The least k >= 0 with ``fails(k)`` (monotone), or :data:`_HUGE`."""
    if fails(0):
        return 0
    good, step = 0, 1
    while not fails(good + step):
        good += step
        step *= 2
        if good >= _HUGE:
            return _HUGE
    bad = good + step
    while bad - good > 1:
        mid = (good + bad) // 2
        if fails(mid):
            bad = mid
        else:
            good = mid
    return bad


def count_by_checks(node: Node, inst: Instance) -> int:
    """How many copies of ``inst`` fit on ``node`` one after the other, worked out per
    check of add_pri (strict): the number placed before each first fails, the least
    of them (``k`` below is the number already placed)."""
    mem = inst.mem if inst.uses_memory else 0
    unalloc = node.unallocated_mem
    local = inst.local_storage
    dsk = inst.dsk if local else 0
    vcpus = inst.vcpus if inst.not_offline else 0
    tsp = inst.total_spindles
    counts = [_first(lambda k: unalloc - (k + 1) * mem <= 0)]
    if local:
        counts.append(_first(lambda k: node.f_dsk - (k + 1) * dsk <= 0))
        counts.append(_first(lambda k: node.f_dsk - (k + 1) * dsk < node.lo_dsk))
        if node.excl:
            if tsp is None:
                counts.append(0)
            else:
                counts.append(_first(lambda k: node.f_sp - (k + 1) * tsp < 0))
        if node.excl:
            if node.hi_sp < 0.0:
                counts.append(0)
        else:
            counts.append(_first(
                lambda k: node.inst_sp + (k + 1) * inst.spindle_use > node.hi_sp))
    # N+1: the node may not start failing it; once failing (already, or after a
    # placement that found it so) the check holds
    crosses = _first(lambda k: unalloc - (k + 1) * mem <= node.r_mem)
    if not node.fail_n1 or crosses > 0:
        counts.append(crosses)
    ratio = node.vcpu_ratio
    if ratio >= 0:
        counts.append(_first(lambda k: ratio < _ratio(node.u_cpu + (k + 1) * vcpus,
                                                      node.t_cpu)))
    # the forthcoming figures
    counts.append(_first(lambda k: node.f_mem_forth - (k + 1) * inst.mem <= 0))
    if local:
        counts.append(_first(lambda k: node.f_dsk_forth - (k + 1) * dsk <= 0))
        counts.append(_first(lambda k: node.f_dsk_forth - (k + 1) * dsk < node.lo_dsk))
        if node.excl:
            counts.append(0 if tsp is None else
                          _first(lambda k: node.f_sp_forth - (k + 1) * tsp < 0))
            if node.hi_sp < 0.0:
                counts.append(0)
        else:
            counts.append(_first(
                lambda k: node.inst_sp_forth + (k + 1) * inst.spindle_use > node.hi_sp))
    if ratio >= 0:
        counts.append(_first(lambda k: ratio < _ratio(node.u_cpu_forth + (k + 1) * vcpus,
                                                      node.t_cpu)))
    return min(counts)


def _ratio(used: float, total: float) -> float:
    if total:
        return used / total
    return float("inf") if used > 0 else float("-inf") if used < 0 else float("nan")


def _after(node: Node, inst: Instance, count: int) -> Node:
    """``node`` with ``count`` more copies of ``inst`` placed (as that many add_pri
    would leave the fields the checks read)."""
    if count == 0:
        return node
    new = node.copy()
    mem = inst.mem if inst.uses_memory else 0
    new.i_mem = node.i_mem + count * mem
    new.f_mem_forth = node.f_mem_forth - count * inst.mem
    if inst.not_offline:
        new.u_cpu = node.u_cpu + count * inst.vcpus
        new.u_cpu_forth = node.u_cpu_forth + count * inst.vcpus
    if inst.local_storage:
        new.f_dsk = node.f_dsk - count * inst.dsk
        new.f_dsk_forth = node.f_dsk_forth - count * inst.dsk
        if node.excl:
            new.inst_sp = new.inst_sp_forth = 0.0
            tsp = inst.total_spindles
            new.f_sp = -1 if tsp is None else node.f_sp - count * tsp
            new.f_sp_forth = -1 if tsp is None else node.f_sp_forth - count * tsp
        else:
            new.inst_sp = node.inst_sp + count * inst.spindle_use
            new.inst_sp_forth = node.inst_sp_forth + count * inst.spindle_use
    new.fail_n1 = new.unallocated_mem <= node.r_mem
    return new


def allocation_count(node: Node, inst: Instance) -> int:
    """How many copies of ``inst`` fit on ``node`` placed one after the other (htools
    places them until one does not fit: its allocation vector counts one more)."""
    if inst.forthcoming or inst.excl_tags:
        return count_one_by_one(node, inst)
    count = count_by_checks(node, inst)
    if count < _HUGE and isinstance(add_pri(_after(node, inst, count), inst), FailMode) \
            and (count == 0 or not isinstance(
                add_pri(_after(node, inst, count - 1), inst), FailMode)):
        return count
    return count_one_by_one(node, inst)     # pragma: no cover - the checks agree


def count_one_by_one(node: Node, inst: Instance) -> int:
    """:func:`allocation_count` by placing the copies one after the other."""
    count = 0
    current: Node | FailMode = add_pri(node, inst)
    while not isinstance(current, FailMode):
        count += 1
        current = add_pri(current, inst)
    return count


def _vector(tests: Sequence[Instance], node: Node) -> list[int]:
    return [allocation_count(node, inst) for inst in tests]


def show_metric(metric: Metric) -> str:
    """A metric as hail prints it (Haskell's ``show``): ``([0,1],1024)``."""
    return f"([{','.join(str(n) for n in metric[0])}],{metric[1]})"


# -- placing ----------------------------------------------------------------------


def _on_single(cluster: Cluster, inst: Instance, pdx: int,
               force: bool) -> tuple[list[Node], Metric] | FailMode:
    primary = cluster.nodes[pdx]
    bad = matches_policy(inst, primary.policy, primary.excl)
    if bad is not None:
        return bad
    tests = test_instances(primary.policy)
    new_p = add_pri(primary, inst, force)
    if isinstance(new_p, FailMode):
        return new_p
    lost = [a - b for a, b in zip(_vector(tests, primary), _vector(tests, new_p),
                                  strict=True)]
    return [new_p], (tuple(lost), new_p.f_dsk)


def _on_pair(cluster: Cluster, inst: Instance, pdx: int, sdx: int,
             force: bool) -> tuple[list[Node], Metric] | FailMode:
    primary, secondary = cluster.nodes[pdx], cluster.nodes[sdx]
    bad = matches_policy(inst, primary.policy, primary.excl)
    if bad is not None:
        return bad
    tests = test_instances(primary.policy)
    new_p = add_pri(primary, inst, force)
    if isinstance(new_p, FailMode):
        return new_p
    new_s = add_sec(secondary, inst, pdx)
    if isinstance(new_s, FailMode):
        return new_s
    lost_p = [a - b for a, b in zip(_vector(tests, primary), _vector(tests, new_p),
                                    strict=True)]
    lost_s = [a - b for a, b in zip(_vector(tests, secondary), _vector(tests, new_s),
                                    strict=True)]
    return [new_p, new_s], (tuple(p + s for p, s in zip(lost_p, lost_s, strict=True)),
                            new_p.f_dsk + new_s.f_dsk)


class DedicatedSolution(Solution):
    """A solution whose placement's metric is lost allocations (printed as hail)."""

    metric: Metric = ((), 0)

    def score_text(self) -> str:
        """The metric of the placement as hail prints it."""
        return show_metric(self.metric)


def _find(cluster: Cluster, gdx: int, inst: Instance, count: int,
          opts: AllocOptions) -> DedicatedSolution:
    """The best placement in group ``gdx`` (htools' findAllocation)."""
    group = cluster.groups[gdx]
    if any(network is not None and network not in group.networks
           for network in inst.nic_networks):
        raise AllocError(f"The group {group.name} is not connected to a network "
                         f"required by instance {inst.name}")
    nodes = [n.idx for n in cluster.nodes if n.group == gdx]
    cands = candidate_nodes(cluster, nodes, count, opts.restrict_to)
    if not cands:
        raise AllocError("No online nodes" if count == 1 else "Not enough online nodes")
    sol = DedicatedSolution()
    best: tuple[Metric, tuple[int, ...], list[Node]] | None = None
    tried: list[tuple[int, ...]] = (
        [(p,) for p in cands] if count == 1     # type: ignore[misc]
        else [(p, s) for p, secs in cands for s in secs])    # type: ignore[misc]
    for cand in tried:
        placed = inst.copy()
        placed.pnode = cand[0]
        placed.snode = cand[1] if len(cand) > 1 else NO_NODE
        result = (_on_single(cluster, placed, cand[0], opts.force) if len(cand) == 1
                  else _on_pair(cluster, placed, cand[0], cand[1], opts.force))
        if isinstance(result, FailMode):
            sol.fail(result)
            continue
        sol.allocs += 1
        changed, metric = result
        if best is None or not best[0] < metric:
            best = (metric, cand, changed)
    if best is not None:
        metric, cand, changed = best
        placed = inst.copy()
        placed.pnode = cand[0]
        placed.snode = cand[1] if len(cand) > 1 else NO_NODE
        sol.best = Placement(cand, 0.0, changed, placed)
        sol.metric = metric
    sol.log = [f"Group {group.name} ({group.alloc_policy.raw}): {sol.describe(cluster)}"]
    return sol


def _find_any(cluster: Cluster, inst: Instance, count: int, opts: AllocOptions,
              groups: Sequence[int] | None = None) -> DedicatedSolution:
    """The best group's placement (htools' findMGAllocation), among ``groups``
    (default: every group with nodes)."""
    msgs: list[str] = []
    kept: list[tuple[Any, DedicatedSolution]] = []
    for gdx in (cluster.groups_in_use() if groups is None else groups):
        group = cluster.groups[gdx]
        try:
            sol = _find(cluster, gdx, inst, count, opts)
        except AllocError as err:
            msgs.append(f"Group {group.name}: error {err}")
            continue
        msgs += sol.log
        if sol.best is not None and group.allocable:
            kept.append((group, sol))
    if not kept:
        raise AllocError(", ".join(msgs))
    # as htools: the kept groups in reverse, then a stable sort by policy and metric
    kept.reverse()
    kept.sort(key=lambda gs: (gs[0].alloc_policy, gs[1].metric))
    group, sol = kept[0]
    sol.log = [f"Selected group: {group.name}", *msgs]
    return sol


def allocate_dedicated(cluster: Cluster, inst: Instance, count: int, opts: AllocOptions,
                       group_name: str | None = None) -> Solution:
    """Allocate a new instance on a dedicated cluster, in the named group or the best
    one; the solution's log holds hail's info lines."""
    if group_name is not None:
        group = cluster.group_by_name(group_name)
        if group is None:
            raise AllocError(f"Unknown group '{group_name}'")
        return _find(cluster, group.idx, inst, count, opts)
    return _find_any(cluster, inst, count, opts)


def alloc_list_dedicated(cluster: Cluster, requests: Sequence[tuple[Instance, int]],
                         group_name: str | None,
                         opts: AllocOptions) -> list[tuple[Instance, Solution]]:
    """Allocate several new instances one after the other on a dedicated cluster
    (changes ``cluster``)."""
    results: list[tuple[Instance, Solution]] = []
    original = cluster.fork()
    # after a placement htools goes on with the node list of the placement's group
    # only, so the next instances look in that group alone
    groups: list[int] | None = None
    for inst, count in requests:
        new = inst.copy()
        new.idx = len(cluster.instances)
        if group_name is not None:
            # htools looks for a named group's placement on the cluster as it was
            # before the request, not after the instances placed before
            group = cluster.group_by_name(group_name)
            if group is None:
                raise AllocError(f"Unknown group '{group_name}'")
            sol: Solution = _find(original, group.idx, new, count, opts)
        else:
            sol = _find_any(cluster, new, count, opts, groups)
            if sol.best is not None:
                groups = [cluster.nodes[sol.best.nodes[0]].group]
        if sol.best is not None:
            cluster.replace_nodes(sol.best.changed)
            cluster.instances.append(sol.best.inst)
        results.append((new, sol))
    return results

