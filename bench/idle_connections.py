"""Benchmark: do 500 idle luxi and 500 idle RAPI connections slow the master down?

Starts a one-node testbed in a temporary directory and measures three workloads:

* **jobs/s**: ``--jobs`` ``OP_TEST_DELAY(duration=0)`` jobs submitted over one luxi
  connection as fast as the submissions are answered (``gnt-debug delay --submit 0``
  in a loop), counted until the last one has ended;
* **luxi query**: p50 of ``--requests`` ``QueryClusterInfo`` calls on one connection;
* **RAPI GET**: p50 of ``--requests`` ``GET /2/info`` on one kept-alive HTTPS
  connection.

Each round measures them without, then with ``--idle`` idle luxi connections (open,
nothing sent) and as many idle RAPI connections (TLS handshake done, nothing sent)
held open by another process (``_idle_holder.py``: idle clients are other programs,
and a thousand connections in the measuring client's own event loop would be counted
against the daemons); ``--rounds`` rounds alternate, and which of the two comes first
alternates too, so that both meet the same machine conditions; each figure is the
median over rounds. The idle connections are checked to be still open after each
round. The issue's target: the figures with the idle connections within 10 % of those
without (``ratio``: with over without, for times; without over with, for jobs/s, so
that above 1.10 is worse in every case). On a shared machine one round's figures
move by more than that on their own: use more rounds there.

Prints one JSON line, with the load average before and after (the machine is shared).

    .venv/bin/python bench/idle_connections.py [--idle N] [--jobs N] [--requests N]
                                               [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from _common import FINAL, testbed
from corral.luxi import AsyncClient
from corral.paths import Paths

OP = {"OP_ID": "OP_TEST_DELAY", "duration": 0}
#: The issue's bound: idle connections change no figure by more than this.
TARGET_RATIO = 1.10


async def jobs_per_second(socket: Path, jobs: int) -> float:
    """Submit ``jobs`` zero-delay jobs one after the other and wait for all of them."""
    client = AsyncClient(socket)
    try:
        started = time.perf_counter()
        ids = [await client.call("SubmitJob", [OP]) for _ in range(jobs)]
        while True:
            rows = await client.call("QueryJobs", ids, ["status"])
            if all(row is not None and row[0] in FINAL for row in rows):
                break
            await asyncio.sleep(0.01)
        elapsed = time.perf_counter() - started
        await client.call("AutoArchiveJobs", 0, 30)  # the next round starts from empty
        return jobs / elapsed
    finally:
        await client.close()


async def luxi_latency(socket: Path, requests: int) -> float:
    """p50 of ``QueryClusterInfo`` in milliseconds."""
    client = AsyncClient(socket)
    try:
        await client.call("QueryClusterInfo")
        times = []
        for _ in range(requests):
            started = time.perf_counter()
            await client.call("QueryClusterInfo")
            times.append(time.perf_counter() - started)
        return statistics.median(times) * 1000
    finally:
        await client.close()


async def rapi_latency(rapi: dict[str, Any], requests: int) -> float:
    """p50 of ``GET /2/info`` on one kept-alive connection, in milliseconds."""
    context = ssl.create_default_context(cafile=rapi["ca"])
    context.check_hostname = False
    token = base64.b64encode(f"{rapi['user']}:{rapi['password']}".encode()).decode()
    connector = aiohttp.TCPConnector(ssl=context, limit=1)
    async with aiohttp.ClientSession(connector=connector,
                                     headers={"Authorization": f"Basic {token}"}) as session:
        async def get() -> None:
            async with session.get(rapi["url"] + "/2/info") as response:
                await response.read()
                if response.status != 200:
                    raise SystemExit(f"GET /2/info: HTTP {response.status}")

        await get()
        times = []
        for _ in range(requests):
            started = time.perf_counter()
            await get()
            times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


async def measure(socket: Path, rapi: dict[str, Any], jobs: int, requests: int
                  ) -> dict[str, float]:
    """The three figures, one workload after the other."""
    return {"jobs_per_s": await jobs_per_second(socket, jobs),
            "luxi_query_p50_ms": await luxi_latency(socket, requests),
            "rapi_get_p50_ms": await rapi_latency(rapi, requests)}


class IdleClients:
    """``count`` idle luxi and ``count`` idle RAPI connections, held by a process of
    their own (``_idle_holder.py``)."""

    def __init__(self, socket: Path, rapi: dict[str, Any], count: int) -> None:
        self.argv = [sys.executable, str(Path(__file__).with_name("_idle_holder.py")),
                     str(socket), rapi["url"], rapi["ca"], str(count)]
        self.proc: subprocess.Popen[str] | None = None

    def open(self) -> None:
        """Start the holder and wait until every connection is open."""
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.close()
            raise SystemExit(f"the idle connections could not be opened: {line!r}")

    def closed_by_servers(self) -> int:
        """How many of them a daemon has closed."""
        assert self.proc is not None and self.proc.stdin and self.proc.stdout
        self.proc.stdin.write("check\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def close(self) -> None:
        """Close them all (the holder exits)."""
        if self.proc is not None:
            self.proc.communicate(timeout=120)
            self.proc = None


async def run(socket: Path, rapi: dict[str, Any], args: argparse.Namespace
              ) -> dict[str, Any]:
    """Alternate rounds without and with the idle clients; medians of each."""
    without: list[dict[str, float]] = []
    with_idle: list[dict[str, float]] = []
    await measure(socket, rapi, max(10, args.jobs // 10), 20)  # warm-up
    for index in range(args.rounds):
        # Every other round measures with the idle connections first: what runs second
        # finds warmer caches and a queue that has just been archived.
        if index % 2 == 0:
            without.append(await measure(socket, rapi, args.jobs, args.requests))
        idle = IdleClients(socket, rapi, args.idle)
        idle.open()
        try:
            with_idle.append(await measure(socket, rapi, args.jobs, args.requests))
            if closed := idle.closed_by_servers():
                raise SystemExit(f"the daemons closed {closed} idle connections during "
                                 "the round")
        finally:
            idle.close()
        if index % 2 == 1:
            without.append(await measure(socket, rapi, args.jobs, args.requests))

    def medians(rounds: list[dict[str, float]]) -> dict[str, float]:
        return {key: round(statistics.median(r[key] for r in rounds), 3) for key in rounds[0]}

    before, after = medians(without), medians(with_idle)
    ratio = {"jobs_per_s": round(before["jobs_per_s"] / after["jobs_per_s"], 3),
             "luxi_query_p50_ms": round(after["luxi_query_p50_ms"]
                                        / before["luxi_query_p50_ms"], 3),
             "rapi_get_p50_ms": round(after["rapi_get_p50_ms"] / before["rapi_get_p50_ms"], 3)}
    return {"without_idle": before, "with_idle": after, "ratio": ratio,
            "within_target": all(value <= TARGET_RATIO for value in ratio.values())}


def main() -> None:
    """Run the benchmark on a fresh testbed and print one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--idle", type=int, default=500,
                        help="idle connections to each of luxi and RAPI")
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="corral-bench-idle-") as tmp:
        directory = Path(tmp) / "tb"
        testbed("up", "--nodes", "1", "--dir", str(directory))
        try:
            state = json.loads((directory / "testbed.json").read_text())
            socket = Paths(Path(state["env"]["CORRAL_ROOT"])).master_socket
            result = asyncio.run(run(socket, state["rapi"], args))
        finally:
            testbed("down", "--dir", str(directory))
    print(json.dumps({
        "benchmark": "idle_connections", "idle_luxi": args.idle, "idle_rapi": args.idle,
        "jobs": args.jobs, "requests": args.requests, "rounds": args.rounds, **result,
        "target_ratio": TARGET_RATIO,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }))


if __name__ == "__main__":
    main()
