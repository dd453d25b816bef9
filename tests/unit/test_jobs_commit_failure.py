"""A job-store commit that fails: every requester and watcher gets the error, nobody
waits for ever, and the queue keeps only what is stored."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from corral.errors import ConfigStoreError
from corral.jobs import JobQueue, JobStore
from corral.jobs import store as store_module
from corral.jobs.model import Job, QueuedOpCode, timestamp_now
from corral.opcodes import OpTestDelay
from tests.unit.test_jobs_queue import FakeExecutor


def _job(job_id: int) -> Job:
    return Job(id=job_id, ops=[QueuedOpCode(input={"OP_ID": "OP_TEST_DELAY"},
                                            summary="TEST_DELAY(0)")],
               received_timestamp=timestamp_now())


class _Disk:
    """Makes the job store's transactions fail like a full or broken disk."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.broken = False
        real = store_module._write_rows

        def write(conn: sqlite3.Connection, rows: Any, *, reset: bool = False) -> None:
            if self.broken:
                raise sqlite3.OperationalError("database or disk is full")
            real(conn, rows, reset=reset)

        monkeypatch.setattr(store_module, "_write_rows", write)


@pytest.fixture
async def queue(tmp_path: Path) -> AsyncIterator[tuple[JobQueue, FakeExecutor]]:
    executor = FakeExecutor()
    job_queue = JobQueue(JobStore.open(tmp_path / "jobs.db"), executor)
    await job_queue.start()
    yield job_queue, executor
    await job_queue.stop()


async def test_a_watcher_gets_the_error_of_a_failed_commit(
        queue: tuple[JobQueue, FakeExecutor], monkeypatch: pytest.MonkeyPatch) -> None:
    job_queue, executor = queue
    disk = _Disk(monkeypatch)
    [(ok, job_id)] = await job_queue.submit_many([[OpTestDelay(duration=0)]])
    assert ok and isinstance(job_id, int)
    gate = executor.hold(job_id, running=True)
    await asyncio.wait_for(executor.entered_event(job_id).wait(), 5)
    first = await job_queue.wait_for_change(job_id, ["status"], None, None, 5.0)
    assert first != "nochange"
    info, log = first
    serial = log[-1][0] if log else None
    watcher = asyncio.create_task(
        job_queue.wait_for_change(job_id, ["status"], info, serial, 30.0))
    await asyncio.sleep(0.05)
    disk.broken = True
    gate.set()  # the job finishes; storing its end fails
    with pytest.raises(ConfigStoreError, match="disk is full"):
        async with asyncio.timeout(5):  # not the watcher's 30 s
            await watcher


async def test_a_failed_submission_leaves_no_job_and_no_reused_id(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    job_queue = JobQueue(JobStore.open(tmp_path / "jobs.db"), FakeExecutor())
    await job_queue.start()
    disk = _Disk(monkeypatch)
    disk.broken = True
    with pytest.raises(ConfigStoreError, match="disk is full"):
        async with asyncio.timeout(5):
            await job_queue.submit_many([[OpTestDelay(duration=0)]])
    # The job was never stored, so the queue does not show it either.
    assert await job_queue.query(None, ["id"]) == []
    disk.broken = False
    [(ok, job_id)] = await job_queue.submit_many([[OpTestDelay(duration=0)]])
    assert ok and job_id == 2
    await job_queue.stop()
    reopened = JobStore.open(tmp_path / "jobs.db")
    try:
        assert reopened.last_id == 2
        assert [job.id for job in reopened.load().jobs] == [2]
    finally:
        reopened.close_sync()


async def test_a_failed_set_drained_then_success_stores_the_last_id(tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    disk = _Disk(monkeypatch)
    store = JobStore.open(tmp_path / "jobs.db")
    disk.broken = True
    with pytest.raises(ConfigStoreError):
        await asyncio.wait_for(store.save(_job(store.new_id())), 5)
    disk.broken = False
    await asyncio.wait_for(store.set_drained(False), 5)
    assert store.serial == 1  # the failed batch took no serial
    await store.close()
    reopened = JobStore.open(tmp_path / "jobs.db")
    try:
        assert reopened.last_id == 1  # id 1 was handed out: it is never handed out again
    finally:
        reopened.close_sync()


async def test_a_job_that_cannot_be_encoded_fails_its_batch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = JobStore.open(tmp_path / "jobs.db")

    def broken(job: Job) -> bytes:
        raise TypeError("an opcode result that is not JSON")

    monkeypatch.setattr(store_module, "encode_job", broken)
    with pytest.raises(ConfigStoreError, match="not JSON"):
        await asyncio.wait_for(store.save(_job(store.new_id())), 5)
    monkeypatch.undo()
    await asyncio.wait_for(store.save(_job(store.new_id())), 5)
    await store.close()


async def test_a_failing_listener_stops_no_later_batch(tmp_path: Path) -> None:
    store = JobStore.open(tmp_path / "jobs.db")
    calls: list[int] = []

    def listener(serial: int, _rows: Any) -> None:
        calls.append(serial)
        if serial == 1:
            raise RuntimeError("listener bug")

    store.add_listener(listener)
    first = store.save(_job(store.new_id()))
    await asyncio.sleep(0)  # the first batch is being committed
    second = store.save(_job(store.new_id()))
    assert second is not first
    await asyncio.wait_for(first, 5)
    await asyncio.wait_for(second, 5)
    assert calls == [1, 2]
    await store.close()


async def test_a_job_that_ended_on_a_full_disk_is_stored_once_there_is_room(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    executor = FakeExecutor()
    job_queue = JobQueue(JobStore.open(tmp_path / "jobs.db"), executor)
    monkeypatch.setattr(JobQueue, "RESAVE_INTERVAL", 0.05)
    await job_queue.start()
    disk = _Disk(monkeypatch)
    [(ok, job_id)] = await job_queue.submit_many([[OpTestDelay(duration=0)]])
    assert ok and isinstance(job_id, int)
    gate = executor.hold(job_id, running=True)
    await asyncio.wait_for(executor.entered_event(job_id).wait(), 5)
    disk.broken = True
    gate.set()  # the job ends; storing its end fails, and fails again while broken
    await asyncio.sleep(0.3)
    disk.broken = False  # room again: the next attempt stores it
    async with asyncio.timeout(5):
        while True:
            reopened = JobStore.open(tmp_path / "jobs.db")
            try:
                stored = {job.id: job.status for job in reopened.load().jobs}
            finally:
                reopened.close_sync()
            if stored[job_id] == "success":
                break
            await asyncio.sleep(0.05)
    assert await job_queue.query([job_id], ["status"]) == [["success"]]
    await job_queue.stop()
