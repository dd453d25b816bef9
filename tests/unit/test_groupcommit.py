"""The shared group-commit writer when its event loop closes mid-write: nobody is left
waiting, for the job store as for any other store."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from corral.errors import ConfigStoreError
from corral.jobs import JobStore
from corral.jobs import store as store_module
from corral.jobs.model import Job, QueuedOpCode, timestamp_now
from corral.utils.groupcommit import GroupWriter


class _Stopped(Exception):
    pass


class _SlowDisk:
    """A write that starts, then waits until the test lets it finish."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()

    def write(self) -> None:
        self.started.set()
        self.release.wait(10)

    async def started_writing(self) -> None:
        assert await asyncio.to_thread(self.started.wait, 10)


def _requests_left_when_the_loop_closes(
        disk: _SlowDisk, request: Any) -> list[asyncio.Future[None]]:
    """Run a loop that makes one request, then (while it is written) another, and
    closes without awaiting them; the two futures, as the closed loop left them."""

    async def main() -> list[asyncio.Future[None]]:
        first = request()
        await disk.started_writing()
        second = request()
        assert second is not first  # it waits behind the batch being written
        return [first, second]

    try:
        return asyncio.run(main())  # closing the loop cancels the writer's flush task
    finally:
        disk.release.set()


def test_a_writer_stopped_mid_write_fails_the_written_and_the_queued_batch() -> None:
    disk = _SlowDisk()
    writer: GroupWriter[list[int], None] = GroupWriter(
        "test", new_payload=list, prepare=lambda _payload: None,
        write=lambda _work: disk.write(), stopped=lambda: _Stopped("writer stopped"))

    def request() -> asyncio.Future[None]:
        payload, future = writer.request()
        payload.append(1)
        return future

    try:
        futures = _requests_left_when_the_loop_closes(disk, request)
    finally:
        writer.shutdown()
    for future in futures:
        assert future.done() and not future.cancelled()
        assert isinstance(future.exception(), _Stopped)


def test_without_a_stopped_error_the_queued_batch_is_cancelled_not_left_waiting() -> None:
    disk = _SlowDisk()
    writer: GroupWriter[list[int], None] = GroupWriter(
        "test", new_payload=list, prepare=lambda _payload: None,
        write=lambda _work: disk.write())

    def request() -> asyncio.Future[None]:
        return writer.request()[1]

    try:
        futures = _requests_left_when_the_loop_closes(disk, request)
    finally:
        writer.shutdown()
    assert [future.cancelled() for future in futures] == [True, True]


def test_a_job_store_stopped_mid_write_fails_its_requesters_with_a_store_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = _SlowDisk()
    real = store_module._write_rows
    written = threading.Event()

    def slow(conn: sqlite3.Connection, rows: Any, *, reset: bool = False) -> None:
        disk.write()
        real(conn, rows, reset=reset)
        written.set()

    monkeypatch.setattr(store_module, "_write_rows", slow)
    store = JobStore.open(tmp_path / "jobs.db")

    def request() -> asyncio.Future[None]:
        job_id = store.new_id()
        return store.save(Job(id=job_id, ops=[QueuedOpCode(
            input={"OP_ID": "OP_TEST_DELAY"}, summary="TEST_DELAY(0)")],
            received_timestamp=timestamp_now()))

    try:
        futures = _requests_left_when_the_loop_closes(disk, request)
    finally:
        written.wait(10)  # the writer thread finishes the write it had begun
        store.close_sync()
    for future in futures:
        assert future.done() and not future.cancelled()
        error = future.exception()
        assert isinstance(error, ConfigStoreError)
        assert "writer stopped" in str(error)
