"""The watcher's decisions, without daemons: which instances it restarts (and which it
leaves alone: stopped through corral, locked by a job, backing off, given up), which
nodes count as rebooted, its pause file, its memory between runs and its lock."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from corral.errors import OpPrereqError
from corral.paths import Paths
from corral.utils.process import PidFile
from corral.watcher import run as watcher_run
from corral.watcher.pause import parse_timespec, paused_until, write_pause
from corral.watcher.run import MAX_ATTEMPTS, Options, Report, backoff, run_pass
from corral.watcher.state import WatcherState


def _inst(name: str, status: str, *, pnode: str = "node1", disks_active: bool = False
          ) -> dict[str, Any]:
    return {"name": name, "status": status, "admin_state": "up", "pnode": pnode,
            "disks_active": disks_active}


def test_only_instances_that_should_run_and_do_not_are_restarted() -> None:
    state, report = WatcherState(), Report()
    instances = [_inst("down", "ERROR_down"), _inst("stopped", "ADMIN_down"),
                 _inst("runs", "running"), _inst("busy", "ERROR_down"),
                 _inst("offline-node", "ERROR_nodedown")]
    ops = watcher_run._plan_restarts(instances, {"busy"}, state, report, 1000.0)
    assert list(ops) == ["down"]
    op = ops["down"]
    assert op["OP_ID"] == "OP_INSTANCE_STARTUP" and op["instance_name"] == "down"
    [(source, text, timestamp)] = op["reason"]
    assert (source, text) == ("gnt:watcher", "Restarting instance down")
    assert timestamp > 10**18
    assert report.skipped_locked == ["busy"]
    assert state.attempts("down").count == 1 and state.attempts("stopped").count == 0


def test_attempts_back_off_and_stop_after_the_limit() -> None:
    state = WatcherState()
    inst = [_inst("web1", "ERROR_down")]
    now = 1000.0
    assert watcher_run._plan_restarts(inst, set(), state, Report(), now)
    report = Report()
    assert not watcher_run._plan_restarts(inst, set(), state, report, now + 1)
    assert report.backing_off == ["web1"]
    for attempt in range(2, MAX_ATTEMPTS + 1):
        now += backoff(attempt - 1)
        assert watcher_run._plan_restarts(inst, set(), state, Report(), now), attempt
    report = Report()
    assert not watcher_run._plan_restarts(inst, set(), state, report, now + 10**6)
    assert report.given_up == ["web1"]
    # Once it runs again, the counter starts afresh.
    watcher_run._plan_restarts([_inst("web1", "running")], set(), state, Report(), now)
    assert state.attempts("web1").count == 0
    assert [backoff(n) for n in range(5)] == [0.0, 60.0, 120.0, 240.0, 480.0]
    assert backoff(20) == 3600.0


def test_disks_are_activated_for_instances_on_rebooted_nodes() -> None:
    state = WatcherState(boot_ids={"node1": "boot-a", "node2": "boot-b"})
    nodes = [{"name": "node1", "bootid": "boot-a", "offline": False},
             {"name": "node2", "bootid": "boot-c", "offline": False},
             {"name": "node3", "bootid": None, "offline": True}]
    instances = [_inst("on1", "ADMIN_down", disks_active=True),
                 _inst("on2", "ADMIN_down", pnode="node2", disks_active=True),
                 _inst("on2-inactive", "ADMIN_down", pnode="node2"),
                 _inst("on2-runs", "running", pnode="node2", disks_active=True)]
    report = Report()
    ops = watcher_run._plan_disk_activations(instances, nodes, set(), state, report)
    assert list(ops) == ["on2"]
    assert ops["on2"]["OP_ID"] == "OP_INSTANCE_ACTIVATE_DISKS"
    assert ops["on2"]["reason"][0][:2] == ["gnt:watcher", "Activating disks for instance on2"]
    assert report.rebooted_nodes == ["node2"]
    assert state.boot_ids["node2"] == "boot-c"


def test_state_survives_a_run_and_a_bad_file_is_a_fresh_start(tmp_path: Path) -> None:
    path = tmp_path / "watcher.state.json"
    state = WatcherState()
    state.record_attempt("web1", 12.5)
    state.boot_ids["node1"] = "abc"
    state.save(path)
    again = WatcherState.load(path)
    assert (again.attempts("web1").count, again.attempts("web1").last) == (1, 12.5)
    assert again.boot_ids == {"node1": "abc"}
    path.write_text("{not json")
    assert WatcherState.load(path) == WatcherState()


@pytest.mark.parametrize(("text", "seconds"), [("30", 30), ("90s", 90), ("5m", 300),
                                                ("1h", 3600), ("2d", 172800), ("1w", 604800)])
def test_timespecs(text: str, seconds: int) -> None:
    assert parse_timespec(text) == seconds


@pytest.mark.parametrize(("text", "message"), [
    ("abc", "Invalid time specification 'abc'"), ("xh", "Invalid time specification 'x'"),
    ("h", "Invalid time specification (only suffix passed)"),
    ("", "Empty time specification passed")])
def test_bad_timespecs_are_ganetis_wrong_input(text: str, message: str) -> None:
    with pytest.raises(OpPrereqError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_timespec(text)


def test_pause_file(tmp_path: Path) -> None:
    path = tmp_path / "watcher.pause"
    assert paused_until(path) is None
    until = time.time() + 3600
    write_pause(path, until)
    assert path.read_text() == f"{int(until)}\n"  # Ganeti's format
    assert paused_until(path) == int(until)
    assert paused_until(path, now=until + 1) is None  # a pause that ended
    write_pause(path, None)
    assert not path.exists()


def test_a_paused_or_locked_out_watcher_does_nothing(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    paths.ensure_dirs()
    write_pause(paths.watcher_pause_file, time.time() + 60)
    report = run_pass(paths)
    assert report.paused_until is not None and not report.master
    assert not paths.watcher_lock_file.exists()
    lock = PidFile(paths.watcher_lock_file)  # another watcher runs
    try:
        report = run_pass(paths, Options(ignore_pause=True))
    finally:
        lock.remove()
    assert report.locked_out and report.daemons_started == {}
