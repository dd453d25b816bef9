"""A master candidate cut off from the others mid-operation: its node daemon lives in a
network namespace whose link the test drops (:mod:`tests.faults.netbed`), so its
packets are lost without a refusal or a reset, as when a cable is pulled.

* during replication rounds: commits and jobs go on, the other candidate keeps up,
  and the cut one catches up once its link is back;
* during a migration to it: the migration ends with an error naming the node, the
  instance keeps running on one node only (the source, or the target if it arrived),
  and ``gnt-instance migrate --cleanup`` (the operator's repair) records where it runs.

After each: the invariants of :mod:`tests.faults.invariants`.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.faults.conftest import FaultLog, rounds
from tests.faults.invariants import Ledger, check_cluster
from tests.faults.jobdriver import (
    create_op,
    job_log,
    job_status,
    remove_op,
    run_job,
    submit,
    wait_job,
)
from tests.faults.netbed import FaultBed, fault_bed


@pytest.fixture
def bed(request: pytest.FixtureRequest) -> Iterator[FaultBed]:
    """The shared fault testbed, with every link up again after the test."""
    shared = fault_bed(request)
    yield shared
    for node in shared.network.isolated:
        shared.network.heal(node)
    reports = shared.new_loop_reports()
    assert not reports, "a daemon blocked its event loop:\n" + "\n".join(reports)




def _vcpus(name: str, count: int) -> dict[str, Any]:
    return {"OP_ID": "OP_INSTANCE_SET_PARAMS", "instance_name": name,
            "beparams": {"vcpus": count}}


def _replica_serial(bed: FaultBed, node: int) -> int:
    from corral.config import load_readonly
    return load_readonly(bed.paths(node).config_replica).serial


def _master_serial(bed: FaultBed) -> int:
    from corral.config import load_readonly
    return load_readonly(bed.paths(1).config_db).serial


def test_a_candidate_cut_off_during_replication_rounds(bed: FaultBed,
                                                        fault_log: FaultLog) -> None:
    cluster, ledger = bed.cluster, Ledger()
    name = "cfj-repl.testbed"
    assert run_job(cluster, ledger, create_op(name, bed.name(2)))[0] == "success"
    try:
        changes = 8
        for count in range(1, changes + 1):
            job = submit(cluster, ledger, _vcpus(name, count))
            if count == 3:
                # while the first changes travel to the candidates
                bed.network.cut(3)
                fault_log.injected(f"{bed.name(3)} cut off (link down) during the "
                                   f"replication of change {count} of {changes}")
            status, result = wait_job(cluster, ledger, job)
            assert status == "success", result
            ledger.acknowledge(("instance", name, "be/vcpus"), count)
        # The other candidate keeps up while node3 is cut off.
        deadline = time.monotonic() + 20
        while _replica_serial(bed, 2) != _master_serial(bed):
            assert time.monotonic() < deadline, "node2's replica fell behind with node3's"
            time.sleep(0.05)
        assert _replica_serial(bed, 3) < _master_serial(bed)
        fault_log.note(f"{bed.name(2)} kept up (serial {_replica_serial(bed, 2)}), "
                       f"{bed.name(3)} stayed at serial {_replica_serial(bed, 3)}")
        bed.network.heal(3)
        fault_log.injected(f"{bed.name(3)}'s link up again")
        fault_log.checked(check_cluster(cluster, ledger, watcher=False))
    finally:
        for node in bed.network.isolated:
            bed.network.heal(node)
        run_job(cluster, ledger, remove_op(name))


def _migrate(name: str, target: str) -> dict[str, Any]:
    return {"OP_ID": "OP_INSTANCE_MIGRATE", "instance_name": name, "target_node": target,
            "mode": "live", "cleanup": False, "allow_failover": False}


def _primary(bed: FaultBed, name: str) -> int:
    with bed.cluster.client() as client:
        answer = client.call("Query", "instance", ["pnode"], ["=", "name", name])
    return int(answer["data"][0][0][1].removeprefix("node").split(".")[0])


def _wait_for_acceptance(bed: FaultBed, target: int, name: str, job: int) -> str:
    """Wait until the target holds the instance as 'migrating' (it accepted, the
    migration is under way) or the job ended; say which."""
    state = bed.paths(target).hypervisor_state_dir / "fake" / f"{name}.json"
    deadline = time.monotonic() + 30
    polls = 0
    while time.monotonic() < deadline:
        try:
            if json.loads(state.read_text()).get("state") == "migrating":
                return "the target accepted the instance (its state 'migrating')"
        except (FileNotFoundError, ValueError):
            pass
        polls += 1
        if polls % 50 == 0 and job_status(bed.cluster, job) not in (
                "queued", "waiting", "running"):
            return "the job ended (the target's acceptance was missed)"
        time.sleep(0.001)
    raise AssertionError(f"job {job}: the target never accepted the instance: "
                         f"{job_log(bed.cluster, job)}")


def test_the_target_cut_off_during_a_migration(bed: FaultBed, fault_log: FaultLog,
                                               rng: random.Random) -> None:
    """Each round migrates the instance to the other namespaced node and cuts that one
    off once it accepted the instance (plus a random pause after the first round;
    CORRAL_FAULT_ROUNDS gives more rounds)."""
    cluster, ledger = bed.cluster, Ledger()
    name = "cfj-mig.testbed"
    started = run_job(cluster, ledger, create_op(name, bed.name(2)),
                      {"OP_ID": "OP_INSTANCE_STARTUP", "instance_name": name})
    assert started[0] == "success", started
    try:
        for round_ in range(rounds(1)):
            target = 5 - _primary(bed, name)  # node 2 <-> node 3
            pause = 0.0 if round_ == 0 else rng.uniform(0, 0.05)
            job = submit(cluster, ledger, _migrate(name, bed.name(target)))
            when = _wait_for_acceptance(bed, target, name, job)
            time.sleep(pause)
            bed.network.cut(target)
            fault_log.injected(f"round {round_}: {bed.name(target)} (the target) cut off "
                               f"{pause * 1000:.0f} ms after {when}")
            status, result = wait_job(cluster, ledger, job)
            fault_log.note(f"the migration ended {status}: {result}")
            bed.network.heal(target)
            fault_log.injected(f"{bed.name(target)}'s link up again")
            if status != "success":
                message = str(result)
                assert bed.name(target) in message, message
                assert "unreachable" in message or "did not answer" in message, message
                if "--cleanup" in message:
                    cleanup = dict(_migrate(name, bed.name(target)), cleanup=True)
                    fixed = run_job(cluster, ledger, cleanup)
                    fault_log.note(f"gnt-instance migrate --cleanup: {fixed[0]}")
                    assert fixed[0] == "success", fixed
            fault_log.checked(check_cluster(cluster, ledger, watcher=False))
    finally:
        for node in bed.network.isolated:
            bed.network.heal(node)
        run_job(cluster, ledger, remove_op(name))
