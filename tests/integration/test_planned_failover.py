"""A planned master failover (``gnt-cluster master-failover`` while the old master
runs) loses no job: the old master refuses new jobs, lets the running opcode finish
and leaves the rest queued; the new master runs every job to its end. The testbed
follows a failover an administrator ran by hand."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from corral.paths import Paths
from tests.conftest import BIN, TestbedHandle, run_testbed, run_tool


def _env(testbed: TestbedHandle, index: int) -> dict[str, str]:
    root = testbed.state["nodes"][index - 1]["root"]
    return {**testbed.env, "CORRAL_ROOT": root}


def _submit(env: dict[str, str], *args: str, check: bool = True
            ) -> subprocess.CompletedProcess[str]:
    return run_tool(["gnt-debug", "delay", "--submit", "--print-jobid", *args], env,
                    check=check)


def _status(env: dict[str, str], job: int) -> str:
    return run_tool(["gnt-job", "list", "--no-headers", "-o", "status", str(job)],
                    env).stdout.strip()


def _wait_for_status(env: dict[str, str], job: int, wanted: str) -> None:
    deadline = time.monotonic() + 30
    while _status(env, job) != wanted:
        assert time.monotonic() < deadline, f"job {job} never became {wanted}"
        time.sleep(0.05)


def _final_statuses(env: dict[str, str], jobs: list[int]) -> dict[int, str]:
    for job in jobs:
        run_tool(["gnt-job", "wait", str(job)], env, check=False, timeout=120)
    out = run_tool(["gnt-job", "list", "--no-headers", "-o", "id,status",
                    *map(str, jobs)], env).stdout
    return {int(line.split()[0]): line.split()[1] for line in out.splitlines()}


def test_planned_failover_finishes_every_job_on_the_new_master(
        testbed: TestbedHandle) -> None:
    old, new = _env(testbed, 1), _env(testbed, 2)
    run_tool(["gnt-cluster", "modify", "--max-running-jobs", "2"], old)
    running = int(_submit(old, "8").stdout.split()[0])
    _wait_for_status(old, running, "running")
    waiting = int(_submit(old, "1").stdout.split()[0])  # waits for the master's lock
    _wait_for_status(old, waiting, "waiting")
    queued = [int(_submit(old, "0").stdout.split()[0]) for _ in range(3)]
    assert {_status(old, job) for job in queued} == {"queued"}
    # An administrator following a job on the old master is told where it went.
    follower = subprocess.Popen([str(BIN / "gnt-job"), "watch", str(waiting)], env=old,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out = run_tool(["gnt-cluster", "master-failover"], new, timeout=180).stdout
        _followed, lost = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert "node2.testbed is the master now (was node1.testbed)" in out
    assert "interrupted" not in out.lower()
    assert follower.returncode == 1
    assert "node 'node2.testbed'" in lost and f"gnt-job watch {waiting}" in lost, lost
    jobs = [running, waiting, *queued]
    assert _final_statuses(new, jobs) == dict.fromkeys(jobs, "success")
    # The job that waited for the lock says where it went.
    info = run_tool(["gnt-job", "info", str(waiting)], new).stdout
    assert "moves to node2.testbed" in info


def test_submissions_during_the_handover_are_refused_or_kept(
        testbed: TestbedHandle) -> None:
    old, new = _env(testbed, 1), _env(testbed, 2)
    running = int(_submit(old, "6").stdout.split()[0])
    _wait_for_status(old, running, "running")
    failover = subprocess.Popen([str(BIN / "gnt-cluster"), "master-failover"], env=new,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    accepted: list[int] = []
    refusals: list[str] = []
    try:
        while failover.poll() is None:
            proc = _submit(old, "0", check=False)
            if proc.returncode == 0:
                accepted.append(int(proc.stdout.split()[0]))
            else:
                refusals.append(proc.stderr)
    finally:
        _out, err = failover.communicate(timeout=180)
    assert failover.returncode == 0, err
    # While the old master hands over it says why it takes no job, and where to go.
    clear = [text for text in refusals if "master failover is in progress" in text]
    assert clear, refusals
    assert "node2.testbed" in clear[0]
    # Every job a user was given an id for runs to its end on the new master.
    jobs = [running, *accepted]
    assert _final_statuses(new, jobs) == dict.fromkeys(jobs, "success")


def test_testbed_follows_a_failover_run_by_hand(testbed: TestbedHandle) -> None:
    run_tool(["gnt-cluster", "master-failover"], _env(testbed, 2))
    status = run_testbed("status", "--dir", str(testbed.dir))
    assert status.returncode == 0, status.stderr
    roles = {line.split()[0]: line.split()[2] for line in status.stdout.splitlines()}
    assert roles == {"node1.testbed": "node", "node2.testbed": "master",
                     "node3.testbed": "node"}
    testbed.reload()
    node2 = testbed.state["nodes"][1]
    assert testbed.state["master"] == "node2.testbed"
    assert testbed.state["env"]["CORRAL_ROOT"] == node2["root"]
    assert testbed.state["rapi"]["url"].startswith(f"https://{node2['ip']}:")
    assert "masterd" in node2["daemons"]
    assert testbed.run("gnt-cluster", "getmaster").stdout.strip() == "node2.testbed"

    back = run_testbed("failover", "--dir", str(testbed.dir), "--to", "1")
    assert back.returncode == 0, back.stderr
    testbed.reload()
    assert testbed.state["master"] == "node1.testbed"
    assert testbed.run("gnt-cluster", "getmaster").stdout.strip() == "node1.testbed"
    assert Paths(Path(testbed.state["nodes"][0]["root"])).config_db.exists()
    assert json.loads((testbed.dir / "testbed.json").read_text())["master"] == "node1.testbed"
