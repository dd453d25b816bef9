"""Benchmark: instance life cycle on a 3-node testbed (fake hypervisor, real noded).

Starts a 3-node testbed in a temporary directory (corral-masterd plus a corral-noded
per node on 127.0.1.N, joined by token), then:

* **file**: ``--file`` instances (default 50) with the ``file`` template, one 1 GiB
  sparse disk and the bundled OS ``corral-ext4+default`` (which runs ``mkfs.ext4`` and
  ``debugfs`` on the disk), primary nodes round robin, created by 4 concurrent
  submitters (``--submitters``); then started, stopped and removed the same way.
  Each operation's time is submit -> job success, as ``gnt-instance add`` sees it;
* **diskless**: ``--diskless`` instances (default 20) created all at once (one job
  each, submitted together), without an OS install (a diskless instance has no
  disk for an OS to write to); the median per create and the wall time until the
  last one succeeded are reported.

Prints one JSON line: per phase the median seconds and instances/s.
Run: ``.venv/bin/python bench/instances.py [--file N] [--diskless N] [--submitters N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import run_job, testbed
from corral.luxi import AsyncClient
from corral.paths import Paths

NODES = ["node1.testbed", "node2.testbed", "node3.testbed"]



async def _phase(socket: Path, ops: list[dict[str, Any]], submitters: int
                 ) -> tuple[list[float], float]:
    """Run ``ops`` from ``submitters`` concurrent clients; latencies and wall time."""
    pending = list(reversed(ops))
    latencies: list[float] = []

    async def worker() -> None:
        client = AsyncClient(socket)
        try:
            while pending:
                latencies.append(await run_job(client, pending.pop()))
        finally:
            await client.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(submitters)))
    return latencies, time.perf_counter() - started


def _summary(latencies: list[float], wall: float) -> dict[str, float]:
    return {"median_s": round(statistics.median(latencies), 4),
            "max_s": round(max(latencies), 4),
            "wall_s": round(wall, 3),
            "instances_per_s": round(len(latencies) / wall, 2)}


def _create(name: str, node: str, template: str, install: bool) -> dict[str, Any]:
    op: dict[str, Any] = {
        "OP_ID": "OP_INSTANCE_CREATE", "instance_name": name, "mode": "create",
        "disk_template": template, "pnode": node, "os_type": "corral-ext4+default",
        "disks": [{"size": 1024}] if template != "diskless" else [],
        "nics": [{}], "beparams": {"maxmem": 64, "minmem": 64},
        "start": False, "no_install": not install,
    }
    return op


async def _bench(socket: Path, files: int, diskless: int, submitters: int) -> dict[str, Any]:
    result: dict[str, Any] = {}
    names = [f"inst{i}.testbed" for i in range(files)]
    phases: list[tuple[str, Callable[[str, int], dict[str, Any]]]] = [
        ("file_create", lambda n, i: _create(n, NODES[i % 3], "file", True)),
        ("start", lambda n, _i: {"OP_ID": "OP_INSTANCE_STARTUP", "instance_name": n}),
        ("stop", lambda n, _i: {"OP_ID": "OP_INSTANCE_SHUTDOWN", "instance_name": n}),
        ("remove", lambda n, _i: {"OP_ID": "OP_INSTANCE_REMOVE", "instance_name": n}),
    ]
    for phase, make in phases:
        latencies, wall = await _phase(
            socket, [make(n, i) for i, n in enumerate(names)], submitters)
        result[phase] = _summary(latencies, wall)
    light = [f"light{i}.testbed" for i in range(diskless)]
    latencies, wall = await _phase(
        socket, [_create(n, NODES[i % 3], "diskless", False) for i, n in enumerate(light)],
        len(light))
    result["diskless_create_concurrent"] = _summary(latencies, wall)
    return result


def main() -> None:
    """Run the benchmark and print one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=int, default=50, help="file-disk instances")
    parser.add_argument("--diskless", type=int, default=20, help="diskless instances")
    parser.add_argument("--submitters", type=int, default=4, help="concurrent submitters")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="corral-bench-") as tmp:
        directory = Path(tmp) / "tb"
        testbed("up", "--nodes", "3", "--dir", str(directory))
        try:
            state = json.loads((directory / "testbed.json").read_text())
            socket = Paths(Path(state["env"]["CORRAL_ROOT"])).master_socket
            figures = asyncio.run(_bench(socket, args.file, args.diskless, args.submitters))
        finally:
            testbed("down", "--dir", str(directory))
    print(json.dumps({"bench": "instances", "nodes": 3, "file_instances": args.file,
                      "diskless_instances": args.diskless, "submitters": args.submitters,
                      **figures}))


if __name__ == "__main__":
    main()
