"""The configuration store: create/open, reading, transactions and serials."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest

from corral import CONFIG_SCHEMA_VERSION
from corral.config import ConfigStore, Transaction
from corral.errors import (
    AlreadyExistsError,
    ClusterExistsError,
    ConfigStoreError,
    ConfigurationError,
    InternalError,
    NotFoundError,
    ParameterError,
    SerialConflictError,
)
from corral.objects import NIC, Cluster, Disk, FilterRule, Instance, Node, NodeGroup
from tests.unit.config_helpers import check_invariants, new_store, snapshot


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "config.db"


@pytest.fixture
def store(path: Path) -> ConfigStore:
    store = new_store(path)
    yield store  # type: ignore[misc]
    store.close()


_NODE_ADDRESSES = itertools.count(10)


def _node(store: ConfigStore, name: str) -> Node:
    ip = f"198.51.100.{next(_NODE_ADDRESSES) % 250}"
    return Node(name=name, primary_ip=ip, group=store.get("nodegroup", "default").uuid)


# -- create and open -----------------------------------------------------------------


def test_create_then_open_round_trip(path: Path) -> None:
    store = new_store(path)
    before = snapshot(store)
    assert store.serial == 1
    assert store.path == path
    assert store.cluster.name == "cluster.example.com"
    node = store.get("node", "node1")
    assert store.cluster.master_node == node.uuid
    assert node.group == store.get("nodegroup", "default").uuid
    for kind in ("cluster", "nodegroup", "node"):
        (obj,) = store.all(kind)
        assert obj.serial_no == 1
        assert obj.ctime == obj.mtime
    store.close()
    reopened = ConfigStore.open(path)
    try:
        assert snapshot(reopened) == before
        check_invariants(reopened)
    finally:
        reopened.close()


def test_create_refuses_existing_file_and_touches_nothing(path: Path) -> None:
    new_store(path).close()
    content = path.read_bytes()
    group = NodeGroup(name="other")
    node = Node(name="other", primary_ip="192.0.2.2", group=group.uuid)
    with pytest.raises(ClusterExistsError, match=str(path)):
        ConfigStore.create(path, Cluster(name="x", master_node=node.uuid), group, node)
    assert path.read_bytes() == content
    assert sorted(p.name for p in path.parent.iterdir()) == ["config.db"]


def test_create_with_invalid_objects_leaves_no_file(path: Path) -> None:
    group = NodeGroup(name="default")
    node = Node(name="node1", primary_ip="192.0.2.1", group="no-such-group")
    with pytest.raises(ConfigurationError, match="group 'no-such-group' does not exist"):
        ConfigStore.create(path, Cluster(name="c", master_node=node.uuid), group, node)
    assert list(path.parent.iterdir()) == []


def test_store_file_is_private_and_in_wal_mode(path: Path) -> None:
    import sqlite3

    new_store(path).close()
    assert path.stat().st_mode & 0o077 == 0
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        meta = dict(conn.execute("SELECT key, value FROM meta"))
        assert meta == {"schema_version": CONFIG_SCHEMA_VERSION, "serial": 1}
        kinds = sorted(r[0] for r in conn.execute("SELECT kind FROM objects"))
        assert kinds == ["cluster", "node", "nodegroup"]
    finally:
        conn.close()


def test_closed_store_refuses_transactions(path: Path) -> None:
    store = new_store(path)
    store.close()
    store.close()  # twice is fine
    with pytest.raises(InternalError, match="closed"):
        store.transaction()


def test_store_is_a_context_manager(path: Path) -> None:
    with new_store(path) as store:
        assert store.serial == 1
    with pytest.raises(InternalError):
        store.transaction()


# -- reading -------------------------------------------------------------------------


def test_get_by_uuid_or_name_and_not_found(store: ConfigStore) -> None:
    node = store.get("node", "node1")
    assert store.get("node", node.uuid) is node
    assert store.find("node", "nope") is None
    with pytest.raises(NotFoundError, match="node 'nope' does not exist"):
        store.get("node", "nope")
    with pytest.raises(NotFoundError, match="instance 'node1'"):
        store.get("instance", "node1")
    assert store.get("cluster", store.cluster.uuid) is store.cluster
    assert store.get("cluster", "cluster.example.com") is store.cluster


def test_unknown_kind_is_refused(store: ConfigStore) -> None:
    with pytest.raises(ParameterError, match="unknown configuration kind 'vm'"):
        store.get("vm", "x")
    with pytest.raises(ParameterError):
        store.all("vm")
    with pytest.raises(ParameterError):
        store.count("vm")


def test_all_is_sorted_by_name_then_uuid(store: ConfigStore) -> None:
    node = store.get("node", "node1").uuid
    with store.transaction() as txn:
        for name in ("web3", "db1", "web10"):
            txn.add(Instance(name=name, primary_node=node))
        txn.add(Disk(name="zeta", nodes=[node]))
        txn.add(Disk(uuid="00000000-0000-0000-0000-000000000001", nodes=[node]))
        txn.add(FilterRule(uuid="f2"))
        txn.add(FilterRule(uuid="f1"))
    assert [i.name for i in store.all("instance")] == ["db1", "web10", "web3"]
    assert [d.name or d.uuid for d in store.all("disk")] == [
        "00000000-0000-0000-0000-000000000001", "zeta",
    ]
    assert [f.uuid for f in store.all("filter")] == ["f1", "f2"]
    assert store.count("instance") == 3
    # all() hands out a new list each time.
    store.all("instance").clear()
    assert store.count("instance") == len(store.all("instance")) == 3


# -- transactions --------------------------------------------------------------------


def test_transaction_get_returns_private_copy(store: ConfigStore) -> None:
    shared = store.get("node", "node1")
    with store.transaction() as txn:
        copy = txn.get("node", "node1")
        assert copy == shared and copy is not shared
        copy.offline = True
        copy.ndparams["ssh_port"] = 2222
    assert store.get("node", "node1").offline is False
    assert store.get("node", "node1").ndparams == {}
    assert store.serial == 1  # nothing was staged


def test_update_is_applied_and_bumps_serials(store: ConfigStore) -> None:
    before_node = store.get("node", "node1")
    before_group = store.get("nodegroup", "default")
    time.sleep(0.01)
    with store.transaction() as txn:
        node = txn.get("node", "node1")
        node.drained = True
        txn.update(node)
    after = store.get("node", "node1")
    assert after.drained is True
    assert after.serial_no == before_node.serial_no + 1
    assert after.mtime > before_node.mtime
    assert after.ctime == before_node.ctime
    assert store.get("nodegroup", "default") is before_group  # untouched
    assert store.serial == 2
    # The caller's object was stamped too, so it can go into another transaction.
    assert (node.serial_no, node.mtime) == (after.serial_no, after.mtime)
    with store.transaction() as txn:
        node.drained = False
        txn.update(node)
    assert store.get("node", "node1").serial_no == 3
    assert store.serial == 3


def test_added_objects_get_serial_one_and_fresh_times(store: ConfigStore) -> None:
    node = _node(store, "node2")
    node.serial_no = 42
    node.ctime = node.mtime = 1.0
    start = time.time()
    with store.transaction() as txn:
        txn.add(node)
    stored = store.get("node", "node2")
    assert stored.serial_no == 1
    assert stored.ctime == stored.mtime >= start
    assert node.serial_no == 1


def test_one_commit_bumps_config_serial_once(store: ConfigStore) -> None:
    with store.transaction() as txn:
        for index in range(5):
            txn.add(_node(store, f"n{index}"))
        cluster = txn.cluster()
        cluster.tags.append("five-nodes")
        txn.update(cluster)
    assert store.serial == 2
    assert store.cluster.tags == ["five-nodes"]
    assert store.cluster.serial_no == 2


def test_commit_returns_new_serial_and_empty_commit_changes_nothing(store: ConfigStore) -> None:
    txn = store.transaction()
    txn.add(_node(store, "node2"))
    assert txn.commit() == 2
    empty = store.transaction()
    assert empty.commit() == 2
    assert store.serial == 2


def test_commit_twice_is_a_bug(store: ConfigStore) -> None:
    txn = store.transaction()
    txn.add(_node(store, "node2"))
    txn.commit()
    with pytest.raises(InternalError, match="already committed"):
        txn.commit()
    with pytest.raises(InternalError):
        txn.add(_node(store, "node3"))


def test_exception_in_block_discards(store: ConfigStore, path: Path) -> None:
    before = snapshot(store)
    with pytest.raises(RuntimeError), store.transaction() as txn:
        txn.add(_node(store, "node2"))
        raise RuntimeError("changed my mind")
    assert snapshot(store) == before
    with pytest.raises(InternalError, match="discarded"):
        txn.commit()


def test_failed_commit_leaves_transaction_open_for_a_fix(store: ConfigStore) -> None:
    txn = store.transaction()
    node = _node(store, "node1")
    txn.add(node)
    with pytest.raises(AlreadyExistsError):
        txn.commit()
    txn.remove("node", node.uuid)
    txn.add(_node(store, "node2"))
    assert txn.commit() == 2


def test_transaction_sees_its_own_changes(store: ConfigStore) -> None:
    with store.transaction() as txn:
        node = _node(store, "node2")
        txn.add(node)
        assert txn.get("node", "node2").uuid == node.uuid
        renamed = txn.get("node", "node2")
        renamed.name = "node3"
        txn.update(renamed)
        with pytest.raises(NotFoundError):
            txn.get("node", "node2")
        assert txn.get("node", "node3").uuid == node.uuid
        old = txn.get("node", "node1")
        old.name = "node2"  # the name node2 is free again
        txn.update(old)
        assert txn.get("node", "node2").uuid == old.uuid
        txn.remove("node", "node3")
        with pytest.raises(NotFoundError):
            txn.get("node", node.uuid)
    assert [n.name for n in store.all("node")] == ["node2"]
    assert store.serial == 2


def test_remove_of_added_object_cancels_it(store: ConfigStore) -> None:
    with store.transaction() as txn:
        txn.add(_node(store, "node2"))
        txn.remove("node", "node2")
    assert store.serial == 1  # nothing left to commit


def test_remove_unknown_is_not_found(store: ConfigStore) -> None:
    with pytest.raises(NotFoundError, match="instance 'ghost'"), store.transaction() as txn:
        txn.remove("instance", "ghost")


def test_update_of_unknown_object(store: ConfigStore) -> None:
    with pytest.raises(NotFoundError, match="node 'node2'"), store.transaction() as txn:
        txn.update(_node(store, "node2"))


def test_update_of_shared_object_is_refused(store: ConfigStore) -> None:
    shared = store.get("node", "node1")
    with pytest.raises(InternalError, match="private copy"), store.transaction() as txn:
        txn.update(shared)


def test_add_of_non_top_level_object_is_refused(store: ConfigStore) -> None:
    with pytest.raises(ParameterError, match="NIC"), store.transaction() as txn:
        txn.add(NIC(mac="aa:00:00:00:00:01"))  # type: ignore[arg-type]


def test_transaction_type_is_exported(store: ConfigStore) -> None:
    assert isinstance(store.transaction(), Transaction)


# -- optimistic concurrency ----------------------------------------------------------


def test_serial_conflict_at_update(store: ConfigStore) -> None:
    stale = store.transaction().get("node", "node1")
    with store.transaction() as txn:
        fresh = txn.get("node", "node1")
        fresh.offline = True
        txn.update(fresh)
    stale.drained = True
    with pytest.raises(SerialConflictError, match="node 'node1' was changed"):
        store.transaction().update(stale)


def test_serial_conflict_at_commit_writes_nothing(store: ConfigStore, path: Path) -> None:
    slow = store.transaction()
    mine = slow.get("node", "node1")
    mine.drained = True
    slow.update(mine)
    slow.add(_node(store, "node2"))
    with store.transaction() as fast:
        theirs = fast.get("node", "node1")
        theirs.offline = True
        fast.update(theirs)
    before = snapshot(store)
    with pytest.raises(SerialConflictError):
        slow.commit()
    assert snapshot(store) == before
    store.close()
    with ConfigStore.open(path) as reopened:
        assert snapshot(reopened) == before


def test_removed_meanwhile_is_a_conflict(store: ConfigStore) -> None:
    with store.transaction() as txn:
        txn.add(_node(store, "node2"))
    slow = store.transaction()
    node = slow.get("node", "node2")
    node.offline = True
    slow.update(node)
    with store.transaction() as fast:
        fast.remove("node", "node2")
    with pytest.raises(SerialConflictError, match="removed"):
        slow.commit()


def test_another_process_changing_the_file_is_detected(store: ConfigStore, path: Path) -> None:
    other = ConfigStore.open(path)
    try:
        with other.transaction() as txn:
            txn.add(_node(other, "node2"))
        before = snapshot(store)
        with pytest.raises(ConfigStoreError, match="changed by another process"), \
                store.transaction() as txn:
            txn.add(_node(store, "node3"))
        assert snapshot(store) == before
    finally:
        other.close()


def test_commit_validates_field_types(store: ConfigStore) -> None:
    before = snapshot(store)
    with pytest.raises(ConfigurationError, match=r"node 'node1': invalid value.*\$\.group"), \
            store.transaction() as txn:
        node = txn.get("node", "node1")
        node.group = 5  # type: ignore[assignment]
        txn.update(node)
    assert snapshot(store) == before


def test_unencodable_value_is_refused(store: ConfigStore) -> None:
    with pytest.raises(ConfigurationError, match="cannot be stored"), \
            store.transaction() as txn:
        node = txn.get("node", "node1")
        node.ndparams["weird"] = object()
        txn.update(node)
