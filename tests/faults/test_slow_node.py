"""A slow node: its node daemon is frozen (SIGSTOP) and thawed (SIGCONT) seconds later,
as a node stalled by swapping or a hung disk is. Its kernel still accepts connections
and acknowledges what it is sent, so the master does not take it for cut off (the
dead-peer limit of :mod:`corral.rpc.deadpeer` is shorter than the freeze); the node
answers every call, late.

* a call whose timeout is shorter than the freeze (``gnt-debug delay -n NODE 0``: 5 s)
  fails its job with an error naming the node and the timeout, its locks are freed,
  and the late answer changes nothing;
* a call whose timeout is longer (starting an instance) waits for the late answer and
  succeeds; the instance runs once, on its node.

Then the invariants of :mod:`tests.faults.invariants`.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator

import pytest

from corral.utils.process import running_pid
from tests.faults.conftest import FaultLog
from tests.faults.invariants import Ledger, check_cluster
from tests.faults.jobdriver import create_op, job_status, remove_op, run_job, submit, wait_job
from tests.faults.netbed import DEAD_PEER_TIMEOUT, FaultBed, fault_bed

SLOW = 2
#: Seconds the node daemon stays frozen: past the delay call's 5 s timeout and the
#: dead-peer limit, far below an instance start's.
FREEZE = 6.5


@pytest.fixture
def bed(request: pytest.FixtureRequest) -> Iterator[FaultBed]:
    """The shared fault testbed; the slow node's daemon is thawed afterwards."""
    shared = fault_bed(request)
    yield shared
    pid = running_pid(shared.paths(SLOW).pid_file("noded"))
    if pid is not None:
        os.kill(pid, signal.SIGCONT)
    reports = shared.new_loop_reports()
    assert not reports, "a daemon blocked its event loop:\n" + "\n".join(reports)



def test_a_node_that_answers_after_the_rpc_timeout(bed: FaultBed,
                                                   fault_log: FaultLog) -> None:
    assert FREEZE > 5 and FREEZE > DEAD_PEER_TIMEOUT
    cluster, ledger = bed.cluster, Ledger()
    name = "cfj-slow.testbed"
    node = bed.name(SLOW)
    assert run_job(cluster, ledger, create_op(name, node))[0] == "success"
    pid = running_pid(bed.paths(SLOW).pid_file("noded"))
    assert pid is not None
    try:
        os.kill(pid, signal.SIGSTOP)
        frozen = time.monotonic()
        fault_log.injected(f"{node}'s node daemon frozen (SIGSTOP) for {FREEZE:g} s")
        delay = submit(cluster, ledger, {"OP_ID": "OP_TEST_DELAY", "duration": 0,
                                         "on_master": False, "on_nodes": [node],
                                         "repeat": 0})
        start = submit(cluster, ledger, {"OP_ID": "OP_INSTANCE_STARTUP",
                                         "instance_name": name})
        status, result = wait_job(cluster, ledger, delay)
        fault_log.note(f"gnt-debug delay -n {node} 0 (job {delay}): {status}: {result}")
        assert status == "error", result
        assert f"node {node} did not answer within 5 s" in str(result), result
        assert job_status(cluster, start) in ("waiting", "running")
        time.sleep(max(0.0, FREEZE - (time.monotonic() - frozen)))
    finally:
        os.kill(pid, signal.SIGCONT)
    fault_log.injected(f"{node}'s node daemon thawed (SIGCONT): it answers late")
    # A callback running when the daemon was frozen held its loop for the freeze: the
    # loop check reports that (not a blocking call of corral's); any other report fails
    # the test in the fixture.
    frozen_log = f"node{SLOW}/var/log/corral/noded.log"
    for line in bed.new_loop_reports():
        held = re.search(r"held the event loop for (?:over )?([\d.]+) s", line)
        assert frozen_log in line and held and float(held.group(1)) >= FREEZE - 1, line
        fault_log.note(f"the loop check saw the freeze: {line}")
    try:
        status, result = wait_job(cluster, ledger, start)
        fault_log.note(f"gnt-instance startup {name} (job {start}), its call waiting "
                       f"for the frozen node: {status}")
        assert status == "success", result
        ledger.acknowledge(("instance", name, "admin_state"), "up")
        # the node answers again at once
        again = run_job(cluster, ledger, {"OP_ID": "OP_TEST_DELAY", "duration": 0,
                                          "on_master": False, "on_nodes": [node],
                                          "repeat": 0})
        assert again[0] == "success", again
        fault_log.checked(check_cluster(cluster, ledger, watcher=False))
    finally:
        run_job(cluster, ledger, remove_op(name))
