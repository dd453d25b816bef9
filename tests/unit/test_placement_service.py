"""The master's placement service runs reads in worker threads, several at once, and
a change alone: it waits for running reads, and no read starts before it is committed."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import msgspec
import pytest

from corral import serializer
from corral.luxi import calls
from corral.masterd import placement as service_module
from corral.masterd.placement import PlacementService
from corral.placement.model import PlacementStore
from corral.placement.rest import Changes, PlacementRequest, PlacementResponse
from tests.unit.config_helpers import new_store
from tests.unit.test_placement_saved import RP, call

real_handle = service_module.handle


class Gate:
    """Holds reads of ``/resource_providers`` inside the engine until opened."""

    def __init__(self) -> None:
        self.inside = threading.Semaphore(0)
        self.open = threading.Event()
        self.threads: set[int] = set()

    def handle(self, store: PlacementStore, req: PlacementRequest,
               ) -> tuple[PlacementResponse, Changes]:
        if req.method == "GET" and req.path == "/resource_providers":
            self.threads.add(threading.get_ident())
            self.inside.release()
            assert self.open.wait(30), "the test never opened the gate"
        return real_handle(store, req)

    async def entered(self) -> None:
        assert await asyncio.to_thread(self.inside.acquire, True, 30)


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Gate:
    found = Gate()
    monkeypatch.setattr(service_module, "handle", found.handle)
    return found


async def names(service: PlacementService) -> list[str]:
    status, body = await call(service, "GET", "/resource_providers")
    assert status == 200
    return [p["name"] for p in body["resource_providers"]]


async def test_reads_run_off_the_loop_together_and_a_change_waits_for_them(
        tmp_path: Path, gate: Gate) -> None:
    store = new_store(tmp_path / "config.db")
    try:
        service = PlacementService(store)
        first = asyncio.create_task(names(service))
        second = asyncio.create_task(names(service))
        await gate.entered()
        await gate.entered()  # both reads are in the engine at once, in other threads
        assert threading.get_ident() not in gate.threads and len(gate.threads) == 2
        change = asyncio.create_task(call(service, "POST", "/resource_providers",
                                          {"name": "cn1", "uuid": RP}))
        await asyncio.sleep(0.05)
        assert not change.done()  # the loop runs, the change waits for the reads
        assert store.all("placement_provider") == []
        gate.open.set()
        assert await first == [] and await second == []
        assert (await change)[0] == 200
        assert await names(service) == ["cn1"]
    finally:
        gate.open.set()
        store.close()


async def test_a_read_after_a_change_waits_for_its_commit(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          ) -> None:
    store = new_store(tmp_path / "config.db")
    try:
        service = PlacementService(store)
        committing = asyncio.Event()
        release = asyncio.Event()
        persist = service._persist

        async def slow_persist(changes: Changes) -> None:
            committing.set()
            await release.wait()
            await persist(changes)

        monkeypatch.setattr(service, "_persist", slow_persist)
        change = asyncio.create_task(call(service, "POST", "/resource_providers",
                                          {"name": "cn1", "uuid": RP}))
        await committing.wait()
        read = asyncio.create_task(names(service))
        await asyncio.sleep(0.05)
        assert not read.done()  # the change is in the engine, not yet committed
        release.set()
        assert (await change)[0] == 200
        assert await read == ["cn1"]
        assert [p.name for p in store.all("placement_provider")] == ["cn1"]
    finally:
        store.close()


async def test_a_cancelled_read_keeps_changes_out_until_its_thread_ends(
        tmp_path: Path, gate: Gate) -> None:
    store = new_store(tmp_path / "config.db")
    try:
        service = PlacementService(store)
        read = asyncio.create_task(names(service))
        await gate.entered()
        read.cancel()
        change = asyncio.create_task(call(service, "POST", "/resource_providers",
                                          {"name": "cn1", "uuid": RP}))
        await asyncio.sleep(0.05)
        assert read.cancelled() or read.done()
        assert not change.done()
        gate.open.set()
        assert (await change)[0] == 200
    finally:
        gate.open.set()
        store.close()


async def test_holding_the_lock_holds_off_reads_and_changes(tmp_path: Path) -> None:
    """What the cluster's sync does while it changes the engine in a worker thread."""
    store = new_store(tmp_path / "config.db")
    try:
        service = PlacementService(store)
        async with service.lock:
            read = asyncio.create_task(names(service))
            change = asyncio.create_task(call(service, "POST", "/resource_providers",
                                              {"name": "cn8"}))
            await asyncio.sleep(0.05)
            assert not read.done() and not change.done()
            await asyncio.to_thread(service.engine.create_provider, "cn9", RP)
        assert await read == ["cn9"]
        assert (await change)[0] == 200
    finally:
        store.close()


async def test_the_luxi_answer_carries_the_body_encoded(tmp_path: Path) -> None:
    """The body travels as its JSON string, encoded in advance: what the luxi client
    decodes is the very text a plain call answers."""
    store = new_store(tmp_path / "config.db")
    try:
        service = PlacementService(store)

        def args(method: str, path: str, body: Any = None) -> calls.Placement:
            return calls.Placement(method, path, "", "placement latest",
                                   "application/json" if body else None,
                                   json.dumps(body) if body else "", "admin", False)

        def over_luxi(answer: dict[str, Any]) -> Any:
            assert isinstance(answer["body"], msgspec.Raw)
            return serializer.loads(serializer.dumps(answer))["body"]

        created = await service.call(args("POST", "/resource_providers",
                                          {"name": "cn1", "uuid": RP}), encoded=True)
        assert json.loads(over_luxi(created))["name"] == "cn1"
        listed = await service.call(args("GET", "/resource_providers"), encoded=True)
        plain = await service.call(args("GET", "/resource_providers"))
        assert over_luxi(listed) == plain["body"]
        assert json.loads(plain["body"])["resource_providers"][0]["uuid"] == RP
    finally:
        store.close()
