"""Capacity planning: how many more instances of a size fit (hspace).

*Standard* allocation places instances of one size until none fits; *tiered*
allocation starts from a large size and, whenever nothing fits, shrinks the instance
by the resource that failed most (64 MiB of memory, 256 MiB of disk, one VCPU) and
goes on. Both follow htools exactly, including its shortcut for speed: instances are
first placed in big steps without capacity checks, and a step is kept only if the
cluster is N+1 redundant at its end; otherwise the step is redone in steps of 10, and
at last one instance at a time with the checks on.

:func:`resources` gives the cluster figures hspace prints (free, allocatable,
used and total memory, disk, spindles and CPUs, the score, the instance count).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from corral.allocator.alloc import FITS, AllocOptions, Solution, _Context, outcomes, try_alloc
from corral.allocator.capacity import Memo, redundant
from corral.allocator.metrics import full_score
from corral.allocator.model import NO_NODE, Cluster, Instance, Node
from corral.allocator.types import UNIT_CPU, UNIT_DSK, UNIT_MEM, UNIT_SPINDLE, FailMode

__all__ = [
    "AllocResult",
    "CStats",
    "Planner",
    "instance_from_spec",
    "resources",
    "shrink",
]


@dataclass
class CStats:
    """Cluster figures (htools' CStats): free (f), allocatable (a), per-node maximum
    allocatable (m), used by instances (i), total (t) memory, disk, spindles and CPUs."""

    fmem: int = 0
    fdsk: int = 0
    fspn: int = 0
    amem: int = 0
    adsk: int = 0
    acpu: int = 0
    mmem: int = 0
    mdsk: int = 0
    mcpu: int = 0
    imem: int = 0
    idsk: int = 0
    ispn: int = 0
    icpu: int = 0
    tmem: float = 0.0
    tdsk: float = 0.0
    tspn: float = 0.0
    tcpu: float = 0.0
    vcpu: int = 0
    ncpu: float = 0.0
    xmem: int = 0
    nmem: int = 0
    score: float = 0.0
    ninst: int = 0


def resources(nodes: Sequence[Node]) -> CStats:
    """The figures of a node list (hspace's INI/FIN/TRL values)."""
    cs = CStats()
    for node in nodes:
        amem = node.avail_mem
        adsk = node.avail_disk
        acpu = node.avail_cpu
        cs.fmem += node.unallocated_mem
        cs.fdsk += node.f_dsk
        cs.fspn += node.f_sp
        cs.amem += amem
        cs.adsk += adsk
        cs.acpu += acpu
        cs.mmem = max(cs.mmem, amem)
        cs.mdsk = max(cs.mdsk, adsk)
        cs.mcpu = max(cs.mcpu, acpu)
        cs.imem += node.i_mem
        cs.idsk += int(node.t_dsk) - node.f_dsk
        cs.ispn += node.t_sp - node.f_sp
        cs.icpu += node.u_cpu
        cs.tmem += node.t_mem
        cs.tdsk += node.t_dsk
        cs.tspn += node.t_sp
        cs.tcpu += node.t_cpu
        cs.vcpu += node.hi_cpu
        cs.ncpu += node.u_cpu / node.vcpu_ratio if node.vcpu_ratio else float("inf")
        cs.xmem += node.x_mem
        cs.nmem += node.n_mem
        cs.ninst += len(node.p_list)
    cs.score = full_score(nodes)
    return cs


def instance_from_spec(mem: int, dsk: int, cpus: int, spindles: int, template: str,
                       spindle_use: int) -> Instance:
    """A new instance of a spec (one disk)."""
    return Instance("new", mem, dsk, cpus, "running", NO_NODE, NO_NODE, template,
                    spindle_use, (), True, False, ((dsk, spindles),))


def shrunk(inst: Instance, mode: FailMode, times: int) -> Instance | None:
    """:func:`shrink` applied ``times`` times (None if it stops before)."""
    if times == 0:
        return inst
    if mode == FailMode.MEM:
        value = inst.mem - times * UNIT_MEM
        return None if value < UNIT_MEM else replace(inst.copy(), mem=value)
    if mode == FailMode.DISK:
        step = times * UNIT_DSK
        disks = tuple((size - step, sp) for size, sp in inst.disks)
        if any(size < UNIT_DSK for size, _ in disks):
            return None
        return replace(inst.copy(), dsk=inst.dsk - len(inst.disks) * step, disks=disks)
    if mode == FailMode.CPU:
        value = inst.vcpus - times * UNIT_CPU
        return None if value < UNIT_CPU else replace(inst.copy(), vcpus=value)
    if mode == FailMode.SPINDLES:
        if len(inst.disks) != 1 or inst.disks[0][1] is None:
            return None
        value = inst.disks[0][1] - times * UNIT_SPINDLE
        if value < UNIT_SPINDLE:
            return None
        return replace(inst.copy(), disks=((inst.disks[0][0], value),))
    return None


def shrink(inst: Instance, mode: FailMode) -> Instance | None:
    """The instance made smaller in the resource that failed, or None if it cannot
    shrink further (htools' shrinkByType)."""
    if mode == FailMode.MEM:
        value = inst.mem - UNIT_MEM
        return None if value < UNIT_MEM else replace(inst.copy(), mem=value)
    if mode == FailMode.DISK:
        disks = tuple((size - UNIT_DSK, sp) for size, sp in inst.disks)
        if any(size < UNIT_DSK for size, _ in disks):
            return None
        return replace(inst.copy(), dsk=inst.dsk - len(inst.disks) * UNIT_DSK, disks=disks)
    if mode == FailMode.CPU:
        value = inst.vcpus - UNIT_CPU
        return None if value < UNIT_CPU else replace(inst.copy(), vcpus=value)
    if mode == FailMode.SPINDLES:
        if len(inst.disks) != 1 or inst.disks[0][1] is None:
            return None
        value = inst.disks[0][1] - UNIT_SPINDLE
        if value < UNIT_SPINDLE:
            return None
        return replace(inst.copy(), disks=((inst.disks[0][0], value),))
    return None


@dataclass
class AllocResult:
    """Where an allocation run ended: the failure counts of its last try, the cluster
    and the instances placed (in order)."""

    failures: list[int]
    cluster: Cluster
    placed: list[Instance] = field(default_factory=list)

    def sorted_failures(self) -> list[tuple[FailMode, int]]:
        """(mode, count), most frequent first (hspace's order)."""
        pairs = [(FailMode(i), n) for i, n in enumerate(self.failures)]
        return sorted(pairs, key=lambda pair: -pair[1])


#: Up to this many candidates, :func:`outcomes` is used to skip tries.
_CHEAP_CHECKS = 5000

#: A tier's limit once the limit is reached (no further tier runs).
_STOP = -1


@dataclass
class _Tier:
    """One level of tiered allocation waiting for the result of the next."""

    result: AllocResult
    new_limit: int | None
    template: Instance
    ordered: list[int]


class Planner:
    """Runs hspace's allocation methods on a cluster.

    ``candidates`` are the nodes (count 1) or primary/secondaries pairs (count 2)
    from :func:`corral.allocator.alloc.candidate_nodes`; ``opts`` carry the capacity
    check setting (global N+1 is checked on every node of the cluster)."""

    def __init__(self, candidates: list[int] | list[tuple[int, list[int]]], count: int,
                 opts: AllocOptions) -> None:
        self.candidates = candidates
        self.count = count
        self.memo = opts.memo if opts.memo is not None else Memo()
        self.opts = replace(opts, memo=self.memo)
        #: few candidates: checking them one by one (:func:`outcomes`) costs less
        #: than a try
        self._checks_cheap = (len(candidates) if count == 1 else sum(
            len(secs) for _, secs in candidates)) <= _CHEAP_CHECKS    # type: ignore[misc]

    # -- one instance at a time ---------------------------------------------------

    def _try(self, cluster: Cluster, ctx: _Context, inst: Instance,
             capacity: bool) -> Solution:
        opts = replace(self.opts, capacity=capacity)
        every = list(range(len(cluster.nodes)))
        return try_alloc(cluster, every, inst, self.count, self.candidates, opts, ctx)

    def small_steps(self, cluster: Cluster, limit: int | None, template: Instance,
                    placed: list[Instance], capacity: bool) -> AllocResult:
        """Place instances one by one until one does not fit or ``limit`` are placed
        (changes ``cluster``)."""
        if template.disk_template == "drbd":
            capacity = False
        if self._checks_cheap:
            # nothing fits (common in tiered allocation): the failures are the checks'
            first = template.copy()
            first.idx = len(cluster.instances)
            seen = outcomes(cluster, first, self.candidates, self.opts.force)
            if FITS not in seen:
                failures = [0] * len(FailMode)
                for mode in seen:
                    failures[mode] += 1
                return AllocResult(failures, cluster, placed)
        ctx = _Context(cluster, list(range(len(cluster.nodes))))
        while True:
            new = template.copy()
            new.name = f"new-{len(placed)}"
            new.alias = new.name
            new.idx = len(cluster.instances)
            sol = self._try(cluster, ctx, new, capacity)
            if sol.best is None or limit == 0:
                return AllocResult(sol.failures, cluster, placed)
            ctx.apply(sol.best.changed)
            cluster.instances.append(sol.best.inst)
            placed = [*placed, sol.best.inst]
            limit = None if limit is None else limit - 1

    def _big_step(self, nodes: Sequence[Node], inst: Instance) -> int:
        total = sum(node.avail_mem for node in nodes)
        guess = total // inst.mem - len(nodes) if inst.mem else 0
        return max(guess, 20)

    def iterate(self, cluster: Cluster, limit: int | None, template: Instance,
                placed: list[Instance] | None = None, huge: bool = True) -> AllocResult:
        """Standard allocation (htools' iterateAlloc): big steps checked for N+1
        redundancy at their ends, then steps of 10, then one at a time."""
        placed = list(placed or [])
        if not self.opts.capacity:
            return self.small_steps(cluster.fork(), limit, template, placed, False)
        while True:
            step = self._big_step(cluster.nodes, template) if huge else 10
            if limit is None:
                this_limit, rest = step, None
            else:
                this_limit, rest = min(step, limit), max(0, limit - step)
            result = self.small_steps(cluster.fork(), this_limit, template, placed, False)
            if redundant(result.cluster, accept_existing=self.opts.accept_existing,
                         ignore_groups=self.opts.ignore_groups, memo=self.memo):
                if rest == 0 or len(result.placed) == len(placed):
                    return result
                cluster, limit, placed = result.cluster, rest, result.placed
                continue
            if huge:
                huge = False
                continue
            return self.small_steps(cluster.fork(), limit, template, placed, True)

    # -- tiered -------------------------------------------------------------------

    def suffices(self, cluster: Cluster, template: Instance, mode: FailMode) -> Instance | None:
        """The first smaller version of ``template`` (shrinking ``mode`` only) that
        fits, if one does before ``mode`` stops being a reason of failure."""
        if self._may_skip(cluster):
            return self._suffices_skipping(cluster, template, mode)
        return self.suffices_trying_each(cluster, template, mode)

    def suffices_trying_each(self, cluster: Cluster, template: Instance,
                             mode: FailMode) -> Instance | None:
        """:meth:`suffices` trying every size in turn (as htools)."""
        ctx = _Context(cluster, list(range(len(cluster.nodes))))
        inst: Instance | None = template
        while inst is not None:
            trial = inst.copy()
            trial.idx = len(cluster.instances)
            sol = self._try(cluster, ctx, trial, self.opts.capacity)
            if sol.best is not None:
                return inst
            if sol.failures[mode] == 0:
                return None
            inst = shrink(inst, mode)
        return None

    def _may_skip(self, cluster: Cluster) -> bool:
        """Whether :meth:`_suffices_skipping` applies: every check of a candidate is
        then a threshold on the size being shrunk (one min/max pair per policy)."""
        return self._checks_cheap and all(len(node.policy.minmax) <= 1
                                          for node in cluster.nodes)

    def _suffices_skipping(self, cluster: Cluster, template: Instance,
                           mode: FailMode) -> Instance | None:
        """:meth:`suffices` without trying every size.

        Shrinking one resource, each check of a candidate (policy bounds, the nodes'
        limits) fails on one side of a threshold, so it changes its verdict at most
        once along the sizes; a candidate's outcome (its first failing check) is
        then the same at every size between two sizes where it is the same. While
        no candidate fits, a try's result is its candidates' outcomes: between two
        sizes with the same outcomes the result is the same, and the sizes between
        need no try. The first size where the outcomes change is found by
        doubling and bisecting."""
        sizes: dict[int, Instance | None] = {0: template}

        def size(k: int) -> Instance | None:
            if k not in sizes:
                sizes[k] = shrunk(template, mode, k)
            return sizes[k]

        def seen(k: int) -> list[int]:
            inst = size(k)
            assert inst is not None
            trial = inst.copy()
            trial.idx = len(cluster.instances)
            return outcomes(cluster, trial, self.candidates, self.opts.force)

        ctx: _Context | None = None
        k = 0
        while True:
            inst = size(k)
            if inst is None:
                return None
            now = seen(k)
            if FITS in now:
                if ctx is None:
                    ctx = _Context(cluster, list(range(len(cluster.nodes))))
                trial = inst.copy()
                trial.idx = len(cluster.instances)
                sol = self._try(cluster, ctx, trial, self.opts.capacity)
                if sol.best is not None:
                    return inst
                if sol.failures[mode] == 0:
                    return None
                k += 1
                continue
            if int(mode) not in now:
                return None
            # the last size with the same outcomes: double, then bisect
            same, step = k, 1
            while True:
                probe = k + step
                if size(probe) is None or seen(probe) != now:
                    break
                same, step = probe, step * 2
            differ = k + step
            while differ - same > 1:
                mid = (same + differ) // 2
                if size(mid) is not None and seen(mid) == now:
                    same = mid
                else:
                    differ = mid
            k = same + 1

    def tiered(self, cluster: Cluster, limit: int | None, template: Instance,
               placed: list[Instance] | None = None) -> AllocResult:
        """Tiered allocation (htools' tieredAlloc): place as many as fit, shrink the
        spec in the resource that failed most and go on; keep the shrunk run only if
        it placed more, otherwise try shrinking in the other resources that failed.

        htools recurses once per shrink step (thousands of steps from a large disk
        spec); this walks the same calls with an explicit stack."""
        stack: list[_Tier] = []
        call: tuple[Cluster, int | None, Instance, list[Instance] | None] | None = (
            cluster, limit, template, placed)
        value: AllocResult | None = None
        while call is not None:
            frame, child = self._tier_enter(*call)
            call = None
            if child is not None:
                stack.append(frame)
                call = child
                continue
            call = self._tier_fallback(frame) if frame.new_limit != _STOP else None
            if call is not None:
                continue
            value = frame.result
            while stack:
                parent = stack.pop()
                if (len(value.cluster.instances)
                        > len(parent.result.cluster.instances)):
                    continue
                call = self._tier_fallback(parent)
                if call is not None:
                    break
                value = parent.result
        assert value is not None
        return value

    def _tier_enter(self, cluster: Cluster, limit: int | None, template: Instance,
                    placed: list[Instance] | None) -> tuple[_Tier, tuple[
                        Cluster, int | None, Instance, list[Instance]] | None]:
        """Run one tier; return it and the call for the next (shrunk) tier, if any."""
        result = self.iterate(cluster, limit, template, placed)
        count = len(result.placed)
        ordered = sorted(range(len(FailMode)), key=lambda m: result.failures[m])
        if limit is not None and limit <= count:
            return _Tier(result, _STOP, template, ordered), None
        new_limit = None if limit is None else limit - count
        frame = _Tier(result, new_limit, template, ordered)
        smaller = shrink(template, FailMode(ordered[-1]))
        if smaller is None:
            return frame, None
        return frame, (result.cluster.fork(), new_limit, smaller, result.placed)

    def _tier_fallback(self, frame: _Tier) -> tuple[
            Cluster, int | None, Instance, list[Instance]] | None:
        """The tier to run when shrinking in the main failure did not help: the
        template shrunk in another failing resource until it fits, if one does."""
        result = frame.result
        for mode in reversed(frame.ordered):
            found = self.suffices(result.cluster, frame.template, FailMode(mode))
            if found is not None:
                return (result.cluster.fork(), frame.new_limit, found, result.placed)
        return None
