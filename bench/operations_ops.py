"""Benchmark: one watcher pass on a testbed with 100 instances, and the master's
``/metrics`` scrape under load (issue 17; ``bench/operations.py`` holds the verify
figures, the lead folds the two together).

Starts a 3-node testbed in a temporary directory (fake hypervisor), creates
``--instances`` diskless instances (default 100, primaries round robin) and starts
them, then:

* **watcher**: kills ``--killed`` of them behind corral's back (their fake hypervisor
  state goes) and times ``corral-watcher`` on the master as cron runs it (the whole
  process, from start to exit), which restarts them; then a second pass with nothing
  to do. Beside it, when Ganeti's reference cluster runs here, one pass of Ganeti's
  own ``ganeti-watcher`` on it (a single node with whatever instances it has).
* **metrics**: ``--scrapes`` scrapes of the master's ``/metrics`` one after the other
  while ``--clients`` luxi clients keep submitting ``OP_TEST_DELAY(0)`` jobs and
  listing instances (median and p99 latency; target 20 ms), and the same for one
  node's mond ``/metrics``.

Prints one JSON line. Run: ``.venv/bin/python bench/operations_ops.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from _common import create_diskless, follow_job, percentile, testbed
from corral.luxi import AsyncClient
from corral.paths import Paths

NODES = ["node1.testbed", "node2.testbed", "node3.testbed"]
BIN = Path(sys.executable).parent


async def _start_all(socket: Path, names: list[str]) -> None:
    client = AsyncClient(socket)
    try:
        ids = [await client.call("SubmitJob", [{"OP_ID": "OP_INSTANCE_STARTUP",
                                                "instance_name": name}]) for name in names]
        for job_id in ids:
            if (status := await follow_job(client, job_id)) != "success":
                raise SystemExit(f"startup job {job_id} ended {status}")
    finally:
        await client.close()


def _watcher_pass(root: str) -> float:
    started = time.perf_counter()
    subprocess.run([str(BIN / "corral-watcher")], env={**os.environ, "CORRAL_ROOT": root},
                   check=True, capture_output=True, timeout=600)
    return time.perf_counter() - started


def _status_counts(env: dict[str, str]) -> dict[str, int]:
    out = subprocess.run([str(BIN / "gnt-instance"), "list", "--no-headers", "-o", "status"],
                         env=env, check=True, capture_output=True, text=True).stdout
    counts: dict[str, int] = {}
    for status in out.split():
        counts[status] = counts.get(status, 0) + 1
    return counts


def _ganeti_watcher() -> float | None:
    """One pass of Ganeti's watcher on the reference cluster, if it runs here."""
    watcher = Path("/usr/sbin/ganeti-watcher")
    if not watcher.exists() or not Path("/var/lib/ganeti/config.data").exists():
        return None
    started = time.perf_counter()
    proc = subprocess.run([str(watcher)], capture_output=True, timeout=600)
    elapsed = time.perf_counter() - started
    return elapsed if proc.returncode == 0 else None


def _scrape(url: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as answer:
        answer.read()
    return time.perf_counter() - started


async def _load(socket: Path, stop: asyncio.Event, counter: list[int]) -> None:
    client = AsyncClient(socket)
    try:
        while not stop.is_set():
            job_id = await client.call("SubmitJob", [{"OP_ID": "OP_TEST_DELAY",
                                                      "duration": 0}])
            await client.call("Query", "instance", ["name", "status"], None)
            await follow_job(client, job_id)
            counter[0] += 1
    finally:
        await client.close()


async def _scrapes_under_load(socket: Path, urls: dict[str, str], scrapes: int,
                              clients: int) -> tuple[dict[str, list[float]], float]:
    stop = asyncio.Event()
    counter = [0]
    loaders = [asyncio.create_task(_load(socket, stop, counter)) for _ in range(clients)]
    if clients:
        await asyncio.sleep(1.0)  # the load is under way
    timings: dict[str, list[float]] = {name: [] for name in urls}
    started = time.perf_counter()
    for _ in range(scrapes):
        for name, url in urls.items():
            timings[name].append(await asyncio.to_thread(_scrape, url))
        await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - started
    stop.set()
    await asyncio.gather(*loaders)
    return timings, counter[0] / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=100)
    parser.add_argument("--killed", type=int, default=10)
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--keep", action="store_true", help="leave the testbed running")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="corral-bench-ops-")) / "tb"
    result: dict[str, Any] = {"bench": "operations_ops", "instances": args.instances,
                              "load_before": os.getloadavg()[0]}
    try:
        testbed("up", "--nodes", "3", "--dir", str(directory))
        state = json.loads((directory / "testbed.json").read_text())
        env = {**os.environ, **state["env"]}
        master = Paths(Path(state["nodes"][0]["root"]))
        names = [f"ops{i:03d}.testbed" for i in range(args.instances)]
        asyncio.run(create_diskless(master.master_socket, names, NODES))
        asyncio.run(_start_all(master.master_socket, names))
        by_node = {node["name"]: Paths(Path(node["root"])) for node in state["nodes"]}
        for index, name in enumerate(names[:args.killed]):
            fake = by_node[NODES[index % len(NODES)]].hypervisor_state_dir / "fake"
            (fake / f"{name}.json").unlink()
        assert _status_counts(env).get("ERROR_down") == args.killed
        result["watcher_pass_restarting_s"] = round(_watcher_pass(str(master.root)), 3)
        result["restarted_running"] = _status_counts(env).get("running") == args.instances
        result["watcher_pass_idle_s"] = round(_watcher_pass(str(master.root)), 3)
        ganeti = _ganeti_watcher()
        result["ganeti_watcher_pass_s"] = None if ganeti is None else round(ganeti, 3)
        ips = {node["name"]: node["ip"] for node in state["nodes"]}
        urls = {"master": f"http://{ips[NODES[0]]}:{state['ports']['metrics']}/metrics",
                "node": f"http://{ips[NODES[1]]}:{state['ports']['mond']}/metrics"}
        idle, _none = asyncio.run(_scrapes_under_load(master.master_socket, urls, 50, 0))
        for name, values in idle.items():
            result[f"{name}_metrics_idle_median_ms"] = round(statistics.median(values) * 1000, 2)
        timings, jobs_per_s = asyncio.run(_scrapes_under_load(
            master.master_socket, urls, args.scrapes, args.clients))
        result["load_jobs_per_s"] = round(jobs_per_s, 1)
        for name, values in timings.items():
            result[f"{name}_metrics_median_ms"] = round(statistics.median(values) * 1000, 2)
            result[f"{name}_metrics_p99_ms"] = round(percentile(values, 0.99) * 1000, 2)
        result["load_after"] = os.getloadavg()[0]
    finally:
        if not args.keep:
            testbed("down", "--dir", str(directory))
            shutil.rmtree(directory.parent, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
