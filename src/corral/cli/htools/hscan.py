"""``hscan``: save clusters in the text data format (htools' hscan).

Each argument is a RAPI address (see :mod:`corral.cli.htools.data`); without one,
the local cluster is read through luxi (as ``LOCAL``). For each it prints a summary
line and writes ``NAME.data`` (slashes in the name become ``_``) in ``-d DIR``.
"""

from __future__ import annotations

import os
import sys

from corral.cli.htools import options as o

__all__ = ["OPTION_NAMES", "main"]

OPTION_NAMES = ("print-nodes", "output-dir", "luxi", "verbose", "no-headers",
                "static-kvm-node-memory")


def main(argv: list[str] | None = None) -> None:
    """The ``hscan`` command."""
    opts, clusters = o.run("hscan", OPTION_NAMES, argv)
    from corral.allocator.load import finish
    from corral.allocator.metrics import full_score
    from corral.allocator.model import LoadError
    from corral.allocator.textformat import serialize
    from corral.allocator.textout import fixed, print_nodes
    from corral.cli.htools.data import read_luxi, read_rapi

    names = clusters if clusters else ["LOCAL"]
    width = max(len(name) for name in names)
    if not opts.no_headers:
        print(f"{'Name'.ljust(width)} {'Nodes':>5} {'Inst':>5} {'BNode':>5} {'BInst':>5} "
              f"{'t_mem':>6} {'f_mem':>6} {'t_disk':>6} {'f_disk':>6} {'Score':>10}")
    ok = True
    for name in names:
        try:
            cluster = read_luxi(opts.luxi or "") if not clusters else read_rapi(name)
            text = serialize(cluster)
        except LoadError as err:
            print(f"\nError for {name}: failed to load data. Details:\n{err}\n")
            ok = False
            continue
        try:
            finish(cluster, static_kvm_memory=opts.static_kvm_memory)
        except LoadError as err:
            print(f"\nError for {name}: failed to process data. Details:\n{err}\n")
            ok = False
            continue
        sys.stdout.write(f"{name.ljust(width)} ")
        sys.stdout.flush()
        nodes = cluster.nodes
        bad = [n for n in nodes if not n.offline and n.fail_n1]
        bad_insts = {i for n in bad for i in n.p_list + n.s_list}
        t_ram = sum(n.t_mem for n in nodes)
        t_dsk = sum(n.t_dsk for n in nodes)
        f_ram = sum(n.f_mem for n in nodes)
        f_dsk = sum(n.f_dsk for n in nodes)
        print(f"{len(nodes):5d} {len(cluster.instances):5d} {len(bad):5d} "
              f"{len(bad_insts):5d} {fixed(t_ram, 0):>6} {f_ram:6d} "
              f"{fixed(t_dsk / 1024, 0):>6} {f_dsk // 1024:6d} {fixed(full_score(nodes), 8)}")
        if opts.print_nodes is not None:
            sys.stdout.write(print_nodes(nodes, opts.print_nodes))
        target = os.path.join(opts.output_dir, name.replace("/", "_")) + ".data"
        try:
            with open(target, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as err:
            o.fail(f"cannot write {target}: {err.strerror or err}")
    if not ok:
        raise SystemExit(2)
