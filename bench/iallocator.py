"""Benchmark: the master's side of allocation — building the iallocator request, and
a whole ``gnt-debug iallocator --dir out -I hail`` beside Ganeti's.

Two JSON lines:

* ``request_build``: the time the master takes to build the input of a plugin (the
  configuration in Ganeti's shape plus every node's live answer, then its JSON text)
  for synthetic clusters of 100 and 1000 nodes with 10 instances each (median of
  ``--runs``, the first run excluded: an unchanged instance's entry is reused from the
  previous request); the target keeps it a small part of the 0.5 s an allocation on
  1000 nodes may take (issue 15);
* ``debug_iallocator_hail``: whole-process wall time of ``gnt-debug iallocator --dir
  out -I hail -m allocate`` (a job that builds the request from the nodes' answers,
  runs Ganeti's hail on it and prints its answer) on a 3-node corral testbed, and the
  same command on Ganeti's reference cluster when one answers (one node there; runs
  alternate, median of ``--runs``). ``ratio`` is Ganeti's median over corral's.

Run: ``.venv/bin/python bench/iallocator.py [--runs N] [--no-ganeti]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from _common import testbed
from corral.config import ConfigStore
from corral.iallocator import ClusterView, NodeLive, allocate_request, build_input
from corral.objects import Cluster, Disk, Instance, Node, NodeGroup

HAIL = Path("/usr/lib/ganeti/iallocators/hail")
TARGETS = {"request_build_1000_s": 0.1, "ratio": 1}
_STARTED = time.perf_counter()


def log(message: str) -> None:
    print(f"[bench/iallocator {time.perf_counter() - _STARTED:6.1f}s] {message}",
          file=sys.stderr, flush=True)


def synthetic_store(path: Path, nodes: int, per_node: int) -> ConfigStore:
    """A store with ``nodes`` nodes in two groups and ``per_node`` file instances each."""
    groups = [NodeGroup(name="default"), NodeGroup(name="rack2")]
    members = [Node(name=f"node{i}.example.com", primary_ip=f"10.{i // 250}.{i % 250}.1",
                    group=groups[i % 2].uuid) for i in range(nodes)]
    cluster = Cluster(name="bench.example.com", master_node=members[0].uuid,
                      file_storage_dir="/srv/corral/file-storage")
    store = ConfigStore.create(path, cluster, groups[0], members[0])
    with store.transaction() as txn:
        txn.add(groups[1])
        for node in members[1:]:
            txn.add(node)
        for node in members:
            for j in range(per_node):
                disk = Disk(dev_type="file", size=10240, nodes=[node.uuid], iv_name="disk/0")
                txn.add(disk)
                txn.add(Instance(name=f"i{j}.{node.name}", primary_node=node.uuid,
                                 disk_template="file", disks=[disk.uuid],
                                 admin_state="up", beparams={"maxmem": 1024, "vcpus": 2}))
    return store


def live_answers(store: ConfigStore) -> dict[str, NodeLive]:
    by_node: dict[str, list[str]] = {}
    for inst in store.all("instance"):
        by_node.setdefault(inst.primary_node, []).append(inst.name)
    return {node.name: NodeLive(
        info={"memory_total": 65536, "memory_free": 40000, "memory_hv": 10240,
              "cpu_total": 16, "cpu_dom0": 16,
              "storage": {"/srv/corral/file-storage": {"size": 2000000, "free": 1500000}}},
        instances={name: {"memory": 1024} for name in by_node.get(node.uuid, [])})
        for node in store.all("node")}


def request_build(runs: int) -> dict[str, Any]:
    request = allocate_request(
        name="new1", disk_template="file", disks=[{"size": 10240, "mode": "rw"}],
        nics=[{"mac": "auto", "nicparams": {}}], vcpus=2, memory=1024, spindle_use=1,
        os="debian", tags=[], hypervisor="kvm")
    out: dict[str, Any] = {"figure": "request_build", "runs": runs}
    with tempfile.TemporaryDirectory(prefix="bench-ialloc.") as tmp:
        for nodes in (100, 1000):
            log(f"building a {nodes}-node store")
            store = synthetic_store(Path(tmp) / f"c{nodes}.db", nodes, 10)
            live = live_answers(store)
            times: list[float] = []
            size = 0
            build_input(ClusterView.of(store), live, request)  # the first, full build
            for _ in range(runs):
                start = time.perf_counter()
                # what the master does: the view on its loop, the rest in a thread
                size = len(msgspec.json.encode(build_input(ClusterView.of(store), live,
                                                           request)))
                times.append(time.perf_counter() - start)
            out[f"request_build_{nodes}_s"] = round(statistics.median(times), 4)
            out[f"request_bytes_{nodes}"] = size
            store.close()
    out["targets"] = {"request_build_1000_s": TARGETS["request_build_1000_s"]}
    return out


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    took = time.perf_counter() - start
    if proc.returncode != 0 or '"success"' not in proc.stdout:
        raise SystemExit(f"{' '.join(argv)} failed: {proc.stdout}{proc.stderr}")
    return took


def ganeti_answers(env: dict[str, str]) -> bool:
    try:
        return subprocess.run(["/usr/sbin/gnt-cluster", "getmaster"], env=env,
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def debug_iallocator(runs: int, with_ganeti: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"figure": "debug_iallocator_hail", "runs": runs}
    if not HAIL.exists():
        out["skipped"] = "Ganeti's hail is not installed (make sysdeps)"
        return out
    args = ["iallocator", "--dir", "out", "-I", "hail", "-m", "allocate", "--disks", "1G",
            "-t", "file", "--memory", "256"]
    base_env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="bench-ialloc-tb.") as tmp:
        directory = Path(tmp) / "tb"
        log("starting a 3-node testbed")
        testbed("up", "--nodes", "3", "--dir", str(directory))
        try:
            state = json.loads((directory / "testbed.json").read_text())
            env = {**base_env, **state["env"]}
            root = Path(state["env"]["CORRAL_ROOT"])
            plugins = root / "usr/lib/ganeti/iallocators"
            plugins.mkdir(parents=True, exist_ok=True)
            (plugins / "hail").symlink_to(HAIL)
            ours = [str(Path(sys.executable).parent / "gnt-debug"), *args, "-o",
                    "corral-ext4+default", "bench1"]
            theirs = ["/usr/sbin/gnt-debug", *args, "-o", "noop+default", "bench1"]
            ganeti = with_ganeti and ganeti_answers(base_env)
            timed(ours, env)
            if ganeti:
                timed(theirs, base_env)
            mine: list[float] = []
            other: list[float] = []
            for _ in range(runs):
                mine.append(timed(ours, env))
                if ganeti:
                    other.append(timed(theirs, base_env))
        finally:
            testbed("down", "--dir", str(directory))
    out["corral_s"] = round(statistics.median(mine), 3)
    out["corral_nodes"] = 3
    if other:
        out["ganeti_s"] = round(statistics.median(other), 3)
        out["ganeti_nodes"] = 1
        out["ratio"] = round(out["ganeti_s"] / out["corral_s"], 2)
    else:
        out["ganeti_s"] = None
        out["ganeti_note"] = "no Ganeti cluster answered" if with_ganeti else "--no-ganeti"
    out["targets"] = {"ratio": TARGETS["ratio"]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-ganeti", action="store_true")
    args = parser.parse_args()
    print(json.dumps(request_build(args.runs)), flush=True)
    print(json.dumps(debug_iallocator(args.runs, not args.no_ganeti)), flush=True)


if __name__ == "__main__":
    main()
