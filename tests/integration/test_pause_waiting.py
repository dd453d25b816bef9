"""A PAUSE filter on a job that is waiting for locks (seed 000), on a real testbed.

The job is made to wait by an interruptible ``gnt-debug delay`` holding the master
node's lock; ``gnt-debug locks`` shows who holds and who queues for each lock. The job
stays paused across a planned master failover.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import TestbedHandle, run_tool

pytestmark = pytest.mark.integration


def _submit_delay(tb: TestbedHandle, *args: str) -> int:
    proc = tb.run("gnt-debug", "delay", "--submit", "--print-jobid", *args)
    return int(proc.stdout.split()[0])


def _fields(env: dict[str, str], job_id: int, fields: str) -> list[str]:
    """The job's ``fields`` as listed by the master that ``env`` reaches."""
    row = run_tool(["gnt-job", "list", "--no-headers", "--separator", "|", "-o", fields,
                    str(job_id)], env).stdout.strip()
    return row.split("|")


def _lock_users(tb: TestbedHandle) -> dict[str, set[int]]:
    """Job ids holding or queueing for each lock, by lock name."""
    rows = tb.run("gnt-debug", "locks", "--no-headers", "--separator", "|").stdout
    users: dict[str, set[int]] = {}
    for row in rows.splitlines():
        name, _mode, owners, pending = row.split("|")
        names = [] if owners == "-" else owners.split(",")
        if pending != "-":
            for entry in pending.split(", "):
                names += entry.split(":", 1)[1].split(",")
        users[name] = {int(owner.rsplit("/", 1)[-1]) for owner in names}
    return users


def _wait_for(tb: TestbedHandle, job_id: int, status: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while _fields(tb.env, job_id, "status") != [status]:
        assert time.monotonic() < deadline, f"job {job_id} never became {status}"
        time.sleep(0.1)


def test_pause_releases_a_waiting_job_until_the_rule_goes(testbed: TestbedHandle) -> None:
    old = testbed.env
    holder = _submit_delay(testbed, "--interruptible", "600")
    _wait_for(testbed, holder, "running")
    waiting = _submit_delay(testbed, "--reason", "pause-while-waiting", "0")
    _wait_for(testbed, waiting, "waiting")
    # Between its timed lock attempts the job briefly holds nothing: look again.
    deadline = time.monotonic() + 10
    while not any(waiting in users for users in _lock_users(testbed).values()):
        assert time.monotonic() < deadline, f"job {waiting} is in no lock queue"
        time.sleep(0.05)

    predicates = json.dumps([["reason", ["=", "reason", "pause-while-waiting"]]])
    uuid = testbed.run("gnt-filter", "add", "--action", "PAUSE", "--predicates",
                       predicates).stdout.strip()
    # Held by the rule, back in the queue, and out of every lock and lock queue.
    assert _fields(old, waiting, "status,paused_by,opstatus") == [
        "queued", uuid, "['queued']"]
    assert not [name for name, users in _lock_users(testbed).items() if waiting in users]
    assert f"Paused by filter rule {uuid}" in testbed.run(
        "gnt-job", "info", str(waiting)).stdout

    # A later job needing the same lock gets it once the holder is gone; the
    # paused one still does not run.
    later = _submit_delay(testbed, "0")
    _wait_for(testbed, later, "waiting")
    testbed.run("gnt-job", "cancel", str(holder))
    testbed.run("gnt-job", "wait", str(later))
    assert _fields(old, later, "status") == ["success"]
    assert _fields(old, waiting, "status,paused_by") == ["queued", uuid]

    # The new master of a planned failover keeps it paused.
    new = {**testbed.env, "CORRAL_ROOT": testbed.state["nodes"][1]["root"]}
    run_tool(["gnt-cluster", "master-failover"], new, timeout=180)
    assert _fields(new, waiting, "status,paused_by") == ["queued", uuid]

    # The rule goes: the job waits for its lock again and succeeds.
    run_tool(["gnt-filter", "delete", uuid], new)
    run_tool(["gnt-job", "wait", str(waiting)], new)
    assert _fields(new, waiting, "status,paused_by") == ["success", "None"]
