"""Benchmark: job throughput and latency of the master daemon, persistence on.

Starts a one-node testbed in a temporary directory (a real corral-masterd with its
SQLite job queue), then:

* **throughput**: 16 concurrent luxi clients submit 2000 ``OP_TEST_DELAY(duration=0)``
  jobs between them, each as fast as its submissions are answered; jobs/s is counted
  from the first submission to the last job's end (``end_ts``, recorded by the
  master), and each job's submit->success latency is its ``end_ts`` minus the
  client's clock just before submitting (same machine, same clock);
* **single job**: on the idle daemon, one job at a time is submitted and followed with
  ``WaitForJobChange`` until it succeeds, as ``gnt-debug delay 0`` does; the median
  over the rounds is reported.

Prints one JSON line. Run: ``.venv/bin/python bench/jobs.py [--jobs N] [--clients N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import FINAL, follow_job, percentile, testbed
from corral.luxi import AsyncClient
from corral.paths import Paths

OP = {"OP_ID": "OP_TEST_DELAY", "duration": 0}




async def _submitter(socket: Path, count: int, submitted: dict[int, float]) -> None:
    client = AsyncClient(socket)
    try:
        for _ in range(count):
            started = time.time()
            job_id = await client.call("SubmitJob", [OP])
            submitted[job_id] = started
    finally:
        await client.close()


async def _wait_all(socket: Path, ids: list[int]) -> list[list[Any]]:
    client = AsyncClient(socket)
    try:
        while True:
            rows = await client.call("QueryJobs", ids, ["status", "end_ts"])
            if all(row is not None and row[0] in FINAL for row in rows):
                return list(rows)
            await asyncio.sleep(0.05)
    finally:
        await client.close()


async def throughput(socket: Path, jobs: int, clients: int) -> dict[str, Any]:
    """Submit ``jobs`` jobs from ``clients`` clients; rate and latency percentiles."""
    submitted: dict[int, float] = {}
    share = [jobs // clients + (1 if i < jobs % clients else 0) for i in range(clients)]
    first = time.time()
    await asyncio.gather(*(_submitter(socket, n, submitted) for n in share))
    ids = sorted(submitted)
    rows = await _wait_all(socket, ids)
    failed = [job_id for job_id, row in zip(ids, rows, strict=True) if row[0] != "success"]
    if failed:
        raise SystemExit(f"{len(failed)} jobs did not succeed, e.g. {failed[:5]}")
    ends = {job_id: row[1][0] + row[1][1] / 1e6 for job_id, row in zip(ids, rows, strict=True)}
    latencies = [ends[j] - submitted[j] for j in ids]
    elapsed = max(ends.values()) - first
    return {
        "jobs_per_s": round(jobs / elapsed, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 2),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
    }


async def single(socket: Path, rounds: int) -> float:
    """Median submit->success time (ms) of one job at a time, followed by WaitForJobChange."""
    client = AsyncClient(socket)
    times = []
    try:
        for _ in range(rounds):
            started = time.perf_counter()
            job_id = await client.call("SubmitJob", [OP])
            status = await follow_job(client, job_id, wait=10)
            times.append(time.perf_counter() - started)
            if status != "success":
                raise SystemExit(f"job {job_id} ended {status}")
    finally:
        await client.close()
    return round(statistics.median(times) * 1000, 2)


def main() -> None:
    """Run the benchmark on a fresh testbed and print one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=50, help="single-job rounds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="corral-bench-jobs-") as tmp:
        directory = Path(tmp) / "tb"
        testbed("up", "--nodes", "1", "--dir", str(directory))
        try:
            state = json.loads((directory / "testbed.json").read_text())
            socket = Paths(Path(state["env"]["CORRAL_ROOT"])).master_socket
            latency = asyncio.run(single(socket, args.rounds))
            result = asyncio.run(throughput(socket, args.jobs, args.clients))
        finally:
            testbed("down", "--dir", str(directory))
    print(json.dumps({
        "benchmark": "jobs", "jobs": args.jobs, "clients": args.clients, **result,
        "single_job_ms": latency, "target_jobs_per_s": 1000, "target_single_job_ms": 10,
    }))


if __name__ == "__main__":
    main()
