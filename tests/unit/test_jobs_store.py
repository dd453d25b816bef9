"""The job store: group commit, durability before the future resolves, ids, archive."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from corral.jobs.model import Job, QueuedOpCode, decode_job, timestamp_now
from corral.jobs.store import JobStore


def make_job(job_id: int, status: Any = "queued") -> Job:
    return Job(
        id=job_id,
        ops=[QueuedOpCode(input={"OP_ID": "OP_TEST_DELAY"}, summary="TEST_DELAY(0)",
                          status=status)],
        received_timestamp=timestamp_now(),
    )


def rows(path: Path, table: str = "jobs") -> dict[int, Job]:
    conn = sqlite3.connect(path)
    try:
        return {i: decode_job(d) for i, d in conn.execute(f"SELECT id, data FROM {table}")}
    finally:
        conn.close()


async def test_one_turn_of_writes_is_one_transaction(tmp_path: Path, monkeypatch: Any) -> None:
    path = tmp_path / "jobs.db"
    store = JobStore.open(path)
    commits: list[int] = []
    real_commit = store._commit

    def counting(batch: Any) -> None:
        commits.append(len(batch.upserts))
        real_commit(batch)

    monkeypatch.setattr(store, "_commit", counting)
    futures = [store.save(make_job(store.new_id())) for _ in range(50)]
    assert len({id(f) for f in futures}) == 1  # one batch
    assert not futures[0].done()
    await futures[0]
    assert commits == [50]
    # durable: a fresh connection sees every job once the future resolved
    assert sorted(rows(path)) == list(range(1, 51))
    await store.close()


async def test_writes_during_a_commit_form_the_next_batch(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    store = JobStore.open(path)
    job = make_job(store.new_id())
    first = store.save(job)
    await asyncio.sleep(0)  # the flush has taken the first batch
    job.ops[0].status = "success"
    second = store.save(job)
    assert first is not second
    await second
    assert first.done()
    assert rows(path)[1].status == "success"
    await store.close()


async def test_ids_drain_and_archive_survive_reopen(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    store = JobStore.open(path)
    jobs = [make_job(store.new_id(), "success") for _ in range(3)]
    for job in jobs:
        store.save(job)
    store.set_drained(True)
    await store.barrier()
    await store.archive(jobs[:2])
    assert await store.read_archived([1, 2, 3]) == {
        1: pytest.approx(jobs[0]), 2: pytest.approx(jobs[1])}
    await store.close()
    assert sorted(rows(path, "archive")) == [1, 2]
    reopened = JobStore.open(path)
    loaded = reopened.load()
    assert [job.id for job in loaded.jobs] == [3]
    assert loaded.drained and loaded.last_id == 3
    assert reopened.new_id() == 4
    archived = await reopened.read_archived([1])
    assert archived[1].archived
    await reopened.close()


async def test_ids_sqlite_cannot_hold_name_no_archived_job(tmp_path: Path) -> None:
    """A client may ask for any integer (luxi's QueryJobs, WaitForJobChange): one past
    SQLite's 64-bit range is simply not found, among ids that are."""
    store = JobStore.open(tmp_path / "jobs.db")
    job = make_job(store.new_id(), "success")
    store.save(job)
    await store.barrier()
    await store.archive([job])
    found = await store.read_archived([2**63, 1, 2**70, -(2**64)])
    assert list(found) == [1]
    await store.close()


async def test_last_id_is_stored_even_without_live_jobs(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    store = JobStore.open(path)
    for _ in range(7):
        store.new_id()
    await store.set_drained(False)
    await store.close()
    assert JobStore.open(path).load().last_id == 7
