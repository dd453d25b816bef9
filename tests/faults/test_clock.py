"""A master candidate whose clock is far off: its node daemon and confd run under
libfaketime (the Debian package ``faketime``, installed by ``make sysdeps``).

* node 3 three hours behind: beyond the hour by which certificates are backdated, so
  it finds the master's certificate not valid yet and refuses its calls (its node
  daemon's log says why at start, the master's errors say that a clock far off is a
  cause);
* node 2 two days ahead: certificates are still valid, but ``gnt-cluster verify``
  reports its time (and its confd finds every request stale).

Jobs go on meanwhile, and once the clocks are right again the candidates catch up.
Then the invariants of
:mod:`tests.faults.invariants`.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_tool
from tests.faults.conftest import FaultLog
from tests.faults.invariants import Ledger, check_cluster
from tests.faults.jobdriver import create_op, remove_op, run_job
from tests.faults.netbed import FaultBed, fault_bed

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
#: Three hours behind: past the hour by which certificates are backdated.
BEHIND = 3
#: Two days ahead: the certificates are valid still.
AHEAD = 2
SKEWS = {BEHIND: "-3h", AHEAD: "+2d"}


@pytest.fixture
def bed(request: pytest.FixtureRequest) -> Iterator[FaultBed]:
    """The shared fault testbed (the test sets the clocks right again itself)."""
    if not LIBFAKETIME.exists():
        pytest.skip(f"libfaketime ({LIBFAKETIME}, Debian package faketime) is not "
                    "installed: no way to skew one node's clock")
    shared = fault_bed(request)
    yield shared
    reports = shared.new_loop_reports()
    assert not reports, "a daemon blocked its event loop:\n" + "\n".join(reports)


def _skew(bed: FaultBed, node: int, offset: str) -> None:
    """Restart ``node``'s node daemon and confd with their clock ``offset`` off."""
    bed.restart(node, extra_env={
        "LD_PRELOAD": str(LIBFAKETIME), "FAKETIME": offset,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        # libfaketime intercepts every clock read: the loop check would measure it
        "CORRAL_LOOP_CHECK": "0"})


def _verify(bed: FaultBed) -> subprocess.CompletedProcess[str]:
    return run_tool(["gnt-cluster", "verify"], bed.handle.env, check=False, timeout=120)


def _vcpus(name: str, count: int) -> dict[str, Any]:
    return {"OP_ID": "OP_INSTANCE_SET_PARAMS", "instance_name": name,
            "beparams": {"vcpus": count}}



def test_candidates_with_their_clocks_far_off(bed: FaultBed, fault_log: FaultLog) -> None:
    cluster, ledger = bed.cluster, Ledger()
    name = "cfj-clock.testbed"
    assert run_job(cluster, ledger, create_op(name, bed.name(1)))[0] == "success"
    skewed: set[int] = set()
    try:
        for node, offset in SKEWS.items():
            skewed.add(node)
            _skew(bed, node, offset)
            fault_log.injected(f"{bed.name(node)}'s node daemon and confd restarted with "
                               f"their clock {offset} off")
        log = bed.paths(BEHIND).log_file("noded").read_text()
        assert "is before the start of its certificate's validity" in log
        fault_log.checked([f"{bed.name(BEHIND)}'s node daemon logs that its clock is "
                           "before its certificate's validity"])
        for count in (2, 3):
            status, result = run_job(cluster, ledger, _vcpus(name, count))
            assert status == "success", result
            ledger.acknowledge(("instance", name, "be/vcpus"), count)
        verify = _verify(bed)
        fault_log.note(f"gnt-cluster verify exited {verify.returncode}:\n"
                       + verify.stdout + verify.stderr)
        assert verify.returncode == 1
        assert re.search(rf"ERROR: node {bed.name(AHEAD)}: Node time diverges by at least "
                         r"\d+\.\ds from master node time", verify.stdout), verify.stdout
        assert re.search(rf"ERROR: node {bed.name(BEHIND)}: .*refused this node's "
                         "certificate, which it does when its clock is far off",
                         verify.stdout), verify.stdout
        while skewed:
            bed.restart(skewed.pop())
        fault_log.injected("the daemons restarted with the right clock")
        fault_log.checked(check_cluster(cluster, ledger, watcher=False))
    finally:
        while skewed:
            bed.restart(skewed.pop())
        run_job(cluster, ledger, remove_op(name))
