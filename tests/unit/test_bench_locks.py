"""The lock benchmark gives both sides the same work (bench/locks.py, issue 24 item 6)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.unit.bench_helpers import BENCH, load_bench


def _best(run: object, times: int = 7) -> float:
    best = float("inf")
    for _ in range(times):
        start = time.perf_counter()
        run()  # type: ignore[operator]
        best = min(best, time.perf_counter() - start)
    return best


def test_the_work_takes_the_same_time_in_a_thread_and_in_a_task() -> None:
    locks = load_bench("locks")
    iterations = locks.calibrate(2000)
    in_thread: list[float] = []
    thread = threading.Thread(
        target=lambda: in_thread.append(_best(lambda: locks.work(iterations))))
    thread.start()
    thread.join()

    async def task() -> float:
        return _best(lambda: locks.work(iterations))

    in_task = asyncio.run(task())
    assert 0.001 < in_thread[0] < 0.004
    assert 0.001 < in_task < 0.004
    assert max(in_thread[0], in_task) / min(in_thread[0], in_task) < 1.5
    assert locks.calibrate(0) == 0


def test_both_sides_report_the_same_work_and_latency_percentiles() -> None:
    ganeti = Path("/usr/share/ganeti/3.0/ganeti/locking.py")
    if not ganeti.exists() or not Path("/usr/bin/python3").exists():
        pytest.skip("Ganeti 3.0 is not installed (apt-get install ganeti-3.0)")
    done = subprocess.run(
        [sys.executable, str(BENCH / "locks.py"), "--seconds", "0.3", "--rounds", "1",
         "--owners", "20", "--locks", "10", "--work-us", "300", "--wait-us", "2000"],
        capture_output=True, text=True, timeout=120, check=True)
    lines = {line["figure"]: line for line in map(json.loads, done.stdout.splitlines())}
    corral, ganeti_line = lines["contended_corral"], lines["contended_ganeti"]
    for line in (corral, ganeti_line):
        assert line["work_us"] == 300 and line["wait_us"] == 2000
        # Each side's calibrated work takes what was asked when run alone...
        assert 200 < line["work_us_alone"] < 450
        # ... and every acquisition held its locks for at least the work and the wait.
        assert line["hold_us"] >= 2000
        assert 0 < line["latency_p50_us"] <= line["latency_p90_us"] <= line["latency_p99_us"]
    assert "SharedLock" in ganeti_line["lock_path"]
    assert "LockSet" in corral["lock_path"]
    ratio = lines["ratio"]
    assert ratio["acquisitions_per_s_corral_over_ganeti"] == pytest.approx(
        corral["acquisitions_per_s"] / ganeti_line["acquisitions_per_s"], rel=0.01)
