"""Benchmark: whole-process wall time of the gnt-* tools, corral beside Ganeti.

Before measuring, corral's package directory (found via ``corral.__file__``) is
byte-compiled with ``python -m compileall -q``: an installed package ships .pyc files,
while a source checkout run with ``PYTHONDONTWRITEBYTECODE=1`` (as this machine's
environment sets) would compile every imported module on every run and measure that.

Starts a one-node corral testbed in a temporary directory and creates ``--instances``
(default 100) diskless instances there, not started, without an OS install (all jobs
submitted over one luxi client, then followed). Then times, as whole processes
(output to /dev/null, ``time.perf_counter`` around start and a blocking wait, exit code
checked):

* ``--help`` of every gnt-* tool, and of ``corral-daemons`` and ``corral-confd-query``
  (corral only: Ganeti has no counterpart);
* ``gnt-instance list`` (the instances must be listed: checked once beforehand);
* ``gnt-debug delay --submit 0`` (submits one job and prints its id).

Each command gets one warm-up run, then ``--runs`` runs (default 7); corral's and
Ganeti's runs alternate (A B A B ...) so that drift hits both. Ganeti's tools are
``/usr/sbin/gnt-*``; their ``--help`` needs no cluster. List and submit are timed on
Ganeti only if a Ganeti cluster answers (``gnt-cluster getmaster`` and then
``gnt-node list``); the bench then creates the missing ``bench-cli-<n>`` instances
there (diskless, OS ``noop+default``, on the master node) and removes the ones it
created at the end. ``ratio`` is Ganeti's median over corral's (how many times faster
corral is). ``--no-ganeti`` skips Ganeti entirely.

Prints one JSON line; progress goes to stderr.
Run: ``.venv/bin/python bench/cli.py [--runs N] [--instances N] [--no-ganeti]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import corral
from _common import FINAL, create_diskless, testbed
from corral.paths import Paths

GNT_TOOLS = ["gnt-cluster", "gnt-instance", "gnt-node", "gnt-group", "gnt-job", "gnt-filter",
             "gnt-debug", "gnt-os", "gnt-network", "gnt-backup", "gnt-storage"]
CORRAL_ONLY = ["corral-daemons", "corral-confd-query"]
GANETI_BIN = Path("/usr/sbin")
TARGETS = {"help_s": 0.1, "list_s": 0.15, "submit_s": 0.15, "ratio": 2}
SUBMIT = ["gnt-debug", "delay", "--submit", "0"]

#: A command to time: its argv, its environment.
Command = tuple[list[str], dict[str, str]]


_STARTED = time.perf_counter()


def log(message: str) -> None:
    """Print a progress message on stderr, after the seconds since the start."""
    print(f"[bench/cli {time.perf_counter() - _STARTED:6.1f}s] {message}", file=sys.stderr,
          flush=True)


def run(argv: list[str], env: dict[str, str] | None = None, timeout: float = 120
        ) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` with captured text output; raise (with its output) unless it exits 0."""
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}:\n"
                         f"{proc.stdout}{proc.stderr}")
    return proc


def time_once(command: Command, limit: float = 120) -> float:
    """Wall time in seconds of one run of ``command``; raise unless it exits 0.

    The wait blocks in ``waitpid`` (a timer kills the process after ``limit`` s):
    ``subprocess.run(timeout=...)`` polls with sleeps growing to 50 ms, which would
    round every figure up to the next step of that poll."""
    argv, env = command
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    watchdog = threading.Timer(limit, proc.kill)
    watchdog.start()
    try:
        returncode = proc.wait()
    finally:
        watchdog.cancel()
    elapsed = time.perf_counter() - started
    if returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {returncode}, expected 0")
    return elapsed


def _stats(times: list[float]) -> dict[str, float]:
    return {"s": round(statistics.median(times), 4), "min_s": round(min(times), 4),
            "max_s": round(max(times), 4)}


def measure(corral_cmd: Command, ganeti_cmd: Command | None, runs: int) -> dict[str, Any]:
    """Time ``corral_cmd`` and ``ganeti_cmd`` (if any) alternately: one warm-up each, then
    ``runs`` each; medians, extremes and the ratio Ganeti/corral."""
    commands = {"corral": corral_cmd} | ({"ganeti": ganeti_cmd} if ganeti_cmd else {})
    times: dict[str, list[float]] = {side: [] for side in commands}
    for command in commands.values():
        time_once(command)
    for _ in range(runs):
        for side, command in commands.items():
            times[side].append(time_once(command))
    result: dict[str, Any] = {}
    for side, values in times.items():
        result.update({f"{side}_{key}": value for key, value in _stats(values).items()})
    if ganeti_cmd:
        result["ratio"] = round(result["ganeti_s"] / result["corral_s"], 2)
    return result


def compile_corral() -> None:
    """Byte-compile corral's package directory so that runs load .pyc files."""
    package = Path(corral.__file__).parent
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True)


def check_list(command: Command, at_least: int, exact: bool) -> None:
    """Check once that ``gnt-instance list`` prints a header and ``at_least`` instances
    (exactly that many if ``exact``)."""
    lines = run(*command).stdout.splitlines()
    if len(lines) - 1 < at_least or (exact and len(lines) - 1 != at_least):
        raise SystemExit(f"{' '.join(command[0])} printed {len(lines)} lines, "
                         f"expected {at_least + 1}")


def ganeti_master(env: dict[str, str]) -> tuple[str | None, str]:
    """The Ganeti master node's name if a Ganeti cluster answers, else None and why."""
    try:
        master = run([str(GANETI_BIN / "gnt-cluster"), "getmaster"], env, 10).stdout.strip()
        # getmaster answers from ssconf files even with the daemons down; ask luxid too
        run([str(GANETI_BIN / "gnt-node"), "list", "--no-headers", "-o", "name"], env, 15)
    except (SystemExit, subprocess.TimeoutExpired, OSError) as err:
        return None, f"no Ganeti cluster answers: {str(err).strip().splitlines()[0]}"
    return master, ""


def ganeti_jobs(argvs: list[list[str]], env: dict[str, str]) -> dict[str, str]:
    """Run each ``--submit`` command of ``argvs`` (8 at a time), then wait until every
    submitted job ends; the final status of each job id."""
    ids: list[str] = []
    for start in range(0, len(argvs), 8):
        batch = argvs[start:start + 8]
        procs = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True) for argv in batch]
        for argv, proc in zip(batch, procs, strict=True):
            out = proc.communicate(timeout=120)[0]
            found = re.search(r"JobID: (\d+)", out)
            if proc.returncode != 0 or found is None:
                raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {out}")
            ids.append(found.group(1))
    job_list = [str(GANETI_BIN / "gnt-job"), "list", "--no-headers", "-o", "id,status"]
    deadline = time.monotonic() + 30 + 5 * len(ids)
    statuses: dict[str, str] = {}
    while pending := [job for job in ids if statuses.get(job) not in FINAL]:
        if time.monotonic() > deadline:
            raise SystemExit(f"Ganeti jobs {pending} did not end in time")
        time.sleep(0.5)
        for line in run(job_list + pending, env).stdout.splitlines():
            job, status = line.split()
            statuses[job] = status
    return statuses


def all_succeeded(statuses: dict[str, str]) -> None:
    """Raise unless every job of ``statuses`` (id -> status) succeeded."""
    if failed := [job for job, status in statuses.items() if status != "success"]:
        raise SystemExit(f"Ganeti jobs {failed} failed (see gnt-job info {failed[0]})")


def ganeti_instances(env: dict[str, str]) -> set[str]:
    """The names of the Ganeti cluster's instances."""
    listing = [str(GANETI_BIN / "gnt-instance"), "list", "--no-headers", "-o", "name"]
    return set(run(listing, env).stdout.split())


def main() -> None:
    """Run the benchmark and print one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs per command")
    parser.add_argument("--instances", type=int, default=100, help="instances to list")
    parser.add_argument("--no-ganeti", action="store_true", help="time corral only")
    args = parser.parse_args()
    bindir = Path(sys.executable).parent
    base_env = {k: v for k, v in os.environ.items() if k != "CORRAL_ROOT"}
    ganeti = not args.no_ganeti and (GANETI_BIN / "gnt-cluster").exists()
    compile_corral()
    out: dict[str, Any] = {"bench": "cli", "runs": args.runs, "instances": args.instances,
                           "help": {}}

    log("byte-compiled corral; timing --help")
    for tool in GNT_TOOLS + CORRAL_ONLY:
        path = GANETI_BIN / tool
        other = ([str(path), "--help"], base_env) if ganeti and path.exists() else None
        out["help"][tool] = measure(([str(bindir / tool), "--help"], base_env), other,
                                    args.runs)

    master, note = ganeti_master(base_env) if ganeti else (None, "--no-ganeti")
    created: list[str] = []
    job_status = ""
    names = [f"bench-cli-{n}" for n in range(args.instances)]
    list_key = f"list_{args.instances}"
    gnt = {tool: str(GANETI_BIN / tool) for tool in GNT_TOOLS}
    with tempfile.TemporaryDirectory(prefix="corral-bench-cli-") as tmp:
        directory = Path(tmp) / "tb"
        log("starting a one-node corral testbed")
        testbed("up", "--nodes", "1", "--dir", str(directory))
        try:
            state = json.loads((directory / "testbed.json").read_text())
            env = {**base_env, **state["env"]}
            socket = Paths(Path(state["env"]["CORRAL_ROOT"])).master_socket
            log(f"creating {args.instances} corral instances")
            asyncio.run(create_diskless(
                socket, [f"bench-cli-{n}" for n in range(args.instances)], [state["master"]]))
            ours_list: Command = ([str(bindir / "gnt-instance"), "list"], env)
            check_list(ours_list, args.instances, exact=True)
            ours_submit: Command = ([str(bindir / SUBMIT[0]), *SUBMIT[1:]], env)
            printed = run(*ours_submit)
            if not re.search(r"JobID: \d+", printed.stdout + printed.stderr):
                raise SystemExit(f"{' '.join(SUBMIT)} printed no job id")
            theirs_list: Command | None = None
            theirs_submit: Command | None = None
            if master is not None:
                missing = [name for name in names if name not in ganeti_instances(base_env)]
                log(f"creating {len(missing)} Ganeti instances on {master}")
                created = missing
                all_succeeded(ganeti_jobs(
                    [[gnt["gnt-instance"], "add", "--submit", "-t", "diskless", "-o",
                      "noop+default", "-n", master, "--no-start", "--no-ip-check",
                      "--no-name-check", name] for name in missing], base_env))
                theirs_list = ([gnt["gnt-instance"], "list"], base_env)
                check_list(theirs_list, args.instances, exact=False)
                theirs_submit = ([gnt[SUBMIT[0]], *SUBMIT[1:]], base_env)
                [job_status] = ganeti_jobs([theirs_submit[0]], base_env).values()
            log("timing list and submit")
            for key, ours, theirs in ((list_key, ours_list, theirs_list),
                                      ("submit", ours_submit, theirs_submit)):
                out[key] = measure(ours, theirs, args.runs)
                if theirs is None:
                    out[key].update({"ganeti": None, "ganeti_note": note})
        finally:
            testbed("down", "--dir", str(directory))
            log("testbed down")
            if created:
                log(f"removing the {len(created)} Ganeti instances the bench created")
                present = ganeti_instances(base_env)
                all_succeeded(ganeti_jobs(
                    [[gnt["gnt-instance"], "remove", "--submit", "--force", name]
                     for name in created if name in present], base_env))
    if master is not None:
        # Ganeti refuses a delay of 0 when the job runs; its submission still exits 0
        out["submit"]["ganeti_job_status"] = job_status
    out["targets"] = TARGETS
    out["wall_s"] = round(time.perf_counter() - _STARTED, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
