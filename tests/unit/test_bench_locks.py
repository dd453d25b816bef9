"""The lock benchmark gives both sides the same work (bench/locks.py, issue 24 item 6)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.bench_helpers import BENCH, load_bench


def test_calibration_scales_the_work_and_zero_means_none() -> None:
    # Calibration is what makes both sides do the same work; it must ask for more loop
    # turns for more microseconds (the times themselves depend on the machine's load,
    # so the test compares counts, never durations).
    locks = load_bench("locks")
    small, large = locks.calibrate(200), locks.calibrate(2000)
    assert 0 < small < large
    assert locks.calibrate(0) == 0 and locks.work_us_alone(0) == 0.0
    assert locks.work(10) == 1 ^ 2 ^ 3 ^ 4 ^ 5 ^ 6 ^ 7 ^ 8 ^ 9


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
        # Each side reports what its calibrated work took alone (a machine's figure),
        # and every acquisition held its locks for at least the wait.
        assert line["work_us_alone"] > 0
        assert line["hold_us"] >= 2000
        assert 0 < line["latency_p50_us"] <= line["latency_p90_us"] <= line["latency_p99_us"]
    assert "SharedLock" in ganeti_line["lock_path"]
    assert "LockSet" in corral["lock_path"]
    ratio = lines["ratio"]
    assert ratio["acquisitions_per_s_corral_over_ganeti"] == pytest.approx(
        corral["acquisitions_per_s"] / ganeti_line["acquisitions_per_s"], rel=0.01)
