"""kill -9 of the master daemon during a stream of commits loses nothing acknowledged.

Each commit is an OP_CLUSTER_SET_PARAMS job; acknowledged means the job succeeded."""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import pytest

from corral.daemons import start
from corral.errors import CorralError
from corral.luxi import Client
from corral.paths import Paths
from corral.utils.process import running_pid
from tests.conftest import TestbedHandle

pytestmark = pytest.mark.integration


def _set_vcpus(client: Client, value: int) -> None:
    """Run one OP_CLUSTER_SET_PARAMS job and return once it succeeded."""
    job_id = client.call("SubmitJob", [{"OP_ID": "OP_CLUSTER_SET_PARAMS",
                                        "beparams": {"vcpus": value}}])
    while True:
        answer = client.call("WaitForJobChange", job_id, ["status"], None, None, 5)
        if answer != "nochange" and answer[0][0] in ("success", "error", "canceled"):
            assert answer[0][0] == "success", answer
            return


def _wait_for_jobs(paths: Paths) -> None:
    with Client(paths.master_socket, timeout=10) as client:
        for _ in range(200):
            statuses = [row[0] for row in client.call("QueryJobs", None, ["status"])]
            if all(s in ("success", "error", "canceled") for s in statuses):
                return
            time.sleep(0.05)
    raise AssertionError(f"jobs still unfinished after the restart: {statuses}")


def _wait_gone(paths: Paths, pid: int) -> None:
    """Wait until the killed daemon has let go of its pid file: SIGKILL is delivered at
    once, but a busy machine may take a moment to tear the process down, and a start
    before that would find the dying daemon still holding its lock."""
    deadline = time.monotonic() + 10
    while running_pid(paths.pid_file("masterd")) == pid and time.monotonic() < deadline:
        time.sleep(0.01)


def _commit_stream(client: Client, first: int, acked: list[int], stop: threading.Event) -> None:
    """Set vcpus to first, first+1, ... until the daemon dies; record what was acknowledged."""
    value = first
    while not stop.is_set():
        try:
            _set_vcpus(client, value)
        except CorralError:
            return
        acked.append(value)
        value += 1


def test_kill_9_during_commits_keeps_old_or_new_config(testbed: TestbedHandle) -> None:
    paths = testbed.paths
    rng = random.Random(4711)
    first = testbed.info()["beparams"]["default"]["vcpus"] + 1  # every write is a change
    for _round in range(4):
        serial_before = testbed.info()["config_serial"]
        acked: list[int] = []
        stop = threading.Event()
        client = Client(paths.master_socket, timeout=10)
        writer = threading.Thread(target=_commit_stream, args=(client, first, acked, stop))
        writer.start()
        time.sleep(rng.uniform(0.2, 0.6))
        pid = running_pid(paths.pid_file("masterd"))
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        _wait_gone(paths, pid)
        writer.join(timeout=30)
        stop.set()
        client.close()
        assert acked, "no commit was acknowledged before the kill"

        start(paths)
        _wait_for_jobs(paths)  # a job queued before the kill runs after the restart
        info = testbed.info()
        vcpus = info["beparams"]["default"]["vcpus"]
        committed = info["config_serial"] - serial_before
        # Every acknowledged commit survived; at most the one in flight was added.
        assert committed in (len(acked), len(acked) + 1)
        assert vcpus == first + committed - 1
        first = vcpus + 1
