"""``hail``: the iallocator plugin (htools' hail).

Given the file of an iallocator request (Ganeti's protocol), it prints the answer as
one JSON object (``success``, ``info``, ``result``) on standard output. Installed
where a cluster looks for allocators (Ganeti's ``/usr/lib/ganeti/iallocators``), a
Ganeti cluster can use it in place of its own hail; corral's master runs the same
engine as its built-in allocator ``corral``.
"""

from __future__ import annotations

import json
import sys

from corral.cli.htools import options as o

__all__ = ["OPTION_NAMES", "main"]

OPTION_NAMES = (
    "print-nodes", "save", "text-data", "simulate", "verbose", "ignore-dynu",
    "ignore-soft-errors", "no-capacity-checks", "restrict-allocation-to", "mond",
    "mond-xen", "static-kvm-node-memory",
)


def main(argv: list[str] | None = None) -> None:
    """The ``hail`` command."""
    opts, args = o.run("hail", OPTION_NAMES, argv)
    if not args:
        o.fail("This program needs an input file.")
    if len(args) > 1:
        o.fail("Only one argument is accepted (the input file)")
    from corral.allocator.iallocator import AnswerOptions, answer_parsed
    from corral.allocator.model import LoadError
    from corral.allocator.request import RequestError, parse
    from corral.cli.htools.common import maybe_print_nodes, maybe_save

    path = args[0]
    try:
        if path == "-":
            raw = json.load(sys.stdin)
        else:
            with open(path, encoding="utf-8") as handle:
                raw = json.load(handle)
    except OSError as err:
        o.fail(f"{path}: {err.strerror or err}")
    except json.JSONDecodeError as err:
        o.fail(f"Parsing input IAllocator message: {err}")
    try:
        parsed = parse(raw, opts.static_kvm_memory)
    except RequestError as err:
        o.fail(str(err))
    if parsed.warnings:
        sys.stderr.write("Warning: cluster has inconsistent data:\n"
                         + "".join(f"  - {w}\n" for w in parsed.warnings) + "\n")
    if opts.data_file is not None or opts.simulate:
        from corral.cli.htools.data import load

        try:
            parsed.cluster = load(opts, node_status=False)
        except LoadError as err:
            o.fail(str(err))
    if opts.verbose > 1:
        sys.stderr.write(f"Received request: {parsed.kind} {parsed.request}\n")
    cluster = parsed.cluster
    maybe_print_nodes(opts.print_nodes, "Initial cluster", cluster.nodes)
    maybe_save(opts.save, "pre-ialloc", "before iallocator run", cluster)
    result = answer_parsed(parsed, AnswerOptions(
        capacity=opts.capacity, force=opts.ignore_soft_errors, restrict_to=opts.restrict_to,
        static_kvm_memory=opts.static_kvm_memory))
    sys.stdout.write(json.dumps(result, separators=(",", ":")) + "\n")
    maybe_print_nodes(opts.print_nodes, "Final cluster", cluster.nodes)
    maybe_save(opts.save, "post-ialloc", "after iallocator run", cluster)
