"""Benchmark: RAPI v2 latency and throughput over HTTPS, corral and Ganeti 3.0 side by side.

Starts a corral testbed of ``--nodes`` nodes (default 1, as the Ganeti reference cluster
has) in a temporary directory, with corral-rapi requiring authentication, and creates
``--instances`` diskless instances (default 20) without an OS install, all submitted at
once. When the Ganeti 3.0 reference cluster (``../shared/tools/ganeti-reference/``) answers
at ``--ganeti-url`` with its RAPI credentials, the benchmark gives it the same number of
instances of the same kind (``bench-NNN``, diskless, 128 MiB, not started, no install),
measures it the same way in the same run, and removes those instances afterwards (unless
``--keep-ganeti-instances``). Otherwise the Ganeti line says ``"ganeti": "unavailable"``
and why, and no Ganeti figure is printed: the script holds none of its own.

Each side is measured with aiohttp over HTTPS with HTTP basic auth, trusting only its own
certificate (corral: the cluster CA; Ganeti: its ``rapi.pem``, whose name is not the
loopback address, so the host name is not checked there). The figures, per resource
``/2/info``, ``/2/instances?bulk=1`` and ``/2/jobs``:

* **keep-alive**: one client on one kept-alive TLS connection sends ``--requests`` GETs one
  after the other; p50 and p99 in milliseconds;
* **new connection**: the same with a quarter as many requests, each on its own TCP and
  TLS connection, as Ganeti's pycurl client and most scripts do;
* **throughput**: ``--clients`` concurrent clients, each on its own kept-alive
  connection, for ``--seconds`` per resource; requests per second.

The sides take turns for ``--rounds`` rounds (default 3) so that both meet the same
machine conditions; each figure is the median over rounds. ``/2/jobs`` lists every job
in the queue, which differs between the two (the lines give each side's job count).
Ganeti 3.0's RAPI closes every connection after its answer, so its keep-alive figures
are new connections as well (``keeps_connections_alive`` on each side's line); the
like-for-like comparison is the new-connection one.

Prints one JSON line per side and a ``ratio`` line (Ganeti's time over corral's, corral's
requests per second over Ganeti's) with the issue's targets: ``/2/info`` at most 2 ms
with keep-alive and at most 1/20 of Ganeti's time with a new connection each time,
``/2/instances?bulk=1`` at most 5 ms with keep-alive.

    .venv/bin/python bench/rapi.py [--nodes N] [--instances N] [--requests N]
                                   [--clients N] [--rounds R] [--ganeti-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import ssl
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from _common import FINAL, create_diskless, percentile, testbed
from corral.paths import Paths

RESOURCES = {"info": "/2/info", "instances_bulk": "/2/instances?bulk=1", "jobs": "/2/jobs"}
#: The issue's absolute targets for corral, in milliseconds (p50 with keep-alive).
TARGET_MS = {"info_keepalive": 2.0, "instances_bulk_keepalive": 5.0}
#: ... and its relative one: /2/info with a new connection at most this part of Ganeti's.
TARGET_INFO_NEW_CONNECTION_FRACTION = 1 / 20
#: The instances both sides get: the memory fits Ganeti's default instance policy.
MEMORY_MIB = 128
GANETI_PREFIX = "bench-"


def _figures(seconds: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(seconds) * 1000, 3),
            "p99_ms": round(percentile(seconds, 0.99) * 1000, 3)}


class Target:
    """Where a RAPI is and how to reach it."""

    def __init__(self, url: str, user: str, password: str, cafile: Path, *,
                 check_hostname: bool = True) -> None:
        self.url = url.rstrip("/")
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self.headers = {"Accept": "application/json", "Authorization": f"Basic {token}"}
        # Trust that certificate only.
        self.ssl = ssl.create_default_context(cafile=str(cafile))
        self.ssl.check_hostname = check_hostname

    def session(self, *, keepalive: bool = True, limit: int = 1) -> aiohttp.ClientSession:
        """A client session; without keep-alive each request has its own connection."""
        connector = aiohttp.TCPConnector(ssl=self.ssl, force_close=not keepalive, limit=limit)
        return aiohttp.ClientSession(connector=connector, headers=self.headers)

    async def get(self, session: aiohttp.ClientSession, path: str) -> bytes:
        """One GET that must answer 200; the body, read whole."""
        async with session.get(self.url + path) as response:
            body = await response.read()
            if response.status != 200:
                raise SystemExit(f"GET {self.url}{path}: HTTP {response.status}: {body[:300]!r}")
            return body

    async def request(self, session: aiohttp.ClientSession, method: str, path: str,
                      body: Any = None) -> Any:
        """One request whose answer must be 200; its decoded JSON body."""
        async with session.request(method, self.url + path, json=body) as response:
            text = await response.read()
            if response.status != 200:
                raise SystemExit(f"{method} {self.url}{path}: HTTP {response.status}:"
                                 f" {text[:300]!r}")
            return json.loads(text)


async def latency(target: Target, path: str, requests: int, *, keepalive: bool
                  ) -> dict[str, float]:
    """p50 and p99 of ``requests`` sequential GETs of ``path``."""
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
    ready = asyncio.Barrier(clients + 1)
    start = asyncio.Event()
    stop_at = 0.0

    async def client() -> None:
        nonlocal done
        async with target.session() as session:
            await target.get(session, path)  # connected and warm
            await ready.wait()
            await start.wait()
            while time.perf_counter() < stop_at:
                await target.get(session, path)
                done += 1

    tasks = [asyncio.create_task(client()) for _ in range(clients)]
    await ready.wait()
    stop_at = time.perf_counter() + seconds
    started = time.perf_counter()
    start.set()
    await asyncio.gather(*tasks)
    return round(done / (time.perf_counter() - started), 1)


async def measure(target: Target, requests: int, clients: int, seconds: float
                  ) -> dict[str, Any]:
    """Every figure of one round on one side."""
    result: dict[str, Any] = {}
    for name, path in RESOURCES.items():
        result[name] = {
            "keepalive": await latency(target, path, requests, keepalive=True),
            "new_connection": await latency(target, path, max(20, requests // 4),
                                            keepalive=False),
            "rps": await throughput(target, path, clients, seconds),
        }
    return result


async def describe(target: Target) -> dict[str, Any]:
    """What a side's answers are made of (its instance and job counts) and whether it
    keeps a connection open after answering (Ganeti 3.0's RAPI answers
    ``Connection: close``, so its keep-alive figures are new connections too)."""
    async with target.session() as session:
        instances = json.loads(await target.get(session, "/2/instances"))
        jobs = json.loads(await target.get(session, "/2/jobs"))
        async with session.get(target.url + "/2/info") as response:
            await response.read()
            closes = response.headers.get("Connection", "").lower() == "close"
    return {"instance_count": len(instances), "job_count": len(jobs),
            "keeps_connections_alive": not closes}


# -- the Ganeti reference cluster ---------------------------------------------------------


async def ganeti_probe(target: Target) -> str | None:
    """Why the Ganeti RAPI cannot be used, or None when it answers as Ganeti 3.0."""
    try:
        async with target.session() as session, session.get(
                target.url + "/2/info", timeout=aiohttp.ClientTimeout(total=10)) as response:
            body = await response.read()
            if response.status != 200:
                return f"GET {target.url}/2/info: HTTP {response.status}"
            version = str(json.loads(body).get("software_version", ""))
    except (OSError, aiohttp.ClientError, TimeoutError, ValueError) as exc:
        return f"GET {target.url}/2/info: {type(exc).__name__}: {exc}"
    if not version.startswith("3.0"):
        return f"{target.url} is not Ganeti 3.0 (software_version {version!r})"
    return None


async def _wait_ganeti_jobs(target: Target, session: aiohttp.ClientSession,
                            ids: list[int]) -> None:
    pending = set(ids)
    failed: list[int] = []
    while pending:
        for job_id in sorted(pending):
            job = await target.request(session, "GET", f"/2/jobs/{job_id}")
            if job["status"] in FINAL:
                pending.discard(job_id)
                if job["status"] != "success":
                    failed.append(job_id)
        if pending:
            await asyncio.sleep(0.5)
    if failed:
        raise SystemExit(f"Ganeti: {len(failed)} jobs failed, e.g. {failed[:5]}")


async def ganeti_prepare(target: Target, count: int) -> list[str]:
    """Give the Ganeti cluster ``count`` bench instances; the names it created."""
    async with target.session(limit=8) as session:
        existing = {row["id"] for row in await target.request(session, "GET", "/2/instances")}
        node = (await target.request(session, "GET", "/2/info"))["master"]
        wanted = [f"{GANETI_PREFIX}{i:03}" for i in range(count)]
        missing = [name for name in wanted if name not in existing]
        ids = await asyncio.gather(*(target.request(session, "POST", "/2/instances", {
            "__version__": 1, "mode": "create", "name": name, "disk_template": "diskless",
            "disks": [], "nics": [{}], "os_type": "noop+default", "pnode": node,
            "beparams": {"maxmem": MEMORY_MIB, "minmem": MEMORY_MIB}, "start": False,
            "no_install": True, "ip_check": False, "name_check": False,
        }) for name in missing))
        await _wait_ganeti_jobs(target, session, [int(i) for i in ids])
    return missing


async def ganeti_cleanup(target: Target, names: list[str]) -> None:
    """Remove the instances the benchmark created on the Ganeti cluster."""
    async with target.session(limit=8) as session:
        ids = await asyncio.gather(*(
            target.request(session, "DELETE", f"/2/instances/{name}") for name in names))
        await _wait_ganeti_jobs(target, session, [int(i) for i in ids])


# -- the run -------------------------------------------------------------------------------


def _median_figures(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the rounds."""
    result: dict[str, Any] = {}
    for name in RESOURCES:
        result[name] = {
            kind: {key: round(statistics.median(r[name][kind][key] for r in rounds), 3)
                   for key in ("p50_ms", "p99_ms")}
            for kind in ("keepalive", "new_connection")
        }
        result[name]["rps"] = round(statistics.median(r[name]["rps"] for r in rounds), 1)
        result[name]["rounds_keepalive_p50_ms"] = [r[name]["keepalive"]["p50_ms"]
                                                   for r in rounds]
    return result


def _ratio_line(corral: dict[str, Any], ganeti: dict[str, Any] | None,
                reason: str | None) -> dict[str, Any]:
    line: dict[str, Any] = {"bench": "rapi", "figure": "ratio"}
    checks: dict[str, bool | None] = {
        "info_keepalive": corral["info"]["keepalive"]["p50_ms"] <= TARGET_MS["info_keepalive"],
        "instances_bulk_keepalive": corral["instances_bulk"]["keepalive"]["p50_ms"]
        <= TARGET_MS["instances_bulk_keepalive"],
        "info_new_connection": None,
    }
    targets: dict[str, Any] = dict(TARGET_MS)
    if ganeti is None:
        targets["info_new_connection"] = "1/20 of Ganeti's (unavailable)"
        line.update(ganeti="unavailable", reason=reason)
    else:
        limit = ganeti["info"]["new_connection"]["p50_ms"] * TARGET_INFO_NEW_CONNECTION_FRACTION
        targets["info_new_connection"] = round(limit, 3)
        checks["info_new_connection"] = corral["info"]["new_connection"]["p50_ms"] <= limit
        for name in RESOURCES:
            for kind in ("keepalive", "new_connection"):
                line[f"{name}_{kind}_p50_ganeti_over_corral"] = round(
                    ganeti[name][kind]["p50_ms"] / corral[name][kind]["p50_ms"], 2)
            line[f"{name}_rps_corral_over_ganeti"] = round(
                corral[name]["rps"] / ganeti[name]["rps"], 2)
    line.update(target_ms=targets, meets_targets=checks)
    return line


def main() -> None:
    """Run the benchmark on a fresh testbed (and Ganeti when it answers); print JSON lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1,
                        help="corral testbed nodes (default 1, as the reference cluster)")
    parser.add_argument("--instances", type=int, default=20)
    parser.add_argument("--requests", type=int, default=200,
                        help="sequential requests per resource with keep-alive"
                             " (a quarter of them with a new connection each)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="duration of each throughput run")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds per side, taking turns; figures are medians")
    parser.add_argument("--ganeti-url", default="https://127.0.0.1:5080")
    parser.add_argument("--ganeti-user", default=os.environ.get("RAPI_USER", "gntadmin"))
    parser.add_argument("--ganeti-password", default=os.environ.get("RAPI_PASS", "gntpass"))
    parser.add_argument("--ganeti-cert", type=Path, default=Path("/var/lib/ganeti/rapi.pem"))
    parser.add_argument("--keep-ganeti-instances", action="store_true",
                        help="leave the bench instances on the Ganeti cluster")
    args = parser.parse_args()

    ganeti: Target | None = None
    reason: str | None = None
    if not args.ganeti_cert.is_file():
        reason = f"no Ganeti RAPI certificate at {args.ganeti_cert}"
    else:
        ganeti = Target(args.ganeti_url, args.ganeti_user, args.ganeti_password,
                        args.ganeti_cert, check_hostname=False)
        reason = asyncio.run(ganeti_probe(ganeti))
        if reason is not None:
            ganeti = None

    corral_rounds: list[dict[str, Any]] = []
    ganeti_rounds: list[dict[str, Any]] = []
    created: list[str] = []
    with tempfile.TemporaryDirectory(prefix="corral-bench-rapi-") as tmp:
        directory = Path(tmp) / "tb"
        testbed("up", "--nodes", str(args.nodes), "--dir", str(directory))
        try:
            state = json.loads((directory / "testbed.json").read_text())
            paths = Paths(Path(state["env"]["CORRAL_ROOT"]))
            rapi = state["rapi"]
            if not rapi.get("url"):
                raise SystemExit("the testbed runs no RAPI (testbed.json has no rapi url)")
            nodes = [node["name"] for node in state["nodes"]]
            names = [f"bench{i:03}.testbed" for i in range(args.instances)]
            asyncio.run(create_diskless(paths.master_socket, names, nodes, MEMORY_MIB))
            corral = Target(rapi["url"], rapi["user"], rapi["password"],
                            Path(rapi["ca"]))
            if ganeti is not None:
                created = asyncio.run(ganeti_prepare(ganeti, args.instances))
            for _ in range(args.rounds):
                corral_rounds.append(asyncio.run(
                    measure(corral, args.requests, args.clients, args.seconds)))
                if ganeti is not None:
                    ganeti_rounds.append(asyncio.run(
                        measure(ganeti, args.requests, args.clients, args.seconds)))
            corral_counts = asyncio.run(describe(corral))
            ganeti_counts = asyncio.run(describe(ganeti)) if ganeti is not None else None
        finally:
            testbed("down", "--dir", str(directory))
            if ganeti is not None and created and not args.keep_ganeti_instances:
                asyncio.run(ganeti_cleanup(ganeti, created))

    common = {"bench": "rapi", "requests": args.requests, "clients": args.clients,
              "seconds": args.seconds, "rounds": args.rounds}
    corral_figures = _median_figures(corral_rounds)
    print(json.dumps({**common, "side": "corral", "nodes": args.nodes, **corral_counts,
                      **corral_figures}))
    ganeti_figures: dict[str, Any] | None = None
    if ganeti is None or ganeti_counts is None:
        print(json.dumps({**common, "side": "ganeti", "ganeti": "unavailable",
                          "reason": reason}))
    else:
        ganeti_figures = _median_figures(ganeti_rounds)
        print(json.dumps({**common, "side": "ganeti", "ganeti": "3.0", "url": ganeti.url,
                          **ganeti_counts, **ganeti_figures}))
    print(json.dumps(_ratio_line(corral_figures, ganeti_figures, reason)))


if __name__ == "__main__":
    main()
