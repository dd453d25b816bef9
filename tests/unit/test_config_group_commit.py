"""Configuration commits on an event loop: off the loop, grouped, durable, undone on failure."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.config import ConfigStore
from corral.config.storage import Database
from corral.errors import ConfigStoreError, InternalError
from corral.objects import Node
from tests.unit.config_helpers import check_invariants, new_store, snapshot

#: How long each slowed write takes (seconds): far longer than a loop turn.
SLOW = 0.3


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ConfigStore]:
    store = new_store(tmp_path / "config.db")
    yield store
    store.close()


class _Disk:
    """Slows (and optionally breaks) the SQLite writes and counts the transactions."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.transactions = 0
        self.threads: set[str] = set()
        self.fail: BaseException | None = None
        self.delay = SLOW
        put = Database._put
        begin = Database._transaction

        def slow_put(*args: Any) -> None:
            self.threads.add(threading.current_thread().name)
            time.sleep(self.delay)
            if self.fail is not None:
                raise self.fail
            put(*args)

        def counted(db: Database) -> Any:
            self.transactions += 1
            return begin(db)

        monkeypatch.setattr(Database, "_put", staticmethod(slow_put))
        monkeypatch.setattr(Database, "_transaction", counted)


def _node(store: ConfigStore, index: int) -> Node:
    return Node(name=f"node-{index}", primary_ip=f"198.51.100.{index}",
                group=store.get("nodegroup", "default").uuid)


async def _add(store: ConfigStore, node: Node) -> int:
    async with store.transaction() as txn:
        txn.add(node)
    return store.serial


async def test_a_commit_does_not_block_the_event_loop(
        store: ConfigStore, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = _Disk(monkeypatch)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    tick_task = asyncio.create_task(ticker())
    try:
        started = time.monotonic()
        serial = await _add(store, _node(store, 2))
        elapsed = time.monotonic() - started
    finally:
        tick_task.cancel()
    assert elapsed >= SLOW  # the caller waited for the write...
    assert ticks >= 10  # ...while the loop kept running other coroutines
    assert threading.current_thread().name not in disk.threads
    assert serial == store.serial == 2
    with ConfigStore.open(store.path) as reopened:  # durable once acknowledged
        assert reopened.serial == 2
        assert reopened.find("node", "node-2") is not None


async def test_concurrent_commits_share_one_write_in_order(
        store: ConfigStore, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = _Disk(monkeypatch)
    seen: list[tuple[int, list[str]]] = []
    store.add_listener(lambda serial, rows, deletes: seen.append(
        (serial, [row.uuid for row in rows])))
    nodes = [_node(store, index) for index in range(2, 12)]
    await asyncio.gather(*(_add(store, node) for node in nodes))
    assert disk.transactions < len(nodes) / 2  # grouped: not one fsync per commit
    assert store.serial == 1 + len(nodes)
    assert seen == [(2 + i, [node.uuid]) for i, node in enumerate(nodes)]
    assert [n.serial_no for n in nodes] == [1] * len(nodes)
    check_invariants(store)
    with ConfigStore.open(store.path) as reopened:
        assert snapshot(reopened) == snapshot(store)


async def test_readers_of_the_file_state_see_only_durable_commits(
        store: ConfigStore, monkeypatch: pytest.MonkeyPatch) -> None:
    _Disk(monkeypatch)
    node = _node(store, 2)
    before = sorted(row.uuid for row in store.rows())
    adding = asyncio.create_task(_add(store, node))
    await asyncio.sleep(SLOW / 3)  # the write is under way
    assert store.find("node", "node-2") is not None  # the next transaction sees it
    assert store.serial == 1  # ...but the serial and the rows a replica gets do not
    assert sorted(row.uuid for row in store.rows()) == before
    # a blocking commit would race the writer:
    with pytest.raises(InternalError, match="async with"), store.transaction() as txn:
        txn.add(_node(store, 3))
    await adding
    assert store.serial == 2
    assert sorted(row.uuid for row in store.rows()) == sorted([*before, node.uuid])


async def test_a_failed_write_fails_every_waiter_and_undoes_the_commits(
        store: ConfigStore, monkeypatch: pytest.MonkeyPatch) -> None:
    await _add(store, _node(store, 2))
    before = snapshot(store)
    disk = _Disk(monkeypatch)
    disk.fail = sqlite3.OperationalError("disk I/O error")
    first = asyncio.create_task(_add(store, _node(store, 3)))
    await asyncio.sleep(SLOW / 3)  # the first commit is being written...
    later = [asyncio.create_task(_add(store, _node(store, i))) for i in (4, 5)]
    async with asyncio.timeout(5 * SLOW):  # ...and the ones behind it wait: nobody hangs
        results = await asyncio.gather(first, *later, return_exceptions=True)
    assert disk.transactions == 1  # the commits queued behind the failure were not written
    for result in results:
        assert isinstance(result, ConfigStoreError)
        assert "disk I/O error" in result.message
        assert "stays at serial 2" in result.message
    assert snapshot(store) == before
    check_invariants(store)
    for index in (3, 4, 5):
        assert store.find("node", f"node-{index}") is None
    disk.fail = None
    disk.delay = 0
    assert await _add(store, _node(store, 3)) == 3  # the store goes on from the file's state
    with ConfigStore.open(store.path) as reopened:
        assert snapshot(reopened) == snapshot(store)


async def test_a_failed_update_restores_the_object_it_replaced(
        store: ConfigStore, monkeypatch: pytest.MonkeyPatch) -> None:
    await _add(store, _node(store, 2))
    disk = _Disk(monkeypatch)
    disk.fail = sqlite3.OperationalError("database or disk is full")
    with pytest.raises(ConfigStoreError, match="disk is full"):
        async with store.transaction() as txn:
            node = txn.get("node", "node-2")
            node.name = "renamed"
            txn.update(node)
    assert store.find("node", "renamed") is None
    assert store.get("node", "node-2").serial_no == 1
    disk.fail = None
    disk.delay = 0
    async with store.transaction() as txn:  # the name is free again for a new commit
        node = txn.get("node", "node-2")
        node.name = "renamed"
        txn.update(node)
    assert store.get("node", "renamed").serial_no == 2


async def test_a_cancelled_committer_does_not_cancel_the_others_of_its_group(
        store: ConfigStore, monkeypatch: pytest.MonkeyPatch) -> None:
    _Disk(monkeypatch)
    nodes = [_node(store, index) for index in (2, 3, 4)]
    tasks = [asyncio.create_task(_add(store, node)) for node in nodes]
    await asyncio.sleep(SLOW / 3)  # all three are in the group being written
    tasks[0].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[0], asyncio.CancelledError)
    assert done[1:] == [4, 4]
    await store.drain()
    assert store.serial == 4  # the cancelled caller's commit was written all the same
    with ConfigStore.open(store.path) as reopened:
        assert snapshot(reopened) == snapshot(store)
