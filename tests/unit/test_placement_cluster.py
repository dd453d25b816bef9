"""The cluster in the placement engine: nodes as providers, instances as consumers
(:mod:`corral.placement.cluster`), and the constraints of a new instance
(:mod:`corral.placement.constraints`)."""

from __future__ import annotations

import msgspec
import pytest

from corral.errors import ParameterError
from corral.iallocator import ClusterView
from corral.objects import Cluster, Disk, Instance, Node, NodeGroup, new_uuid
from corral.placement import Inventory, PlacementStore
from corral.placement.cluster import (
    CLUSTER_PROJECT,
    NODE_TRAIT,
    NodeResources,
    cluster_store,
    sync,
)
from corral.placement.constraints import (
    Constraints,
    allowed_nodes,
    check_aggregate_name,
    check_traits,
    resolve_member_of,
    violations,
)

AGG1, AGG2 = new_uuid(), new_uuid()
RES = NodeResources(cpus=4, memory_mb=8192, memory_reserved_mb=1024, disk_mb=100 * 1024)


def _view(nodes: list[Node], instances: list[Instance] = (), disks: list[Disk] = (),
          ratio: float = 4, groups: list[NodeGroup] | None = None) -> ClusterView:
    cluster = Cluster(name="c", master_node=nodes[0].uuid if nodes else "",
                      aggregates={"agg1": AGG1, "agg2": AGG2})
    cluster.ipolicy = {**cluster.ipolicy, "vcpu-ratio": ratio}
    groups = groups if groups is not None else [GROUP]
    return ClusterView(cluster=cluster, groups={g.uuid: g for g in groups}, nodes=nodes,
                       instances=list(instances), disks={d.uuid: d for d in disks})


GROUP = NodeGroup(name="default")


def _node(name: str, **kw: object) -> Node:
    return Node(name=name, primary_ip="127.0.1.1", group=GROUP.uuid, **kw)  # type: ignore[arg-type]


def _instance(name: str, node: Node, vcpus: int = 1, maxmem: int = 512,
              disk_mib: int = 0) -> tuple[Instance, list[Disk]]:
    disks = [Disk(dev_type="file", size=disk_mib)] if disk_mib else []
    inst = Instance(name=name, primary_node=node.uuid, disk_template="file" if disks else
                    "diskless", beparams={"vcpus": vcpus, "maxmem": maxmem, "minmem": maxmem},
                    disks=[d.uuid for d in disks])
    return inst, disks


def test_nodes_become_root_providers_with_inventories_aggregates_and_traits() -> None:
    n1 = _node("n1", aggregates=[AGG1], traits=["CUSTOM_GPU", "HW_CPU_X86_AVX2"])
    n2 = _node("n2")
    store = cluster_store(_view([n1, n2], ratio=2.5), {"n1": RES})
    assert [(p.uuid, p.name, p.parent_uuid) for p in store.providers()] == [
        (n1.uuid, "n1", None), (n2.uuid, "n2", None)]
    inv = store.inventories(n1.uuid)
    assert inv["VCPU"].total == 4 and inv["VCPU"].allocation_ratio == 2.5
    assert inv["VCPU"].capacity == 10
    assert inv["MEMORY_MB"] == Inventory(total=8192, reserved=1024)
    assert inv["DISK_GB"].total == 100
    assert store.inventories(n2.uuid) == {}  # no live data: nothing to offer
    assert store.provider_aggregates(n1.uuid) == {GROUP.uuid, AGG1}
    assert store.provider_aggregates(n2.uuid) == {GROUP.uuid}
    assert store.provider_traits(n1.uuid) == {NODE_TRAIT, "CUSTOM_GPU", "HW_CPU_X86_AVX2"}


def test_instances_are_consumers_of_their_primary_node() -> None:
    n1 = _node("n1")
    inst, disks = _instance("i1", n1, vcpus=2, maxmem=1024, disk_mib=1500)
    store = cluster_store(_view([n1], [inst], disks), {"n1": RES})
    consumer = store.consumer(inst.uuid)
    assert consumer is not None and consumer.project_id == CLUSTER_PROJECT
    assert consumer.allocations == {n1.uuid: {"VCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 2}}
    assert store.usages(n1.uuid) == {"VCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 2}


def test_an_allocation_beyond_capacity_is_recorded_and_leaves_nothing_free() -> None:
    n1 = _node("n1")
    inst, _ = _instance("big", n1, vcpus=64, maxmem=7168)
    store = cluster_store(_view([n1], [inst], ratio=1), {"n1": RES})
    assert store.usages(n1.uuid)["VCPU"] == 64
    assert allowed_nodes(store, {"VCPU": 1}, Constraints()) == []


def test_sync_follows_changes_and_leaves_other_providers_alone() -> None:
    n1, n2 = _node("n1"), _node("n2")
    i1, _ = _instance("i1", n1)
    i2, _ = _instance("i2", n2)
    store = PlacementStore()
    other = store.create_provider("storage-pool")
    store.set_inventories(other.uuid, None, {"DISK_GB": Inventory(total=1000)})
    store.set_allocations("c0ffee00-0000-4000-8000-000000000000", {other.uuid: {"DISK_GB": 5}},
                          consumer_generation=None, project_id="p", user_id="u")
    live = {"n1": RES, "n2": RES}
    first = sync(store, _view([n1, n2], [i1, i2]), live)
    assert (first.providers, first.consumers, first.traits) == (
        {n1.uuid, n2.uuid}, {i1.uuid, i2.uuid}, {NODE_TRAIT})
    gen = {p.uuid: p.generation for p in store.providers()}
    # nothing changed: nothing touched
    assert not sync(store, _view([n1, n2], [i1, i2]), live)
    assert {p.uuid: p.generation for p in store.providers()} == gen
    # n2 removed with its instance, i1 moved to a new node n3 and grown, n1 renamed
    # and put in agg2
    n3 = _node("n3")
    n1b = msgspec.structs.replace(n1, name="n1-renamed", aggregates=[AGG2])
    i1b = msgspec.structs.replace(i1, primary_node=n3.uuid, beparams={"vcpus": 3,
                                                                      "maxmem": 512})
    synced = sync(store, _view([n1b, n3], [i1b]), {"n1-renamed": RES, "n3": RES})
    assert synced.providers == {n1.uuid, n2.uuid, n3.uuid}
    assert synced.consumers == {i1.uuid, i2.uuid} and synced.traits == set()
    assert [p.name for p in store.providers()] == ["storage-pool", "n1-renamed", "n3"]
    assert store.provider_aggregates(n1.uuid) == {GROUP.uuid, AGG2}
    assert store.consumer(i2.uuid) is None
    consumer = store.consumer(i1.uuid)
    assert consumer is not None and consumer.allocations == {
        n3.uuid: {"VCPU": 3, "MEMORY_MB": 512}}
    assert store.usages(n1.uuid) == {"VCPU": 0, "MEMORY_MB": 0, "DISK_GB": 0}
    assert store.usages(other.uuid) == {"DISK_GB": 5}
    assert store.provider(other.uuid).generation == gen[other.uuid]


def test_a_node_sync_cannot_give_a_provider_is_skipped_and_the_others_synced() -> None:
    n1, n2, n3 = _node("n1"), _node("n2"), _node("taken")
    i3, _ = _instance("i3", n3)
    store = PlacementStore()
    sync(store, _view([n1, n2]), {"n1": RES, "n2": RES})
    child = store.create_provider("client-child", parent_uuid=n2.uuid)
    store.create_provider("taken")  # a client's provider with the name of a new node
    synced = sync(store, _view([n1, n3], [i3]), {"n1": RES, "taken": RES})
    assert set(synced.refused) == {n2.uuid, n3.uuid}
    assert "taken" in synced.refused[n3.uuid]
    assert store.slot_of(n3.uuid) is None and store.consumer(i3.uuid) is None
    assert store.provider(child.uuid).parent_uuid == n2.uuid  # kept, with its parent
    store.delete_provider(child.uuid)
    again = sync(store, _view([n1, n3], [i3]), {"n1": RES, "taken": RES})
    assert set(again.refused) == {n3.uuid}  # the name is still taken
    assert store.slot_of(n2.uuid) is None  # the removed node's provider went


def test_sync_removes_a_node_whose_instances_are_gone_at_once() -> None:
    n1, n2 = _node("n1"), _node("n2")
    inst, _ = _instance("i", n2)
    store = cluster_store(_view([n1, n2], [inst]), {"n1": RES, "n2": RES})
    sync(store, _view([n1]), {"n1": RES})
    assert [p.name for p in store.providers()] == ["n1"]
    assert store.consumer(inst.uuid) is None


@pytest.mark.parametrize(("values", "expected"), [
    (["agg1"], [AGG1]),
    (["!agg2"], ["!" + AGG2]),
    (["in:agg1,agg2"], [f"in:{AGG1},{AGG2}"]),
    (["!in:agg1,default"], [f"!in:{AGG1},{GROUP.uuid}"]),
    ([AGG1.upper()], [AGG1]),
    (["agg1", "!agg2"], [AGG1, "!" + AGG2]),
])
def test_member_of_names_become_uuids(values: list[str], expected: list[str]) -> None:
    names = {"default": GROUP.uuid, "agg1": AGG1, "agg2": AGG2}
    assert list(resolve_member_of(values, names)) == expected


@pytest.mark.parametrize(("value", "message"), [
    ("agg1,agg2", "several aggregates need 'in:'"),
    ("in:agg1,", "an aggregate is empty"),
    ("!nosuch", "unknown aggregate 'nosuch' (known by name: agg1, agg2"),
    ("!", "an aggregate is empty"),
])
def test_member_of_refusals(value: str, message: str) -> None:
    with pytest.raises(ParameterError, match=message.replace("(", r"\(")):
        resolve_member_of([value], {"agg1": AGG1, "agg2": AGG2})


def test_names_and_traits_are_checked() -> None:
    assert check_aggregate_name("rack-1.a") == "rack-1.a"
    for bad in ("1rack", "a:b", "!a", "+a", AGG1, "a,b", ""):
        with pytest.raises(ParameterError, match="invalid aggregate name"):
            check_aggregate_name(bad)
    assert check_traits(["HW_CPU_X86_AVX2", "CUSTOM_X", "CUSTOM_X"]) == [
        "CUSTOM_X", "HW_CPU_X86_AVX2"]
    for bad in ("custom_x", "NOT_A_TRAIT", "CUSTOM_"):
        with pytest.raises(ParameterError, match="invalid trait"):
            check_traits([bad])


def _three() -> tuple[PlacementStore, Node, Node, Node]:
    a = _node("a", aggregates=[AGG1], traits=["CUSTOM_SSD"])
    b = _node("b", aggregates=[AGG2])
    c = _node("c", traits=["CUSTOM_SSD"])
    return cluster_store(_view([a, b, c]), {"a": RES, "b": RES, "c": RES}), a, b, c


@pytest.mark.parametrize(("constraints", "names"), [
    (Constraints(), ["a", "b", "c"]),
    (Constraints(member_of=(f"!in:{AGG1},{AGG2}",)), ["c"]),
    (Constraints(member_of=(AGG2,)), ["b"]),
    (Constraints(member_of=(f"in:{AGG1},{AGG2}",), forbidden_traits=("CUSTOM_SSD",)), ["b"]),
    (Constraints(required_traits=("CUSTOM_SSD",), member_of=("!" + AGG1,)), ["c"]),
    (Constraints(required_traits=("CUSTOM_NOBODY",)), []),
    (Constraints(forbidden_traits=("CUSTOM_NOBODY",)), ["a", "b", "c"]),
    (Constraints(member_of=(GROUP.uuid, "!" + AGG2)), ["a", "c"]),
])
def test_allowed_nodes(constraints: Constraints, names: list[str]) -> None:
    store, *nodes = _three()
    by_uuid = {n.uuid: n.name for n in nodes}
    assert [by_uuid[u] for u in allowed_nodes(store, {"VCPU": 1, "MEMORY_MB": 512},
                                              constraints)] == names


def test_allowed_nodes_need_room() -> None:
    store, a, _b, _c = _three()
    assert allowed_nodes(store, {"MEMORY_MB": 7168}, Constraints()) == [a.uuid, _b.uuid,
                                                                        _c.uuid]
    assert allowed_nodes(store, {"MEMORY_MB": 7169}, Constraints()) == []
    assert allowed_nodes(store, {"VCPU": 17}, Constraints()) == []


def test_violations_name_the_aggregate_and_trait() -> None:
    label = {AGG1: "agg1", AGG2: "agg2"}.get
    c = Constraints(member_of=(f"!in:{AGG1},{AGG2}", AGG2), required_traits=("CUSTOM_GPU",),
                    forbidden_traits=("CUSTOM_SSD",))
    assert violations({AGG1}, {"CUSTOM_SSD"}, c, lambda u: label(u) or u) == [
        "it is in aggregate agg1, which member_of !in:agg1,agg2 forbids",
        "it is not in aggregate agg2 (member_of agg2)",
        "it lacks the required trait CUSTOM_GPU",
        "it has the forbidden trait CUSTOM_SSD",
    ]
    assert violations({AGG2}, {"CUSTOM_GPU"}, Constraints(member_of=(AGG2,)), str) == []


def test_a_class_a_node_stops_reporting_stays_while_instances_hold_it() -> None:
    n1 = _node("n1")
    inst, _ = _instance("i", n1, vcpus=2)
    store = cluster_store(_view([n1], [inst]), {"n1": RES})
    sync(store, _view([n1], [inst]), {})  # the node did not answer this time
    assert set(store.inventories(n1.uuid)) == {"VCPU", "MEMORY_MB"}
    sync(store, _view([n1]), {})
    assert store.inventories(n1.uuid) == {}


@pytest.mark.parametrize(("current", "spec", "expected"), [
    (["b"], ["a", "c"], ["a", "c"]),
    (["b"], ["+a", "-b"], ["a"]),
    (["b"], ["-zz"], ["b"]),
    (["b"], [], []),
])
def test_list_changes_set_or_change(current: list[str], spec: list[str],
                                    expected: list[str]) -> None:
    from corral.cmdlib.aggregates import apply_list_change

    assert apply_list_change(current, spec, str, "aggregates") == expected


def test_list_changes_refuse_a_mix_and_what_resolve_refuses() -> None:
    from corral.cmdlib.aggregates import apply_list_change

    with pytest.raises(ParameterError, match=r"aggregates: give either the whole list"):
        apply_list_change([], ["a", "+b"], str, "aggregates")
    with pytest.raises(ParameterError, match="invalid trait 'bad'"):
        apply_list_change([], ["+bad"], lambda t: check_traits([t])[0], "traits")


def test_the_builtin_allocator_takes_nodes_both_restrictions_allow() -> None:
    """A request's restrict-to-nodes (placement constraints) and the allocator's own
    restrict-allocation-to option: only nodes in both are considered."""
    import copy
    import json
    from pathlib import Path

    from corral.allocator.iallocator import AnswerOptions, answer

    data = json.loads((Path(__file__).parents[1] / "data" / "iallocator" /
                       "ganeti-allocate.json").read_text())
    (name,) = data["nodes"]
    data["nodes"]["b"] = copy.deepcopy(data["nodes"][name])  # the instances stay on name
    a = name
    data["request"]["restrict-to-nodes"] = ["b"]

    def chosen(restrict_to: list[str] | None) -> list[str]:
        opts = AnswerOptions(capacity=False, restrict_to=restrict_to)
        return list(answer(copy.deepcopy(data), opts)["result"])

    assert chosen(None) == ["b"]
    assert chosen([a, "b"]) == ["b"]
    assert chosen([a]) == []
