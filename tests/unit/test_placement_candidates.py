"""Allocation candidates on the nested example of MEMBER_OF_SPEC.md §5 (Placement's
NUMAAggregateFixture): what each member_of form selects, per group kind."""

from __future__ import annotations

import gc
import threading
from urllib.parse import parse_qsl

import pytest

from corral.errors import PlacementError
from corral.placement import (
    Inventory,
    PlacementStore,
    allocation_candidates,
    parse_allocation_candidates,
    parse_resource_providers,
    resource_providers,
)
from corral.utils.gcpause import collector_paused

A = "aaaaaaaa-0000-0000-0000-000000000001"
B = "bbbbbbbb-0000-0000-0000-000000000002"
C = "cccccccc-0000-0000-0000-000000000003"
NOAGG = "dddddddd-0000-0000-0000-000000000004"
NAMES = ["cn1", "numa1_1", "numa1_2", "cn2", "numa2_1", "numa2_2", "ss1", "ss2"]


def _uuid(name: str) -> str:
    return f"00000000-0000-0000-0000-{NAMES.index(name):012d}"


@pytest.fixture(scope="module")
def store() -> PlacementStore:
    s = PlacementStore()
    for cn in ("cn1", "cn2"):
        s.create_provider(cn, _uuid(cn))
        for numa in (f"numa{cn[-1]}_1", f"numa{cn[-1]}_2"):
            s.create_provider(numa, _uuid(numa), parent_uuid=_uuid(cn))
            s.set_inventories(_uuid(numa), None, {"VCPU": Inventory(total=8)})
    for ss in ("ss1", "ss2"):
        s.create_provider(ss, _uuid(ss))
        s.set_inventories(_uuid(ss), None, {"DISK_GB": Inventory(total=2000)})
        s.set_provider_traits(_uuid(ss), None, ["MISC_SHARES_VIA_AGGREGATE"])
    for name, aggs in {"cn1": [A], "cn2": [A, B], "numa1_1": [C], "ss1": [A],
                       "ss2": [C]}.items():
        s.set_provider_aggregates(_uuid(name), None, aggs)
    return s


def _names(store: PlacementStore, query: str, version: tuple[int, int] = (1, 39),
           ) -> list[tuple[str, ...]]:
    request = parse_allocation_candidates(parse_qsl(query, keep_blank_values=True), version)
    found = allocation_candidates(store, request)
    by_uuid = {_uuid(n): n for n in NAMES}
    return sorted(tuple(sorted(by_uuid[u] for u in r.allocations))
                  for r in found.allocation_requests)


NUMA = ["numa1_1", "numa1_2", "numa2_1", "numa2_2"]

UNSUFFIXED_VCPU = [
    (f"member_of={A}", NUMA),
    (f"member_of={B}", ["numa2_1", "numa2_2"]),
    (f"member_of={C}", ["numa1_1"]),
    (f"member_of=!{A}", []),
    (f"member_of=!{B}", ["numa1_1", "numa1_2"]),
    (f"member_of=!{C}", ["numa1_2", "numa2_1", "numa2_2"]),
    (f"member_of=!in:{B},{C}", ["numa1_2"]),
    (f"member_of=!{B}&member_of=!{C}", ["numa1_2"]),
    (f"member_of=in:{A},{B}&member_of=!{C}", ["numa1_2", "numa2_1", "numa2_2"]),
    (f"member_of={A}&member_of=!{A}", []),
    (f"member_of=in:{NOAGG},{B}", ["numa2_1", "numa2_2"]),
    (f"member_of={NOAGG}", []),
    (f"member_of=!{NOAGG}", NUMA),
    (f"member_of={A.upper()}", []),  # uuid-like, but compared verbatim
]


@pytest.mark.parametrize(("member_of", "expected"), UNSUFFIXED_VCPU)
def test_unsuffixed_group_root_aggregates_span_the_tree(
        store: PlacementStore, member_of: str, expected: list[str]) -> None:
    assert _names(store, f"resources=VCPU:1&{member_of}") == [(n,) for n in expected]


@pytest.mark.parametrize(("member_of", "expected"), [
    (f"member_of={A}", [("numa1_1", "ss1"), ("numa1_2", "ss1"), ("numa2_1", "ss1"),
                        ("numa2_2", "ss1")]),
    (f"member_of={C}", [("numa1_1", "ss2")]),
    (f"member_of=!{B}", [("numa1_1", "ss1"), ("numa1_1", "ss2"), ("numa1_2", "ss1"),
                         ("numa1_2", "ss2")]),
    (f"member_of=!{C}", [("numa1_2", "ss1"), ("numa2_1", "ss1"), ("numa2_2", "ss1")]),
    (f"member_of={A}&member_of=!in:{B},{C}", [("numa1_2", "ss1")]),
])
def test_unsuffixed_group_with_sharing_providers(
        store: PlacementStore, member_of: str, expected: list[tuple[str, ...]]) -> None:
    assert _names(store, f"resources=VCPU:1,DISK_GB:1000&{member_of}") == expected


@pytest.mark.parametrize(("member_of", "expected"), [
    (f"member_of1={A}", []),
    (f"member_of1={C}", ["numa1_1"]),
    (f"member_of1=!{A}", NUMA),
    (f"member_of1=!{C}", ["numa1_2", "numa2_1", "numa2_2"]),
    (f"member_of1={A}&member_of1={C}", []),
    (f"member_of_X=!{C}", ["numa1_2", "numa2_1", "numa2_2"]),
])
def test_suffixed_group_uses_own_aggregates_only(
        store: PlacementStore, member_of: str, expected: list[str]) -> None:
    suffix = "_X" if "_X" in member_of else "1"
    assert _names(store, f"resources{suffix}=VCPU:1&{member_of}") == [(n,) for n in expected]


@pytest.mark.parametrize(("member_of", "expected"), [
    (f"member_of_N={A}", NUMA),
    (f"member_of_N={B}", ["numa2_1", "numa2_2"]),
    (f"member_of_N={C}", ["numa1_1"]),
    (f"member_of_N={A}&member_of_N=!{B}", ["numa1_1", "numa1_2"]),
    (f"member_of_N=!{B}", []),  # Placement 16's quirk (spec §5d)
])
def test_resourceless_group_in_same_subtree(
        store: PlacementStore, member_of: str, expected: list[str]) -> None:
    query = f"resources_C=VCPU:1&{member_of}&same_subtree=_C,_N&group_policy=none"
    assert _names(store, query) == [(n,) for n in expected]


def test_summaries_mappings_isolation_and_limit(store: PlacementStore) -> None:
    request = parse_allocation_candidates(parse_qsl(
        f"resources1=VCPU:1&resources2=VCPU:1&group_policy=isolate&in_tree1={_uuid('cn1')}"
        f"&in_tree2={_uuid('numa1_2')}"), (1, 39))
    found = allocation_candidates(store, request)
    mappings = [r.mappings for r in found.allocation_requests]
    assert mappings == [{"1": [_uuid("numa1_1")], "2": [_uuid("numa1_2")]},
                        {"1": [_uuid("numa1_2")], "2": [_uuid("numa1_1")]}]
    assert sorted(found.provider_summaries) == sorted(
        _uuid(n) for n in ("cn1", "numa1_1", "numa1_2"))
    summary = found.provider_summaries[_uuid("numa1_1")]
    assert summary.resources == {"VCPU": (8, 0)} and summary.root_uuid == _uuid("cn1")
    none_policy = parse_allocation_candidates(parse_qsl(
        "resources1=VCPU:4&resources2=VCPU:5&group_policy=none&limit=3"), (1, 39))
    # 4 + 5 does not fit on one 8-VCPU NUMA node: only pairs of different nodes
    found = allocation_candidates(store, none_policy)
    assert len(found.allocation_requests) == 3
    assert all(len(r.allocations) == 2 for r in found.allocation_requests)


def test_unknown_names_are_400(store: PlacementStore) -> None:
    with pytest.raises(PlacementError, match="No such resource class CUSTOM_X"):
        _names(store, "resources=CUSTOM_X:1")
    with pytest.raises(PlacementError, match=r"No such trait\(s\): CUSTOM_T"):
        _names(store, "resources=VCPU:1&required=CUSTOM_T")


@pytest.mark.parametrize(("query", "expected"), [
    (f"member_of=!{A}", ["numa1_1", "numa1_2", "numa2_1", "numa2_2", "ss2"]),
    (f"member_of=!{A}&in_tree={_uuid('cn1')}", ["numa1_1", "numa1_2"]),
    (f"member_of=!{A}&resources=VCPU:1", NUMA),
    (f"member_of={A}", ["cn1", "cn2", "ss1"]),
    (f"member_of=in:{B},{C}&member_of=!{A}", ["numa1_1", "ss2"]),
    (f"member_of={A}&required=MISC_SHARES_VIA_AGGREGATE", ["ss1"]),
    ("name=cn2", ["cn2"]),
])
def test_listing_providers_uses_own_aggregates_only(
        store: PlacementStore, query: str, expected: list[str]) -> None:
    found = resource_providers(store, parse_resource_providers(
        parse_qsl(query, keep_blank_values=True), (1, 39)))
    assert [rp.name for rp in found] == expected


@pytest.mark.parametrize(("query", "version", "message"), [
    (f"member_of={A}", (1, 2), "Invalid query string parameters: Additional properties are "
     "not allowed ('member_of' was unexpected)"),
    (f"member_of=!{A}", (1, 31), "Forbidden member_of parameters are not supported in the "
     "specified microversion"),
    (f"member_of={A}&member_of={B}", (1, 23), "Multiple member_of parameters are not supported"),
    ("in_tree=nope", (1, 14), "Invalid query string parameters: 'nope' is not a 'uuid'"),
    ("resources=VCPU:1", (1, 3), "Invalid query string parameters: Additional properties are "
     "not allowed ('resources' was unexpected)"),
])
def test_listing_providers_bad_queries(query: str, version: tuple[int, int],
                                       message: str) -> None:
    with pytest.raises(PlacementError) as caught:
        parse_resource_providers(parse_qsl(query, keep_blank_values=True), version)
    assert caught.value.message == message


def test_collector_state_is_given_back(store: PlacementStore) -> None:
    assert gc.isenabled()
    _names(store, "resources=VCPU:1")
    assert gc.isenabled()
    gc.disable()
    try:
        _names(store, "resources=VCPU:1")
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_before_1_29_one_provider_per_tree(store: PlacementStore) -> None:
    query = "resources1=VCPU:1&resources2=VCPU:1&group_policy=isolate"
    assert len(_names(store, query, (1, 29))) == 4  # two NUMA nodes of one tree, 2 ways
    assert _names(store, query, (1, 28)) == []
    request = parse_allocation_candidates(
        parse_qsl(f"resources=VCPU:1,DISK_GB:1000&member_of={C}"), (1, 28))
    found = allocation_candidates(store, request)
    assert len(found.allocation_requests) == 1  # numa1_1 (tree cn1) with ss2 (its own)
    assert sorted(found.provider_summaries) == sorted([_uuid("numa1_1"), _uuid("ss2")])


def test_collector_paused_from_the_first_thread_in_to_the_last_out() -> None:
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[bool] = []

    def first() -> None:
        with collector_paused():
            first_in.set()
            second_in.wait(10)
        first_out.set()

    def second() -> None:
        first_in.wait(10)
        with collector_paused():
            second_in.set()
            first_out.wait(10)
            seen.append(gc.isenabled())  # the first thread left, this one has not

    assert gc.isenabled()
    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert seen == [False]
    assert gc.isenabled()
