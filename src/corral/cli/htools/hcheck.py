"""``hcheck``: is a cluster healthy, and would balancing help (htools' hcheck)."""

from __future__ import annotations

import sys

from corral.cli.htools import options as o

__all__ = ["OPTION_NAMES", "main"]

OPTION_NAMES = (
    "text-data", "no-disk-moves", "dynu-file", "ignore-dynu", "evac-mode",
    "exclude-instances", "exclusion-tags", "ialloc-src", "no-instance-moves", "luxi",
    "machine-readable", "max-cpu", "max-length", "min-disk", "min-gain", "min-gain-limit",
    "min-score", "ignore-soft-errors", "no-simulation", "offline", "quiet", "master",
    "select-instances", "no-capacity-checks", "verbose",
)

_COMMON = [("N1_FAIL", "Nodes not N+1 happy"),
           ("CONFLICT_TAGS", "Nodes with conflicting instances"),
           ("OFFLINE_PRI", "Instances having the primary node offline"),
           ("OFFLINE_SEC", "Instances having a secondary node offline")]
_GN1 = ("GN1_FAIL", "Nodes not directly evacuateable")


def main(argv: list[str] | None = None) -> None:
    """The ``hcheck`` command."""
    opts, args = o.run("hcheck", OPTION_NAMES, argv)
    if args:
        o.fail("This program doesn't take any arguments.")
    from corral.allocator.balance import BalanceOptions, Balancer
    from corral.allocator.capacity import can_evacuate
    from corral.allocator.metrics import full_score, optimal_score
    from corral.allocator.model import Cluster
    from corral.allocator.textout import fixed
    from corral.cli.htools.data import load

    machine = opts.machine_readable
    verbose = opts.verbose
    cluster = load(opts)
    common = _COMMON + ([_GN1] if opts.capacity else [])
    group_keys = [*common, ("SCORE", "Group score")]
    cluster_keys = [*common, ("NEED_REBALANCE", "Cluster is not healthy")]

    def keys(pairs: list[tuple[str, str]]) -> None:
        for key, value in pairs:
            quoted = value if all(c.isalnum() or c == "." for c in value) else f"'{value}'"
            sys.stdout.write(f"HCHECK_{key}={quoted}\n")

    if machine:
        keys([(f"GROUP_UUID_{g.idx}", g.uuid) for g in cluster.groups])

    def group_stats(state: Cluster, gdx: int) -> tuple[list[int], float]:
        nodes = state.group_nodes(gdx)
        idxs = [n.idx for n in nodes]
        n1 = sum(1 for n in nodes if not n.offline and n.fail_n1)
        conflicts = sum(1 for n in nodes if n.conflicting_primaries > 0)
        offline = [n for n in nodes if n.offline]
        stats = [n1, conflicts, sum(len(n.p_list) for n in offline), len(offline)]
        if opts.capacity:
            stats.append(sum(1 for i in idxs if not can_evacuate(state, i, idxs)))
        return stats, full_score(nodes)

    def show(phase: str, level: str, label: str, values: list[str],
             descr: list[tuple[str, str]]) -> None:
        if machine:
            prefix = f"{'INIT' if phase == 'init' else 'FINAL'}_{level}"
            keys([(f"{prefix}_{key}", value) for (key, _), value in zip(descr, values,
                                                                        strict=True)])
            return
        if verbose < 1:
            return
        when = "initially" if phase == "init" else "after rebalancing"
        head = (f"Statistics for group {label} {when}" if level.startswith("GROUP")
                else f"Cluster statistics {when}")
        print()
        print(head)
        for (_, text), value in zip(descr, values, strict=True):
            print(f"    {text}: {value}")

    groups = cluster.groups_in_use()
    initial = {g: group_stats(cluster, g) for g in groups}
    totals = [sum(vals) for vals in zip(*(initial[g][0] for g in groups), strict=True)] \
        if groups else [0] * len(common)
    need = sum(totals) > 0
    if verbose >= 1 and not machine:
        print("Running in no-simulation mode." if opts.no_simulation else
              "Cluster needs rebalancing." if need else
              "No need to rebalance cluster, no problems found.")

    def as_bool(value: bool) -> str:
        return ("1" if value else "0") if machine else str(value)

    for g in groups:
        stats, score = initial[g]
        label = str(g) if machine else cluster.groups[g].name
        show("init", f"GROUP_{label}", label, [str(v) for v in stats] + [fixed(score, 8)],
             group_keys)
    show("init", "CLUSTER", "", [str(v) for v in totals] + [as_bool(need)], cluster_keys)
    simulate = not opts.no_simulation and need
    if simulate or machine:
        final = cluster
        if simulate:
            final = cluster.copy()
            for g in groups:
                nodes = final.group_nodes(g)
                min_cv = opts.min_score + optimal_score(nodes)
                balancer = Balancer(final, g, BalanceOptions(
                    disk_moves=opts.disk_moves, inst_moves=opts.inst_moves,
                    restricted_migration=opts.restricted_migration,
                    force=opts.ignore_soft_errors, evac_mode=opts.evac_mode,
                    min_gain=opts.min_gain, min_gain_limit=opts.min_gain_limit))
                if balancer.score >= min_cv:
                    balancer.run(opts.max_length, min_cv)
        after = {g: group_stats(final, g) for g in groups}
        for g in groups:
            stats, score = after[g]
            label = str(g) if machine else cluster.groups[g].name
            show("final", f"GROUP_{label}", label,
                 [str(v) for v in stats] + [fixed(score, 8)], group_keys)
        new_totals = [sum(vals) for vals in zip(*(after[g][0] for g in groups),
                                                strict=True)] if groups else totals
        show("final", "CLUSTER", "", [str(v) for v in new_totals] + [as_bool(need)],
             cluster_keys)
    if machine:
        keys([("OK", "1")])
    if not (opts.no_simulation or not need):
        raise SystemExit(1)
