"""Benchmark: storage on a 3-node testbed (fake hypervisor, real noded).

Starts a 3-node testbed in a temporary directory and, with root and lvm2, gives every
node a volume group of its own on a loop device (same name on all, the cluster's
``--vg-name``; :mod:`corral.testbed.loopvg`). Then:

* **plain**: ``--volumes`` (default 20) ``plain`` instances of one 4 MiB disk created
  and removed one after the other, each through a job (submit -> success, as
  ``gnt-instance add --no-install --no-start`` and ``remove`` see it): the median per
  operation. This host has no device-mapper, so LVM works on metadata only and so do
  these volumes (HOST-FACTS.md). Beside it, the same number of bare ``lvcreate`` and
  ``lvremove`` runs on the same volume group, in the same run: the floor;
* **storage units**: ``OP_NODE_QUERY_STORAGE`` over the 3 nodes for ``lvm-vg``,
  ``lvm-pv`` and ``file`` (``--lists`` runs each, default 20): the median per list;
* **verify-disks**: ``gnt-cluster verify-disks`` as a command (whole process, as an
  administrator runs it) with ``--instances`` (default 100) running ``file`` instances
  spread over the nodes: the median of ``--verify-runs`` runs (default 5); target
  at most 0.5 s. When the reference Ganeti cluster runs on this machine, its own
  ``gnt-cluster verify-disks`` is timed the same way in the same run (on whatever
  instances it holds: a floor for the command, not the same workload);
* **rbd**: :func:`rbd_figures`, the place of the Ceph figures (another part of issue 16).

Prints one JSON line with the figures and the load average at the start and the end.
Run: ``.venv/bin/python bench/storage.py [--volumes N] [--instances N]``.
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
from pathlib import Path
from typing import Any

from _common import follow_job, testbed
from corral.luxi import AsyncClient
from corral.paths import Paths
from corral.testbed.loopvg import LoopVolumeGroup, lvm_available

NODES = ["node1.testbed", "node2.testbed", "node3.testbed"]
#: What verify-disks should stay under with 100 instances (issue 16).
VERIFY_TARGET_S = 0.5
BIN = Path(sys.executable).parent


def _median_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 2)


async def _job(client: AsyncClient, op: dict[str, Any]) -> tuple[float, Any]:
    """Submit one opcode, follow it; its latency and result (raise if it failed)."""
    started = time.perf_counter()
    job_id = await client.call("SubmitJob", [op])
    status = await follow_job(client, job_id)
    elapsed = time.perf_counter() - started
    [[result]] = await client.call("QueryJobs", [job_id], ["opresult"])
    if status != "success":
        raise SystemExit(f"job {job_id} ({op['OP_ID']}) ended {status}: {result}")
    return elapsed, result[0]


def _plain(name: str, node: str) -> dict[str, Any]:
    return {"OP_ID": "OP_INSTANCE_CREATE", "instance_name": name, "mode": "create",
            "disk_template": "plain", "pnode": node, "os_type": "corral-ext4+default",
            "disks": [{"size": 4}], "nics": [], "start": False, "no_install": True}


async def plain_figures(socket: Path, volumes: int, group: LoopVolumeGroup
                        ) -> dict[str, Any]:
    """Create and remove ``volumes`` plain instances through jobs, then the same with
    bare lvcreate/lvremove: medians in ms."""
    client = AsyncClient(socket)
    try:
        names = [f"plain{i}.testbed" for i in range(volumes)]
        create = [(await _job(client, _plain(n, NODES[0])))[0] for n in names]
        remove = [(await _job(client, {"OP_ID": "OP_INSTANCE_REMOVE",
                                       "instance_name": n}))[0] for n in names]
    finally:
        await client.close()
    bare_create, bare_remove = [], []
    for i in range(volumes):
        started = time.perf_counter()
        group.lvm("lvcreate", "-q", "-Wn", "-L", "4m", "-n", f"bare{i}", group.name)
        bare_create.append(time.perf_counter() - started)
    for i in range(volumes):
        started = time.perf_counter()
        group.lvm("lvremove", "-q", "-f", f"{group.name}/bare{i}")
        bare_remove.append(time.perf_counter() - started)
    return {"volumes": volumes, "create_median_ms": _median_ms(create),
            "remove_median_ms": _median_ms(remove),
            "bare_lvcreate_median_ms": _median_ms(bare_create),
            "bare_lvremove_median_ms": _median_ms(bare_remove),
            "activation": "none: no device-mapper here, LV metadata only"}


async def list_figures(socket: Path, runs: int, types: list[str]) -> dict[str, Any]:
    """``OP_NODE_QUERY_STORAGE`` over every node, ``runs`` times per type: medians."""
    client = AsyncClient(socket)
    figures: dict[str, Any] = {}
    try:
        for storage_type in types:
            times = []
            rows: Any = None
            for _run in range(runs):
                elapsed, rows = await _job(client, {
                    "OP_ID": "OP_NODE_QUERY_STORAGE", "storage_type": storage_type,
                    "output_fields": ["node", "name", "size", "free", "allocatable"]})
                times.append(elapsed)
            figures[f"{storage_type}_median_ms"] = _median_ms(times)
            figures[f"{storage_type}_units"] = len(rows)
    finally:
        await client.close()
    return figures


async def _make_instances(socket: Path, count: int) -> None:
    """``count`` running file instances (8 MiB sparse disks) over the nodes."""
    client = AsyncClient(socket)
    try:
        names = [f"vd{i}.testbed" for i in range(count)]
        ids = [await client.call("SubmitJob", [{
            "OP_ID": "OP_INSTANCE_CREATE", "instance_name": n, "mode": "create",
            "disk_template": "file", "pnode": NODES[i % 3], "os_type": "corral-ext4+default",
            "disks": [{"size": 8}], "nics": [], "start": False, "no_install": True}])
            for i, n in enumerate(names)]
        ids += [await client.call("SubmitJob", [{
            "OP_ID": "OP_INSTANCE_STARTUP", "instance_name": n,
            "depends": [[job, ["success"]]]}]) for n, job in zip(names, ids, strict=True)]
        for job_id in ids:
            if (status := await follow_job(client, job_id)) != "success":
                raise SystemExit(f"setting up instances: job {job_id} ended {status}")
    finally:
        await client.close()


def _time_command(argv: list[str], env: dict[str, str], runs: int) -> dict[str, Any]:
    times, code = [], 0
    for _run in range(runs):
        started = time.perf_counter()
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
        times.append(time.perf_counter() - started)
        code = proc.returncode
    return {"median_s": round(statistics.median(times), 3),
            "min_s": round(min(times), 3), "exit_code": code}


def verify_figures(env: dict[str, str], socket: Path, instances: int, runs: int
                   ) -> dict[str, Any]:
    """``gnt-cluster verify-disks`` (whole command) with ``instances`` running."""
    asyncio.run(_make_instances(socket, instances))
    corral = _time_command([str(BIN / "gnt-cluster"), "verify-disks"], env, runs)
    figures: dict[str, Any] = {"instances": instances, "corral": corral,
                               "target_s": VERIFY_TARGET_S,
                               "within_target": corral["median_s"] <= VERIFY_TARGET_S}
    ganeti = "/usr/sbin/gnt-cluster"
    if os.path.exists("/var/lib/ganeti/config.data") and shutil.which(ganeti):
        probe = subprocess.run([ganeti, "getmaster"], capture_output=True, timeout=60)
        if probe.returncode == 0:
            figures["ganeti_reference"] = {
                **_time_command([ganeti, "verify-disks"], dict(os.environ), runs),
                "note": "Ganeti 3.0 on the reference cluster with its own instances"}
    return figures


def rbd_figures() -> dict[str, Any]:
    """The place of the ``rbd`` figures (create and remove 20 rbd disks on a
    single-node Ceph), which the Ceph part of issue 16 measures
    (bench/storage_rbd.py) and the lead folds in here."""
    return {"pending": "measured by bench/storage_rbd.py (issue 16, part 2)"}


def _load() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def main() -> None:
    """Run the benchmark and print one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--volumes", type=int, default=20, help="plain volumes")
    parser.add_argument("--lists", type=int, default=20, help="runs per storage list")
    parser.add_argument("--instances", type=int, default=100,
                        help="running instances for verify-disks")
    parser.add_argument("--verify-runs", type=int, default=5, help="verify-disks runs")
    args = parser.parse_args()
    out: dict[str, Any] = {"bench": "storage", "nodes": 3, "load_start": _load()}
    reason = lvm_available()
    with tempfile.TemporaryDirectory(prefix="corral-bench-storage-") as tmp:
        directory = Path(tmp) / "tb"
        groups: list[LoopVolumeGroup] = []
        testbed("up", "--nodes", "3", "--dir", str(directory))
        try:
            state = json.loads((directory / "testbed.json").read_text())
            socket = Paths(Path(state["env"]["CORRAL_ROOT"])).master_socket
            env = {**os.environ, **state["env"]}
            types = ["file"]
            if reason is None:
                name = f"corral-bench-{os.getpid()}"
                for index, node in enumerate(state["nodes"]):
                    group = LoopVolumeGroup.create(Path(tmp) / f"vg{index}", [256], name=name)
                    groups.append(group)
                    group.install(Paths(Path(node["root"])))
                subprocess.run([str(BIN / "gnt-cluster"), "modify", "--vg-name", name,
                                "--enabled-disk-templates", "file,plain,diskless",
                                "--ipolicy-disk-templates", "file,plain,diskless"],
                               env=env, check=True, capture_output=True, timeout=120)
                out["plain"] = asyncio.run(plain_figures(socket, args.volumes, groups[0]))
                types = ["lvm-vg", "lvm-pv", "file"]
            else:
                out["plain"] = {"skipped": reason}
            out["storage_list"] = asyncio.run(list_figures(socket, args.lists, types))
            out["verify_disks"] = verify_figures(env, socket, args.instances,
                                                 args.verify_runs)
        finally:
            testbed("down", "--dir", str(directory))
            for group in groups:
                group.destroy()
    out["rbd"] = rbd_figures()
    out["load_end"] = _load()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
