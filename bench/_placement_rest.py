"""The REST half of ``bench/placement.py``: corral's ``/placement/`` on a testbed and
OpenStack Placement 16 itself, loaded with the same provider trees and asked the same
``GET /allocation_candidates`` queries in the same run.

Not a benchmark itself (``make bench`` runs ``bench/[!_]*.py``).

Shape: per compute a root and two NUMA children (VCPU 32 at ratio 4, MEMORY_MB 131072
with 2048 reserved, on each child); three sharing providers with DISK_GB
(``MISC_SHARES_VIA_AGGREGATE``), one in each of aggregates A, B and R. Compute ``i`` is
in A when ``i % 10 < 4``, in B when ``3 <= i % 10 < 7``, else in R: the proportions of
the engine figures (40 % in A, 40 % in B, a tenth in both), spread so that a larger size
only adds trees to a smaller one (sizes load incrementally, once per server).

Loading (the fastest path both servers support): plain REST, 6 requests per tree (the
root, its aggregates, two children, two inventories), from ``LOADERS`` concurrent
clients for corral and one for Placement (on SQLite, concurrent writers fail with
"database is locked"). Sequential figures: the median of ``runs`` requests on one kept-alive
connection, with the client's own CPU to receive an answer (TLS, HTTP) and to decode
its JSON (``json.loads``, as a Python client does; the timed requests do not decode),
which bound what a Python client can do whatever the server. Concurrent figures:
``CLIENTS`` threads, each on its own connection, for at least ``seconds`` (and at least
one request each): requests per second.
"""

from __future__ import annotations

import base64
import concurrent.futures
import json
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import urllib3

__all__ = ["CLIENTS", "LOADERS", "Side", "candidates_query", "load_trees", "measure"]

#: Concurrent clients of the throughput figures (the issue's "4 concurrent clients").
CLIENTS = 4
#: Concurrent clients that load the trees.
LOADERS = 4

AGG_A = str(uuid.UUID(int=0xA))
AGG_B = str(uuid.UUID(int=0xB))
AGG_R = str(uuid.UUID(int=0xC))
NUMA_INVENTORY = {"VCPU": {"total": 32, "allocation_ratio": 4.0},
                  "MEMORY_MB": {"total": 131072, "reserved": 2048}}


@dataclass
class Side:
    """One Placement endpoint under test."""

    name: str
    url: str
    headers: dict[str, str]
    ca: str | None = None
    #: Concurrent loader clients (Placement on SQLite: one, its writers lock each other).
    loaders: int = LOADERS
    loaded: int = 0
    load_seconds: float = 0.0
    _local: threading.local = field(default_factory=threading.local)

    @classmethod
    def basic(cls, name: str, url: str, user: str, password: str, ca: str) -> Side:
        """A side authenticated with HTTP basic (corral's RAPI users)."""
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        return cls(name, url, {"authorization": f"Basic {token}"}, ca)

    def _pool(self) -> urllib3.PoolManager:
        pool = getattr(self._local, "pool", None)
        if pool is None:
            pool = urllib3.PoolManager(maxsize=1, retries=False, ca_certs=self.ca,
                                       cert_reqs="CERT_REQUIRED" if self.ca else None,
                                       timeout=urllib3.Timeout(300.0))
            self._local.pool = pool
        return pool

    def request(self, method: str, path: str, body: Any = None, version: str = "1.39",
                ) -> tuple[int, bytes]:
        """One request on this thread's kept-alive connection: status and body."""
        headers = {"openstack-api-version": f"placement {version}",
                   "accept": "application/json", **self.headers}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["content-type"] = "application/json"
        response = self._pool().request(method, self.url + path, body=data, headers=headers)
        return response.status, response.data

    def ok(self, method: str, path: str, body: Any = None, version: str = "1.39") -> Any:
        """A request that must succeed; its decoded JSON (None when empty)."""
        status, data = self.request(method, path, body, version)
        if status >= 300:
            raise RuntimeError(f"{self.name}: {method} {path} -> {status}: {data[:300]!r}")
        return json.loads(data) if data else None


def _tree(side: Side, i: int) -> None:
    root = str(uuid.UUID(int=0x2_0000_0000 + i))
    side.ok("POST", "/resource_providers", {"name": f"cn{i}", "uuid": root})
    aggs = ([AGG_A] if i % 10 < 4 else []) + ([AGG_B] if 3 <= i % 10 < 7 else [])
    side.ok("PUT", f"/resource_providers/{root}/aggregates",
            {"aggregates": aggs or [AGG_R], "resource_provider_generation": 0})
    for n in range(2):
        child = str(uuid.UUID(int=0x3_0000_0000 + 2 * i + n))
        side.ok("POST", "/resource_providers",
                {"name": f"cn{i}-numa{n}", "uuid": child, "parent_provider_uuid": root})
        side.ok("PUT", f"/resource_providers/{child}/inventories",
                {"resource_provider_generation": 0, "inventories": NUMA_INVENTORY})


def _sharing(side: Side) -> None:
    for i, agg in enumerate((AGG_A, AGG_B, AGG_R)):
        ss = str(uuid.UUID(int=0x1_0000_0000 + i))
        side.ok("POST", "/resource_providers", {"name": f"ss{i}", "uuid": ss})
        side.ok("PUT", f"/resource_providers/{ss}/inventories",
                {"resource_provider_generation": 0,
                 "inventories": {"DISK_GB": {"total": 1000000}}})
        side.ok("PUT", f"/resource_providers/{ss}/traits",
                {"resource_provider_generation": 1, "traits": ["MISC_SHARES_VIA_AGGREGATE"]})
        side.ok("PUT", f"/resource_providers/{ss}/aggregates",
                {"aggregates": [agg], "resource_provider_generation": 2})


def load_trees(side: Side, computes: int) -> None:
    """Grow ``side`` to ``computes`` trees (the sharing providers first, once)."""
    started = time.perf_counter()
    if side.loaded == 0:
        _sharing(side)
    with concurrent.futures.ThreadPoolExecutor(side.loaders) as pool:
        for future in [pool.submit(_tree, side, i) for i in range(side.loaded, computes)]:
            future.result()
    side.loaded = computes
    side.load_seconds += time.perf_counter() - started


def candidates_query(member_of: str, limit: int | None) -> str:
    """The benchmark's query string."""
    query = f"resources=VCPU:1,MEMORY_MB:1024,DISK_GB:10&{member_of}"
    return query + (f"&limit={limit}" if limit else "")


def measure(side: Side, query: str, runs: int, seconds: float) -> dict[str, Any]:
    """Sequential median ms, candidates, requests per second with CLIENTS clients, and
    what the client itself spends per answer (CPU ms to receive it and to decode it)."""
    path = "/allocation_candidates?" + query
    answer = side.ok("GET", path)  # also warms the connection and any cache
    times = []
    cpu = []
    body = b""
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), time.process_time()
        status, body = side.request("GET", path)
        times.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
        if status != 200:
            raise RuntimeError(f"{side.name}: GET {path} -> {status}")
    decode = []
    for _ in range(3):
        start_cpu = time.process_time()
        json.loads(body)
        decode.append((time.process_time() - start_cpu) * 1000)
    done = [0] * CLIENTS
    deadline = time.perf_counter() + seconds

    def client(index: int) -> None:
        while True:
            status, _ = side.request("GET", path)
            if status != 200:
                raise RuntimeError(f"{side.name}: GET {path} -> {status}")
            done[index] += 1
            if time.perf_counter() >= deadline:
                return

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        for future in [pool.submit(client, i) for i in range(CLIENTS)]:
            future.result()
    elapsed = time.perf_counter() - start
    return {"median_ms": round(statistics.median(times), 2),
            "rps": round(sum(done) / elapsed, 2),
            "candidates": len(answer["allocation_requests"]), "body_bytes": len(body),
            "client_read_cpu_ms": round(statistics.median(cpu), 2),
            "client_json_decode_cpu_ms": round(statistics.median(decode), 2)}
