"""``hinfo``: what a cluster looks like (htools' hinfo): its groups, N+1 health, the
score and each metric."""

from __future__ import annotations

import sys

from corral.cli.htools import options as o

__all__ = ["OPTION_NAMES", "main"]

OPTION_NAMES = (
    "print-nodes", "print-instances", "text-data", "master", "luxi", "ialloc-src",
    "verbose", "quiet", "offline", "ignore-dynu", "mond", "mond-data",
    "static-kvm-node-memory",
)


def _plural(count: int, one: str, many: str) -> str:
    return one if count == 1 else many


def main(argv: list[str] | None = None) -> None:
    """The ``hinfo`` command."""
    opts, args = o.run("hinfo", OPTION_NAMES, argv)
    if args:
        o.fail("This program doesn't take any arguments.")
    from corral.allocator.load import common_suffix
    from corral.allocator.metrics import full_score, print_stats
    from corral.allocator.textout import fixed, format_table, show_ipolicy
    from corral.cli.htools.common import maybe_print_instances, maybe_print_nodes
    from corral.cli.htools.data import load

    verbose = opts.verbose
    cluster = load(opts, node_status=False)
    print("Loaded cluster tags: " + ",".join(cluster.tags))
    if verbose > 2:
        print("Loaded cluster ipolicy: " + show_ipolicy(cluster.ipolicy))
    from corral.allocator.load import set_node_status
    from corral.allocator.model import LoadError

    try:
        set_node_status(cluster, offline=opts.offline, max_cpu=opts.max_cpu,
                        min_disk=opts.min_disk)
    except LoadError as err:
        o.fail(str(err))
    nodes, insts, groups = cluster.nodes, cluster.instances, cluster.groups
    if not insts and verbose > 1:
        print("Cluster is empty.")
    print(f"Loaded {len(nodes)} {_plural(len(nodes), 'node', 'nodes')}, {len(insts)} "
          f"{_plural(len(insts), 'instance', 'instances')}, {len(groups)} "
          f"{_plural(len(groups), 'node group', 'node groups')}")
    suffix = common_suffix(cluster)
    if suffix and verbose > 2:
        print(f"Note: Stripping common suffix of '{suffix}' from names")
    split = cluster.split_instances()
    if split:
        print("Found instances belonging to multiple node groups:")
        for inst in split:
            sys.stderr.write(f"  {inst.name}\n")
    elif verbose > 1:
        print("No split instances found")
    rows = []
    happy = True
    for gdx in cluster.groups_in_use():
        gnodes = cluster.group_nodes(gdx)
        ginsts = cluster.group_instances(gdx)
        bad = [n for n in gnodes if not n.offline and n.fail_n1]
        bad_insts = {i for n in bad for i in n.p_list + n.s_list}
        happy = happy and not bad
        rows.append([groups[gdx].name, str(len(gnodes)), str(len(ginsts)), str(len(bad)),
                     str(len(bad_insts)), str(not bad), fixed(full_score(gnodes), 8)])
    if verbose > 1:
        sys.stdout.write("Node group information:\n" + format_table(
            ["Group", "Nodes", "Instances", "Bad_Nodes", "Bad_Instances", "N+1", "Score"],
            rows, [False, True, True, True, True, False, True], "  "))
    print(f"Cluster is N+1 {'happy' if happy else 'unhappy'}")
    maybe_print_instances(opts.print_instances, "Instances", cluster)
    maybe_print_nodes(opts.print_nodes, "Cluster", nodes)
    sys.stdout.write("Cluster coefficients:\n" + print_stats("  ", nodes))
    print(f"Cluster score: {fixed(full_score(nodes), 8)}")
