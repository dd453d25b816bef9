"""kill -9 of the master daemon with a full queue loses only the opcode that was running.

The issue's scenario: 40 ``gnt-debug delay`` jobs locking the master node, one
running, 19 waiting for its lock, 20 queued behind them (``max_running_jobs`` 20);
kill -9 of the master daemon by pid. After the restart (``corral-daemons start``), or
after a master failover to a candidate instead, only the running job ends in error,
saying the master daemon died; every other job runs to success, the requeued ones
keeping their start time and saying in their log why they waited twice.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from corral.jobs.recovery import CRASH_MESSAGE, REQUEUED_MESSAGE
from tests.conftest import run_tool
from tests.faults.conftest import FaultLog
from tests.faults.injector import kill9, master_failover, restart, wait_luxi
from tests.faults.invariants import FaultCluster, Ledger, check_cluster, settle_jobs

pytestmark = [pytest.mark.integration, pytest.mark.shared_testbed]


def _delay(duration: float) -> list[dict[str, Any]]:
    """The opcode ``gnt-debug delay DURATION`` submits (it locks the master node)."""
    return [{"OP_ID": "OP_TEST_DELAY", "duration": duration, "on_master": True,
             "on_nodes": [], "repeat": 0, "no_locks": False}]


def _statuses(cluster: FaultCluster, ids: list[int]) -> dict[int, list[Any]]:
    with cluster.client() as client:
        rows = client.call("QueryJobs", ids, ["id", "status", "start_ts", "opresult",
                                              "oplog"])
    return {row[0]: row for row in rows if row is not None}


def _fill_queue(cluster: FaultCluster, ledger: Ledger) -> tuple[int, list[int], list[int]]:
    """One job running (through the real ``gnt-debug delay``), 19 waiting for its lock,
    20 queued; their ids."""
    out = run_tool(["gnt-debug", "delay", "--submit", "--print-jobid", "60"],
                   cluster.tool_env()).stdout
    running = int(out.split()[-1])
    ledger.submitted(running)
    with cluster.client() as client:
        answers = client.call("SubmitManyJobs", [_delay(0.02) for _ in range(39)])
    assert all(ok for ok, _ in answers), answers
    rest = [job_id for _, job_id in answers]
    for job_id in rest:
        ledger.submitted(job_id)
    deadline = time.monotonic() + 30
    while True:
        rows = _statuses(cluster, [running, *rest])
        waiting = [j for j in rest if rows[j][1] == "waiting"]
        if rows[running][1] == "running" and len(waiting) == 19:
            break
        assert time.monotonic() < deadline, f"the queue did not fill: {rows}"
        time.sleep(0.05)
    queued = [j for j in rest if rows[j][1] == "queued"]
    assert len(queued) == 20
    return running, waiting, queued


def _check_outcome(cluster: FaultCluster, running: int, waiting: list[int],
                   queued: list[int], before: dict[int, list[Any]]) -> None:
    settle_jobs(cluster, timeout=60)
    rows = _statuses(cluster, [running, *waiting, *queued])
    assert rows[running][1] == "error"
    assert rows[running][3] == [["OpExecError", [CRASH_MESSAGE]]]
    assert {j: rows[j][1] for j in waiting + queued} == dict.fromkeys(waiting + queued,
                                                                      "success")
    for job_id in waiting:
        assert rows[job_id][2] == before[job_id][2], "a requeued job kept its start time"
        assert REQUEUED_MESSAGE in [entry[3] for entry in rows[job_id][4][0]]
    for job_id in queued:
        assert REQUEUED_MESSAGE not in [entry[3] for entry in rows[job_id][4][0]]


def test_kill9_of_masterd_fails_only_the_running_job(fault_cluster: FaultCluster,
                                                     fault_log: FaultLog) -> None:
    ledger = Ledger()
    running, waiting, queued = _fill_queue(fault_cluster, ledger)
    before = _statuses(fault_cluster, waiting)
    master = fault_cluster.master()
    pid = kill9(master, "masterd")
    fault_log.injected(f"kill -9 of masterd (pid {pid}) on {master.name} with job {running} "
                       f"running, {len(waiting)} waiting for its lock, {len(queued)} queued")
    fault_log.note(restart(fault_cluster, master))
    wait_luxi(fault_cluster)
    _check_outcome(fault_cluster, running, waiting, queued, before)
    fault_log.note(f"  job {running} error ({CRASH_MESSAGE!r}); the {len(waiting)} waiting "
                   f"requeued and the {len(queued)} queued ran to success")
    fault_log.checked(check_cluster(fault_cluster, ledger))


def test_failover_after_kill9_of_masterd_fails_only_the_running_job(
        fault_cluster: FaultCluster, fault_log: FaultLog) -> None:
    ledger = Ledger()
    running, waiting, queued = _fill_queue(fault_cluster, ledger)
    before = _statuses(fault_cluster, waiting)
    old = fault_cluster.master()
    pid = kill9(old, "masterd")
    fault_log.injected(f"kill -9 of masterd (pid {pid}) on {old.name} with job {running} "
                       f"running, {len(waiting)} waiting, {len(queued)} queued")
    new = next(node for node in fault_cluster.candidates())
    fault_log.note(master_failover(fault_cluster, new))
    assert fault_cluster.master() == new
    _check_outcome(fault_cluster, running, waiting, queued, before)
    fault_log.checked(check_cluster(fault_cluster, ledger))
    # back to the first master, as the shared testbed was found
    fault_log.note(master_failover(fault_cluster, old))
    wait_luxi(fault_cluster)
