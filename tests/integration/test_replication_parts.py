"""A job queue larger than one node RPC body on the 3-node testbed: the daemons run
with a 256 KiB body limit and the archive grows to several times that; a candidate
whose replica was lost is seeded with every job all the same, and takes over."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral import daemons
from corral.config.storage import sidecar_files
from corral.luxi import Client
from corral.rpc.chunks import MAX_BODY_ENV
from corral.utils.process import running_pid
from tests.conftest import TestbedHandle, run_tool
from tests.integration.test_replication import _finished_statuses, _node_paths, _query

BODY_LIMIT = 256 * 1024
COMMENT = 40_000
JOBS = 40  # 40 jobs of 40 kB: about six times the body limit


@pytest.fixture
def small_bodies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every daemon the testbed starts (it inherits this environment) refuses bodies
    over :data:`BODY_LIMIT`, and the master sizes its parts from it."""
    monkeypatch.setenv(MAX_BODY_ENV, str(BODY_LIMIT))


@pytest.fixture
def testbed(small_bodies: None, testbed: TestbedHandle) -> Iterator[TestbedHandle]:
    """The shared testbed, brought up once the body limit is in the environment."""
    yield testbed


def _serial(db: Path) -> int:
    if not db.exists():
        return -1
    try:
        rows = _query(db, "SELECT value FROM meta WHERE key = 'serial'")
    except sqlite3.OperationalError:
        return -1  # the node daemon has created the file but not yet its tables
    return int(str(rows[0][0])) if rows else 0


def _submit_big_jobs(testbed: TestbedHandle) -> list[int]:
    ids: list[int] = []
    with Client(testbed.paths.master_socket) as client:
        for start in range(0, JOBS, 10):
            ops = [[{"OP_ID": "OP_TEST_DELAY", "duration": 0,
                     "comment": f"{index:04d}" + "x" * COMMENT}]
                   for index in range(start, start + 10)]
            ids += [job_id for ok, job_id in client.call("SubmitManyJobs", ops) if ok]
        assert len(ids) == JOBS
        assert _finished_statuses(client, ids) == ["success"] * JOBS
        for job_id in ids:
            assert client.call("ArchiveJob", job_id) is True
    return ids


def test_a_candidate_is_seeded_with_an_archive_larger_than_one_body(
        testbed: TestbedHandle) -> None:
    node3 = _node_paths(testbed, 3)
    # node3's replica is lost while its daemon is down: it needs a full snapshot.
    daemons.stop(node3)
    for stale in (node3.jobs_replica, *sidecar_files(node3.jobs_replica)):
        stale.unlink(missing_ok=True)
    ids = _submit_big_jobs(testbed)
    master_jobs = testbed.paths.jobs_db
    size = sum(len(str(data)) for (data,) in _query(master_jobs, "SELECT data FROM archive"))
    assert size > 5 * BODY_LIMIT
    target = _serial(master_jobs)
    # node2 followed with deltas larger than one body as well.
    node2 = _node_paths(testbed, 2)
    deadline = time.monotonic() + 60
    while _serial(node2.jobs_replica) != target and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _serial(node2.jobs_replica) == target

    daemons.start(node3)
    deadline = time.monotonic() + 60
    while _serial(node3.jobs_replica) != target and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _serial(node3.jobs_replica) == target
    archived = _query(node3.jobs_replica, "SELECT id, length(data) FROM archive ORDER BY id")
    assert [row[0] for row in archived] == ids
    assert all(int(str(length)) > COMMENT for _id, length in archived)
    assert not Path(f"{node3.jobs_replica}.incoming").exists()

    # node3 takes over after the master dies, with every job.
    pid = running_pid(testbed.paths.pid_file("masterd"))
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    env = {**testbed.env, "CORRAL_ROOT": str(node3.root)}
    out = run_tool(["gnt-cluster", "master-failover"], env).stdout
    assert "node3.testbed is the master now" in out
    listed = run_tool(["gnt-job", "list", "--archived", "--no-headers", "-o", "id,status"],
                      env).stdout.split("\n")
    found = {int(line.split()[0]): line.split()[1] for line in listed if line.strip()}
    assert {job_id: found.get(job_id) for job_id in ids} == dict.fromkeys(ids, "success")
