"""Benchmark: rbd disks through corral on a 3-node testbed, beside the bare rbd command.

Starts a real single-node Ceph (:mod:`corral.testbed.ceph`) and a 3-node testbed (fake
hypervisor, real noded, every node using that Ceph) in a temporary directory, enables
the ``rbd`` template, then:

* **corral**: ``--disks`` instances (default 20) with one 64 MiB ``rbd`` disk each,
  created one after the other (``OP_INSTANCE_CREATE``, no OS installation, not
  started, primary nodes round robin), then removed one after the other
  (``OP_INSTANCE_REMOVE``): each operation's time is submit -> job success, as
  ``gnt-instance add``/``remove`` see it; the node daemon runs ``rbd create`` /
  ``rbd rm`` for it;
* **rbd**: the same number of 64 MiB images made and removed with Ceph's own ``rbd
  create`` / ``rbd rm`` against the same cluster, one after the other, in the same run.

Prints one JSON line: per operation the median and maximum seconds for both, the
difference of the medians (what corral adds: the job, the configuration commit, the
RPC), the Ceph's start-up time and the load average at the start.
Run: ``.venv/bin/python bench/storage_rbd.py [--disks N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import run_job, testbed
from corral.luxi import AsyncClient
from corral.paths import Paths
from corral.testbed import ceph as testbed_ceph

NODES = ["node1.testbed", "node2.testbed", "node3.testbed"]


async def _corral(socket: Path, count: int) -> dict[str, list[float]]:
    client = AsyncClient(socket)
    reason = [["gnt:client:bench", "storage_rbd", time.time_ns()]]
    try:
        templates = ["file", "sharedfile", "diskless", "rbd"]
        await run_job(client, {"OP_ID": "OP_CLUSTER_SET_PARAMS", "reason": reason,
                            "enabled_disk_templates": templates,
                            "ipolicy": {"disk-templates": templates}})
        names = [f"rbd{i}.bench" for i in range(count)]
        create = []
        for index, name in enumerate(names):
            create.append(await run_job(client, {
                "OP_ID": "OP_INSTANCE_CREATE", "instance_name": name, "mode": "create",
                "disk_template": "rbd", "pnode": NODES[index % len(NODES)],
                "hypervisor": "fake", "os_type": "corral-ext4+default", "disks": [{"size": 64}],
                "nics": [], "start": False, "no_install": True, "reason": reason}))
        remove = [await run_job(client, {"OP_ID": "OP_INSTANCE_REMOVE", "instance_name": name,
                                      "reason": reason}) for name in names]
    finally:
        await client.close()
    return {"create": create, "remove": remove}


def _bare(cluster: testbed_ceph.CephCluster, count: int) -> dict[str, list[float]]:
    def timed(*args: str) -> float:
        started = time.perf_counter()
        subprocess.run(cluster.command("rbd", *args), check=True, capture_output=True)
        return time.perf_counter() - started
    names = [f"bare{i}" for i in range(count)]
    create = [timed("create", "-p", cluster.pool, name, "--size", "64M") for name in names]
    remove = [timed("rm", "--no-progress", "-p", cluster.pool, name) for name in names]
    return {"create": create, "remove": remove}


def _figures(times: list[float]) -> dict[str, float]:
    return {"median_s": round(statistics.median(times), 4), "max_s": round(max(times), 4)}


def main() -> None:
    """Run the benchmark and print one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--disks", type=int, default=20, help="rbd disks of each kind")
    args = parser.parse_args()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="corral-bench-") as tmp:
        ceph_dir = Path(tmp) / "ceph"
        directory = Path(tmp) / "tb"
        started = time.perf_counter()
        try:
            cluster = testbed_ceph.start(ceph_dir)
            ceph_start = time.perf_counter() - started
            testbed("up", "--nodes", "3", "--dir", str(directory))
            try:
                state = json.loads((directory / "testbed.json").read_text())
                for node in state["nodes"]:
                    testbed_ceph.install_conf(cluster, Path(node["root"]))
                socket = Paths(Path(state["env"]["CORRAL_ROOT"])).master_socket
                corral = asyncio.run(_corral(socket, args.disks))
                bare = _bare(cluster, args.disks)
            finally:
                testbed("down", "--dir", str(directory))
        finally:
            testbed_ceph.stop(ceph_dir)
    out: dict[str, Any] = {"bench": "storage_rbd", "nodes": 3, "disks": args.disks,
                           "disk_mib": 64, "ceph_start_s": round(ceph_start, 1)}
    for operation in ("create", "remove"):
        ours, theirs = _figures(corral[operation]), _figures(bare[operation])
        out[f"corral_{operation}"] = ours
        out[f"rbd_cli_{operation}"] = theirs
        out[f"corral_{operation}_overhead_s"] = round(ours["median_s"] - theirs["median_s"], 4)
    out["load_average_1m"] = round(load[0], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
