"""Benchmark: corral's allocator beside Ganeti's htools on the same generated clusters.

Generates (``/work/shared/tools/htools-data/gen_cluster.py``, seed 42, or
``--gen``) the 10-, 100- and 1000-node clusters with their iallocator requests, then
times whole processes, corral's tool and Ganeti's in turn (Ganeti's htools from the
Debian package ``ganeti-htools-3.0``; a Ganeti run that passes ``--timeout`` is
killed and reported as a lower bound):

* ``hail`` allocating with capacity (N+1) checks on the 100- and 1000-node clusters,
  plain (one node) and drbd (two nodes): seconds, the chosen nodes, the score after
  the placement, and whether corral's score is equal or better (``score_ok``);
* ``hbal`` to convergence on the 100-node group of the 1000-node cluster
  (``group-04``): seconds, moves, final score. Ganeti's hbal takes hours there: with
  ``--hbal-timeout`` (default: ``--timeout``) it is stopped and its moves and score
  so far are reported, with corral's score after the same number of moves; a final
  score recorded from a complete run can be given with ``--ganeti-hbal-final``;
* ``hspace`` standard (and tiered) allocation on the 10-node cluster
  (``--standard-alloc=10240,1024,1 --tiered-alloc=10240,1024,1
  --disk-template=plain``): seconds, the instances placed, and whether the outputs
  are the same.

Each corral figure is the median of ``--runs`` runs (default 3); the load average
is printed with each line. One JSON line per figure; progress on stderr.
Run: ``.venv/bin/python bench/allocation.py [--runs N] [--timeout S] [--no-ganeti]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GEN = Path("/work/shared/tools/htools-data/gen_cluster.py")
GANETI_BIN = Path("/usr/lib/ganeti/3.0/usr/bin")
GANETI_HAIL = Path("/usr/lib/ganeti/3.0/usr/lib/ganeti/iallocators/hail")
CORRAL_BIN = Path(sys.executable).parent
TARGETS = {"hail_c1000_s": 0.5, "hbal_s": 10.0, "hspace_s": 1.0}
HSPACE_ARGS = ["--standard-alloc=10240,1024,1", "--tiered-alloc=10240,1024,1",
               "--disk-template=plain", "--machine-readable"]


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


#: CPU seconds of the last command :func:`run` ran (user + system)
LAST_CPU = [0.0]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(argv: list[str], timeout: float | None = None) -> tuple[float, str, bool]:
    """Run a command: wall seconds, stdout, whether it finished in time (its CPU
    seconds in :data:`LAST_CPU`: on a loaded machine they say more than the wall)."""
    cpu = _children_cpu()
    start = time.perf_counter()
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          text=True) as proc:
        try:
            out, _ = proc.communicate(timeout=timeout)
            finished = True
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            finished = False
    wall = time.perf_counter() - start
    LAST_CPU[0] = _children_cpu() - cpu
    return wall, out, finished


def load_average() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def hail_answer(out: str) -> dict[str, Any]:
    """Nodes and score of a hail answer."""
    try:
        answer = json.loads(out)
    except json.JSONDecodeError:
        return {"success": None}
    info = answer.get("info", "")
    selected = re.search(r"Selected group: ([^,]+)", info)
    scores = dict(re.findall(r"Group (\S+) \([a-z_]+\): score: ([0-9.]+)", info))
    score = float(scores[selected.group(1)]) if selected and selected.group(1) in scores \
        else None
    return {"success": answer.get("success"), "nodes": answer.get("result"),
            "score": score}


def bench_hail(data: Path, runs: int, timeout: float, ganeti: bool) -> None:
    for size in ("c100", "c1000"):
        for kind in ("plain", "drbd"):
            request = data / f"{size}.alloc-{kind}.json"
            log(f"hail {size} {kind}: corral")
            times = []
            cpus = []
            corral: dict[str, Any] = {}
            for _ in range(runs):
                seconds, out, _ = run([str(CORRAL_BIN / "hail"), str(request)])
                times.append(seconds)
                cpus.append(LAST_CPU[0])
                corral = hail_answer(out)
            engine = _engine_seconds(request)
            line: dict[str, Any] = {
                "bench": "allocation", "figure": f"hail_{size}_{kind}",
                "corral_s": round(statistics.median(times), 3),
                "corral_cpu_s": round(statistics.median(cpus), 3),
                "corral_engine_s": round(engine[0], 3),
                "corral_engine_cpu_s": round(engine[1], 3), "corral_nodes": corral.get("nodes"),
                "corral_score": corral.get("score")}
            if ganeti:
                log(f"hail {size} {kind}: Ganeti (timeout {timeout:.0f} s)")
                seconds, out, finished = run([str(GANETI_HAIL), str(request)], timeout)
                theirs = hail_answer(out) if finished else {}
                line.update(ganeti_s=round(seconds, 3), ganeti_cpu_s=round(LAST_CPU[0], 3),
                            ganeti_finished=finished, ganeti_nodes=theirs.get("nodes"),
                            ganeti_score=theirs.get("score"))
                if finished and theirs.get("score") is not None and corral.get("score"):
                    line["score_ok"] = corral["score"] <= theirs["score"]
                    line["same_nodes"] = corral.get("nodes") == theirs.get("nodes")
                line["speedup"] = (round(seconds / line["corral_s"], 1)
                                   if line["corral_s"] else None)
            if size == "c1000":
                line["target_s"] = TARGETS["hail_c1000_s"]
            line["loadavg"] = load_average()
            print(json.dumps(line), flush=True)


def _engine_seconds(request: Path) -> tuple[float, float]:
    """Wall and CPU seconds of corral's allocator itself on a request (read and
    answer, in this process), without the interpreter's start and imports."""
    from corral.allocator.iallocator import answer

    raw = json.loads(request.read_text())
    answer(raw)          # warm (imports, caches)
    raw = json.loads(request.read_text())
    start, cpu = time.perf_counter(), time.process_time()
    answer(raw)
    return time.perf_counter() - start, time.process_time() - cpu


def _standard_seconds(path: Path) -> tuple[float, float]:
    """Wall and CPU seconds of corral's standard allocation alone (hspace's
    ``--standard-alloc`` part, in this process): hspace always runs tiered allocation
    too."""
    from corral.allocator import load, textformat
    from corral.allocator.alloc import AllocOptions, candidate_nodes
    from corral.allocator.planning import Planner, instance_from_spec

    cluster = textformat.read_file(str(path))
    load.finish(cluster)
    every = list(range(len(cluster.nodes)))
    planner = Planner(candidate_nodes(cluster, every, 1, None, True), 1,
                      AllocOptions(capacity=True))
    start, cpu = time.perf_counter(), time.process_time()
    planner.iterate(cluster.copy(), None, instance_from_spec(1024, 10240, 1, 1, "plain", 1))
    return time.perf_counter() - start, time.process_time() - cpu


_MOVE = re.compile(r"^\s+(\d+)\. \S+ .* ([0-9.]+) a=", re.MULTILINE)


def _hbal_result(out: str) -> tuple[int, float | None]:
    moves = _MOVE.findall(out)
    final = re.search(r"Cluster score improved from [0-9.]+ to ([0-9.]+)", out)
    if final:
        return len(moves), float(final.group(1))
    return len(moves), float(moves[-1][1]) if moves else None


def bench_hbal(data: Path, runs: int, timeout: float, ganeti: bool,
               recorded: float | None) -> None:
    argv = ["-t", str(data / "c1000.data"), "-G", "group-04"]
    log("hbal c1000 group-04: corral")
    times = []
    cpus = []
    out = ""
    for _ in range(runs):
        seconds, out, _ = run([str(CORRAL_BIN / "hbal"), *argv])
        times.append(seconds)
        cpus.append(LAST_CPU[0])
    moves, score = _hbal_result(out)
    line: dict[str, Any] = {"bench": "allocation", "figure": "hbal_c1000_group04",
                            "corral_s": round(statistics.median(times), 3),
                            "corral_cpu_s": round(statistics.median(cpus), 3),
                            "corral_moves": moves, "corral_score": score,
                            "target_s": TARGETS["hbal_s"]}
    if ganeti:
        log(f"hbal c1000 group-04: Ganeti (timeout {timeout:.0f} s)")
        seconds, theirs, finished = run([str(GANETI_BIN / "hbal"), *argv], timeout)
        g_moves, g_score = _hbal_result(theirs)
        line.update(ganeti_s=round(seconds, 3), ganeti_cpu_s=round(LAST_CPU[0], 3),
                    ganeti_finished=finished, ganeti_moves=g_moves, ganeti_score=g_score)
        if finished and g_score is not None and score is not None:
            line["score_ok"] = score <= g_score
        elif g_moves:
            _, same_len, _ = run([str(CORRAL_BIN / "hbal"), *argv, "-l", str(g_moves)])
            line["corral_score_at_ganeti_moves"] = _hbal_result(same_len)[1]
    if recorded is not None and score is not None:
        line.update(ganeti_recorded_final_score=recorded, score_ok=score <= recorded)
    line["loadavg"] = load_average()
    print(json.dumps(line), flush=True)


def bench_hspace(data: Path, runs: int, timeout: float, ganeti: bool) -> None:
    argv = ["-t", str(data / "c10.data"), *HSPACE_ARGS]
    log("hspace c10 plain: corral")
    times = []
    cpus = []
    out = ""
    for _ in range(runs):
        seconds, out, _ = run([str(CORRAL_BIN / "hspace"), *argv])
        times.append(seconds)
        cpus.append(LAST_CPU[0])
    mine = dict(re.findall(r"^HTS_(\w+)=(.*)$", out, re.MULTILINE))
    standard = _standard_seconds(data / "c10.data")
    line: dict[str, Any] = {"bench": "allocation", "figure": "hspace_c10_plain",
                            "corral_s": round(statistics.median(times), 3),
                            "corral_cpu_s": round(statistics.median(cpus), 3),
                            "corral_standard_engine_s": round(standard[0], 3),
                            "corral_standard_engine_cpu_s": round(standard[1], 3),
                            "corral_instances": int(mine.get("ALLOC_INSTANCES", -1)),
                            "corral_tiered": mine.get("TSPEC", "").strip("'"),
                            "target_s": TARGETS["hspace_s"]}
    if ganeti:
        log(f"hspace c10 plain: Ganeti (timeout {timeout:.0f} s)")
        seconds, theirs, finished = run([str(GANETI_BIN / "hspace"), *argv], timeout)
        other = dict(re.findall(r"^HTS_(\w+)=(.*)$", theirs, re.MULTILINE))
        line.update(ganeti_s=round(seconds, 3), ganeti_cpu_s=round(LAST_CPU[0], 3),
                    ganeti_finished=finished,
                    ganeti_instances=int(other.get("ALLOC_INSTANCES", -1)),
                    ganeti_tiered=other.get("TSPEC", "").strip("'"))
        if finished:
            line["same_output"] = out == theirs
            line["speedup"] = round(seconds / line["corral_s"], 1)
    line["loadavg"] = load_average()
    print(json.dumps(line), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds after which a Ganeti tool is stopped")
    parser.add_argument("--hbal-timeout", type=float, default=None)
    parser.add_argument("--ganeti-hbal-final", type=float, default=None,
                        help="Ganeti hbal's final score from a complete run")
    parser.add_argument("--gen", type=Path, default=GEN)
    parser.add_argument("--no-ganeti", action="store_true")
    parser.add_argument("--only", choices=("hail", "hbal", "hspace"), action="append")
    args = parser.parse_args()
    if args.runs < 1 or args.timeout <= 0:
        parser.error("--runs must be at least 1 and --timeout positive")
    if not args.gen.exists():
        print(json.dumps({"bench": "allocation", "skipped": f"no generator {args.gen}"}))
        return
    ganeti = not args.no_ganeti and GANETI_HAIL.exists() and (GANETI_BIN / "hbal").exists()
    only = set(args.only or ("hail", "hbal", "hspace"))
    with tempfile.TemporaryDirectory(prefix="corral-bench-alloc-") as tmp:
        data = Path(tmp)
        for nodes, insts in ((10, 40), (100, 400), (1000, 4000)):
            subprocess.run([sys.executable, str(args.gen), "--nodes", str(nodes),
                            "--instances", str(insts), "--seed", "42", "--out",
                            str(data / f"c{nodes}")], check=True, capture_output=True)
        if "hail" in only:
            bench_hail(data, args.runs, args.timeout, ganeti)
        if "hspace" in only:
            bench_hspace(data, args.runs, args.timeout, ganeti)
        if "hbal" in only:
            bench_hbal(data, args.runs, args.hbal_timeout or args.timeout, ganeti,
                       args.ganeti_hbal_final)


if __name__ == "__main__":
    main()
