"""Replication updates larger than one request go in parts; an interrupted one never
touches the replica; the node daemon commits off its event loop."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.errors import ParameterError
from corral.jobs import JobStore
from corral.jobs.model import Job, QueuedOpCode, timestamp_now
from corral.jobs.store import JobReplica, job_snapshot_args
from corral.masterd.replication import ConfigReplicator, JobReplicator
from corral.noded import replication as node_side
from corral.noded.procedures import PROCEDURES
from corral.paths import Paths
from corral.rpc.chunks import split_update
from tests.unit.config_helpers import snapshot
from tests.unit.test_replication import NodeSideRpc, _cluster, _replica_objects

#: The node procedures as a node daemon runs them (arguments decoded first).
_jobs_replicate = PROCEDURES["jobs_replicate"]
_config_replicate = PROCEDURES["config_replicate"]


@pytest.fixture(autouse=True)
def _close_replicas() -> Iterator[None]:
    yield
    node_side.close_replicas()


def _job(job_id: int, size: int = 2000) -> Job:
    return Job(id=job_id, ops=[QueuedOpCode(input={"OP_ID": "OP_TEST_DELAY",
                                                   "comment": "x" * size},
                                            summary="TEST_DELAY(0)")],
               received_timestamp=timestamp_now())


def _stored_ids(db: Path, table: str) -> list[int]:
    conn = sqlite3.connect(f"{db.absolute().as_uri()}?mode=ro", uri=True)
    try:
        return [row[0] for row in conn.execute(f"SELECT id FROM {table} ORDER BY id")]
    finally:
        conn.close()


def _staging(paths: Paths) -> Path:
    return Path(f"{paths.jobs_replica}.incoming")


async def _queue_with_archive(path: Path, count: int = 40) -> JobStore:
    jobs = JobStore.open(path)
    batch = [_job(jobs.new_id()) for _ in range(count)]
    for job in batch:
        jobs.save(job)
    await jobs.archive(batch[: count // 2])
    return jobs


def test_an_update_that_fits_is_one_call_and_a_larger_one_is_a_session() -> None:
    args = {"snapshot": True, "serial": 7,
            "jobs": [[i, "y" * 100] for i in range(10)], "meta": [["drained", 0]]}
    assert split_update(args, 10_000) == [args]
    parts = split_update(args, 300)
    assert len(parts) > 3
    assert {p["session"] for p in parts} == {parts[0]["session"]}
    assert [p["part"] for p in parts] == list(range(len(parts)))
    assert [p["last"] for p in parts] == [False] * (len(parts) - 1) + [True]
    assert all(p["serial"] == 7 and p["snapshot"] is True for p in parts)
    assert [row for p in parts for row in p.get("jobs", [])] == args["jobs"]
    assert [row for p in parts for row in p.get("meta", [])] == args["meta"]


async def test_a_job_queue_larger_than_one_call_seeds_a_candidate(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = _cluster(tmp_path, candidates=1)
    jobs = await _queue_with_archive(tmp_path / "jobs.db")

    async def whole_queue_in_memory() -> Any:
        raise AssertionError("the master read the whole queue at once")

    monkeypatch.setattr(jobs, "snapshot", whole_queue_in_memory)
    rpc = NodeSideRpc(root=tmp_path)
    replicator = JobReplicator(store, jobs, rpc, retry_interval=0.05, part_bytes=8000)
    replicator.start()
    try:
        assert await replicator.wait_replicated(10)
    finally:
        await replicator.stop()
    sent = [call.args for call in rpc.calls if call.node == "node2"]
    snapshot_parts = [args for args in sent if args.get("snapshot")]
    assert len(snapshot_parts) > 5 and snapshot_parts[-1]["last"] is True
    node_side.close_replicas()
    replica = rpc.roots["node2"].jobs_replica
    assert _stored_ids(replica, "jobs") == list(range(21, 41))
    assert _stored_ids(replica, "archive") == list(range(1, 21))
    assert JobReplica.open(replica).serial == jobs.serial
    await jobs.close()


async def test_a_configuration_snapshot_in_parts_seeds_a_candidate(tmp_path: Path) -> None:
    store = _cluster(tmp_path, candidates=1)
    rpc = NodeSideRpc(root=tmp_path)
    replicator = ConfigReplicator(store, rpc, retry_interval=0.05, part_bytes=200)
    replicator.start()
    try:
        assert await replicator.wait_replicated(10)
    finally:
        await replicator.stop()
    assert sum(1 for call in rpc.calls if call.args.get("session")) > 1
    node_side.close_replicas()
    assert _replica_objects(rpc.roots["node2"]) == snapshot(store)


async def test_an_interrupted_snapshot_leaves_the_replica_intact(tmp_path: Path) -> None:
    store = _cluster(tmp_path, candidates=1)
    jobs = await _queue_with_archive(tmp_path / "jobs.db", count=10)
    rpc = NodeSideRpc(root=tmp_path)
    replicator = JobReplicator(store, jobs, rpc, retry_interval=0.05, part_bytes=5000)
    replicator.start()
    try:
        assert await replicator.wait_replicated(10)
        good = rpc.roots["node2"].jobs_replica
        serial = jobs.serial
        # The master restarts (it forgets where node2 is) and the queue grows
        # past its log, so node2 needs a snapshot; node2 stops answering after 3 parts.
        await replicator.stop()
        replicator = JobReplicator(store, jobs, rpc, retry_interval=0.05, part_bytes=5000,
                                   log_size=1)
        more = [_job(jobs.new_id()) for _ in range(10)]
        for job in more:
            jobs.save(job)
            await jobs.barrier()
        rpc.fail_after["node2"] = 4  # serial_only, then 3 parts of the snapshot
        replicator.start()
        assert not await replicator.wait_replicated(0.5)
        assert _stored_ids(good, "jobs") == list(range(6, 11))  # as it was
        assert JobReplica.open(good).serial == serial
        # node2 answers again: the whole snapshot is sent again and applied.
        del rpc.fail_after["node2"]
        assert await replicator.wait_replicated(10)
        assert _stored_ids(good, "jobs") == list(range(6, 21))
    finally:
        await replicator.stop()
        await jobs.close()


async def test_a_part_out_of_order_drops_the_staged_update(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    paths.data_dir.mkdir(parents=True)
    jobs = await _queue_with_archive(tmp_path / "jobs.db", count=6)
    serial, rows = await jobs.snapshot()
    await jobs.close()
    whole = job_snapshot_args(serial, rows)
    parts = split_update(whole, 4000)
    assert len(parts) >= 3
    await _jobs_replicate(paths, parts[0])
    with pytest.raises(ParameterError, match="does not follow"):
        await _jobs_replicate(paths, parts[2])  # part 1 was lost
    # Nothing was applied, and the rest of the old session is refused too.
    assert (await _jobs_replicate(paths, {"serial_only": True}))["serial"] == 0
    with pytest.raises(ParameterError, match="does not follow"):
        await _jobs_replicate(paths, parts[1])
    assert not _staging(paths).exists()
    for part in parts:
        answer = await _jobs_replicate(paths, part)
    assert answer == {"serial": serial, "applied": True}
    assert _stored_ids(paths.jobs_replica, "archive") == [1, 2, 3]
    assert not _staging(paths).exists()


async def test_a_slow_commit_does_not_block_the_node_daemon(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = Paths(tmp_path)
    paths.data_dir.mkdir(parents=True)
    real = JobReplica._write
    committed: list[float] = []

    def slow(self: JobReplica, rows: Any, *, reset: bool) -> None:
        time.sleep(0.6)  # an fsync on a busy disk
        real(self, rows, reset=reset)
        committed.append(time.monotonic())

    monkeypatch.setattr(JobReplica, "_write", slow)
    update = {"snapshot": True, "serial": 3, "jobs": [[1, '{"id": 1}']]}
    replicate = asyncio.create_task(_jobs_replicate(paths, update))
    await asyncio.sleep(0.1)  # the commit is under way
    started = time.monotonic()
    # Another request (the configuration replica's serial) is answered meanwhile,
    # and the loop keeps turning.
    answer = await asyncio.wait_for(
        _config_replicate(paths, {"serial_only": True}), 0.3)
    await asyncio.sleep(0.01)
    assert answer["serial"] == 0
    assert time.monotonic() - started < 0.3
    assert not replicate.done()
    assert await replicate == {"serial": 3, "applied": True}
    # The answer came once the replica was committed, not before.
    assert committed and time.monotonic() >= committed[0]
    assert _stored_ids(paths.jobs_replica, "jobs") == [1]


async def test_the_master_reads_a_snapshot_part_by_part_at_one_serial(tmp_path: Path) -> None:
    jobs = await _queue_with_archive(tmp_path / "jobs.db", count=30)
    serial = jobs.serial
    parts = jobs.snapshot_parts(10_000)
    first_serial, first = await anext(parts)
    # Writes go on while the snapshot is read; it still shows one serial.
    late = _job(jobs.new_id())
    await jobs.save(late)
    await jobs.archive([late])
    rest = [part async for part in parts]
    assert {first_serial, *(s for s, _rows in rest)} == {serial}
    everything = [first, *(rows for _s, rows in rest)]
    assert len(everything) > 3
    for rows in everything:
        assert sum(len(data) for *_, data in [*rows.upserts, *rows.archive]) <= 10_000
    assert [i for rows in everything for i, _ in rows.upserts] == list(range(16, 31))
    assert [i for rows in everything for i, *_ in rows.archive] == list(range(1, 16))
    assert dict(everything[-1].meta)["serial"] == serial
    await jobs.close()
