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
load average. Run: ``.venv/bin/python bench/placement.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import parse_qsl

sys.path.insert(0, str(Path(__file__).parent))

from _common import percentile
from corral.placement import (
    Inventory,
    PlacementStore,
    allocation_candidates,
    parse_allocation_candidates,
)

AGG_A = str(uuid.UUID(int=0xA))
AGG_B = str(uuid.UUID(int=0xB))
RESOURCES = "resources=VCPU:1,MEMORY_MB:1024,DISK_GB:10"
QUERIES = {"not_A": f"member_of=!{AGG_A}", "not_in_A_B": f"member_of=!in:{AGG_A},{AGG_B}",
           "in_A": f"member_of={AGG_A}"}
TARGET_MS = 50.0


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--sizes", default="100,1000,5000")
    args = parser.parse_args()
    for computes in (int(s) for s in args.sizes.split(",")):
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
                for _ in range(args.runs):
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
                    "cpu_median_ms": round(statistics.median(cpu), 2), "runs": args.runs,
                    "target_ms": TARGET_MS, "ok": median <= TARGET_MS,
                    "build_s": round(build_s, 2),
                    "load": [round(v, 2) for v in os.getloadavg()]}), flush=True)


if __name__ == "__main__":
    main()
