"""``hbal``: balance a node group by moving instances (htools' hbal).

It reads the cluster (``-t``, ``-L``, ``-m``, ``-I``), searches the moves that lower
the group's score most (:mod:`corral.allocator.balance`), prints them as hbal does,
optionally the ``gnt-instance`` commands (``-C``), and with ``-X`` (luxi only) runs
them as jobs: one job per move, the moves that touch different nodes together (a
*jobset*), one jobset after the other; it stops at the first jobset with a failed job
and says which moves were made.
"""

from __future__ import annotations

import signal
import sys
import time
from typing import Any

from corral import __version__
from corral.cli.htools import options as o

__all__ = ["OPTION_NAMES", "main"]

OPTION_NAMES = (
    "print-nodes", "print-instances", "print-commands", "text-data", "evac-mode",
    "restricted-migration", "master", "luxi", "ialloc-src", "exec", "first-job-group",
    "reason", "group", "max-length", "verbose", "quiet", "offline",
    "static-kvm-node-memory", "min-score", "max-cpu", "min-disk", "min-gain",
    "min-gain-limit", "no-disk-moves", "select-instances", "no-instance-moves",
    "ignore-soft-errors", "dynu-file", "ignore-dynu", "mond", "mond-data",
    "exit-on-missing-mond-data", "mond-xen", "exclusion-tags", "exclude-instances", "save",
    "priority", "parallel",
)

_SH_TEMPLATE = """#!/bin/sh

# Auto-generated script for executing cluster rebalancing

# To stop, touch the file /tmp/stop-htools

set -e

check() {
  if [ -f /tmp/stop-htools ]; then
    echo 'Stop requested, exiting'
    exit 0
  fi
}

"""


def _move_text(move: tuple[str, int], running: bool, inam: str, npri: str,
               nsec: str) -> tuple[str, list[str]]:
    """What hbal prints after ``a=`` and the gnt-instance commands of a move."""
    kind = move[0]
    mig = f"{'migrate' if running else 'failover'} -f {inam}"
    if kind == "f":
        return "f", [mig]
    if kind == "fa":
        return f"fa:{npri}", [f"{'migrate' if running else 'failover'} -f -n {npri} {inam}"]
    if kind == "far":
        return f"f r:{nsec}", [mig, f"replace-disks -n {nsec} {inam}"]
    if kind == "rs":
        return f"r:{nsec}", [f"replace-disks -n {nsec} {inam}"]
    if kind == "raf":
        return f"r:{npri} f", [f"replace-disks -n {npri} {inam}", mig]
    return f"f r:{npri} f", [mig, f"replace-disks -n {npri} {inam}", mig]


def split_jobs(moves: list[tuple[list[int], Any]]) -> list[list[Any]]:
    """Group moves (nodes they touch, move) into jobsets: consecutive moves touching
    different nodes go together. As htools, the grouping starts from the last move."""
    jobsets: list[list[Any]] = []
    busy: list[int] = []
    for nodes, move in reversed(moves):
        if jobsets and not set(nodes) & set(busy):
            jobsets[0].insert(0, move)
            busy = nodes + busy
        else:
            jobsets.insert(0, [move])
            busy = list(nodes)
    return jobsets


def format_commands(jobsets: list[list[list[str]]]) -> list[str]:
    """htools' command listing of jobsets (each job a list of gnt-instance commands)."""
    lines: list[str] = []
    for jsn, jobs in enumerate(jobsets, start=1):
        for sn, cmds in enumerate(jobs, start=1):
            if sn == 1:
                lines += ["", f"echo jobset {jsn}, {len(jobs)} jobs"]
            lines += [f"  echo job {jsn}/{sn}", "  check"]
            lines += [f"  gnt-instance {cmd}" for cmd in cmds]
    return lines


def main(argv: list[str] | None = None) -> None:
    """The ``hbal`` command."""
    opts, args = o.run("hbal", OPTION_NAMES, argv)
    if args:
        o.fail("This program doesn't take any arguments.")
    _run(opts)


def _run(opts: o.Options) -> None:
    from corral.allocator import metrics
    from corral.allocator.balance import BalanceOptions, Balancer
    from corral.allocator.load import common_suffix
    from corral.allocator.textout import fixed, show_ipolicy
    from corral.cli.htools.common import (
        maybe_print_instances,
        maybe_print_nodes,
        maybe_save,
        select_group,
    )
    from corral.cli.htools.data import load

    verbose = opts.verbose
    cluster = load(opts)
    original = cluster.copy()
    if verbose > 1:
        print("Loaded cluster tags: " + ",".join(cluster.tags))
        print("Loaded cluster ipolicy: " + show_ipolicy(cluster.ipolicy))
    if not cluster.instances:
        print("Cluster is empty, exiting.")
        raise SystemExit(0)
    split = cluster.split_instances()
    if split and verbose > 1:
        sys.stderr.write("Found instances belonging to multiple node groups:\n"
                         + "".join(f"  {i.name}\n" for i in split)
                         + "These instances will not be moved.\n")
    print(f"Loaded {len(cluster.nodes)} nodes, {len(cluster.instances)} instances")
    suffix = common_suffix(cluster)
    if suffix and verbose > 1:
        print(f"Note: Stripping common suffix of '{suffix}' from names")
    maybe_save(opts.save, "original", "before balancing", original)
    gdx = select_group(cluster, opts.group)
    gname = (cluster.groups[gdx].name if gdx is not None
             else cluster.group_by_name(opts.group or "").name)   # type: ignore[union-attr]
    nodes = [n.idx for n in cluster.nodes if n.group == gdx]
    insts = [i for i in cluster.instances if i.pnode in set(nodes)]
    print(f"Group size {len(nodes)} nodes, {len(insts)} instances")
    print(f"Selected node group: {gname}")
    group_nodes = [cluster.nodes[i] for i in nodes]
    bad = [n for n in group_nodes if not n.offline and n.fail_n1]
    bad_insts = sorted({i for n in bad for i in n.p_list + n.s_list})
    if verbose >= 1:
        print(f"Initial check done: {len(bad)} bad nodes, {len(bad_insts)} bad instances.")
    policy_bad = [n for n in group_nodes if n not in bad
                  and (n.inst_sp > n.hi_sp or n.u_cpu / n.t_cpu > n.policy.vcpu_ratio)]
    if bad:
        print("Cluster is not N+1 happy, continuing but no guarantee that the cluster "
              "will end N+1 happy.")
    if policy_bad:
        print(f"The cluster contains {len(policy_bad)} policy-violating nodes.")
        print("Continuing, ignoring soft errors." if opts.ignore_soft_errors else
              "Continuing, but the set of moves might be too restricted; consider using "
              "the --ignore-soft-errors option.")
    maybe_print_instances(opts.print_instances, "Initial", cluster, nodes)
    maybe_print_nodes(opts.print_nodes, "Initial cluster", group_nodes)
    if not nodes:
        print("Initial score: 0.00000000")
    balancer = Balancer(cluster, gdx, BalanceOptions(
        disk_moves=opts.disk_moves, inst_moves=opts.inst_moves,
        restricted_migration=opts.restricted_migration, force=opts.ignore_soft_errors,
        evac_mode=opts.evac_mode, min_gain=opts.min_gain,
        min_gain_limit=opts.min_gain_limit))
    ini_cv = balancer.score
    opt_cv = metrics.optimal_score(group_nodes)
    if verbose > 2:
        print(f"Initial coefficients: overall {fixed(ini_cv, 8)}")
        sys.stdout.write(metrics.print_stats("  ", group_nodes))
    else:
        print(f"Initial score: {fixed(ini_cv, 8)}")
    if ini_cv - opt_cv < opts.min_score:
        print(f"Cluster is already well balanced (initial score {_g(ini_cv)},\n"
              f"optimum score due to N+1 reservations {_g(opt_cv)},\n"
              f"minimum score {_g(opts.min_score)}).\nNothing to do, exiting")
        raise SystemExit(0)
    print("Trying to minimize the CV...")
    imlen = max((len(i.alias) for i in insts), default=0)
    nmlen = max((len(cluster.nodes[i].alias) for i in nodes), default=0)
    pmlen = 2 * nmlen + 1
    moves: list[tuple[list[int], Any]] = []

    def show(step: Any) -> None:
        inst = cluster.instances[step.inst]
        old_p, old_s = step.old_nodes
        names = cluster.nodes
        ostr = names[old_p].alias + (f":{names[old_s].alias}" if old_s >= 0 else "")
        nstr = names[step.pnode].alias + (f":{names[step.snode].alias}"
                                          if step.snode >= 0 else "")
        text, cmds = _move_text(step.move, inst.running, inst.alias, names[step.pnode].alias,
                                names[step.snode].alias if step.snode >= 0 else "")
        score = fixed(step.score, 8).rjust(12)
        print(f"  {len(balancer.steps):3d}. {inst.alias.ljust(imlen)} {ostr.ljust(pmlen)} => "
              f"{nstr.ljust(pmlen)} {score} a={text}", flush=True)
        involved = list(dict.fromkeys(n for n in (step.pnode, step.snode, old_p, old_s)
                                      if n >= 0))
        moves.append((involved, (step, cmds)))

    balancer.run(opts.max_length, opt_cv + opts.min_score, show)
    fin_cv = balancer.score
    steps = balancer.steps
    if not steps:
        print("No solution found")
    elif verbose > 2:
        print(f"Final coefficients:   overall {fixed(fin_cv, 8)}")
        sys.stdout.write(metrics.print_stats("  ", [cluster.nodes[i] for i in nodes]))
    else:
        print(f"Cluster score improved from {fixed(ini_cv, 8)} to {fixed(fin_cv, 8)}")
    if verbose >= 1:
        print(f"Solution length={len(steps)}")
    jobsets = split_jobs(moves)
    if opts.first_job_group:
        jobsets = jobsets[:1]
    if opts.print_commands is not None:
        lines = format_commands([[cmds for _, cmds in js] for js in jobsets])
        if opts.print_commands == "-":
            print()
            print("First set of jobs:" if opts.first_job_group
                  else "Commands to run to reach the above solution:")
            for line in lines:
                if line != "  check":
                    print("  " + line)
        else:
            try:
                with open(opts.print_commands, "w", encoding="utf-8") as handle:
                    handle.write(_SH_TEMPLATE + "".join(line + "\n" for line in lines))
            except OSError as err:
                o.fail(f"cannot write {opts.print_commands}: {err.strerror or err}")
            print(f"The commands have been written to file '{opts.print_commands}'")
    maybe_save(opts.save, "balanced", "after balancing", cluster)
    maybe_print_instances(opts.print_instances, "Final", cluster, nodes)
    maybe_print_nodes(opts.print_nodes, "Final cluster", [cluster.nodes[i] for i in nodes])
    if verbose > 3:
        from corral.allocator.planning import resources

        ini = resources([original.nodes[i] for i in nodes])
        fin = resources([cluster.nodes[i] for i in nodes])
        print(f"Original: mem={ini.fmem} disk={ini.fdsk}")
        print(f"Final:    mem={fin.fmem} disk={fin.fdsk}")
    if opts.exec_jobs and steps:
        if opts.luxi is None:
            o.fail("hbal: Execution of commands possible only on LUXI")
        _execute(opts, original, jobsets)


def _g(value: float) -> str:
    """printf's %.6g as the htools print it."""
    text = f"{value:.6g}"
    return text if any(c in text for c in ".en") else text + ".0"


_PRIORITY = {"low": 10, "normal": 0, "high": -10}


def _execute(opts: o.Options, original: Any, jobsets: list[list[Any]]) -> None:
    """Run the jobsets through luxi; stop after the first jobset with a failed job."""
    from pathlib import Path

    from corral.allocator.evacuate import move_opcodes
    from corral.errors import CorralError
    from corral.luxi.client import Client
    from corral.paths import Paths

    path = Path(opts.luxi) if opts.luxi else Paths.from_env().master_socket
    stop = {"requests": 0}

    def on_signal(signum: int, _frame: Any) -> None:
        stop["requests"] += 1
        if stop["requests"] > 1 or signum == signal.SIGTERM:
            print("Double cancel request, exiting now...", flush=True)
            raise SystemExit(2)
        print("Cancel request registered, will exit at the end of the current job set...",
              flush=True)

    old_int = signal.signal(signal.SIGINT, on_signal)
    old_term = signal.signal(signal.SIGTERM, on_signal)
    reason = opts.reason or f"hbal {__version__} called"
    done: list[str] = []
    try:
        with Client(path) as client:
            for pos, jobset in enumerate(jobsets):
                if stop["requests"]:
                    print("Exiting early due to user request, ")
                    print(f"{pos}jobset(s) submitted: ")
                    print(f"{len(jobsets) - pos} jobset(s) not submitted:")
                    break
                jobs = []
                for step, _cmds in jobset:
                    inst = original.instances[step.inst]
                    ops = move_opcodes(original, inst, step.move)
                    for op in ops:
                        op["comment"] = f"rebalancing via hbal {__version__}"
                        op["reason"] = [["hbal", reason, time.time_ns()]]
                        if opts.priority is not None:
                            op["priority"] = _PRIORITY[opts.priority]
                    jobs.append(ops)
                results = _run_jobset(client, jobs, opts.parallel)
                failed = [(jid, status) for jid, status in results if status != "success"]
                for (step, _cmds), (jid, status) in zip(jobset, results, strict=True):
                    if status == "success":
                        done.append(f"{original.instances[step.inst].name} (job {jid})")
                if failed:
                    listing = ", ".join(f"(JobId {jid},JOB_STATUS_{status.upper()})"
                                        for jid, status in failed)
                    print("Moves done: " + (", ".join(done) if done else "none"))
                    o.fail(f"hbal: Not all jobs completed successfully: [{listing}]\n"
                           "Aborting.")
    except CorralError as err:
        print("Moves done: " + (", ".join(done) if done else "none"))
        o.fail(f"hbal: {err}")
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)


def _run_jobset(client: Any, jobs: list[list[dict[str, Any]]],
                parallel: int) -> list[tuple[int, str]]:
    """Submit the jobs of a jobset (at most ``parallel`` at once, 0: all) and wait for
    them; each job's id and final status."""
    batch = parallel if parallel > 0 else len(jobs)
    results: list[tuple[int, str]] = []
    for start in range(0, len(jobs), batch):
        answer = client.call("SubmitManyJobs", jobs[start:start + batch])
        ids = []
        for ok, value in answer:
            if not ok:
                raise _submit_error(value)
            ids.append(int(value))
        print("Got job IDs " + ", ".join(str(i) for i in ids), flush=True)
        results += _wait(client, ids)
    return results


def _submit_error(value: Any) -> Exception:
    from corral.errors import CorralError

    return CorralError(f"Job submission error: {value}")


def _wait(client: Any, ids: list[int]) -> list[tuple[int, str]]:
    delay = 0.1
    while True:
        rows = client.call("QueryJobs", ids, ["status"])
        statuses = [row[0] if row else "unknown" for row in rows]
        if all(s in ("success", "error", "canceled") for s in statuses):
            return list(zip(ids, statuses, strict=True))
        time.sleep(delay)
        delay = min(delay * 2, 2.0)
