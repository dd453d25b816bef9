"""The watcher on a real testbed: it restarts an instance killed behind corral's back
(fake hypervisor: its state file removed) with a ``gnt:watcher`` reason, leaves an
instance stopped through corral alone, honours ``gnt-cluster watcher pause`` on every
node, and starts a node daemon that died. The node keeps the last status change's
reason trail in its file, across a node daemon restart."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from corral.paths import Paths
from corral.utils.process import running_pid
from tests.conftest import TestbedHandle, run_tool

pytestmark = [pytest.mark.integration, pytest.mark.shared_testbed]

INSTANCES = ("wd-up.testbed", "wd-stopped.testbed")


def _node_paths(testbed: TestbedHandle, number: int) -> Paths:
    return Paths(Path(testbed.state["nodes"][number - 1]["root"]))


def _node_env(testbed: TestbedHandle, number: int) -> dict[str, str]:
    return {**testbed.env, "CORRAL_ROOT": testbed.state["nodes"][number - 1]["root"]}


def _watcher(testbed: TestbedHandle, number: int = 1, *args: str) -> None:
    run_tool(["corral-watcher", *args], _node_env(testbed, number))


def _status(testbed: TestbedHandle) -> dict[str, str]:
    out = testbed.run("gnt-instance", "list", "--no-headers", "-o", "name,status",
                      *INSTANCES).stdout
    return dict(line.split() for line in out.splitlines())


def _kill_behind_corrals_back(testbed: TestbedHandle, name: str) -> None:
    state = _node_paths(testbed, 2).hypervisor_state_dir / "fake" / f"{name}.json"
    state.unlink()


def _trail(testbed: TestbedHandle, name: str) -> list[list[object]]:
    path = _node_paths(testbed, 2).instance_reason_dir / name
    data: list[list[object]] = json.loads(path.read_text())
    return data


@pytest.fixture
def instances(testbed: TestbedHandle):  # type: ignore[no-untyped-def]
    for name in INSTANCES:
        # --no-install leaves a new instance stopped, as in Ganeti
        testbed.run("gnt-instance", "add", "-t", "diskless", "--no-install",
                    "-n", "node2.testbed", name)
        testbed.run("gnt-instance", "startup", name)
    testbed.run("gnt-instance", "shutdown", "--reason", "not needed now", INSTANCES[1])
    try:
        yield testbed
    finally:
        testbed.run("gnt-cluster", "watcher", "continue")
        for name in INSTANCES:
            testbed.run("gnt-instance", "remove", "-f", name, check=False)


def test_watcher_restarts_a_killed_instance_and_leaves_a_stopped_one(
        instances: TestbedHandle) -> None:
    testbed = instances
    up, stopped = INSTANCES
    assert _trail(testbed, stopped)[0][:2] == ["user", "not needed now"]
    assert _trail(testbed, stopped)[-1][0] == "gnt:daemon:noded:shutdown"
    _kill_behind_corrals_back(testbed, up)
    assert _status(testbed) == {up: "ERROR_down", stopped: "ADMIN_down"}

    # Paused on every node: a pass changes nothing.
    out = testbed.run("gnt-cluster", "watcher", "pause", "1h").stdout
    assert out.startswith("The watcher is paused until ") and out.endswith(".\n")
    for number in (1, 2, 3):
        until = int(_node_paths(testbed, number).watcher_pause_file.read_text())
        assert 3500 < until - time.time() <= 3600
    assert testbed.run("gnt-cluster", "watcher", "info").stdout == out
    _watcher(testbed)
    assert _status(testbed)[up] == "ERROR_down"

    assert testbed.run("gnt-cluster", "watcher", "continue").stdout == \
        "The watcher is no longer paused.\n"
    assert testbed.run("gnt-cluster", "watcher", "info").stdout == \
        "The watcher is not paused.\n"
    assert not _node_paths(testbed, 3).watcher_pause_file.exists()
    _watcher(testbed)
    assert _status(testbed) == {up: "running", stopped: "ADMIN_down"}
    # The restart's trail: the watcher's reason, the queue's and the node daemon's.
    trail = _trail(testbed, up)
    assert trail[0][:2] == ["gnt:watcher", f"Restarting instance {up}"]
    assert [entry[0] for entry in trail][1:] == ["gnt:opcode:instance_startup",
                                                 "gnt:daemon:noded:start"]
    log = (_node_paths(testbed, 1).log_dir / "watcher.log").read_text()
    assert f"restarting instance {up} (attempt 1 of 5)" in log

    # A second pass finds everything as wanted: it submits nothing.
    jobs_before = testbed.run("gnt-job", "list", "--no-headers", "-o", "id").stdout
    _watcher(testbed)
    assert testbed.run("gnt-job", "list", "--no-headers", "-o", "id").stdout == jobs_before


def test_bad_watcher_commands_are_ganetis_errors(testbed: TestbedHandle) -> None:
    for args, message in ((["pause"], "Missing pause duration"),
                          (["pause", "abc"], "Invalid time specification 'abc'"),
                          (["bogus"], "Command 'bogus' is not valid.")):
        proc = testbed.run("gnt-cluster", "watcher", *args, check=False)
        assert proc.returncode == 1
        assert proc.stderr.splitlines() == [
            "Failure: prerequisites not met for this operation:",
            "error type: wrong_input, error details:", message]


def test_watcher_starts_a_node_daemon_that_died(instances: TestbedHandle) -> None:
    testbed = instances
    node2 = _node_paths(testbed, 2)
    before = _trail(testbed, INSTANCES[1])
    pid = running_pid(node2.pid_file("noded"))
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # a daemon of this test's testbed, by its pid
    deadline = time.monotonic() + 10
    while running_pid(node2.pid_file("noded")) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running_pid(node2.pid_file("noded")) is None
    _watcher(testbed, 2)
    assert running_pid(node2.pid_file("noded")) not in (None, pid)
    # The node answers again, and its files outlived the daemon.
    assert _status(testbed)[INSTANCES[1]] == "ADMIN_down"
    assert _trail(testbed, INSTANCES[1]) == before
