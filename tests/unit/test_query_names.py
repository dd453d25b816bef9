"""Queries asked for items by name, and their order: a filter that only names items
answers them in the order named and refuses an unknown name (Ganeti's
``unknown_entity``); any other query answers in natural order of the names."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.errors import NotFoundError, to_ganeti
from corral.objects import NodeGroup
from corral.qlang import pick_items, requested_names
from corral.utils.nicesort import nice_key, nice_sorted
from tests.unit.instance_helpers import Cluster, open_cluster


@pytest.fixture
def cl(tmp_path: Path) -> Iterator[Cluster]:
    yield from open_cluster(tmp_path)


def names_of(cl: Cluster, resource: str, qfilter: Any = None) -> list[str]:
    async def ask() -> dict[str, Any]:
        return await cl.ctx.queries[resource].query(["name"], qfilter)

    return [row[0][1] for row in asyncio.run(ask())["data"]]


def names_rows(cl: Cluster, fields: list[str], qfilter: Any) -> list[Any]:
    async def ask() -> dict[str, Any]:
        return await cl.ctx.queries["instance"].query(fields, qfilter)

    rows: list[Any] = asyncio.run(ask())["data"]
    return rows


def by_name(*names: str) -> list[Any]:
    return ["|", *(["==", "name", n] for n in names)]


# -- the pure parts ---------------------------------------------------------------------

def test_nice_order() -> None:
    assert nice_sorted(["node10", "node2", "node1", "default", "g2", "g10b", "g10a"]) == [
        "default", "g2", "g10a", "g10b", "node1", "node2", "node10"]
    # Digit runs come before text at the same position; equal keys keep their order.
    assert nice_sorted(["a", "1a", "a1", ""]) == ["", "1a", "a", "a1"]
    assert nice_sorted(["x01", "x1"]) == ["x01", "x1"]
    assert nice_key("disk.size/10") > nice_key("disk.size/2")
    assert nice_sorted([{"n": "b10"}, {"n": "b9"}], key=lambda d: d["n"]) == [
        {"n": "b9"}, {"n": "b10"}]


@pytest.mark.parametrize(("qfilter", "names"), [
    (None, []),
    (["|"], []),
    (["|", ["==", "name", "a"], ["=", "name", "b"]], ["a", "b"]),
    (["|", ["|", ["==", "name", "a"]], ["==", "name", "a"]], ["a", "a"]),
    (["==", "name", "a"], ["a"]),
    (["|", ["==", "name", "a"], ["==", "uuid", "a"]], None),
    (["|", ["=~", "name", "^a"]], None),
    (["&", ["==", "name", "a"]], None),
    (["!", ["==", "name", "a"]], None),
])
def test_requested_names(qfilter: Any, names: list[str] | None) -> None:
    assert requested_names(qfilter) == names


def test_pick_items_named_or_all() -> None:
    items = {"b10": 10, "b2": 2, "a": 0}

    def lookup(name: str) -> int:
        if name not in items:
            raise NotFoundError(f"{name} not found")
        return items[name]

    names = {v: k for k, v in items.items()}
    assert pick_items(items.values(), None, names.__getitem__, lookup) == ([0, 2, 10], None)
    regex = ["=~", "name", "b"]
    assert pick_items(items.values(), regex, names.__getitem__, lookup) == ([0, 2, 10], regex)
    # Named: the names did the choosing, no filter is left.
    assert pick_items(items.values(), by_name("b10", "a", "b10"), names.__getitem__,
                      lookup) == ([10, 0, 10], None)
    with pytest.raises(NotFoundError, match="nope"):
        pick_items(items.values(), by_name("a", "nope"), names.__getitem__, lookup)


# -- the master's resources ---------------------------------------------------------------

def test_instances_in_natural_order_or_as_named(cl: Cluster) -> None:
    for name in ("web10", "web2", "db1"):
        cl.create(name, start=False, disk_template="diskless", disks=[],
                  tags=["zeta", "b10", "b2", "Alpha", "alpha"])
    assert names_of(cl, "instance") == ["db1", "web2", "web10"]
    assert names_of(cl, "instance", ["=~", "name", "^web"]) == ["web2", "web10"]
    assert names_of(cl, "instance", by_name("web10", "db1", "web2")) == ["web10", "db1", "web2"]
    uuid = cl.store.find("instance", "web2").uuid  # type: ignore[union-attr]
    assert names_of(cl, "instance", by_name(uuid)) == ["web2"]
    with pytest.raises(NotFoundError) as caught:
        names_of(cl, "instance", by_name("db1", "web3"))
    first, *rest = caught.value.message.splitlines()
    assert first == "Instance name web3 not found"
    assert "web2" in rest[0]  # the known names nearest to it
    assert to_ganeti(caught.value)[1][1] == "unknown_entity"
    # Tags come sorted as strings, whatever order they were added in (as Ganeti's).
    (row,) = names_rows(cl, ["tags"], by_name("db1"))
    assert row == [[0, ["Alpha", "alpha", "b10", "b2", "zeta"]]]


def test_nodes_and_groups_by_name(cl: Cluster) -> None:
    assert names_of(cl, "node") == ["node1", "node2", "node3", "node4"]
    assert names_of(cl, "node", by_name("node3", "node1")) == ["node3", "node1"]
    with pytest.raises(NotFoundError, match=r"^Node name node9 not found\n"):
        names_of(cl, "node", by_name("node9"))
    with cl.store.transaction() as txn:
        for name in ("rack10.example.com", "rack2"):
            txn.add(NodeGroup(name=name))
    assert names_of(cl, "group") == ["default", "rack2", "rack10.example.com"]
    # A name's first labels find the one object whose full name they begin.
    assert names_of(cl, "group", by_name("rack10", "default")) == [
        "rack10.example.com", "default"]
    with pytest.raises(NotFoundError, match=r"^NodeGroup name rack not found\n"):
        names_of(cl, "group", by_name("rack"))
    # Names beside other conditions are a filter: unknown names just match nothing.
    assert names_of(cl, "group", ["|", ["==", "name", "rack2"], ["==", "uuid", "x"]]) == [
        "rack2"]
