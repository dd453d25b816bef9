"""LockManager: levels, their order, add/remove through levels, introspection."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from corral.errors import LockError
from corral.locking import ALL_SET, BGL, LockLevel, LockManager
from tests.unit.virtual_time import VirtualLoop


@pytest.fixture
def vl() -> Iterator[VirtualLoop]:
    loop = VirtualLoop()
    yield loop
    loop.close()


@pytest.fixture
def locks() -> LockManager:
    return LockManager(nodes=["node1", "node2"], nodegroups=["default"],
                       instances=["web1", "web2"], networks=["net1"])


def test_levels_are_ordered_and_named_like_ganeti_listings() -> None:
    assert [str(level) for level in LockLevel] == [
        "cluster", "nodegroup", "instance", "node", "node-res", "network"]
    assert sorted(LockLevel, key=int) == list(LockLevel)


def test_each_level_starts_with_its_members(locks: LockManager) -> None:
    assert locks.lockset(LockLevel.CLUSTER).names() == [BGL]
    assert locks.lockset(LockLevel.NODE).names() == ["node1", "node2"]
    assert locks.lockset(LockLevel.NODE_RES).names() == ["node1", "node2"]
    assert locks.lockset(LockLevel.INSTANCE).names() == ["web1", "web2"]
    assert locks.lockset(LockLevel.NODEGROUP).names() == ["default"]
    assert locks.lockset(LockLevel.NETWORK).names() == ["net1"]


def test_top_down_acquisition_and_owned_locks(vl: VirtualLoop, locks: LockManager) -> None:
    job = "job/1"
    assert vl.run(locks.acquire(LockLevel.CLUSTER, BGL, shared=True, owner=job)) == {BGL}
    assert vl.run(locks.acquire(LockLevel.INSTANCE, ["web2"], owner=job)) == {"web2"}
    assert vl.run(locks.acquire(LockLevel.NODE, ALL_SET, shared=True, owner=job)) == {
        "node1", "node2"}
    assert locks.owned_locks(LockLevel.INSTANCE, owner=job) == {"web2"}
    assert locks.owned_locks(LockLevel.NODE, owner=job) == {"node1", "node2"}
    assert locks.is_owned(LockLevel.CLUSTER, owner=job)
    assert not locks.is_owned(LockLevel.NETWORK, owner=job)
    assert locks.owned_locks(LockLevel.INSTANCE, owner="job/2") == frozenset()


@pytest.mark.parametrize(("held", "wanted"), [
    (LockLevel.NODE, LockLevel.INSTANCE),
    (LockLevel.INSTANCE, LockLevel.NODEGROUP),
    (LockLevel.NETWORK, LockLevel.CLUSTER),
    (LockLevel.NODE_RES, LockLevel.NODE),
])
def test_acquiring_above_a_held_level_is_refused(
    vl: VirtualLoop, locks: LockManager, held: LockLevel, wanted: LockLevel,
) -> None:
    assert vl.run(locks.acquire(held, ALL_SET, shared=True, owner="j"))
    with pytest.raises(LockError, match=f"cannot acquire {wanted} locks while holding {held}"):
        vl.run(locks.acquire(wanted, ALL_SET, owner="j"))
    assert not locks.is_owned(wanted, owner="j")


def test_level_order_is_per_owner(vl: VirtualLoop, locks: LockManager) -> None:
    vl.run(locks.acquire(LockLevel.NODE, ["node1"], owner="a"))
    assert vl.run(locks.acquire(LockLevel.INSTANCE, ["web1"], owner="b")) == {"web1"}


def test_release_all_lets_the_owner_start_again_from_the_top(
    vl: VirtualLoop, locks: LockManager,
) -> None:
    vl.run(locks.acquire(LockLevel.INSTANCE, ["web1"], owner="j"))
    vl.run(locks.acquire(LockLevel.NODE, ["node1"], owner="j"))
    waiting = vl.spawn(locks.acquire(LockLevel.NODE, ["node1"], owner="other"))
    vl.settle()
    assert not waiting.done()
    locks.release_all(owner="j")
    vl.settle()
    assert waiting.result() == {"node1"}
    assert not any(locks.is_owned(level, owner="j") for level in LockLevel)
    locks.release_all(owner="j")  # holding nothing is fine
    assert vl.run(locks.acquire(LockLevel.CLUSTER, BGL, owner="j")) == {BGL}


def test_release_may_go_in_any_order(vl: VirtualLoop, locks: LockManager) -> None:
    vl.run(locks.acquire(LockLevel.INSTANCE, ["web1"], owner="j"))
    vl.run(locks.acquire(LockLevel.NODE, ["node1", "node2"], owner="j"))
    locks.release(LockLevel.INSTANCE, owner="j")
    locks.release(LockLevel.NODE, ["node2"], owner="j")
    assert locks.owned_locks(LockLevel.NODE, owner="j") == {"node1"}
    with pytest.raises(LockError, match="does not hold"):
        locks.release(LockLevel.NODE, ["node2"], owner="j")


def test_add_and_remove_an_instance_lock(vl: VirtualLoop, locks: LockManager) -> None:
    vl.run(locks.add(LockLevel.INSTANCE, "web3", acquired=True, owner="create"))
    assert locks.owned_locks(LockLevel.INSTANCE, owner="create") == {"web3"}
    waiting = vl.spawn(locks.acquire(LockLevel.INSTANCE, ["web3"], shared=True, owner="q"))
    vl.settle()
    assert vl.run(locks.remove(LockLevel.INSTANCE, ["web3"], owner="create")) == ["web3"]
    assert "web3" not in locks.lockset(LockLevel.INSTANCE)
    assert locks.owned_locks(LockLevel.INSTANCE, owner="create") == frozenset()
    with pytest.raises(LockError, match="deleted"):
        waiting.result()


def test_add_and_remove_respect_the_level_order(vl: VirtualLoop, locks: LockManager) -> None:
    vl.run(locks.acquire(LockLevel.NODE, ["node1"], owner="j"))
    with pytest.raises(LockError, match="cannot add instance locks while holding node"):
        vl.run(locks.add(LockLevel.INSTANCE, "web3", owner="j"))
    with pytest.raises(LockError, match="cannot remove instance locks while holding node"):
        vl.run(locks.remove(LockLevel.INSTANCE, "web1", owner="j"))
    assert locks.lockset(LockLevel.INSTANCE).names() == ["web1", "web2"]


def test_removing_locks_already_held_needs_no_order_check(
    vl: VirtualLoop, locks: LockManager,
) -> None:
    vl.run(locks.acquire(LockLevel.INSTANCE, ["web1"], owner="j"))
    vl.run(locks.acquire(LockLevel.NODE, ["node1"], owner="j"))
    assert vl.run(locks.remove(LockLevel.INSTANCE, "web1", owner="j")) == ["web1"]


def test_info_lists_every_lock_top_level_first(vl: VirtualLoop, locks: LockManager) -> None:
    vl.run(locks.acquire(LockLevel.INSTANCE, ["web1"], owner="job/7"))
    blocked = vl.spawn(locks.acquire(LockLevel.INSTANCE, ["web1"], shared=True,
                                     priority=-10, owner="job/8"))
    vl.settle()
    infos = {info.name: info for info in locks.info()}
    names = [info.name for info in locks.info()]
    assert names[:2] == ["cluster/[lockset]", "cluster/BGL"]
    assert names.index("instance/web1") < names.index("node/node1")
    assert names.index("node/node2") < names.index("node-res/node1")
    assert names[-1] == "network/net1"
    web1 = infos["instance/web1"]
    assert (web1.mode, web1.holders) == ("exclusive", ("job/7",))
    assert [(p.mode, p.priority, p.owners) for p in web1.pending] == [
        ("shared", -10, ("job/8",))]
    assert infos["node/node1"].mode is None and infos["node/node1"].holders == ()
    locks.release_all(owner="job/7")
    vl.settle()
    assert blocked.result() == {"web1"}


def test_the_public_names_are_exactly_these() -> None:
    import corral.locking

    assert sorted(corral.locking.__all__) == [
        "ALL_SET", "AllSet", "BGL", "LockAttemptStrategy", "LockInfo", "LockLevel",
        "LockManager", "LockSet", "PendingInfo", "SharedLock", "owner_name"]
    assert all(hasattr(corral.locking, name) for name in corral.locking.__all__)
