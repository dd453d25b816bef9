"""``hspace``: how many more instances fit on a cluster (htools' hspace).

It runs tiered allocation (from ``--tiered-alloc`` or the policy's largest spec) and
standard allocation (``--standard-alloc`` or the policy's standard spec) from the
cluster as it is, keeping it N+1 redundant (see :mod:`corral.allocator.planning`),
and prints the results as hspace does, or as shell variables
(``--machine-readable``: ``HTS_*``).
"""

from __future__ import annotations

import sys
from typing import Any

from corral.cli.htools import options as o

__all__ = ["OPTION_NAMES", "main"]

OPTION_NAMES = (
    "print-nodes", "text-data", "disk-template", "spindle-use", "simulate", "master",
    "luxi", "ialloc-src", "verbose", "quiet", "independent-groups",
    "accept-existing-errors", "offline", "no-capacity-checks", "machine-readable",
    "max-cpu", "max-length", "min-disk", "standard-alloc", "tiered-alloc", "save",
    "static-kvm-node-memory",
)


def _quoted(value: str) -> str:
    if all(c.isalnum() or c == "." for c in value):
        return value
    return f"'{value}'"


def _keys(pairs: list[tuple[str, str]]) -> None:
    for key, value in pairs:
        sys.stdout.write(f"HTS_{key.upper()}={_quoted(value)}\n")


def _stats(kind: str, cs: Any) -> list[tuple[str, str]]:
    from corral.allocator.textout import fixed

    def eff(num: float, den: float) -> str:
        return fixed(num / den if den else float("nan"), 8)

    return [(f"{kind}_{key}", value) for key, value in (
        ("SCORE", fixed(cs.score, 8)), ("INST_CNT", str(cs.ninst)),
        ("MEM_FREE", str(cs.fmem)), ("MEM_AVAIL", str(cs.amem)),
        ("MEM_RESVD", str(cs.fmem - cs.amem)), ("MEM_INST", str(cs.imem)),
        ("MEM_OVERHEAD", str(cs.xmem + cs.nmem)), ("MEM_EFF", eff(cs.imem, cs.tmem)),
        ("DSK_FREE", str(cs.fdsk)), ("DSK_AVAIL", str(cs.adsk)),
        ("DSK_RESVD", str(cs.fdsk - cs.adsk)), ("DSK_INST", str(cs.idsk)),
        ("DSK_EFF", eff(cs.idsk, cs.tdsk)), ("SPN_FREE", str(cs.fspn)),
        ("SPN_INST", str(cs.ispn)), ("SPN_EFF", eff(cs.ispn, cs.tspn)),
        ("CPU_INST", str(cs.icpu)), ("CPU_EFF", eff(cs.icpu, cs.vcpu)),
        ("MNODE_MEM_AVAIL", str(cs.mmem)), ("MNODE_DSK_AVAIL", str(cs.mdsk)),
    )]


def _show_double(value: float) -> str:
    from corral.allocator.textformat import haskell_double

    return haskell_double(value)


def main(argv: list[str] | None = None) -> None:
    """The ``hspace`` command."""
    opts, args = o.run("hspace", OPTION_NAMES, argv)
    if args:
        o.fail("This program doesn't take any arguments.")
    _run(opts)


def _spec_text(spec: tuple[int, int, int, int], spindles: bool) -> str:
    mem, dsk, cpu, spn = spec
    text = f"MEM {mem}, DSK {dsk}, CPU {cpu}"
    return text + (f", SPN {spn}" if spindles else "")


def _run(opts: o.Options) -> None:
    from corral.allocator.alloc import AllocOptions, candidate_nodes
    from corral.allocator.capacity import Memo, redundant
    from corral.allocator.load import common_suffix
    from corral.allocator.metrics import full_score, print_stats
    from corral.allocator.planning import Planner, instance_from_spec, resources
    from corral.allocator.textout import fixed
    from corral.allocator.types import DISK_TEMPLATES, FailMode, required_nodes
    from corral.cli.htools.common import maybe_print_nodes, maybe_save
    from corral.cli.htools.data import load

    machine = opts.machine_readable
    verbose = opts.verbose
    cluster = load(opts)
    ipol = cluster.ipolicy
    if not ipol.disk_templates:
        o.fail("null list of disk templates received from cluster")
    template = opts.disk_template or ipol.disk_templates[0]
    if template not in DISK_TEMPLATES:
        o.fail(f"Unknown disk template '{template}'")
    count = required_nodes(template)
    spindle_use = opts.spindle_use if opts.spindle_use is not None else ipol.std.spindle_use
    suffix = common_suffix(cluster)
    if suffix and verbose > 1:
        sys.stderr.write(f"Note: Stripping common suffix of '{suffix}' from names\n")
    nodes = cluster.nodes
    excl = any(n.excl for n in nodes)
    maybe_print_nodes(opts.print_nodes, "Initial cluster", nodes)
    if verbose > 2:
        sys.stderr.write(f"Initial coefficients: overall {fixed(full_score(nodes), 8)}\n"
                         + print_stats("  ", nodes))
    ini = resources(nodes)
    if machine:
        _keys([(f"CLUSTER_{k}", v) for k, v in (
            ("MEM", fixed(ini.tmem, 0)), ("DSK", fixed(ini.tdsk, 0)),
            ("CPU", fixed(ini.tcpu, 0)), ("VCPU", str(ini.vcpu)),
            ("SPN", fixed(ini.tspn, 0)))])
        _keys([("CLUSTER_NODES", str(len(nodes)))])
        _keys(_stats("INI", ini))
    else:
        res = (f"MEM {fixed(ini.tmem, 0)}, DSK {fixed(ini.tdsk, 0)}, CPU "
               f"{fixed(ini.tcpu, 0)}, VCPU {ini.vcpu}")
        if excl:
            res += f", SPN {fixed(ini.tspn, 0)}"
        print(f"The cluster has {len(nodes)} nodes and the following resources:\n  {res}.")
        print(f"There are {ini.ninst if ini.ninst > 0 else 'no'} initial instances on "
              "the cluster.")
    memo = Memo()
    bad_nodes = [n for n in nodes if not n.offline and n.fail_n1]
    groups = list(range(len(cluster.groups)))
    bad_groups: list[int] = []
    if opts.independent_groups or verbose > 3:
        bad_groups = [g for g in groups if not redundant(
            cluster, [n.idx for n in nodes if n.group == g],
            accept_existing=opts.accept_existing, memo=memo)]
    if verbose > 3 and bad_nodes:
        sys.stderr.write(f"Bad nodes: {[n.name for n in bad_nodes]}\n")
    if verbose > 3 and bad_groups:
        sys.stderr.write(f"Bad groups: {[cluster.groups[g].name for g in bad_groups]}\n")
    unalloc = set() if opts.accept_existing else {n.group for n in bad_nodes}
    ignore: list[int] = []
    if opts.independent_groups:
        unalloc |= set(bad_groups)
        ignore = bad_groups
    remaining = any(g not in unalloc and cluster.groups[g].allocable for g in groups)
    stopped = (not opts.accept_existing
               and not (opts.independent_groups and remaining) and bool(bad_nodes))
    limit = None if opts.max_length == -1 else opts.max_length
    allowed = [n.idx for n in nodes if n.group not in unalloc]
    from corral.allocator.alloc import AllocError

    try:
        cands = candidate_nodes(cluster, allowed, count, None, True)
    except AllocError as err:
        o.fail(f"failure during allocation: {err}")
    alloc_opts = AllocOptions(force=False, capacity=opts.capacity,
                              accept_existing=opts.accept_existing, ignore_groups=ignore,
                              memo=memo)
    planner = Planner(cands, count, alloc_opts)
    num_instances = len(cluster.instances)
    if opts.tiered_spec is not None:
        tspecs = [opts.tiered_spec]
    else:
        tspecs = [(pair.max.disk_size, pair.max.memory_size, pair.max.cpu_count,
                   pair.max.spindle_use) for pair in ipol.minmax]
    if not tspecs:
        o.fail("Empty list of specs received from the cluster")

    def outcome(result: Any) -> tuple[Any, list[tuple[FailMode, int]]]:
        return result, result.sorted_failures()

    def run_alloc(kind: str, spec: tuple[int, int, int, int], method: Any) -> tuple[
            Any, list[tuple[FailMode, int]], list[tuple[tuple[int, int, int, int], int]]]:
        if stopped:
            failures = [0] * len(FailMode)
            failures[FailMode.N1] = 1
            from corral.allocator.planning import AllocResult

            result = AllocResult(failures, cluster.copy(), [])
        else:
            try:
                result = method()
            except AllocError as err:
                o.fail(f"failure during allocation: {err}")
        name = "Tiered" if kind == "tiered" else "Standard"
        prefix = "TSPEC_INI" if kind == "tiered" else "SPEC"
        disk, mem, cpu, spn = spec
        if machine:
            _keys([(f"{prefix}_{k}", str(v)) for k, v in
                   (("MEM", mem), ("DSK", disk), ("CPU", cpu), ("SPN", spn))])
            _keys([(f"{prefix}_RQN", str(count)), (f"{prefix}_DISK_TEMPLATE", template)])
        else:
            descr = "Tiered (initial size)" if kind == "tiered" else "Standard (fixed-size)"
            print(f"{descr} instance spec is:\n  {_spec_text((mem, disk, cpu, spn), excl)}, "
                  f"using disk template '{template}'.")
        placed = result.placed
        if verbose > 1:
            from corral.allocator.textout import format_rows

            rows = [[i.name, result.cluster.nodes[i.pnode].name,
                     result.cluster.nodes[i.snode].name if i.snode >= 0 else "",
                     str(i.mem), str(i.dsk), str(i.vcpus),
                     (str(i.total_spindles) if i.total_spindles is not None else "?")
                     if excl else ""] for i in placed]
            sys.stderr.write(f"{name} allocation map\n" + format_rows(
                rows, [False, False, False, True, True, True, True]))
        maybe_print_nodes(opts.print_nodes, f"{name} allocation", result.cluster.nodes)
        maybe_save(opts.save, name.lower(), f"after {name.lower()} allocation",
                   result.cluster)
        spec_map: list[tuple[tuple[int, int, int, int], int]] = []
        for inst in placed:
            key = (inst.mem, inst.dsk, inst.vcpus,
                   inst.disks[0][1] if len(inst.disks) == 1 and inst.disks[0][1] else 0)
            if spec_map and spec_map[-1][0] == key:
                spec_map[-1] = (key, spec_map[-1][1] + 1)
            else:
                spec_map.append((key, 1))
        return (*outcome(result), spec_map)

    def scores_and_eff(result: Any, reasons: list[tuple[FailMode, int]]) -> None:
        fin = resources(result.cluster.nodes)
        print(f"  - most likely failure reason: {reasons[0][0].label}")
        print(f"  - initial cluster score: {fixed(full_score(nodes), 8)}")
        print(f"  -   final cluster score: {fixed(full_score(result.cluster.nodes), 8)}")
        effs = [("memory", fin.imem, fin.tmem), ("disk", fin.idsk, fin.tdsk),
                ("vcpu", fin.icpu, fin.vcpu)] + ([("spindles", fin.ispn, fin.tspn)]
                                                 if excl else [])
        width = max(len(name) for name, _, _ in effs)
        for name, num, den in effs:
            value = num / den * 100 if den else float("nan")
            print(f"  - {name.rjust(width)} usage efficiency: {fixed(value, 2).rjust(5)}%")

    def template_of(spec: tuple[int, int, int, int]) -> Any:
        return instance_from_spec(spec[1], spec[0], spec[2], spec[3], template, spindle_use)

    def tiered() -> Any:
        state: Any = None
        for spec in tspecs:
            base = state.cluster if state is not None else cluster.copy()
            placed: list[Any] = state.placed if state is not None else []
            if limit is not None and state is not None and limit <= len(placed):
                break
            new_limit = None if limit is None else limit - len(placed)
            state = planner.tiered(base, new_limit, template_of(spec), placed)
        return state

    t_result, t_reasons, t_map = run_alloc("tiered", tspecs[0], tiered)
    if machine:
        _keys(_stats("TRL", resources(t_result.cluster.nodes)))
        _keys([("TSPEC", " ".join(f"{m},{d},{c},{s}={n}" for (m, d, c, s), n in t_map))])
        rini = resources(nodes)
        rfin = resources(t_result.cluster.nodes)
        for name, rec in (("USED", (ini.icpu, rini.ncpu, ini.imem, ini.idsk, ini.ispn)),
                          ("POOL", (rfin.icpu - rini.icpu, rfin.ncpu - rini.ncpu,
                                    rfin.imem - rini.imem, rfin.idsk - rini.idsk,
                                    rfin.ispn - rini.ispn)),
                          ("UNAV", (rfin.vcpu - rfin.icpu, rfin.tcpu - rfin.ncpu,
                                    int(rfin.tmem) - rfin.imem, int(rfin.tdsk) - rfin.idsk,
                                    int(rfin.tspn) - rfin.ispn))):
            vcpus, ncpus, mem, dsk, spn = rec
            _keys([(f"KM_{name}_CPU", str(vcpus)), (f"KM_{name}_NPU", _show_double(ncpus)),
                   (f"KM_{name}_MEM", str(mem)), (f"KM_{name}_DSK", str(dsk)),
                   (f"KM_{name}_SPN", str(spn))])
    else:
        print("Tiered allocation results:")
        if not t_map:
            print("  - no instances allocated")
        for (m, d, c, s), n in t_map:
            print(f"  - {n:3d} instances of spec {_spec_text((m, d, c, s), excl)}")
        scores_and_eff(t_result, t_reasons)
    if opts.std_spec is not None:
        sspec = opts.std_spec
    else:
        std = ipol.std
        sspec = (std.disk_size, std.memory_size, std.cpu_count, std.spindle_use)
    s_result, s_reasons, _ = run_alloc(
        "standard", sspec, lambda: planner.iterate(cluster.copy(), limit, template_of(sspec)))
    allocs = len(s_result.placed)
    if machine:
        fin = resources(s_result.cluster.nodes)
        if num_instances + allocs != fin.ninst:
            o.fail(f"internal inconsistency, allocated ({num_instances + allocs}) != "
                   f"counted ({fin.ninst})\n")
        _keys(_stats("FIN", fin))
        total = num_instances + allocs
        _keys([("ALLOC_USAGE", fixed(num_instances / total if total else float("nan"), 8)),
               ("ALLOC_INSTANCES", str(allocs)),
               ("ALLOC_FAIL_REASON", s_reasons[0][0].label.upper())])
        _keys([(f"ALLOC_{mode.label.upper()}_CNT", str(n)) for mode, n in s_reasons])
        _keys([("OK", "1")])
    else:
        print("Normal (fixed-size) allocation results:")
        print(f"  - {allocs:3d} instances allocated")
        scores_and_eff(s_result, s_reasons)
