"""Benchmark: what kill -9 of the master daemon costs, over many rounds.

Starts a 3-node testbed in a temporary directory and runs the fault suite's workload
(``tests/faults/workload.py``: instance add/remove/start/stop/modify on the fake
hypervisor, delay jobs, RAPI reads). Each round submits one ``gnt-debug delay 30``
job (it runs, holding the master node's lock) and five short ones waiting for that
lock, waits a random moment, kills the master daemon by pid and runs
``corral-daemons start`` on the master, as an operator would. It measures, from the
restart command:

* ``luxi``: until the master daemon answers luxi again;
* ``requeued``: until every job that was waiting for the lock has run to success
  again (they are requeued at start, and the running job's failure frees the lock).

After each round the invariants of ``tests/faults/invariants.py`` are checked and
their violations counted: jobs lost (an acknowledged job missing or unfinished, a
seen success turned into something else), changes lost (an acknowledged change that
does not read back) and instances inconsistent (running twice, unknown, off their
primary, or not running when they should); all must be 0.

Ganeti comparison (``--ganeti-rounds``, default 3, 0 skips): on the reference Ganeti 3.0
cluster of this machine (``/work/shared/tools/ganeti-reference``), when it runs, the
same delay jobs are submitted, ganeti-luxid and ganeti-wconfd are killed by pid and
restarted with ``daemon-util start``; ``luxi`` is the time until ``gnt-job list``
answers. Ganeti 3.0's jobs run in processes of their own that survive this, so its
``requeued`` figure is the time until the five jobs that were waiting have run: they
wait for the running one (``gnt-debug delay 8``), which carries on.

Prints one JSON line. Run: ``.venv/bin/python bench/faults.py [--rounds N]
[--ganeti-rounds N] [--seed N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from _common import percentile, testbed

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' fault pieces

from tests.faults.injector import kill9, restart, wait_luxi
from tests.faults.invariants import (
    FaultCluster,
    InvariantViolation,
    Ledger,
    check_changes,
    check_instances,
    check_jobs,
    check_locks,
    check_replicas,
    settle_jobs,
)
from tests.faults.workload import Workload


def _delay(duration: float) -> list[dict[str, Any]]:
    return [{"OP_ID": "OP_TEST_DELAY", "duration": duration, "on_master": True,
             "on_nodes": [], "repeat": 0, "no_locks": False}]


def _count(check: Any, workload: Workload) -> int:
    """The number of problems a check finds (0 when it passes); each problem is
    printed on standard error with the workload's jobs on the instances it names."""
    try:
        check()
    except InvariantViolation as err:
        print(err, file=sys.stderr)
        for event in workload.history:
            if any(f"instance {event[0]}:" in problem for problem in err.problems):
                print(f"  workload: {event}", file=sys.stderr)
        return len(err.problems)
    return 0


def _round(cluster: FaultCluster, ledger: Ledger, workload: Workload, rng: random.Random,
           figures: dict[str, list[float]], lost: dict[str, int]) -> None:
    workload.start()
    with cluster.client() as client:
        running = client.call("SubmitJob", _delay(30))
        ledger.submitted(running)
        while client.call("QueryJobs", [running], ["status"])[0][0] != "running":
            time.sleep(0.01)
        answers = client.call("SubmitManyJobs", [_delay(0.01) for _ in range(5)])
    waiting = [job_id for _, job_id in answers]
    for job_id in waiting:
        ledger.submitted(job_id)
    time.sleep(rng.uniform(0.1, 0.5))
    master = cluster.master()
    kill9(master, "masterd")
    started = time.monotonic()
    restart(cluster, master)
    wait_luxi(cluster)
    figures["luxi"].append(time.monotonic() - started)
    with cluster.client() as client:
        while True:
            rows = client.call("QueryJobs", waiting, ["status"])
            if all(row[0] in ("success", "error", "canceled") for row in rows):
                break
            time.sleep(0.005)
    figures["requeued"].append(time.monotonic() - started)
    lost["jobs_not_rerun"] += sum(1 for row in rows if row[0] != "success")
    workload.stop()
    settle_jobs(cluster, timeout=120)
    lost["jobs"] += _count(lambda: check_jobs(cluster, ledger), workload)
    lost["changes"] += _count(lambda: check_changes(cluster, ledger), workload)
    lost["instances"] += _count(lambda: check_instances(cluster, ledger), workload)
    settle_jobs(cluster, timeout=120)
    lost["locks"] += _count(lambda: check_locks(cluster), workload)
    lost["replicas"] += _count(lambda: check_replicas(cluster), workload)
    workload.resync()


def _corral(rounds: int, seed: int) -> dict[str, Any]:
    directory = Path(tempfile.mkdtemp(prefix="corral-bench-faults-"))
    try:
        testbed("up", "--nodes", "3", "--dir", str(directory / "tb"))
        cluster = FaultCluster.from_testbed(directory / "tb")
        rapi = json.loads((directory / "tb" / "testbed.json").read_text())["rapi"]
        rng = random.Random(seed)
        ledger = Ledger()
        workload = Workload(cluster, ledger, rng, rapi=rapi)
        figures: dict[str, list[float]] = {"luxi": [], "requeued": []}
        lost = dict.fromkeys(("jobs", "jobs_not_rerun", "changes", "instances", "locks",
                              "replicas"), 0)
        try:
            for _ in range(rounds):
                _round(cluster, ledger, workload, rng, figures, lost)
        finally:
            workload.stop()
        return {"figures": figures, "lost": lost, "workload": workload.summary()}
    finally:
        testbed("down", "--dir", str(directory / "tb"))
        shutil.rmtree(directory, ignore_errors=True)


# -- Ganeti 3.0 ------------------------------------------------------------------------

_GANETI_PIDS = Path("/var/run/ganeti")
_DAEMON_UTIL = "/usr/lib/ganeti/daemon-util"


def _gnt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([f"/usr/sbin/{args[0]}", *args[1:]], capture_output=True,
                          text=True, timeout=120)


def _ganeti_available() -> str | None:
    """Why the reference cluster cannot be used, or None."""
    if not Path("/usr/sbin/gnt-job").exists():
        return "Ganeti 3.0 is not installed"
    for daemon in ("ganeti-luxid", "ganeti-wconfd"):
        if not _alive(daemon):
            return f"{daemon} does not run (start it with its setup.sh)"
    if _gnt("gnt-job", "list", "--no-headers", "-o", "id").returncode != 0:
        return "the reference cluster does not answer gnt-job list"
    return None


def _alive(daemon: str) -> list[int]:
    """The pids of ``daemon``'s live processes (a killed one not yet reaped is not)."""
    out = subprocess.run(["pgrep", "-x", daemon], capture_output=True, text=True).stdout
    pids = []
    for pid in map(int, out.split()):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            pids.append(pid)
    return pids


def _submit_delay(duration: float) -> int:
    out = _gnt("gnt-debug", "delay", "--submit", "--print-jobid", str(duration)).stdout
    return int(out.split()[-1])


def _ganeti_statuses(ids: list[int]) -> list[str]:
    return _gnt("gnt-job", "list", "--no-headers", "-o", "status",
                *map(str, ids)).stdout.split()


def _start_ganeti_daemons() -> None:
    for daemon in ("ganeti-wconfd", "ganeti-luxid"):
        if _alive(daemon):
            continue
        # daemon-util refuses to start while the dead daemon's pid file is there
        (_GANETI_PIDS / f"{daemon}.pid").unlink(missing_ok=True)
        subprocess.run([_DAEMON_UTIL, "start", daemon], capture_output=True, timeout=60)


def _ganeti(rounds: int) -> dict[str, Any]:
    luxi: list[float] = []
    resumed: list[float] = []
    try:
        for _ in range(rounds):
            first = _submit_delay(8)
            deadline = time.monotonic() + 30
            while (_ganeti_statuses([first]) != ["running"]
                   and time.monotonic() < deadline):
                time.sleep(0.05)
            with ThreadPoolExecutor(5) as pool:
                ids = list(pool.map(_submit_delay, [1] * 5))
            deadline = time.monotonic() + 5
            while (set(_ganeti_statuses(ids)) != {"waiting"}
                   and time.monotonic() < deadline):
                time.sleep(0.05)
            for daemon in ("ganeti-luxid", "ganeti-wconfd"):
                for pid in _alive(daemon):
                    os.kill(pid, signal.SIGKILL)
            while _alive("ganeti-luxid") or _alive("ganeti-wconfd"):
                time.sleep(0.01)
            started = time.monotonic()
            _start_ganeti_daemons()
            deadline = time.monotonic() + 60
            while _gnt("gnt-job", "list", "--no-headers", "-o", "id").returncode != 0:
                if time.monotonic() > deadline:
                    raise SystemExit("the reference Ganeti did not answer within 60 s of "
                                     "its restart")
                time.sleep(0.02)
            luxi.append(time.monotonic() - started)
            while not all(s in ("success", "error", "canceled") for s in _ganeti_statuses(ids)):
                time.sleep(0.1)
            resumed.append(time.monotonic() - started)
    finally:
        _start_ganeti_daemons()  # never leave the shared reference cluster without them
    return {"luxi": luxi, "requeued": resumed}


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {"median": round(percentile(values, 0.5), 3), "p99": round(percentile(values, 0.99), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=50, help="master kill -9 rounds")
    parser.add_argument("--ganeti-rounds", type=int, default=3,
                        help="rounds on the reference Ganeti cluster (0: none)")
    parser.add_argument("--seed", type=int, default=None, help="random seed")
    args = parser.parse_args()
    if args.rounds < 1 or args.ganeti_rounds < 0:
        parser.error("--rounds must be at least 1 and --ganeti-rounds at least 0")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    result = _corral(args.rounds, seed)
    lost = result["lost"]
    line: dict[str, Any] = {
        "bench": "faults", "rounds": args.rounds, "seed": seed,
        "jobs_lost": lost["jobs"], "changes_lost": lost["changes"],
        "instances_inconsistent": lost["instances"],
        "requeued_jobs_not_rerun": lost["jobs_not_rerun"],
        "locks_left": lost["locks"], "replicas_diverged": lost["replicas"],
        "recovery_luxi_s": _summary(result["figures"]["luxi"]),
        "recovery_requeued_s": _summary(result["figures"]["requeued"]),
        "workload": result["workload"],
        "load_average": os.getloadavg()[0],
    }
    if args.ganeti_rounds:
        why = _ganeti_available()
        if why is None:
            ganeti = _ganeti(args.ganeti_rounds)
            line["ganeti"] = {"rounds": args.ganeti_rounds,
                              "recovery_luxi_s": _summary(ganeti["luxi"]),
                              "recovery_requeued_s": _summary(ganeti["requeued"])}
        else:
            line["ganeti"] = {"skipped": why}
    print(json.dumps(line))


if __name__ == "__main__":
    main()
