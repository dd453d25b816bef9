"""Benchmark: the operations commands (issue 17), corral beside Ganeti where it runs.

``verify_figures``: ``gnt-cluster verify`` as a whole process on a 3-node corral testbed
with ``--instances`` (default 100) diskless instances running on the fake hypervisor
(round robin over the nodes), beside Ganeti's ``/usr/sbin/gnt-cluster verify`` on the
reference cluster when one answers (``gnt-cluster getmaster`` and ``gnt-node list``),
in turn (A B A B ...: one warm-up each, then ``--runs`` each), so that drift hits both.
Ganeti's verify is timed as it is (its instances are whatever that cluster holds) and
its exit code recorded: it reports this machine's missing ``/proc/sys`` entries as an
error and exits 1; corral's must exit 0 (checked) and report nothing. Target: 1 s.

Prints one JSON line; progress goes to stderr. Other figures of the issue go in
functions of their own beside ``verify_figures``.
Run: ``.venv/bin/python bench/operations.py [--runs N] [--instances N] [--no-ganeti]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import create_diskless, testbed
from corral.paths import Paths

GANETI_BIN = Path("/usr/sbin")
TARGETS = {"verify_s": 1.0}

_STARTED = time.perf_counter()


def log(message: str) -> None:
    """A progress line on stderr, after the seconds since the start."""
    print(f"[bench/operations {time.perf_counter() - _STARTED:6.1f}s] {message}",
          file=sys.stderr, flush=True)


def time_once(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Wall time of one run of ``argv`` (output discarded) and its exit code."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    code = proc.wait(timeout=300)
    return time.perf_counter() - started, code


def _stats(times: list[float]) -> dict[str, float]:
    return {"s": round(statistics.median(times), 4), "min_s": round(min(times), 4),
            "max_s": round(max(times), 4)}


def ganeti_answers(env: dict[str, str]) -> str:
    """Why no Ganeti cluster can be timed here, or "" when one answers."""
    if not (GANETI_BIN / "gnt-cluster").exists():
        return "Ganeti is not installed"
    for argv in (["gnt-cluster", "getmaster"], ["gnt-node", "list", "--no-headers"]):
        try:
            proc = subprocess.run([str(GANETI_BIN / argv[0]), *argv[1:]], env=env,
                                  capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"no Ganeti cluster answers: {err}"
        if proc.returncode != 0:
            return f"no Ganeti cluster answers: {(proc.stderr or proc.stdout).strip()[:200]}"
    return ""


def verify_figures(runs: int, instances: int, ganeti: bool) -> dict[str, Any]:
    """``gnt-cluster verify`` on a 3-node testbed with ``instances`` running instances,
    and Ganeti's beside it (see the module doc)."""
    bindir = Path(sys.executable).parent
    base_env = {k: v for k, v in os.environ.items() if k != "CORRAL_ROOT"}
    note = ganeti_answers(base_env) if ganeti else "--no-ganeti"
    out: dict[str, Any] = {"instances": instances, "nodes": 3, "runs": runs}
    with tempfile.TemporaryDirectory(prefix="corral-bench-ops-") as tmp:
        directory = Path(tmp) / "tb"
        log("starting a 3-node corral testbed")
        testbed("up", "--nodes", "3", "--dir", str(directory))
        try:
            state = json.loads((directory / "testbed.json").read_text())
            env = {**base_env, **state["env"]}
            nodes = [node["name"] for node in state["nodes"]]
            log(f"creating and starting {instances} instances")
            asyncio.run(create_diskless(Paths(Path(env["CORRAL_ROOT"])).master_socket,
                                        [f"bench-ops-{n}" for n in range(instances)], nodes))
            subprocess.run([str(bindir / "gnt-instance"), "startup", "--all",
                            "--force-multiple"], env=env, check=True, capture_output=True,
                           timeout=600)
            ours = [str(bindir / "gnt-cluster"), "verify"]
            check = subprocess.run(ours, env=env, capture_output=True, text=True, timeout=120)
            if check.returncode != 0 or "  - " in check.stdout:
                raise SystemExit(f"corral's verify is not clean:\n{check.stdout}{check.stderr}")
            theirs = [str(GANETI_BIN / "gnt-cluster"), "verify"] if not note else None
            log("timing gnt-cluster verify" + (" beside Ganeti's" if theirs else ""))
            times: dict[str, list[float]] = {"corral": [], "ganeti": []}
            codes: set[int] = set()
            for argv, side in ((ours, "corral"), (theirs, "ganeti")):
                if argv:
                    time_once(argv, env if side == "corral" else base_env)
            for _ in range(runs):
                elapsed, code = time_once(ours, env)
                if code != 0:
                    raise SystemExit(f"corral's verify exited {code} during the runs")
                times["corral"].append(elapsed)
                if theirs:
                    elapsed, code = time_once(theirs, base_env)
                    times["ganeti"].append(elapsed)
                    codes.add(code)
        finally:
            testbed("down", "--dir", str(directory))
            log("testbed down")
    out.update({f"corral_{k}": v for k, v in _stats(times["corral"]).items()})
    if times["ganeti"]:
        out.update({f"ganeti_{k}": v for k, v in _stats(times["ganeti"]).items()})
        out["ganeti_exit_codes"] = sorted(codes)
        out["ratio"] = round(out["ganeti_s"] / out["corral_s"], 2)
    else:
        out.update({"ganeti": None, "ganeti_note": note})
    out["target_s"] = TARGETS["verify_s"]
    return out


def main() -> None:
    """Run the benchmark and print one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs per command")
    parser.add_argument("--instances", type=int, default=100, help="instances on the testbed")
    parser.add_argument("--no-ganeti", action="store_true", help="time corral only")
    args = parser.parse_args()
    out: dict[str, Any] = {"bench": "operations",
                           "load_average": [round(x, 2) for x in os.getloadavg()]}
    out["verify"] = verify_figures(args.runs, args.instances, not args.no_ganeti)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
