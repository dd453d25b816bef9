"""Network logical units on a real store: add, modify, connect, disconnect, remove,
query, tags; and the configuration invariants around networks."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from corral.cmdlib.base import MasterContext
from corral.cmdlib.processor import Processor
from corral.config import ConfigStore
from corral.errors import AlreadyExistsError, ConfigurationError, NotFoundError, OpPrereqError
from corral.locking import LockLevel
from corral.objects import NIC, Instance
from tests.unit.config_helpers import new_store
from tests.unit.lu_helpers import FakeRpc, JobCtx, make_processor, run_op


@pytest.fixture
def env(tmp_path: Path) -> tuple[ConfigStore, Processor, MasterContext]:
    store = new_store(tmp_path / "config.db")
    processor, ctx = make_processor(store, FakeRpc())
    return store, processor, ctx


def _op(processor: Processor, op_id: str, job: JobCtx | None = None, **params: Any) -> Any:
    return run_op(processor, {"OP_ID": op_id, **params}, job)


def _query(processor: Processor, fields: list[str]) -> list[list[Any]]:
    answer = _op(processor, "OP_QUERY", what="network", fields=fields, qfilter=None)
    return [[cell[1] for cell in row] for row in answer["data"]]


def test_add_records_the_pool_and_refuses_a_second_add(env: Any) -> None:
    store, processor, ctx = env
    _op(processor, "OP_NETWORK_ADD", network_name="net-a", network="10.0.0.0/29",
        gateway="10.0.0.1", add_reserved_ips=["10.0.0.5"], tags=["t1"])
    net = store.get("network", "net-a")
    assert net.ext_reservations == ["10.0.0.0", "10.0.0.1", "10.0.0.5", "10.0.0.7"]
    assert "net-a" in ctx.locks.lockset(LockLevel.NETWORK)
    assert _query(processor, ["name", "free_count", "reserved_count", "map", "tags"]) == [
        ["net-a", 4, 4, "XX...X.X", ["t1"]]]
    with pytest.raises(AlreadyExistsError, match="Desired network name 'net-a' already"):
        _op(processor, "OP_NETWORK_ADD", network_name="net-a", network="10.0.1.0/29")


def test_connect_disconnect_and_remove(env: Any) -> None:
    store, processor, _ctx = env
    _op(processor, "OP_NETWORK_ADD", network_name="net-a", network="10.0.0.0/29")
    _op(processor, "OP_NETWORK_CONNECT", network_name="net-a", group_name="default",
        network_mode="routed", network_link="rt0")
    assert _query(processor, ["group_list", "group_cnt"]) == [
        [[["default", "routed", "rt0", ""]], 1]]
    with pytest.raises(OpPrereqError, match="Network still connected"):
        _op(processor, "OP_NETWORK_REMOVE", network_name="net-a")
    _op(processor, "OP_NETWORK_DISCONNECT", network_name="net-a", group_name="default")
    job = JobCtx()
    _op(processor, "OP_NETWORK_DISCONNECT", job, network_name="net-a", group_name="default")
    assert any("is not mapped to group" in str(m) for m in job.log)
    _op(processor, "OP_NETWORK_REMOVE", network_name="net-a")
    assert store.find("network", "net-a") is None
    with pytest.raises(NotFoundError, match="Network 'net-a' not found"):
        _op(processor, "OP_NETWORK_REMOVE", network_name="net-a")


def test_connect_refuses_nic_addresses_in_the_subnet_unless_told(env: Any) -> None:
    store, processor, ctx = env
    node = store.all("node")[0]
    with store.transaction() as txn:
        txn.add(Instance(name="inst1", primary_node=node.uuid,
                         nics=[NIC(mac="aa:00:00:00:00:01", ip="10.0.0.3")]))
    asyncio.run(ctx.locks.add(LockLevel.INSTANCE, "inst1"))
    _op(processor, "OP_NETWORK_ADD", network_name="net-a", network="10.0.0.0/29")
    conflict = r"Conflicting IP addresses found.*inst1: nic0/10\.0\.0\.3"
    with pytest.raises(OpPrereqError, match=conflict):
        _op(processor, "OP_NETWORK_CONNECT", network_name="net-a", group_name="default",
            network_mode="bridged", network_link="br0")
    _op(processor, "OP_NETWORK_CONNECT", network_name="net-a", group_name="default",
        network_mode="bridged", network_link="br0", conflicts_check=False)
    assert store.get("nodegroup", "default").networks[store.get("network", "net-a").uuid].link \
        == "br0"


def test_modify_gateway_and_reservations(env: Any) -> None:
    store, processor, _ctx = env
    _op(processor, "OP_NETWORK_ADD", network_name="net-a", network="10.0.0.0/29",
        gateway="10.0.0.1")
    with pytest.raises(OpPrereqError, match=r"'10\.0\.0\.7' is already reserved"):
        _op(processor, "OP_NETWORK_SET_PARAMS", network_name="net-a", gateway="10.0.0.7")
    job = JobCtx()
    _op(processor, "OP_NETWORK_SET_PARAMS", job, network_name="net-a",
        add_reserved_ips=["10.0.0.4", "10.9.9.9"], remove_reserved_ips=["10.0.0.1"])
    assert any("Cannot reserve IP address 10.9.9.9" in str(m) for m in job.log)
    assert any("Cannot unreserve Gateway's IP" in str(m) for m in job.log)
    _op(processor, "OP_NETWORK_SET_PARAMS", network_name="net-a", gateway="10.0.0.2",
        mac_prefix="AA:BB:CC")
    net = store.get("network", "net-a")
    assert net.ext_reservations == ["10.0.0.0", "10.0.0.2", "10.0.0.4", "10.0.0.7"]
    assert (net.gateway, net.mac_prefix) == ("10.0.0.2", "aa:bb:cc")


def test_network_tags(env: Any) -> None:
    _store, processor, _ctx = env
    _op(processor, "OP_NETWORK_ADD", network_name="net-a", network="10.0.0.0/29")
    _op(processor, "OP_TAGS_SET", kind="network", name="net-a", tags=["a", "b"])
    _op(processor, "OP_TAGS_DEL", kind="network", name="net-a", tags=["a"])
    assert _op(processor, "OP_TAGS_GET", kind="network", name="net-a") == ["b"]
    assert _op(processor, "OP_TAGS_SEARCH", pattern="^b$") == [["/network/net-a", "b"]]
    with pytest.raises(NotFoundError, match="Network name net-z not found"):
        _op(processor, "OP_TAGS_GET", kind="network", name="net-z")


def test_invariants_keep_nic_addresses_inside_their_network(env: Any) -> None:
    store, processor, _ctx = env
    _op(processor, "OP_NETWORK_ADD", network_name="net-a", network="10.0.0.0/29")
    net = store.get("network", "net-a")
    node = store.all("node")[0]
    with pytest.raises(ConfigurationError, match="not in network 'net-a'"), \
            store.transaction() as txn:
        txn.add(Instance(name="i1", primary_node=node.uuid, nics=[
            NIC(mac="aa:00:00:00:00:01", ip="10.0.1.3", network=net.uuid)]))
    with pytest.raises(ConfigurationError, match="externally reserved in network 'net-a'"), \
            store.transaction() as txn:
        txn.add(Instance(name="i1", primary_node=node.uuid, nics=[
            NIC(mac="aa:00:00:00:00:01", ip="10.0.0.0", network=net.uuid)]))
    with store.transaction() as txn:
        txn.add(Instance(name="i1", primary_node=node.uuid, nics=[
            NIC(mac="aa:00:00:00:00:01", ip="10.0.0.3", network=net.uuid)]))
    with pytest.raises(ConfigurationError, match="still refers to it as its NIC 0 network"), \
            store.transaction() as txn:
        txn.remove("network", net.uuid)
    with pytest.raises(ConfigurationError, match="externally reserved"), store.transaction() as txn:
        changed = txn.get("network", net.uuid)
        changed.ext_reservations = [*changed.ext_reservations, "10.0.0.3"]
        txn.update(changed)
    assert _query(processor, ["inst_list", "inst_cnt", "free_count"]) == [[["i1"], 1, 5]]


def test_old_query_opcode_and_dry_run(env: Any) -> None:
    store, processor, ctx = env
    _op(processor, "OP_NETWORK_ADD", network_name="net-d", network="10.0.0.0/29", dry_run=True)
    assert store.find("network", "net-d") is None
    assert "net-d" not in ctx.locks.lockset(LockLevel.NETWORK)
    _op(processor, "OP_NETWORK_ADD", network_name="net-b", network="10.0.1.0/30")
    _op(processor, "OP_NETWORK_ADD", network_name="net-a", network="10.0.0.0/29")
    assert _op(processor, "OP_NETWORK_QUERY", output_fields=["name", "free_count"]) == [
        ["net-a", 6], ["net-b", 2]]
    assert _op(processor, "OP_NETWORK_QUERY", output_fields=["gateway"],
               names=["net-b"]) == [[None]]


def test_query_by_name_answers_in_the_order_named_and_refuses_an_unknown_network(
        env: Any) -> None:
    _store, processor, _ctx = env
    for name, subnet in (("net10", "10.0.1.0/29"), ("net2", "10.0.2.0/29")):
        _op(processor, "OP_NETWORK_ADD", network_name=name, network=subnet)

    def names(qfilter: Any) -> list[str]:
        answer = _op(processor, "OP_QUERY", what="network", fields=["name"], qfilter=qfilter)
        return [row[0][1] for row in answer["data"]]

    assert names(None) == ["net2", "net10"]  # natural order
    assert names(["|", ["==", "name", "net10"], ["==", "name", "net2"]]) == ["net10", "net2"]
    with pytest.raises(NotFoundError, match=r"^Network name net3 not found\n"):
        names(["|", ["==", "name", "net3"]])


def test_a_dry_run_logs_ganetis_line_and_changes_nothing(env: Any) -> None:
    from corral.cmdlib.processor import DRY_RUN_MESSAGE

    store, processor, _ctx = env
    job = JobCtx()
    _op(processor, "OP_NETWORK_ADD", job, network_name="net-d", network="10.0.9.0/29",
        dry_run=True)
    assert DRY_RUN_MESSAGE in job.log
    assert store.find("network", "net-d") is None
