"""kill -9 of corral's daemons: nothing acknowledged is lost, only the opcode that was
running when the master daemon died fails.

All tests share one 3-node testbed (the failover comes last: it leaves the master on
another node).

**The issue's scenario** (:func:`test_kill9_of_masterd_fails_only_the_running_job`, last):
40 ``gnt-debug delay`` jobs locking the master node, one running, 19 waiting for its
lock, 20 queued behind them (``max_running_jobs`` 20); kill -9 of the master daemon by
pid. After the restart (``corral-daemons start``), or after a master failover to a
candidate instead, only the running job ends in error, saying the master daemon died;
every other job runs to success, the requeued ones keeping their start time and saying
in their log why they waited twice.

**Every daemon under load** (:func:`test_kill9_of_each_daemon_under_load`): each round
waits a random time (seeded: ``CORRAL_FAULT_SEED``) while the workload of
:mod:`tests.faults.workload` runs (instance add/remove/start/stop/modify on the fake
hypervisor, ``gnt-debug delay`` jobs, RAPI reads), then kills one daemon by pid: the
master daemon, the node daemon of the master and of another node, confd, RAPI, mond,
or the watcher in the middle of its pass. The operator's repair follows
(``corral-daemons start`` on that node; the watcher simply runs again), the workload
stops after its current jobs, and every invariant of :mod:`tests.faults.invariants`
is checked before the next round. By default each target is hit once; with
``CORRAL_FAULT_ROUNDS=N`` the test runs N rounds (soak mode), the targets after the
first of each chosen at random.
"""

from __future__ import annotations

import time
from random import Random
from typing import Any

import pytest

from corral.jobs.recovery import CRASH_MESSAGE, REQUEUED_MESSAGE
from tests.conftest import TestbedHandle, run_tool
from tests.faults.conftest import FaultLog, rounds
from tests.faults.injector import kill9, kill_watcher, master_failover, restart, wait_luxi
from tests.faults.invariants import (
    FaultCluster,
    FaultNode,
    Ledger,
    check_cluster,
    settle_jobs,
)
from tests.faults.workload import Workload

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


#: (daemon, where): every daemon once, the node daemon on the master and off it.
TARGETS = [("masterd", "master"), ("noded", "master"), ("noded", "other"),
           ("confd", "other"), ("rapi", "master"), ("mond", "other"), ("watcher", "master")]


def _node(cluster: FaultCluster, where: str, rng_choice: int) -> FaultNode:
    master = cluster.master()
    if where == "master":
        return master
    others = cluster.candidates() or [n for n in cluster.nodes if n != master]
    return others[rng_choice % len(others)]


def test_kill9_of_each_daemon_under_load(testbed: TestbedHandle, fault_cluster: FaultCluster,
                                         fault_log: FaultLog,
                                         rng: Random) -> None:
    ledger = Ledger()
    workload = Workload(fault_cluster, ledger, rng, rapi=testbed.state["rapi"])
    count = rounds(len(TARGETS))
    try:
        for number in range(count):
            daemon, where = (TARGETS[number] if number < len(TARGETS)
                             else rng.choice(TARGETS))
            workload.start()
            time.sleep(rng.uniform(0.05, 0.5))
            node = _node(fault_cluster, where, rng.randrange(1000))
            if daemon == "watcher":
                fault_log.injected(f"round {number + 1}: " + kill_watcher(fault_cluster, rng))
            else:
                pid = kill9(node, daemon)
                fault_log.injected(f"round {number + 1}: kill -9 of {daemon} (pid {pid}) on "
                                   f"{node.name}")
                time.sleep(rng.uniform(0.0, 0.2))  # the cluster without it for a while
                fault_log.note("  " + restart(fault_cluster, node))
            wait_luxi(fault_cluster)
            workload.stop()
            try:
                fault_log.checked(check_cluster(fault_cluster, ledger))
            except AssertionError as err:
                fault_log.note(f"  FAILED: {err}")
                for event in workload.history:
                    fault_log.note(f"  {event}")
                raise
            workload.resync()
    finally:
        workload.stop()
        fault_log.note(workload.summary())
    assert workload.counts.succeeded > 0, "the workload did nothing: " + workload.summary()


@pytest.mark.parametrize("repair", ["restart", "failover"])
def test_kill9_of_masterd_fails_only_the_running_job(fault_cluster: FaultCluster,
                                                     fault_log: FaultLog, repair: str) -> None:
    """The issue's scenario, repaired by a restart or by a failover to a candidate (the
    last test of the module: it leaves the master on another node)."""
    ledger = Ledger()
    running, waiting, queued = _fill_queue(fault_cluster, ledger)
    before = _statuses(fault_cluster, waiting)
    master = fault_cluster.master()
    pid = kill9(master, "masterd")
    fault_log.injected(f"kill -9 of masterd (pid {pid}) on {master.name} with job {running} "
                       f"running, {len(waiting)} waiting for its lock, {len(queued)} queued")
    if repair == "restart":
        fault_log.note(restart(fault_cluster, master))
        wait_luxi(fault_cluster)
    else:
        new = fault_cluster.candidates()[0]
        fault_log.note(master_failover(fault_cluster, new))
        assert fault_cluster.master() == new
    _check_outcome(fault_cluster, running, waiting, queued, before)
    fault_log.note(f"  job {running} error ({CRASH_MESSAGE!r}); the {len(waiting)} waiting "
                   f"requeued and the {len(queued)} queued ran to success")
    fault_log.checked(check_cluster(fault_cluster, ledger))
