"""The placement store: trees, inventories, traits, aggregates, allocations, generations."""

from __future__ import annotations

import uuid

import pytest

from corral.errors import (
    PlacementConcurrentUpdateError,
    PlacementConflictError,
    PlacementError,
    PlacementNotFoundError,
)
from corral.placement import Inventory, PlacementStore
from corral.placement.names import STANDARD_RESOURCE_CLASSES, STANDARD_TRAITS

CN = "00000000-0000-0000-0000-00000000000c"
NUMA = "00000000-0000-0000-0000-00000000001c"
AGG = "00000000-0000-0000-0000-0000000000aa"


def _store() -> PlacementStore:
    store = PlacementStore()
    store.create_provider("cn", CN)
    store.create_provider("numa", NUMA, parent_uuid=CN)
    return store


def test_standard_names_come_from_openstack_lists() -> None:
    assert STANDARD_RESOURCE_CLASSES[:3] == ("VCPU", "MEMORY_MB", "DISK_GB")
    assert "PCPU" in STANDARD_RESOURCE_CLASSES and "SRIOV_NET_VF" in STANDARD_RESOURCE_CLASSES
    assert "MISC_SHARES_VIA_AGGREGATE" in STANDARD_TRAITS and "HW_CPU_X86_AVX2" in STANDARD_TRAITS


def test_tree_roots_and_parents() -> None:
    store = _store()
    numa = store.provider(NUMA)
    assert (numa.root_uuid, numa.parent_uuid) == (CN, CN)
    assert store.provider(CN).parent_uuid is None


def test_capacity_is_total_minus_reserved_times_ratio() -> None:
    assert Inventory(total=10, reserved=2, allocation_ratio=1.5).capacity == 12
    assert Inventory(total=7).max_unit == 7


def test_bad_inventory_is_refused() -> None:
    with pytest.raises(PlacementError, match="reserved"):
        Inventory(total=1, reserved=2)
    with pytest.raises(PlacementError, match="step_size"):
        Inventory(total=1, step_size=0)


def test_generation_conflict_changes_nothing() -> None:
    store = _store()
    gen = store.set_inventories(CN, 0, {"VCPU": Inventory(total=4)})
    assert gen == 1
    with pytest.raises(PlacementConcurrentUpdateError) as caught:
        store.set_inventories(CN, 0, {"VCPU": Inventory(total=8)})
    assert caught.value.placement_code == "placement.concurrent_update"
    assert caught.value.http_status == 409
    assert store.inventories(CN)["VCPU"].total == 4


def test_allocations_usages_and_capacity() -> None:
    store = _store()
    store.set_inventories(CN, None, {"VCPU": Inventory(total=4, max_unit=2)})
    store.set_allocations("c1", {CN: {"VCPU": 2}}, consumer_generation=None,
                          project_id="p", user_id="u")
    assert store.usages(CN) == {"VCPU": 2}
    assert store.consumer("c1") is not None and store.consumer("c1").generation == 1  # type: ignore[union-attr]
    with pytest.raises(PlacementConflictError, match="exceed the capacity"):
        store.set_allocations_many({"c2": ({CN: {"VCPU": 2}}, None, "p", "u", "X"),
                                    "c3": ({CN: {"VCPU": 1}}, None, "p", "u", "X")})
    with pytest.raises(PlacementConflictError, match="inventory constraints"):
        store.set_allocations("c2", {CN: {"VCPU": 3}}, consumer_generation=None,
                              project_id="p", user_id="u")
    with pytest.raises(PlacementConcurrentUpdateError, match="expected null but got 1"):
        store.set_allocations("c1", {}, consumer_generation=None, project_id="p", user_id="u")
    assert store.usages(CN) == {"VCPU": 2} and store.total_usages("p") == {"VCPU": 2}
    with pytest.raises(PlacementConflictError, match="in use") as caught:
        store.set_inventories(CN, None, {})
    assert caught.value.placement_code == "placement.inventory.inuse"
    store.set_allocations("c1", {}, consumer_generation=1, project_id="p", user_id="u")
    assert store.usages(CN) == {"VCPU": 0} and store.consumer("c1") is None


def test_traits_aggregates_and_deletion_rules() -> None:
    store = _store()
    with pytest.raises(PlacementError, match="No such trait"):
        store.set_provider_traits(CN, None, ["CUSTOM_NOPE"])
    store.create_trait("CUSTOM_FAST")
    store.set_provider_traits(CN, None, ["CUSTOM_FAST", "HW_CPU_X86_AVX2"])
    store.set_provider_aggregates(CN, None, [AGG])
    assert store.provider_aggregates(CN) == {AGG}
    with pytest.raises(PlacementConflictError):
        store.delete_trait("CUSTOM_FAST")
    with pytest.raises(PlacementConflictError, match="child"):
        store.delete_provider(CN)
    store.delete_provider(NUMA)
    store.delete_provider(CN)
    with pytest.raises(PlacementNotFoundError, match="No resource provider"):
        store.provider(CN)
    store.delete_trait("CUSTOM_FAST")


def test_rename_and_reparent() -> None:
    store = _store()
    other = store.create_provider("other")
    with pytest.raises(PlacementConflictError) as caught:
        store.update_provider(other.uuid, "cn")
    assert caught.value.placement_code == "placement.duplicate_name"
    with pytest.raises(PlacementError, match="loop"):
        store.update_provider(CN, "cn", parent_uuid=NUMA)
    before = store.provider(CN).generation
    moved = store.update_provider(CN, "cn-renamed", parent_uuid=other.uuid)
    # Placement does not move a provider to a new generation for a rename or a move.
    assert (moved.name, moved.root_uuid, moved.generation) == ("cn-renamed", other.uuid,
                                                               before)
    assert store.provider(NUMA).root_uuid == other.uuid
    with pytest.raises(PlacementError, match="re-parenting"):
        store.update_provider(NUMA, "numa", parent_uuid=other.uuid)
    with pytest.raises(PlacementError, match="un-parenting"):
        store.update_provider(CN, "cn-renamed", parent_uuid=None)


def test_reparenting_and_unparenting_when_allowed() -> None:
    store = _store()
    other = store.create_provider("other")
    store.update_provider(NUMA, "numa", parent_uuid=other.uuid, allow_reparenting=True)
    assert store.provider(NUMA).root_uuid == other.uuid
    assert store.provider(NUMA).parent_uuid == other.uuid
    with pytest.raises(PlacementError, match="does not exist"):
        store.update_provider(NUMA, "numa", parent_uuid=str(uuid.uuid4()),
                              allow_reparenting=True)
    store.update_provider(NUMA, "numa", parent_uuid=None, allow_reparenting=True)
    assert (store.provider(NUMA).root_uuid, store.provider(NUMA).parent_uuid) == (NUMA, None)
    store.delete_provider(CN)  # it has no child any more


def test_aggregates_may_keep_the_generation() -> None:
    store = _store()
    before = store.provider(CN).generation
    store.set_provider_aggregates(CN, None, [str(uuid.uuid4())], increment=False)
    assert store.provider(CN).generation == before
    store.set_provider_aggregates(CN, before, [])
    assert store.provider(CN).generation == before + 1


def test_allocations_move_only_the_new_providers_to_a_new_generation() -> None:
    store = _store()
    store.set_inventories(CN, None, {"VCPU": Inventory(total=8)})
    other = store.create_provider("other2")
    store.set_inventories(other.uuid, None, {"VCPU": Inventory(total=8)})
    store.set_allocations("c1", {CN: {"VCPU": 1}}, consumer_generation=None,
                          project_id="p", user_id="u")
    cn_gen, other_gen = store.provider(CN).generation, store.provider(other.uuid).generation
    store.set_allocations("c1", {other.uuid: {"VCPU": 1}}, consumer_generation=1,
                          project_id="p", user_id="u")
    assert store.provider(CN).generation == cn_gen  # left, not moved on
    assert store.provider(other.uuid).generation == other_gen + 1
    store.set_allocations_many({"c1": ({}, 2, "p", "u", "UNKNOWN")}, bump_emptied=False)
    assert store.provider(other.uuid).generation == other_gen + 1
    store.set_allocations("c2", {CN: {"VCPU": 1}}, consumer_generation=None,
                          project_id="p", user_id="u")
    store.set_allocations("c2", {}, consumer_generation=1, project_id="p", user_id="u")
    assert store.provider(CN).generation == cn_gen + 2  # emptied: its provider moves on


def test_rename_resource_class_everywhere() -> None:
    store = _store()
    store.create_resource_class("CUSTOM_OLD")
    store.set_inventories(CN, None, {"CUSTOM_OLD": Inventory(total=4)})
    store.set_allocations("c1", {CN: {"CUSTOM_OLD": 1}}, consumer_generation=None,
                          project_id="p", user_id="u")
    renamed = store.rename_resource_class("CUSTOM_OLD", "CUSTOM_NEW")
    assert (renamed.providers, renamed.consumers) == ({CN}, {"c1"})
    assert not store.has_resource_class("CUSTOM_OLD")
    assert store.usages(CN) == {"CUSTOM_NEW": 1}
    assert store.consumer("c1").allocations == {CN: {"CUSTOM_NEW": 1}}  # type: ignore[union-attr]
    with pytest.raises(PlacementConflictError):
        store.create_resource_class("CUSTOM_TAKEN")
        store.rename_resource_class("CUSTOM_NEW", "CUSTOM_TAKEN")


def test_custom_resource_classes() -> None:
    store = _store()
    with pytest.raises(PlacementError, match="invalid"):
        store.create_resource_class("GPU")
    assert store.create_resource_class("CUSTOM_GPU") is True
    assert store.create_resource_class("CUSTOM_GPU") is False
    with pytest.raises(PlacementError, match="Unknown resource class"):
        store.set_inventories(CN, None, {"CUSTOM_FPGA": Inventory(total=1)})
    store.set_inventories(CN, None, {"CUSTOM_GPU": Inventory(total=1)})
    with pytest.raises(PlacementConflictError, match="in use in inventory"):
        store.delete_resource_class("CUSTOM_GPU")
    with pytest.raises(PlacementError, match="standard"):
        store.delete_resource_class("VCPU")
    assert store.resource_classes()[-1] == "CUSTOM_GPU"


def test_failed_multi_consumer_change_changes_nothing() -> None:
    store = _store()
    store.set_inventories(CN, None, {"VCPU": Inventory(total=4)})
    generation = store.provider(CN).generation
    with pytest.raises(PlacementNotFoundError):
        store.set_allocations_many({"a": ({CN: {"VCPU": 1}}, None, "p", "u", "X"),
                                    "b": ({NUMA + "0": {"VCPU": 1}}, None, "p", "u", "X")})
    assert store.consumer("a") is None and store.usages(CN) == {"VCPU": 0}
    assert store.provider(CN).generation == generation
