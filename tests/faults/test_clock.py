"""A master candidate whose clock is far off: its node daemon and confd run under
libfaketime (the Debian package ``faketime``, installed by ``make sysdeps``).

* three hours behind: beyond the hour by which certificates are backdated, so the
  candidate finds the master's certificate not valid yet and refuses its calls;
* two days ahead: certificates are still valid, but the candidate's confd finds every
  request stale.

Each time, the jobs go on, ``gnt-cluster verify`` says what is wrong with the node,
and once the clock is right again the candidate catches up. Then the invariants of
:mod:`tests.faults.invariants`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_tool
from tests.faults.conftest import FaultLog
from tests.faults.invariants import Ledger, check_cluster
from tests.faults.jobdriver import run_job
from tests.faults.netbed import FaultBed, fault_bed

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
SKEWED = 3


@pytest.fixture
def bed(request: pytest.FixtureRequest) -> Iterator[FaultBed]:
    """The shared fault testbed; node 3's daemons run with the right clock afterwards."""
    if not LIBFAKETIME.exists():
        pytest.skip(f"libfaketime ({LIBFAKETIME}, Debian package faketime) is not "
                    "installed: no way to skew one node's clock")
    shared = fault_bed(request)
    yield shared
    shared.restart(SKEWED)
    reports = shared.new_loop_reports()
    assert not reports, "a daemon blocked its event loop:\n" + "\n".join(reports)


def _skew(bed: FaultBed, offset: str) -> None:
    """Restart node 3's node daemon and confd with their clock ``offset`` off."""
    bed.restart(SKEWED, extra_env={
        "LD_PRELOAD": str(LIBFAKETIME), "FAKETIME": offset,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        # libfaketime intercepts every clock read: the loop check would measure it
        "CORRAL_LOOP_CHECK": "0"})


def _verify(bed: FaultBed) -> subprocess.CompletedProcess[str]:
    return run_tool(["gnt-cluster", "verify"], bed.handle.env, check=False, timeout=120)


def _vcpus(name: str, count: int) -> dict[str, Any]:
    return {"OP_ID": "OP_INSTANCE_SET_PARAMS", "instance_name": name,
            "beparams": {"vcpus": count}}


def _create(name: str, node: str) -> dict[str, Any]:
    return {"OP_ID": "OP_INSTANCE_CREATE", "instance_name": name, "mode": "create",
            "disk_template": "diskless", "os_type": "corral-tiny", "no_install": True,
            "start": False, "pnode": node, "nics": [], "disks": [], "name_check": False,
            "ip_check": False, "hypervisor": "fake"}


@pytest.mark.parametrize("offset", ["-3h", "+2d"])
def test_a_candidate_with_its_clock_far_off(bed: FaultBed, fault_log: FaultLog,
                                            offset: str) -> None:
    cluster, ledger = bed.cluster, Ledger()
    name = "cfj-clock.testbed"
    assert run_job(cluster, ledger, _create(name, bed.name(2)))[0] == "success"
    try:
        _skew(bed, offset)
        fault_log.injected(f"{bed.name(SKEWED)}'s node daemon and confd restarted with "
                           f"their clock {offset} off")
        for count in (2, 3):
            status, result = run_job(cluster, ledger, _vcpus(name, count))
            assert status == "success", result
            ledger.acknowledge(("instance", name, "be/vcpus"), count)
        verify = _verify(bed)
        fault_log.note(f"gnt-cluster verify exited {verify.returncode}:\n"
                       + verify.stdout + verify.stderr)
        bed.restart(SKEWED)
        fault_log.injected(f"{bed.name(SKEWED)}'s daemons restarted with the right clock")
        fault_log.checked(check_cluster(cluster, ledger, watcher=False))
    finally:
        bed.restart(SKEWED)
        run_job(cluster, ledger, {"OP_ID": "OP_INSTANCE_REMOVE", "instance_name": name,
                                  "shutdown_timeout": 10})
