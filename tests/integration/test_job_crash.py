"""kill -9 of the master daemon with 20 running and 500 queued jobs loses no job.

After the restart every submitted job id is still there and ends in a final state:
the jobs that were running end in error saying the master daemon died, the queued
ones run to success.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from corral.daemons import start
from corral.luxi import Client
from corral.utils.process import running_pid
from tests.conftest import TestbedHandle

pytestmark = pytest.mark.integration

FINAL = ("success", "error", "canceled")


def _delay(duration: float) -> list[dict[str, Any]]:
    return [{"OP_ID": "OP_TEST_DELAY", "duration": duration}]


def _statuses(client: Client, ids: list[int]) -> dict[int, Any]:
    rows = client.call("QueryJobs", ids, ["id", "status", "opresult"])
    return {row[0]: row for row in rows if row is not None}


def test_kill_9_with_running_and_queued_jobs_loses_none(testbed: TestbedHandle) -> None:
    paths = testbed.paths
    with Client(paths.master_socket, timeout=30) as client:
        max_running = client.call("QueryConfigValues", ["max_running_jobs"])[0]
        assert max_running == 20
        long = client.call("SubmitManyJobs", [_delay(60) for _ in range(20)])
        short = client.call("SubmitManyJobs", [_delay(0) for _ in range(500)])
        assert all(ok for ok, _ in long + short)
        running_ids = [job_id for _, job_id in long]
        queued_ids = [job_id for _, job_id in short]
        for _ in range(200):
            rows = _statuses(client, running_ids)
            if all(row[1] == "running" for row in rows.values()):
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"the first 20 jobs did not all start: {rows}")
        assert {row[1] for row in _statuses(client, queued_ids).values()} == {"queued"}

    pid = running_pid(paths.pid_file("masterd"))
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    for _ in range(100):
        if running_pid(paths.pid_file("masterd")) is None:
            break
        time.sleep(0.05)
    start(paths)

    every = running_ids + queued_ids
    with Client(paths.master_socket, timeout=30) as client:
        for _ in range(400):
            rows = _statuses(client, every)
            if len(rows) == len(every) and all(row[1] in FINAL for row in rows.values()):
                break
            time.sleep(0.05)
        assert sorted(rows) == sorted(every), "a submitted job id is missing after the restart"
        for job_id in running_ids:
            status, result = rows[job_id][1], rows[job_id][2]
            assert status == "error"
            assert "master daemon died" in str(result[0])
        assert {rows[job_id][1] for job_id in queued_ids} == {"success"}
        # New jobs get fresh ids after the restart.
        new_id = client.call("SubmitJob", _delay(0))
        assert new_id > max(every)
