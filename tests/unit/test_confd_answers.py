"""confd's answers for every query type against a built configuration, with Ganeti
3.0's semantics, and their change after a commit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral.confd.answers import MEMO_LIMIT, Snapshot, answer, build_snapshot
from corral.confd.protocol import ErrorCode, NodeRole, QueryType, Status
from corral.config.readonly import load_readonly
from tests.unit.confd_helpers import build_config

UNKNOWN = (Status.ERROR, ErrorCode.UNKNOWN_ENTRY)
ARGUMENT = (Status.ERROR, ErrorCode.ARGUMENT)


@pytest.fixture
def snap(tmp_path: Path) -> Snapshot:
    build_config(tmp_path / "config.db").close()
    return build_snapshot(load_readonly(tmp_path / "config.db"))


def test_ping_answers_the_config_version(snap: Snapshot) -> None:
    assert answer(snap, QueryType.PING, None) == (Status.OK, 1)
    assert answer(snap, QueryType.PING, "anything") == (Status.OK, 1)


@pytest.mark.parametrize(("node", "role"), [
    ("node1", NodeRole.MASTER), ("node2", NodeRole.CANDIDATE), ("node3", NodeRole.REGULAR),
    ("node4", NodeRole.DRAINED), ("node5", NodeRole.OFFLINE),
])
def test_node_role_by_name(snap: Snapshot, node: str, role: NodeRole) -> None:
    assert answer(snap, QueryType.NODE_ROLE_BYNAME, node) == (Status.OK, role)


def test_node_role_by_uuid_and_errors(snap: Snapshot, tmp_path: Path) -> None:
    uuid = load_readonly(tmp_path / "config.db").get("node", "node2").uuid
    assert answer(snap, QueryType.NODE_ROLE_BYNAME, uuid) == (Status.OK, NodeRole.CANDIDATE)
    assert answer(snap, QueryType.NODE_ROLE_BYNAME, "node9") == UNKNOWN
    assert answer(snap, QueryType.NODE_ROLE_BYNAME, None) == ARGUMENT
    assert answer(snap, QueryType.NODE_ROLE_BYNAME, {"1": "node1"}) == ARGUMENT


def test_node_pip_by_instance_ip(snap: Snapshot) -> None:
    q = QueryType.NODE_PIP_BY_INSTANCE_IP
    assert answer(snap, q, {"1": "198.51.100.1"}) == (Status.OK, "192.0.2.2")
    assert answer(snap, q, {"1": "198.51.100.2"}) == (Status.OK, "192.0.2.3")
    assert answer(snap, q, {"1": "198.51.100.9"}) == UNKNOWN
    # another link: the IP is looked up on that link only
    assert answer(snap, q, {"1": "203.0.113.1"}) == UNKNOWN
    assert answer(snap, q, {"1": "203.0.113.1", "0": "br1"}) == (Status.OK, "192.0.2.2")
    assert answer(snap, q, {"2": ["198.51.100.2", "10.0.0.1"]}) == (
        Status.OK, [[0, "192.0.2.3", snap.serial], [1, 0, 0]])
    assert answer(snap, q, {}) == (Status.OK, [])
    # Ganeti accepts only a dictionary here
    assert answer(snap, q, "198.51.100.1") == ARGUMENT
    assert answer(snap, q, None) == ARGUMENT
    assert answer(snap, q, {"1": 5}) == ARGUMENT
    assert answer(snap, q, {"2": "198.51.100.1"}) == ARGUMENT


def test_cluster_master(snap: Snapshot) -> None:
    q = QueryType.CLUSTER_MASTER
    assert answer(snap, q, None) == (Status.OK, "node1")
    assert answer(snap, q, {"3": [0, 1, 2]}) == (Status.OK, ["node1", "192.0.2.254", "192.0.2.1"])
    assert answer(snap, q, {"3": [2]}) == (Status.OK, ["192.0.2.1"])
    assert answer(snap, q, {}) == (Status.OK, [])
    assert answer(snap, q, "node1") == ARGUMENT
    assert answer(snap, q, {"3": [7]}) == ARGUMENT
    assert answer(snap, q, {"3": [True]}) == ARGUMENT


def test_ip_lists(snap: Snapshot) -> None:
    assert answer(snap, QueryType.NODE_PIP_LIST, None) == (
        Status.OK, ["192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4", "192.0.2.5"])
    # the master and the candidates (a drained candidate stays one)
    assert answer(snap, QueryType.MC_PIP_LIST, None) == (
        Status.OK, ["192.0.2.1", "192.0.2.2", "192.0.2.4"])
    assert answer(snap, QueryType.INSTANCES_IPS_LIST, None) == (
        Status.OK, ["198.51.100.1", "198.51.100.2"])
    assert answer(snap, QueryType.INSTANCES_IPS_LIST, "br1") == (Status.OK, ["203.0.113.1"])
    assert answer(snap, QueryType.INSTANCES_IPS_LIST, "nolink") == (Status.OK, [])
    assert answer(snap, QueryType.INSTANCES_IPS_LIST, {"0": "br1"}) == ARGUMENT


def test_corral_additions(snap: Snapshot) -> None:
    assert answer(snap, QueryType.INSTANCE_LIST, None) == (Status.OK, ["db1", "web1", "web2"])
    assert answer(snap, QueryType.INSTANCE_PRIMARY_NODE, "web2") == (Status.OK, "node3")
    assert answer(snap, QueryType.INSTANCE_PRIMARY_NODE, "nope") == UNKNOWN
    assert answer(snap, QueryType.INSTANCE_PRIMARY_NODE, None) == ARGUMENT
    assert answer(snap, QueryType.OFFLINE_NODES, None) == (Status.OK, ["node5"])


@pytest.mark.parametrize("qtype", [7, 8, 9, 10, 11])
def test_ganeti_types_corral_lacks_are_not_implemented(snap: Snapshot, qtype: int) -> None:
    result = answer(snap, qtype, "x")
    assert result is not None and result[0] == Status.NOTIMPLEMENTED


@pytest.mark.parametrize("qtype", [-1, 12, 99, 103, 2**40])
def test_unknown_types_get_no_answer(snap: Snapshot, qtype: int) -> None:
    assert answer(snap, qtype, None) is None


def test_answers_follow_a_commit(tmp_path: Path) -> None:
    store = build_config(tmp_path / "config.db")
    before = build_snapshot(load_readonly(tmp_path / "config.db"))
    with store.transaction() as txn:
        node = txn.get("node", "node3")
        node.offline = True
        txn.update(node)
        inst = txn.get("instance", "web2")
        inst.primary_node = txn.get("node", "node2").uuid
        txn.update(inst)
    store.close()
    after = build_snapshot(load_readonly(tmp_path / "config.db"))
    assert after.serial == before.serial + 1
    assert answer(after, QueryType.NODE_ROLE_BYNAME, "node3") == (Status.OK, NodeRole.OFFLINE)
    assert answer(after, QueryType.OFFLINE_NODES, None) == (Status.OK, ["node3", "node5"])
    assert answer(after, QueryType.NODE_PIP_BY_INSTANCE_IP, {"1": "198.51.100.2"}) == (
        Status.OK, "192.0.2.2")
    assert answer(before, QueryType.NODE_ROLE_BYNAME, "node3") == (Status.OK, NodeRole.REGULAR)


def test_memo_stays_bounded(snap: Snapshot) -> None:
    for i in range(MEMO_LIMIT * 3):
        result: Any = answer(snap, QueryType.NODE_ROLE_BYNAME, f"ghost{i}")
        assert result == UNKNOWN
    assert len(snap.memo) <= MEMO_LIMIT
