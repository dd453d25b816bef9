"""The cluster in the /placement/ store, derived in memory
(:mod:`corral.masterd.placement_sync`): which commits wake a sync, the nodes' figures
from a gather, node providers and instance consumers never written as rows (no
commit, no serial change), outside data saved and restored on top of them, and the
409 for REST changes to what the cluster owns. A real configuration store, a fake
node RPC, no daemons."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from corral.config import ConfigStore
from corral.config.storage import Row
from corral.errors import NodeUnreachableError
from corral.luxi import calls
from corral.masterd.placement import PlacementService
from corral.masterd.placement_sync import (
    ClusterSync,
    commit_matters,
    enabled,
    same_figures,
)
from corral.objects import Instance, Node
from corral.placement.cluster import NodeResources
from corral.rpc.protocol import RpcResult
from tests.unit.config_helpers import new_store

INFO = {"memory_total": 4096, "memory_free": 3072, "memory_dom0": 512, "cpu_total": 2}
FIGURES = NodeResources(cpus=2, memory_mb=4096, memory_reserved_mb=512)


class FakeRpc:
    """Answers ``node_info`` with ``answers[name]`` (a missing name does not answer)."""

    def __init__(self, answers: dict[str, dict[str, Any]]) -> None:
        self.answers = answers
        self.asked: list[list[str]] = []

    async def call(self, nodes: Sequence[Node], procedure: str, args: Any, *,
                   timeout: float = 60.0) -> dict[str, RpcResult]:  # noqa: ASYNC109
        assert procedure == "node_info"
        self.asked.append([n.name for n in nodes])
        return {n.name: RpcResult(n.name, payload=self.answers[n.name])
                if n.name in self.answers else
                RpcResult(n.name, error=NodeUnreachableError(f"{n.name} is down"))
                for n in nodes}

    async def join(self, node: Node, token: str, *,
                   timeout: float = 30.0) -> RpcResult:  # noqa: ASYNC109
        raise AssertionError("not used")


def derived(store: ConfigStore, rpc: FakeRpc | None = None,
            live: dict[str, NodeResources] | None = None) -> tuple[ClusterSync,
                                                                   PlacementService]:
    """A sync and its service, wired as the master daemon wires them."""
    follower = ClusterSync(store, rpc)  # type: ignore[arg-type]
    follower.live = dict(live or {})
    service = PlacementService(store, follower)
    follower.attach(service)
    return follower, service


async def rest(follower: ClusterSync, method: str, path: str, body: Any = None
               ) -> tuple[int, Any]:
    """One request as the master daemon runs it (refusal first, then the service,
    which waits for a sync under way)."""
    args = calls.Placement(method, path, "", "placement latest",
                           "application/json" if body is not None else None,
                           json.dumps(body) if body is not None else "", "admin", False)
    answer = follower.refusal(args)
    if answer is None:
        answer = await follower.service.call(args)
    return int(answer["status"]), json.loads(str(answer["body"])) if answer["body"] else None


async def settle(check: Any) -> None:
    """Let the follower run until ``check()`` holds (it syncs in a worker thread)."""
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the follower did not sync")


def node(store: ConfigStore, name: str) -> Node:
    return next(n for n in store.all("node") if n.name == name)


def row(kind: str, uuid: str) -> Row:
    return Row(kind, uuid, 1, b"{}")


def test_which_commits_matter() -> None:
    known: dict[str, str] = {"n1": "node"}
    there = {"n1"}

    def still(_kind: str, uuid: str) -> bool:
        return uuid in there

    assert commit_matters(known, [row("instance", "i1")], [], still)
    assert known["i1"] == "instance"
    assert not commit_matters(known, [row("placement_consumer", "c1")], [], still)
    assert not commit_matters(known, [row("job", "j")], ["x"], still)
    there.clear()
    assert commit_matters(known, [], ["n1"], still)
    assert "n1" not in known


def test_small_moves_of_the_memory_a_node_uses_are_no_news() -> None:
    old = NodeResources(cpus=2, memory_mb=8192, memory_reserved_mb=1000, disk_mb=10240)
    assert not same_figures(None, old)
    assert same_figures(old, NodeResources(2, 8192, 1100, 10240))  # < 2% of 8192
    assert not same_figures(old, NodeResources(2, 8192, 1200, 10240))
    assert not same_figures(old, NodeResources(4, 8192, 1000, 10240))
    assert not same_figures(old, NodeResources(2, 8192, 1000, 20480))
    assert same_figures(old, NodeResources(2, 8192, 1000, 10300))  # DISK_GB is whole GiB


def test_the_environment_can_leave_the_cluster_out() -> None:
    assert enabled({}) and enabled({"CORRAL_PLACEMENT_CLUSTER": "on"})
    assert not enabled({"CORRAL_PLACEMENT_CLUSTER": "off"})
    assert not enabled({"CORRAL_PLACEMENT_CLUSTER": "0"})


async def test_the_cluster_is_derived_and_follows_commits_without_rows(
        tmp_path: Path) -> None:
    store = new_store(tmp_path / "config.db")
    try:
        follower, service = derived(store, live={"node1": FIGURES})
        node1 = node(store, "node1")
        assert service.engine.inventories(node1.uuid)["MEMORY_MB"].reserved == 512
        status, custom = await rest(follower, "POST", "/resource_providers",
                                    {"name": "u-custom"})
        assert status == 200
        serial = store.serial
        follower.start()
        try:
            async with store.transaction() as txn:
                txn.add(Node(name="node2", primary_ip="192.0.2.2", group=node1.group))
            node2 = node(store, "node2")
            await settle(lambda: service.engine.slot_of(node2.uuid) is not None)
            assert service.engine.inventories(node2.uuid) == {}  # no figures yet
            inst = Instance(name="inst1", primary_node=node2.uuid,
                            beparams={"vcpus": 1, "maxmem": 128, "minmem": 128})
            async with store.transaction() as txn:
                txn.add(inst)
            follower.live = {"node1": FIGURES, "node2": FIGURES}
            await follower.sync_now()  # what a gather with news wakes
            consumer = service.engine.consumer(inst.uuid)
            assert consumer is not None
            assert consumer.allocations == {node2.uuid: {"VCPU": 1, "MEMORY_MB": 128}}
            # two commits of the cluster's own objects, nothing of placement's
            assert store.serial == serial + 2
            assert [r.uuid for r in store.all("placement_provider")] == [custom["uuid"]]
            assert store.all("placement_consumer") == []
            follower.live = {"node1": NodeResources(4, 4096, 512)}
            await follower.sync_now()
            assert service.engine.inventories(node1.uuid)["VCPU"].total == 4
            assert store.serial == serial + 2
            async with store.transaction() as txn:
                txn.remove("instance", inst.uuid)
            await settle(lambda: service.engine.consumer(inst.uuid) is None)
            assert (await rest(follower, "GET", f"/resource_providers/{custom['uuid']}")
                    )[1]["generation"] == custom["generation"]
        finally:
            await follower.stop()
    finally:
        store.close()


async def test_outside_allocations_on_a_node_are_saved_and_restored(
        tmp_path: Path) -> None:
    store = new_store(tmp_path / "config.db")
    try:
        follower, _service = derived(store, live={"node1": FIGURES})
        node1 = node(store, "node1")
        outside = str(uuid.uuid4())
        status, _ = await rest(follower, "PUT", f"/allocations/{outside}", {
            "allocations": {node1.uuid: {"resources": {"MEMORY_MB": 1024}}},
            "project_id": "p", "user_id": "u", "consumer_generation": None,
            "consumer_type": "INSTANCE"})
        assert status == 204
        assert [c.uuid for c in store.all("placement_consumer")] == [outside]
        assert store.all("placement_provider") == []  # the node's provider is no row
        # a new master with the node's figures: the consumer is back at once
        _again, service = derived(store, live={"node1": FIGURES})
        assert service.engine.consumer(outside) is not None
        # a new master before the node's first figures: the allocation waits for them
        later, service = derived(store)
        assert service.engine.consumer(outside) is None
        assert [c.uuid for c in service.left.consumers] == [outside]
        later.live = {"node1": FIGURES}
        await later.sync_now()
        restored = service.engine.consumer(outside)
        assert restored is not None and restored.allocations == {
            node1.uuid: {"MEMORY_MB": 1024}}
        assert service.engine.usages(node1.uuid)["MEMORY_MB"] == 1024
    finally:
        store.close()


async def test_rest_changes_to_what_the_cluster_owns_are_refused(tmp_path: Path) -> None:
    store = new_store(tmp_path / "config.db")
    try:
        node1 = node(store, "node1")
        inst = Instance(name="inst1", primary_node=node1.uuid,
                        beparams={"vcpus": 1, "maxmem": 128, "minmem": 128})
        async with store.transaction() as txn:
            txn.add(inst)
        follower, service = derived(store, live={"node1": FIGURES})
        serial = store.serial
        rp = f"/resource_providers/{node1.uuid}"
        status, got = await rest(follower, "GET", rp)
        assert status == 200 and got["name"] == "node1"
        generation = got["generation"]
        for method, path, body in (
                ("PUT", f"{rp}/inventories", {"resource_provider_generation": generation,
                                              "inventories": {"VCPU": {"total": 1}}}),
                ("DELETE", f"{rp}/inventories/VCPU", None),
                ("PUT", f"{rp}/aggregates", {"aggregates": [],
                                             "resource_provider_generation": generation}),
                ("PUT", f"{rp}/traits", {"traits": [],
                                         "resource_provider_generation": generation}),
                ("DELETE", f"{rp}/traits", None),
                ("PUT", rp, {"name": "other"}),
                ("DELETE", rp, None)):
            status, error = await rest(follower, method, path, body)
            assert status == 409, (method, path, error)
            detail = error["errors"][0]["detail"]
            assert "is cluster node node1" in detail
            assert "gnt-node modify --aggregates/--traits node1" in detail
        for method, path, body in (
                ("DELETE", f"/allocations/{inst.uuid}", None),
                ("PUT", f"/allocations/{inst.uuid}", {
                    "allocations": {}, "project_id": "p", "user_id": "u",
                    "consumer_generation": 1}),
                ("POST", "/allocations", {inst.uuid: {
                    "allocations": {}, "project_id": "p", "user_id": "u",
                    "consumer_generation": 1}}),
                ("POST", "/reshaper", {"inventories": {node1.uuid: {
                    "resource_provider_generation": generation, "inventories": {}}},
                    "allocations": {}})):
            status, error = await rest(follower, method, path, body)
            assert status == 409, (method, path, error)
            assert "node1" in error["errors"][0]["detail"] or \
                "is instance inst1" in error["errors"][0]["detail"]
        status, error = await rest(follower, "POST", "/resource_providers",
                                   {"name": "u-n", "uuid": node1.uuid})
        assert status == 409 and "is cluster node node1" in error["errors"][0]["detail"]
        status, custom = await rest(follower, "POST", "/resource_providers", {"name": "u-c"})
        status, error = await rest(follower, "PUT",
                                   f"/resource_providers/{custom['uuid']}/traits", {
                                       "traits": ["CUSTOM_CORRAL_NODE"],
                                       "resource_provider_generation": 0})
        assert status == 409 and "marks the providers" in error["errors"][0]["detail"]
        # a user who may not write gets the usual 403, a bad version its 406
        assert follower.refusal(calls.Placement(
            "DELETE", rp, "", "placement latest", None, "", "reader", True)) is None
        assert follower.refusal(calls.Placement(
            "DELETE", rp, "", "placement 9.99", None, "", "admin", False)) is None
        # nothing changed: the provider, the consumer and the configuration
        assert service.engine.provider(node1.uuid).generation == generation
        assert service.engine.consumer(inst.uuid) is not None
        assert store.serial == serial + 1  # the custom provider only
    finally:
        store.close()


async def test_a_removed_node_takes_outside_allocations_with_it(tmp_path: Path) -> None:
    store = new_store(tmp_path / "config.db")
    try:
        node1 = node(store, "node1")
        async with store.transaction() as txn:
            txn.add(Node(name="node2", primary_ip="192.0.2.2", group=node1.group))
        node2 = node(store, "node2")
        follower, service = derived(store, live={"node1": FIGURES, "node2": FIGURES})
        outside = str(uuid.uuid4())
        assert (await rest(follower, "PUT", f"/allocations/{outside}", {
            "allocations": {node1.uuid: {"resources": {"VCPU": 1}},
                            node2.uuid: {"resources": {"VCPU": 1}}},
            "project_id": "p", "user_id": "u", "consumer_generation": None,
            "consumer_type": "INSTANCE"}))[0] == 204
        async with store.transaction() as txn:
            txn.remove("node", node2.uuid)
        await follower.sync_now()
        assert service.engine.slot_of(node2.uuid) is None
        saved = store.all("placement_consumer")
        assert [c.allocations for c in saved] == [{node1.uuid: {"VCPU": 1}}]
    finally:
        store.close()


async def test_gather_keeps_figures_of_silent_nodes_and_drops_offline_ones(
        tmp_path: Path) -> None:
    store = new_store(tmp_path / "config.db")
    try:
        node1 = node(store, "node1")
        async with store.transaction() as txn:
            txn.add(Node(name="node2", primary_ip="192.0.2.2", group=node1.group))
        rpc = FakeRpc({"node1": INFO})
        follower, service = derived(store, rpc)
        assert not await follower.gather()  # node2 has given no figures yet
        assert set(follower.live) == {"node1"}
        assert follower.live["node1"].memory_reserved_mb == 512
        rpc.answers = {"node2": {**INFO, "cpu_total": 8}}
        assert await follower.gather(missing_only=True)  # after a commit of a node
        assert rpc.asked[-1] == ["node2"]
        assert await follower.gather()
        assert rpc.asked[-1] == ["node1", "node2"]
        assert follower.live["node1"].cpus == 2  # silent now: kept
        assert follower.live["node2"].cpus == 8
        async with store.transaction() as txn:
            changed = txn.get("node", node(store, "node2").uuid)
            changed.offline = True
            txn.update(changed)
        assert await follower.gather()
        assert set(follower.live) == {"node1"} and rpc.asked[-1] == ["node1"]
        serial = store.serial
        changes = await follower.sync_now()
        assert changes.providers == {node1.uuid}  # node2's provider is there, empty
        assert service.engine.inventories(node1.uuid)["VCPU"].total == 2
        assert service.engine.inventories(node(store, "node2").uuid) == {}
        assert not await follower.sync_now()  # nothing changed
        assert store.serial == serial
    finally:
        store.close()
