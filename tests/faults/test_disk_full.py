"""The master's disk full during commits: its data directory (configuration store and
job queue) is a small ext4 file system of its own (:mod:`tests.faults.netbed`), which
the test fills to the last block while jobs change the configuration.

Every operation that hits the full disk must end in a clear error (the submission
refused, or the job failed, saying that the disk is full), nothing acknowledged may be
lost and nothing half-written may be left; once space is freed the master goes on
without a restart. Then the invariants of :mod:`tests.faults.invariants`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.errors import CorralError
from corral.jobs.model import decode_job
from tests.faults.conftest import FaultLog
from tests.faults.invariants import ABSENT, FaultCluster, Ledger, check_cluster
from tests.faults.jobdriver import create_op, job_status, remove_op, run_job, submit, wait_job
from tests.faults.netbed import FaultBed, fault_bed

FILLER = "cfj-filler"


@pytest.fixture
def bed(request: pytest.FixtureRequest) -> Iterator[FaultBed]:
    """The shared fault testbed, with the master's disk emptied again after the test."""
    shared = fault_bed(request)
    yield shared
    _free(shared.mount)
    reports = shared.new_loop_reports()
    assert not reports, "a daemon blocked its event loop:\n" + "\n".join(reports)


def _fill(mount: Path) -> int:
    """Fill the file system at ``mount`` to its last block; the bytes written."""
    directory = mount / FILLER
    directory.mkdir(exist_ok=True)
    written = 0
    stat = os.statvfs(mount)
    big = stat.f_bavail * stat.f_frsize - (256 << 10)
    if big > 0:
        fd = os.open(directory / "big", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.posix_fallocate(fd, 0, big)
            written += big
        finally:
            os.close(fd)
    # the rest block by block, then one file per free inode's worth of small writes
    index = 0
    while True:
        try:
            with open(directory / f"small{index}", "wb") as handle:
                handle.write(b"\0" * 4096)
                handle.flush()
                os.fsync(handle.fileno())
            written += 4096
            index += 1
        except OSError as err:
            if err.errno != errno.ENOSPC:
                raise
            return written


def _free(mount: Path) -> None:
    directory = mount / FILLER
    if directory.is_dir():
        for item in directory.iterdir():
            item.unlink()
        directory.rmdir()



def _delay(seconds: float) -> dict[str, Any]:
    return {"OP_ID": "OP_TEST_DELAY", "duration": seconds, "on_master": True,
            "on_nodes": [], "repeat": 0}


def test_the_masters_disk_full_during_commits(bed: FaultBed, fault_log: FaultLog) -> None:
    cluster, ledger = bed.cluster, Ledger()
    names = [f"cfj-full{i}.testbed" for i in range(4)]
    try:
        # jobs in the queue when the disk fills: they commit their changes on a full disk
        queued = [submit(cluster, ledger, _delay(1.0), create_op(name, bed.name(2)))
                  for name in names[:2]]
        filled = _fill(bed.mount)
        fault_log.injected(f"the master's data file system filled ({filled >> 20} MiB "
                           f"written, not a block left) while jobs {queued} ran")
        for name, job in zip(names, queued, strict=False):
            fault_log.note(f"{name}: job {job} while the disk is full: "
                           f"{_seen_while_full(cluster, job)}")
        for name in names[2:]:
            try:
                job = submit(cluster, ledger, create_op(name, bed.name(2)))
            except CorralError as err:
                assert "disk is full" in str(err), err
                fault_log.note(f"{name}: submission refused: {err}")
                _record(ledger, name, False)
                continue
            queued.append(job)
            fault_log.note(f"{name}: job {job} while the disk is full: "
                           f"{_seen_while_full(cluster, job)}")
        _free(bed.mount)
        fault_log.injected("the filler removed: space free again")
        for name, job in zip(names, queued, strict=False):
            status, result = wait_job(cluster, ledger, job)
            fault_log.note(f"{name}: job {job} {status}: {result}")
            if status != "success":
                assert "disk is full" in str(result), result
            _record(ledger, name, status == "success")
        told = dict(zip(queued, (job_status(cluster, job) for job in queued), strict=True))
        deadline = time.monotonic() + 10
        while (stored := _stored_statuses(bed, queued)) != told:
            assert time.monotonic() < deadline, \
                f"the job queue on disk ({stored}) differs from what clients are told ({told})"
            time.sleep(0.1)
        fault_log.checked([f"jobs: the statuses on disk are those clients were told: {told}"])
        # what is on disk is what a restarted master daemon knows
        bed.restart(1, only=("masterd",))
        fault_log.injected("the master daemon restarted")
        again = run_job(cluster, ledger, create_op("cfj-after.testbed", bed.name(2)))
        assert again[0] == "success", again
        names.append("cfj-after.testbed")
        _record(ledger, "cfj-after.testbed", True)
        fault_log.checked(check_cluster(cluster, ledger, watcher=False))
    finally:
        _free(bed.mount)
        for name in names:
            with contextlib.suppress(CorralError, AssertionError):
                run_job(cluster, ledger, remove_op(name))


def _seen_while_full(cluster: FaultCluster, job: int) -> str:
    """What a client polling ``job`` sees while the disk is full: its end, or the
    error saying that its state cannot be stored (within a few seconds)."""
    deadline = time.monotonic() + 5
    while True:
        try:
            status = job_status(cluster, job)
        except CorralError as err:
            assert "disk is full" in str(err), err
            return f"error to the client: {err}"
        if status in ("success", "error", "canceled") or time.monotonic() > deadline:
            return status
        time.sleep(0.05)


def _stored_statuses(bed: FaultBed, ids: list[int]) -> dict[int, str]:
    """The status of jobs ``ids`` in the master's job queue file."""
    db = bed.paths(1).jobs_db
    conn = sqlite3.connect(f"{db.absolute().as_uri()}?mode=ro", uri=True)
    try:
        rows = conn.execute(f"SELECT id, data FROM jobs WHERE id IN ({','.join('?' * len(ids))})",
                            ids).fetchall()
    finally:
        conn.close()
    return {job_id: decode_job(data).status for job_id, data in rows}


def _record(ledger: Ledger, name: str, created: bool) -> None:
    """A creation the client saw succeed or fail: the instance exists, or not at all."""
    ledger.acknowledge(("instance", name, "name"), name if created else ABSENT)
