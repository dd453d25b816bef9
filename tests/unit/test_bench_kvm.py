"""bench/kvm.py's two readings that are not plain clocks: a process's start time from
/proc (to split corral's add-to-marker at qemu's start) and the migration figures from
the job log of ``gnt-instance migrate``."""

from __future__ import annotations

import subprocess
import time

from tests.unit.bench_helpers import load_bench


def test_process_start_is_on_the_monotonic_clock() -> None:
    bench = load_bench("kvm")
    before = time.monotonic()
    child = subprocess.Popen(["sleep", "5"])
    try:
        after = time.monotonic()
        started = bench._process_start(child.pid)
    finally:
        child.kill()
        child.wait()
    # The kernel counts in clock ticks (10 ms): allow two of them either side.
    assert before - 0.02 <= started <= after + 0.02


def test_migration_figures_from_the_job_log() -> None:
    figures = load_bench("kvm")._FIGURES
    live = ("Wed Nov 25 00:53:11 2026 migration done in 3139 ms (memory 2878 ms), "
            "guest stopped for 7 ms\n")
    found = figures.search(live)
    assert found is not None and found.groups() == ("3139", "2878", "7")
    older = "migration done in 812 ms, guest stopped for 12 ms"
    found = figures.search(older)
    assert found is not None and found.groups() == ("812", None, "12")
    assert figures.search("migration done in 900 ms, the guest stopped throughout "
                          "(non-live)") is None
