"""Benchmark: RAPI v2 latency and throughput over HTTPS on a 3-node testbed.

Starts a 3-node testbed in a temporary directory (corral-masterd, corral-rapi with
``--require-authentication`` and a corral-noded per node), creates ``--instances``
diskless instances without an OS install (default 100, through luxi, all submitted
at once), then measures with aiohttp, as the ``admin`` user with HTTP basic auth and
the cluster CA:

* **keep-alive**: one client on one kept-alive TLS connection sends ``--requests``
  GETs one after the other, for each of ``/2/info``, ``/2/instances?bulk=1`` and
  ``/2/jobs``; median and p99 in milliseconds;
* **new connection**: the same, but every request opens (and closes) its own TCP
  and TLS connection, as Ganeti's pycurl client and most scripts do;
* **throughput**: ``--clients`` concurrent clients (default 8), each on its own
  kept-alive connection, send requests for ``--seconds`` per resource; requests/s.

Targets (from the issue): ``/2/info`` at most 2 ms with keep-alive and at most 1/20
of Ganeti 3.0's 68 ms with a new connection each time; ``/2/instances?bulk=1`` at
most 5 ms (Ganeti 3.0: 181 ms with 20 instances). Prints one JSON line.
Run: ``.venv/bin/python bench/rapi.py [--instances N] [--requests N] [--clients N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import ssl
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from _common import FINAL, percentile, testbed
from corral.luxi import AsyncClient
from corral.paths import Paths

NODES = ["node1.testbed", "node2.testbed", "node3.testbed"]
RESOURCES = {"info": "/2/info", "instances_bulk": "/2/instances?bulk=1", "jobs": "/2/jobs"}
GANETI_MS = {"info": 68.0, "instances_bulk_20": 181.0}
TARGET_MS = {"info_keepalive": 2.0, "info_new_connection": GANETI_MS["info"] / 20,
             "instances_bulk": 5.0}




def _figures(seconds: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(seconds) * 1000, 3),
            "p99_ms": round(percentile(seconds, 0.99) * 1000, 3)}


async def create_instances(socket: Path, count: int) -> None:
    """Create ``count`` diskless instances at once (one job each) and wait for all."""
    client = AsyncClient(socket)
    try:
        ids = []
        for i in range(count):
            ids.append(await client.call("SubmitJob", [{
                "OP_ID": "OP_INSTANCE_CREATE", "instance_name": f"bench{i:03}.testbed",
                "mode": "create", "disk_template": "diskless", "pnode": NODES[i % 3],
                "os_type": "corral-ext4", "disks": [], "nics": [{}],
                "beparams": {"maxmem": 64, "minmem": 64}, "start": False,
                "no_install": True,
            }]))
        while True:
            rows = await client.call("QueryJobs", ids, ["status"])
            if all(row is not None and row[0] in FINAL for row in rows):
                break
            await asyncio.sleep(0.1)
        failed = [job_id for job_id, row in zip(ids, rows, strict=True) if row[0] != "success"]
        if failed:
            raise SystemExit(f"{len(failed)} instance creations failed, e.g. jobs {failed[:5]}")
    finally:
        await client.close()


class Target:
    """Where the RAPI is and how to reach it."""

    def __init__(self, url: str, user: str, password: str, cafile: Path) -> None:
        self.url = url.rstrip("/")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self.headers = {"Accept": "application/json", "Authorization": f"Basic {token}"}
        # Trust the cluster CA only; the certificate names the master's address.
        self.ssl = ssl.create_default_context(cafile=str(cafile))

    def session(self, *, keepalive: bool) -> aiohttp.ClientSession:
        """A client session; without keep-alive each request has its own connection."""
        connector = aiohttp.TCPConnector(ssl=self.ssl, force_close=not keepalive, limit=1)
        return aiohttp.ClientSession(connector=connector, headers=self.headers)

    async def get(self, session: aiohttp.ClientSession, path: str) -> None:
        """One GET that must answer 200; the body is read whole."""
        async with session.get(self.url + path) as response:
            body = await response.read()
            if response.status != 200:
                raise SystemExit(f"GET {path}: HTTP {response.status}: {body[:300]!r}")


async def latency(target: Target, path: str, requests: int, *, keepalive: bool
                  ) -> dict[str, float]:
    """Median and p99 of ``requests`` sequential GETs of ``path``."""
    async with target.session(keepalive=keepalive) as session:
        for _ in range(5):  # warm-up: connection, caches
            await target.get(session, path)
        times = []
        for _ in range(requests):
            started = time.perf_counter()
            await target.get(session, path)
            times.append(time.perf_counter() - started)
    return _figures(times)


async def throughput(target: Target, path: str, clients: int, seconds: float) -> float:
    """Requests/s of ``clients`` concurrent keep-alive clients for ``seconds``."""
    done = 0
    stop_at = 0.0

    async def client() -> None:
        nonlocal done
        async with target.session(keepalive=True) as session:
            await target.get(session, path)
            await barrier.wait()
            while time.perf_counter() < stop_at:
                await target.get(session, path)
                done += 1

    class Barrier:
        def __init__(self, parties: int) -> None:
            self.left = parties
            self.event = asyncio.Event()

        async def wait(self) -> None:
            nonlocal stop_at
            self.left -= 1
            if self.left == 0:
                stop_at = time.perf_counter() + seconds
                self.event.set()
            await self.event.wait()

    barrier = Barrier(clients)
    await asyncio.gather(*(client() for _ in range(clients)))
    return round(done / seconds, 1)


async def measure(target: Target, requests: int, clients: int, seconds: float
                  ) -> dict[str, Any]:
    """Every figure of the benchmark."""
    result: dict[str, Any] = {}
    for name, path in RESOURCES.items():
        result[name] = {
            "keepalive": await latency(target, path, requests, keepalive=True),
            "new_connection": await latency(target, path, max(20, requests // 4),
                                            keepalive=False),
            f"rps_{clients}_clients": await throughput(target, path, clients, seconds),
        }
    return result


def main() -> None:
    """Run the benchmark on a fresh testbed and print one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=100)
    parser.add_argument("--requests", type=int, default=400,
                        help="sequential requests per resource with keep-alive"
                             " (a quarter of them with a new connection each)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="duration of each throughput run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="corral-bench-rapi-") as tmp:
        directory = Path(tmp) / "tb"
        testbed("up", "--nodes", "3", "--dir", str(directory))
        try:
            state = json.loads((directory / "testbed.json").read_text())
            paths = Paths(Path(state["env"]["CORRAL_ROOT"]))
            rapi = state["rapi"]
            if not rapi.get("url"):
                raise SystemExit("the testbed runs no RAPI (testbed.json has no rapi url)")
            asyncio.run(create_instances(paths.master_socket, args.instances))
            target = Target(rapi["url"], rapi["user"], rapi["password"], Path(rapi["ca"]))
            figures = asyncio.run(measure(target, args.requests, args.clients, args.seconds))
        finally:
            testbed("down", "--dir", str(directory))
    checks = {
        "info_keepalive": figures["info"]["keepalive"]["p50_ms"],
        "info_new_connection": figures["info"]["new_connection"]["p50_ms"],
        "instances_bulk": figures["instances_bulk"]["keepalive"]["p50_ms"],
    }
    print(json.dumps({
        "bench": "rapi", "nodes": 3, "instances": args.instances, "requests": args.requests,
        "clients": args.clients, **figures,
        "target_ms": {k: round(v, 2) for k, v in TARGET_MS.items()},
        "ganeti_3_0_ms": GANETI_MS,
        "meets_targets": {k: v <= TARGET_MS[k] for k, v in checks.items()},
    }))


if __name__ == "__main__":
    main()
