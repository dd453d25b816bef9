"""Benchmark: the master daemon keeping the cluster in ``/placement/``
(:mod:`corral.masterd.placement_sync`) on synthetic clusters, no daemons.

One JSON line per size (nodes, with ``--per-node`` instances each):

* ``build_s``: the engine built at the master's start (the cluster with its figures,
  then the saved rows; the master does it before it serves);
* ``sync_idle_s``: a sync when nothing changed (a commit of a watched kind that changed
  nothing placement shows), median of ``--runs``;
* ``sync_change_s``: a sync after the figures of every node changed (a gather with news);
* ``loop_stall_ms``: the longest the event loop went without running another task
  during those syncs (the sync itself runs in a worker thread); target 50 ms;
* ``commits``: configuration commits the syncs made (target 0).

Run: ``.venv/bin/python bench/placement_sync.py [--sizes 1000,5000] [--per-node 4]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from corral.masterd.placement import PlacementService
from corral.masterd.placement_sync import ClusterSync
from corral.placement.cluster import NodeResources
from iallocator import synthetic_store

TARGET_STALL_MS = 50.0


async def _measure(nodes: int, per_node: int, runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"corral-bench-plsync-{os.getpid()}-") as tmp:
        store = synthetic_store(Path(tmp) / "config.db", nodes, per_node)
        try:
            follower = ClusterSync(store)
            follower.live = {n.name: NodeResources(16, 65536, 4096, 2000 * 1024)
                             for n in store.all("node")}
            started = time.perf_counter()
            service = PlacementService(store, follower)
            build_s = time.perf_counter() - started
            follower.attach(service)
            serial = store.serial
            stall = 0.0
            running = True

            async def ticker() -> None:
                nonlocal stall
                last = time.perf_counter()
                while running:
                    await asyncio.sleep(0.002)
                    now = time.perf_counter()
                    stall = max(stall, now - last)
                    last = now

            tick = asyncio.create_task(ticker())
            idle = []
            for _ in range(runs):
                started = time.perf_counter()
                await follower.sync_now()
                idle.append(time.perf_counter() - started)
            follower.live = {name: NodeResources(16, 65536, 8192, 2000 * 1024)
                             for name in follower.live}
            started = time.perf_counter()
            changed = await follower.sync_now()
            change_s = time.perf_counter() - started
            running = False
            await tick
            assert len(changed.providers) == nodes
            return {"bench": "placement_sync", "nodes": nodes, "instances": nodes * per_node,
                    "build_s": round(build_s, 3),
                    "sync_idle_s": round(statistics.median(idle), 3),
                    "sync_change_s": round(change_s, 3),
                    "loop_stall_ms": round(stall * 1000, 1), "target_ms": TARGET_STALL_MS,
                    "ok": stall * 1000 <= TARGET_STALL_MS and store.serial == serial,
                    "commits": store.serial - serial,
                    "load": [round(v, 2) for v in os.getloadavg()]}
        finally:
            store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,5000")
    parser.add_argument("--per-node", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    for size in (int(s) for s in args.sizes.split(",")):
        print(json.dumps(asyncio.run(_measure(size, args.per_node, args.runs))), flush=True)


if __name__ == "__main__":
    main()
