"""Benchmark: the placement engine (``corral.placement``) alone, without HTTP.

Builds 100, 1000 and 5000 compute-node trees (a root with two NUMA children, each child
with VCPU and MEMORY_MB), aggregates A (the first 40 % of the roots), B (30 % to 70 %) and
R (the rest), and three shared-storage providers with DISK_GB (trait
``MISC_SHARES_VIA_AGGREGATE``), one in each of A, B and R: each shares with the computes of
its aggregate (a sharing provider must itself be in a required aggregate).
Then times
``GET /allocation_candidates?resources=VCPU:1,MEMORY_MB:1024,DISK_GB:10`` with
``member_of=!A``, ``member_of=!in:A,B`` and ``member_of=A`` as the engine answers it:
parsing the query string and computing the candidates and provider summaries, in this
process; no HTTP, no JSON encoding (the REST figures come with the REST API).

One JSON line per figure: median and p95 milliseconds over ``--runs`` runs, the number of
candidates, the CPU milliseconds (steadier than the wall clock on a shared machine), the
load average.

**REST figures** (``--layers rest``, see ``bench/_placement_rest.py`` for the shape and
the method): the same queries over HTTPS against corral's ``/placement/`` on a one-node
testbed, and over HTTP against OpenStack Placement 16 (SQLite, a threading wsgiref
server: ``corral.testbed.placement_ref``) in the same run when it is installed
(``python -m corral.testbed.placement_ref install``). Each size is loaded once per
server (sizes grow incrementally) and reused for every query. One JSON line per query:
each side's sequential median ms and requests per second with 4 concurrent clients, the
candidates each found (they must agree), the load time, and Placement's figure over
corral's (``ratio_ms``, ``ratio_rps``).

Run: ``.venv/bin/python bench/placement.py [--runs N] [--sizes 100,1000,5000]
[--layers engine,rest] [--rest-runs N] [--seconds S] [--no-reference]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import parse_qsl

sys.path.insert(0, str(Path(__file__).parent))

from _common import percentile, testbed
from _placement_rest import CLIENTS, Side, candidates_query, load_trees, measure
from corral.masterd.placement_sync import ENABLE_ENV
from corral.placement import (
    Inventory,
    PlacementStore,
    allocation_candidates,
    parse_allocation_candidates,
)
from corral.testbed.placement_ref import ReferencePlacement, installed_python

AGG_A = str(uuid.UUID(int=0xA))
AGG_B = str(uuid.UUID(int=0xB))
RESOURCES = "resources=VCPU:1,MEMORY_MB:1024,DISK_GB:10"
QUERIES = {"not_A": f"member_of=!{AGG_A}", "not_in_A_B": f"member_of=!in:{AGG_A},{AGG_B}",
           "in_A": f"member_of={AGG_A}"}
TARGET_MS = 50.0
TARGET_RPS = 100.0


def build(computes: int) -> PlacementStore:
    """The benchmark's provider population."""
    store = PlacementStore()
    numa = {"VCPU": Inventory(total=32, allocation_ratio=4.0),
            "MEMORY_MB": Inventory(total=131072, reserved=2048)}
    agg_r = str(uuid.UUID(int=0xC))
    for i, agg in enumerate((AGG_A, AGG_B, agg_r)):
        ss = store.create_provider(f"ss{i}", str(uuid.UUID(int=0x1_0000_0000 + i)))
        store.set_inventories(ss.uuid, None, {"DISK_GB": Inventory(total=1000000)})
        store.set_provider_traits(ss.uuid, None, ["MISC_SHARES_VIA_AGGREGATE"])
        store.set_provider_aggregates(ss.uuid, None, [agg])
    for i in range(computes):
        cn = store.create_provider(f"cn{i}", str(uuid.UUID(int=0x2_0000_0000 + i)))
        aggs = ([AGG_A] if i < computes * 0.4 else []) + (
            [AGG_B] if computes * 0.3 <= i < computes * 0.7 else [])
        store.set_provider_aggregates(cn.uuid, None, aggs or [agg_r])
        for n in range(2):
            child = store.create_provider(f"cn{i}-numa{n}",
                                          str(uuid.UUID(int=0x3_0000_0000 + 2 * i + n)),
                                          parent_uuid=cn.uuid)
            store.set_inventories(child.uuid, None, numa)
    return store


def engine_figures(sizes: list[int], runs: int) -> None:
    """The engine alone: one line per size, query and limit."""
    for computes in sizes:
        started = time.perf_counter()
        store = build(computes)
        build_s = time.perf_counter() - started
        for name, member_of in QUERIES.items():
            for limit in (None, 1000):
                query = f"{RESOURCES}&{member_of}" + (f"&limit={limit}" if limit else "")
                params = parse_qsl(query, keep_blank_values=True)
                times = []
                cpu = []
                count = 0
                for _ in range(runs):
                    start, start_cpu = time.perf_counter(), time.process_time()
                    request = parse_allocation_candidates(params, (1, 39))
                    found = allocation_candidates(store, request)
                    times.append((time.perf_counter() - start) * 1000)
                    cpu.append((time.process_time() - start_cpu) * 1000)
                    count = len(found.allocation_requests)
                median = statistics.median(times)
                print(json.dumps({
                    "bench": "placement", "layer": "engine only (no HTTP, no JSON)",
                    "figure": f"candidates_{name}" + (f"_limit{limit}" if limit else ""),
                    "computes": computes, "providers": len(store.providers()),
                    "query": query.replace(AGG_A, "A").replace(AGG_B, "B"),
                    "candidates": count, "median_ms": round(median, 2),
                    "p95_ms": round(percentile(times, 0.95), 2),
                    "cpu_median_ms": round(statistics.median(cpu), 2), "runs": runs,
                    "target_ms": TARGET_MS, "ok": median <= TARGET_MS,
                    "build_s": round(build_s, 2),
                    "load": [round(v, 2) for v in os.getloadavg()]}), flush=True)


def _corral_side(stack: contextlib.ExitStack) -> Side:
    """A one-node testbed in a temporary directory (stopped at the end); its /placement/."""
    directory = Path(stack.enter_context(tempfile.TemporaryDirectory(
        prefix=f"corral-bench-placement-{os.getpid()}-"))) / "tb"
    # The trees are the only providers measured: the testbed's master daemon leaves its
    # node out of /placement/ (the daemons inherit this environment).
    saved = os.environ.get(ENABLE_ENV)
    os.environ[ENABLE_ENV] = "off"
    try:
        testbed("up", "--nodes", "1", "--dir", str(directory))
    finally:
        if saved is None:
            del os.environ[ENABLE_ENV]
        else:
            os.environ[ENABLE_ENV] = saved
    stack.callback(testbed, "down", "--dir", str(directory))
    rapi = json.loads((directory / "testbed.json").read_text())["rapi"]
    return Side.basic("corral", rapi["url"] + "/placement", rapi["user"], rapi["password"],
                      rapi["ca"])


def _reference_side(stack: contextlib.ExitStack) -> Side:
    """Placement 16 with its SQLite database on tmpfs when there is one (/dev/shm): the
    loading is then bound by Placement's own work, not by the disk's flushes."""
    shm = Path("/dev/shm")
    parent = str(shm) if shm.is_dir() else None
    workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(
        prefix=f"corral-bench-placement-ref-{os.getpid()}-", dir=parent)))
    ref = stack.enter_context(ReferencePlacement(workdir))
    return Side("placement", ref.url, {"x-auth-token": "admin"}, loaders=1)


def rest_figures(sizes: list[int], runs: int, seconds: float, reference: bool,
                 reference_max: int) -> None:
    """corral's /placement/ and, when installed, Placement 16 (up to ``reference_max``
    trees: loading it takes about a minute per 100 trees here): one line per query."""
    with contextlib.ExitStack() as stack:
        sides = [_corral_side(stack)]
        why_not = None
        if not reference:
            why_not = "--no-reference"
        elif installed_python() is None:
            why_not = ("not installed (python -m corral.testbed.placement_ref install)")
        else:
            sides.append(_reference_side(stack))
        if why_not:
            print(json.dumps({"bench": "placement", "layer": "rest",
                              "placement": "unavailable", "why": why_not}), flush=True)
        everyone = sides
        for computes in sorted(sizes):
            sides = [side for side in everyone
                     if side.name == "corral" or computes <= reference_max]
            for side in sides:
                load_trees(side, computes)
            for name, member_of in QUERIES.items():
                for limit in (None, 1000):
                    query = candidates_query(member_of, limit)
                    line: dict[str, object] = {
                        "bench": "placement", "layer": "rest",
                        "figure": f"candidates_{name}" + (f"_limit{limit}" if limit else ""),
                        "computes": computes, "providers": 3 + 3 * computes,
                        "query": query.replace(AGG_A, "A").replace(AGG_B, "B"),
                        "loaded_by": "REST, 6 requests per tree, "
                                     + ", ".join(f"{side.name} {side.loaders} clients"
                                                 for side in sides),
                        "clients": CLIENTS, "runs": runs}
                    got = {side.name: measure(side, query, runs, seconds) for side in sides}
                    for side in sides:
                        line.update({f"{side.name}_{key}": value
                                     for key, value in got[side.name].items()})
                        line[f"{side.name}_load_s"] = round(side.load_seconds, 1)
                    corral = got["corral"]
                    if len(everyone) > len(sides):
                        line["placement"] = f"not run above --reference-max {reference_max}"
                    if "placement" in got:
                        placement = got["placement"]
                        line["ratio_ms"] = round(placement["median_ms"] / corral["median_ms"], 1)
                        line["ratio_rps"] = round(corral["rps"] / placement["rps"], 1)
                        line["same_candidates"] = corral["candidates"] == placement["candidates"]
                    line.update({"target_ms": TARGET_MS, "target_rps": TARGET_RPS,
                                 "ok": (corral["median_ms"] <= TARGET_MS
                                        and corral["rps"] >= TARGET_RPS),
                                 "load": [round(v, 2) for v in os.getloadavg()]})
                    print(json.dumps(line), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--sizes", default="100,1000,5000")
    parser.add_argument("--layers", default="engine,rest",
                        help="engine, rest or both (comma-separated)")
    parser.add_argument("--rest-runs", type=int, default=7,
                        help="sequential requests per REST figure (median)")
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="duration of each 4-client throughput figure")
    parser.add_argument("--no-reference", action="store_true",
                        help="do not run OpenStack Placement beside corral")
    parser.add_argument("--reference-max", type=int, default=5000,
                        help="largest size Placement is loaded to (it loads slowly)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    layers = set(args.layers.split(","))
    if "engine" in layers:
        engine_figures(sizes, args.runs)
    if "rest" in layers:
        rest_figures(sizes, args.rest_runs, args.seconds, not args.no_reference,
                     args.reference_max)


if __name__ == "__main__":
    main()
