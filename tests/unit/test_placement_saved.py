"""Placement's state in the configuration store: the master daemon's service persists
what each request changed, rebuilds the same engine from the rows, and never lets the
engine and the rows disagree."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from corral.config import ConfigStore
from corral.luxi import calls
from corral.masterd.placement import PlacementService
from tests.unit.config_helpers import new_store

RP = "33333333-3333-3333-3333-333333333333"
CHILD = "55555555-5555-5555-5555-555555555555"
AGG = "11111111-1111-1111-1111-111111111111"
C1 = "22222222-2222-2222-2222-222222222222"
C2 = "66666666-6666-6666-6666-666666666666"


async def call(service: PlacementService, method: str, path: str, body: Any = None,
               query: str = "", read_only: bool = False) -> tuple[int, Any]:
    answer = await service.call(calls.Placement(
        method, path, query, "placement latest",
        "application/json" if body is not None else None,
        json.dumps(body) if body is not None else "", "admin", read_only))
    return answer["status"], json.loads(answer["body"]) if answer["body"] else None


async def populate(service: PlacementService) -> None:
    for body in ({"name": "cn1", "uuid": RP},
                 {"name": "numa0", "uuid": CHILD, "parent_provider_uuid": RP}):
        assert (await call(service, "POST", "/resource_providers", body))[0] == 200
    assert (await call(service, "PUT", "/traits/CUSTOM_FAST"))[0] == 201
    assert (await call(service, "PUT", "/resource_classes/CUSTOM_GPU"))[0] == 201
    status, _ = await call(service, "PUT", f"/resource_providers/{CHILD}/inventories", {
        "resource_provider_generation": 0,
        "inventories": {"VCPU": {"total": 8, "allocation_ratio": 2.0},
                        "CUSTOM_GPU": {"total": 2}}})
    assert status == 200
    await call(service, "PUT", f"/resource_providers/{RP}/aggregates",
               {"aggregates": [AGG], "resource_provider_generation": 0})
    await call(service, "PUT", f"/resource_providers/{CHILD}/traits",
               {"traits": ["CUSTOM_FAST"], "resource_provider_generation": 1})
    for consumer, vcpu in ((C1, 3), (C2, 1)):
        status, _ = await call(service, "PUT", f"/allocations/{consumer}", {
            "allocations": {CHILD: {"resources": {"VCPU": vcpu}}}, "project_id": "p",
            "user_id": "u", "consumer_generation": None, "consumer_type": "INSTANCE"})
        assert status == 204


async def everything(service: PlacementService) -> list[Any]:
    answers = []
    for path, query in (("/resource_providers", ""),
                        (f"/resource_providers/{CHILD}/inventories", ""),
                        (f"/resource_providers/{CHILD}/allocations", ""),
                        (f"/resource_providers/{RP}/aggregates", ""),
                        (f"/resource_providers/{CHILD}/traits", ""),
                        (f"/allocations/{C1}", ""), ("/usages", "project_id=p"),
                        ("/resource_classes/CUSTOM_GPU", ""), ("/traits", "name=in:CUSTOM_FAST"),
                        ("/allocation_candidates", "resources=VCPU:1,CUSTOM_GPU:1")):
        status, body = await call(service, "GET", path, query=query)
        assert status == 200, body
        answers.append(body)
    return answers


async def test_state_survives_a_reload_from_the_rows(tmp_path: Path) -> None:
    store = new_store(tmp_path / "config.db")
    service = PlacementService(store)
    await populate(service)
    before = await everything(service)
    serial = store.serial
    store.close()
    reopened = ConfigStore.open(tmp_path / "config.db")
    try:
        assert reopened.serial == serial  # the rows read back as written: no rewrite
        assert await everything(PlacementService(reopened)) == before
    finally:
        reopened.close()


async def test_deletions_are_persisted(tmp_path: Path) -> None:
    store = new_store(tmp_path / "config.db")
    try:
        service = PlacementService(store)
        await populate(service)
        for consumer in (C1, C2):
            assert (await call(service, "DELETE", f"/allocations/{consumer}"))[0] == 204
        assert (await call(service, "DELETE", f"/resource_providers/{CHILD}"))[0] == 204
        assert (await call(service, "DELETE", "/traits/CUSTOM_FAST"))[0] == 204
        assert store.all("placement_consumer") == []
        assert [p.uuid for p in store.all("placement_provider")] == [RP]
        assert [n.name for n in store.all("placement_name")] == ["CUSTOM_GPU"]
        assert await everything_simple(PlacementService(store)) == await everything_simple(
            service)
    finally:
        store.close()


async def everything_simple(service: PlacementService) -> Any:
    return (await call(service, "GET", "/resource_providers"))[1]


async def test_refused_change_leaves_engine_and_rows_as_they_were(tmp_path: Path) -> None:
    store = new_store(tmp_path / "config.db")
    try:
        service = PlacementService(store)
        await populate(service)
        serial = store.serial
        before = await everything(service)
        child_gen = service.engine.provider(CHILD).generation
        # The reshaper sets interim inventories and moves C1's allocations, then finds
        # VCPU still used by C2: refused after two steps, which must both be undone.
        status, body = await call(service, "POST", "/reshaper", {
            "inventories": {CHILD: {"resource_provider_generation": child_gen,
                                    "inventories": {"CUSTOM_GPU": {"total": 2}}}},
            "allocations": {C1: {"allocations": {}, "project_id": "p", "user_id": "u",
                                 "consumer_generation": 1, "consumer_type": "INSTANCE"}}})
        assert status == 409, body
        assert store.serial == serial
        assert await everything(service) == before
        service.check()
    finally:
        store.close()


async def test_read_only_call_writes_nothing(tmp_path: Path) -> None:
    store = new_store(tmp_path / "config.db")
    try:
        service = PlacementService(store)
        serial = store.serial
        status, _ = await call(service, "POST", "/resource_providers", {"name": "x"},
                               read_only=True)
        assert status == 403 and store.serial == serial
    finally:
        store.close()
