"""What the benchmark scripts share: running the testbed, following a job, taking
percentiles.

Not a benchmark itself (``make bench`` runs ``bench/[!_]*.py``); the scripts import it
from their own directory.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from corral.luxi import AsyncClient

__all__ = ["FINAL", "create_diskless", "follow_job", "percentile", "run_job", "testbed"]

#: Job statuses after which nothing changes any more.
FINAL = ("success", "error", "canceled")


def testbed(*args: str, timeout: float = 300) -> None:
    """Run ``python -m corral.testbed ARGS`` (``up``, ``down``...); raise if it fails."""
    subprocess.run([sys.executable, "-m", "corral.testbed", *args], check=True,
                   capture_output=True, timeout=timeout)


def percentile(values: list[float], fraction: float) -> float:
    """The value at ``fraction`` (0..1) of the sorted ``values`` (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def follow_job(client: AsyncClient, job_id: int, wait: float = 30) -> str:
    """Follow job ``job_id`` with ``WaitForJobChange`` (as the gnt-* tools do, ``wait``
    seconds per call) until it ends; its final status."""
    info: Any = None
    while True:
        answer = await client.call("WaitForJobChange", job_id, ["status"], info, None, wait)
        if answer == "nochange":
            continue
        info = answer[0]
        if info[0] in FINAL:
            return str(info[0])


async def run_job(client: AsyncClient, op: dict[str, Any]) -> float:
    """Submit one opcode as a job and follow it to the end; its latency in seconds
    (submit -> final status, as a ``gnt-*`` command sees it). Raise if it fails."""
    started = time.perf_counter()
    job_id = await client.call("SubmitJob", [op])
    status = await follow_job(client, job_id)
    elapsed = time.perf_counter() - started
    if status != "success":
        [[result]] = await client.call("QueryJobs", [job_id], ["opresult"])
        raise SystemExit(f"job {job_id} ({op['OP_ID']}) ended {status}: {result}")
    return elapsed


async def create_diskless(socket: Path, names: list[str], nodes: list[str],
                          memory_mib: int = 64) -> None:
    """Create diskless instances ``names`` (primaries round robin over ``nodes``), not
    started and without an OS install: every job submitted first, then each followed;
    raise if one fails."""
    client = AsyncClient(socket)
    try:
        ids = []
        for index, name in enumerate(names):
            ids.append(await client.call("SubmitJob", [{
                "OP_ID": "OP_INSTANCE_CREATE", "instance_name": name, "mode": "create",
                "disk_template": "diskless", "pnode": nodes[index % len(nodes)],
                "os_type": "corral-ext4+default", "disks": [], "nics": [{}],
                "beparams": {"maxmem": memory_mib, "minmem": memory_mib}, "start": False,
                "no_install": True}]))
        for job_id in ids:
            if (status := await follow_job(client, job_id)) != "success":
                [[result]] = await client.call("QueryJobs", [job_id], ["opresult"])
                raise SystemExit(f"instance creation job {job_id} ended {status}: {result}")
    finally:
        await client.close()
