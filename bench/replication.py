"""Benchmark: replication lag from a configuration commit to every candidate's replica.

Starts a 4-node testbed in a temporary directory (node 1 the master, nodes 2-4 master
candidates, each a real corral-noded on its own 127.0.1.N address), then commits
``--commits`` configuration changes one after another (an ``OP_TAGS_SET`` job each,
submitted over luxi and followed to its end). For each commit the lag is the time
from the job's end (``end_ts``, recorded by the master right after the commit) until
the replicas of all three candidates hold that serial, seen by reading their SQLite
files in a tight loop (same machine, same clock). Polling starts once the client
has seen the job end, so a lag shorter than that notice is reported as that notice's
delay: the figures are upper bounds. Prints one JSON line with the median, p99 and
maximum lag.

Run: ``.venv/bin/python bench/replication.py [--commits N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from _common import follow_job, percentile, testbed
from corral.luxi import AsyncClient
from corral.paths import Paths


class _SerialReader:
    """Reads a store's or replica's serial; one read-only connection per file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None

    def read(self) -> int:
        if self._conn is None:
            if not self.path.exists():
                return 0
            self._conn = sqlite3.connect(f"{self.path.absolute().as_uri()}?mode=ro", uri=True)
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'serial'").fetchone()
        return int(row[0]) if row else 0


async def _commit(client: AsyncClient, index: int) -> float:
    """One tag change as a job; the job's end time (seconds since the epoch)."""
    op = {"OP_ID": "OP_TAGS_SET", "kind": "cluster", "name": "", "tags": [f"bench{index}"]}
    job_id = await client.call("SubmitJob", [op])
    await follow_job(client, job_id)
    [[status, end_ts]] = await client.call("QueryJobs", [job_id], ["status", "end_ts"])
    if status != "success":
        raise SystemExit(f"job {job_id} ended {status}")
    return float(end_ts[0]) + float(end_ts[1]) / 1e6


async def _bench(master: Paths, candidates: list[Paths], commits: int) -> list[float]:
    config = _SerialReader(master.config_db)
    replicas = [_SerialReader(p.config_replica) for p in candidates]
    client = AsyncClient(master.master_socket)
    lags: list[float] = []
    try:
        for index in range(commits):
            ended = await _commit(client, index)
            serial = config.read()
            while any(r.read() < serial for r in replicas):
                pass  # nothing else runs on this loop: poll the files as fast as we can
            lags.append(max(0.0, time.time() - ended))
    finally:
        await client.close()
    return lags


def main() -> None:
    """Run the benchmark and print one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=200, help="configuration commits")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="corral-bench-") as tmp:
        directory = Path(tmp) / "tb"
        testbed("up", "--nodes", "4", "--dir", str(directory))
        try:
            state = json.loads((directory / "testbed.json").read_text())
            roots = [Paths(Path(node["root"])) for node in state["nodes"]]
            lags = asyncio.run(_bench(roots[0], roots[1:], args.commits))
        finally:
            testbed("down", "--dir", str(directory))
    print(json.dumps({
        "bench": "replication", "candidates": 3, "commits": args.commits,
        "lag_median_ms": round(statistics.median(lags) * 1000, 2),
        "lag_p99_ms": round(percentile(lags, 0.99) * 1000, 2),
        "lag_max_ms": round(max(lags) * 1000, 2),
    }))


if __name__ == "__main__":
    main()
