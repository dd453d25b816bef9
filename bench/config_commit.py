"""Benchmark: the cost of committing one new instance, in a small and a large cluster.

A commit must cost O(objects changed), never O(cluster size). This adds one instance
(one NIC with a unique MAC and IP, one disk) per commit to a store that already
holds 100 instances and to one that holds 10,000, and prints one JSON line with
the median commit times and their ratio (which should stay close to 1).

It then runs what masterd does when several jobs commit at once: WRITERS coroutines
on one event loop, each committing one instance after another to the small store,
and reports the commits per second and the longest stall of the event loop (a
ticker coroutine's largest lateness). With a corral whose store has the writer thread
(``async with store.transaction()``) the commits are grouped and the loop keeps
running; with an older one each commit fsyncs on the loop.

    .venv/bin/python bench/config_commit.py [--commits N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from corral.config import ConfigStore, Transaction
from corral.objects import NIC, Cluster, Disk, Instance, Node, NodeGroup

BATCH = 2000
#: Commits per store before measuring: enough for a fresh store's WAL to wrap once, since
#: appending to a growing WAL file costs more per fsync than rewriting one that has wrapped.
WARMUP = 400
#: Coroutines committing at once in the concurrent figure.
WRITERS = 16


def _instance(index: int, node: str) -> tuple[Instance, Disk]:
    disk = Disk(name=f"disk{index}", nodes=[node], size=1024, dev_type="file")
    nic = NIC(
        mac=f"aa:00:{index >> 16 & 0xFF:02x}:{index >> 8 & 0xFF:02x}:{index & 0xFF:02x}:01",
        ip=f"10.{index >> 16 & 0xFF}.{index >> 8 & 0xFF}.{index & 0xFF}",
    )
    instance = Instance(
        name=f"inst{index}.example.com", primary_node=node, disks=[disk.uuid], nics=[nic],
        disk_template="file", os="debootstrap+default",
        beparams={"maxmem": 512, "vcpus": 1},
    )
    return instance, disk


def _build(path: Path, size: int) -> tuple[ConfigStore, str]:
    group = NodeGroup(name="default")
    nodes = [Node(name=f"node{i}", primary_ip=f"192.168.0.{i + 1}", group=group.uuid)
             for i in range(10)]
    cluster = Cluster(name="bench.example.com", master_node=nodes[0].uuid)
    store = ConfigStore.create(path, cluster, group, nodes[0])
    with store.transaction() as txn:
        for node in nodes[1:]:
            txn.add(node)
    for start in range(0, size, BATCH):
        with store.transaction() as txn:
            for index in range(start, min(size, start + BATCH)):
                instance, disk = _instance(index, nodes[index % len(nodes)].uuid)
                txn.add(disk)
                txn.add(instance)
    return store, nodes[0].uuid


def _commit_one(store: ConfigStore, node: str, index: int) -> float:
    instance, disk = _instance(index, node)
    start = time.perf_counter()
    with store.transaction() as txn:
        txn.add(disk)
        txn.add(instance)
    return time.perf_counter() - start


def _measure(directory: Path, sizes: tuple[int, ...], commits: int) -> list[float]:
    """Median commit time (ms) per size; commits alternate between the stores so
    that warm-up and machine noise hit every size alike."""
    built = [_build(directory / f"config-{size}.db", size) for size in sizes]
    try:
        times: list[list[float]] = [[] for _ in sizes]
        for step in range(WARMUP + commits):
            for slot, (size, (store, node)) in enumerate(zip(sizes, built, strict=True)):
                elapsed = _commit_one(store, node, size + step)
                if step >= WARMUP:
                    times[slot].append(elapsed)
        for size, (store, _node) in zip(sizes, built, strict=True):
            assert store.count("instance") == size + WARMUP + commits
        return [statistics.median(t) * 1000 for t in times]
    finally:
        for store, _node in built:
            store.close()


async def _commit_async(store: ConfigStore, node: str, index: int) -> None:
    instance, disk = _instance(index, node)
    if hasattr(Transaction, "__aenter__"):
        async with store.transaction() as txn:
            txn.add(disk)
            txn.add(instance)
    else:  # an older corral: the commit blocks the loop
        with store.transaction() as txn:
            txn.add(disk)
            txn.add(instance)


async def _concurrent(store: ConfigStore, node: str, first: int, each: int
                      ) -> tuple[float, float]:
    """Commits per second of WRITERS coroutines committing ``each`` instances apiece,
    and the longest event-loop stall (ms) meanwhile."""
    stall = 0.0

    async def ticker() -> None:
        nonlocal stall
        while True:
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            stall = max(stall, time.perf_counter() - before - 0.001)

    async def writer(slot: int) -> None:
        for step in range(each):
            await _commit_async(store, node, first + slot * each + step)

    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    start = time.perf_counter()
    await asyncio.gather(*(writer(slot) for slot in range(WRITERS)))
    elapsed = time.perf_counter() - start
    await asyncio.sleep(0.01)  # the ticker wakes once more and sees the last stall
    ticking.cancel()
    return WRITERS * each / elapsed, stall * 1000


def _measure_concurrent(directory: Path, each: int) -> tuple[float, float]:
    store, node = _build(directory / "config-concurrent.db", 100)
    try:
        for step in range(WARMUP):
            _commit_one(store, node, 100 + step)
        return asyncio.run(_concurrent(store, node, 100 + WARMUP, each))
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=300, help="commits per store size")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="corral-bench-") as tmp:
        small, large = _measure(Path(tmp), (100, 10_000), args.commits)
        rate, stall = _measure_concurrent(Path(tmp), max(1, args.commits // WRITERS))
    print(json.dumps({
        "bench": "config_commit",
        "median_ms_100": round(small, 4),
        "median_ms_10000": round(large, 4),
        "ratio": round(large / small, 3),
        "commits": args.commits,
        "concurrent_writers": WRITERS,
        "concurrent_commits_per_s": round(rate, 1),
        "concurrent_max_loop_stall_ms": round(stall, 2),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
