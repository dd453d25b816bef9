"""Nodes, node groups and tags: the logical units and the node/group query resources,
against a real store, real locks and node daemons in this process (the real noded procedures)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from corral import x509
from corral.cmdlib.config_files import vnc_password_files
from corral.config import ConfigStore
from corral.errors import (
    AlreadyExistsError,
    JoinError,
    NodeUnreachableError,
    NotFoundError,
    OpExecError,
    OpPrereqError,
    ParameterError,
    UnknownParameterError,
)
from corral.locking import LockLevel
from corral.masterd.local_rpc import in_process_token
from corral.noded import join
from corral.noded.files import read_ancillary_files
from corral.objects import Instance, Node, NodeGroup
from corral.paths import Paths
from corral.qlang import ResultStatus
from corral.rpc.protocol import RpcResult
from tests.unit.config_helpers import check_invariants, new_store
from tests.unit.lu_helpers import JobCtx, LocalRpc, make_processor, run_op

#: Nodes the tests add: they wait for a join with the token made of "tok" (node daemons
#: not yet in the cluster).
NEW_NODES = ("node2.example", *(f"node{n}" for n in range(2, 10)))


def _rpc(store: ConfigStore, **handlers: Any) -> LocalRpc:
    """The real node procedures, one directory per node, with ``handlers`` overriding
    some of them."""
    rpc = LocalRpc(store, Path(tempfile.mkdtemp(dir=store.path.parent)))
    for name in NEW_NODES:
        if store.find("node", name) is None:
            rpc.nodes.wait_for_join(name, "tok")
    for procedure, handler in handlers.items():
        rpc.handlers[procedure] = handler
    return rpc


def _store(tmp_path: Path, nodes: int = 3, pool: int | None = None) -> ConfigStore:
    """node1 (master) plus node2..nodeN, all candidates, in group 'default'."""
    store = new_store(tmp_path / "config.db")
    group = store.all("nodegroup")[0]
    with store.transaction() as txn:
        for n in range(2, nodes + 1):
            txn.add(Node(name=f"node{n}", primary_ip=f"192.0.2.{n}", group=group.uuid))
        if pool is not None:
            cluster = txn.cluster()
            cluster.candidate_pool_size = pool
            txn.update(cluster)
    return store


def _run(store: ConfigStore, rpc: LocalRpc, op: dict[str, Any], job: JobCtx | None = None
         ) -> Any:
    processor, _ctx = make_processor(store, rpc)
    return run_op(processor, op, job)


def _add(name: str, ip: str, token: str | None = None, **extra: Any) -> dict[str, Any]:
    if token is None:
        token = in_process_token(name.lower(), "tok")
    return {"OP_ID": "OP_NODE_ADD", "node_name": name, "primary_ip": ip, "token": token,
            **extra}


def _roles(store: ConfigStore) -> dict[str, tuple[bool, bool, bool]]:
    return {n.name: (n.master_candidate, n.drained, n.offline) for n in store.all("node")}


# -- OP_NODE_ADD ---------------------------------------------------------------------------


def test_add_joins_checks_version_then_records_a_candidate(tmp_path: Path) -> None:
    store = _store(tmp_path, nodes=1)
    with store.transaction() as txn:
        cluster = txn.cluster()
        cluster.uid_pool = [(4000, 4009), (5000, 5000)]
        txn.update(cluster)
    rpc = _rpc(store)
    processor, ctx = make_processor(store, rpc)
    job = JobCtx()
    assert run_op(processor, _add("Node2.Example", "192.0.2.2"), job) is None
    node = store.get("node", "node2.example")
    assert (node.primary_ip, node.secondary_ip, node.master_candidate) == ("192.0.2.2", "", True)
    assert node.group == store.get("nodegroup", "default").uuid
    assert rpc.joined == [("node2.example", in_process_token("node2.example", "tok"))]
    # The node daemon checked and kept the bundle the master sent.
    joined = rpc.nodes.paths("node2.example")
    assert join.read_membership(joined)["node_name"] == "node2.example"
    assert x509.verify_signed_by(joined.node_cert.read_text(), joined.ca_cert.read_text())
    # The new candidate gets a copy of the configuration before it counts as one.
    # Then, as every node, the user-id pool (design 2.1).
    assert rpc.procedures("node2.example") == ["version", "config_replicate", "upload_files"]
    assert joined.uid_pool.read_text() == "4000-4009\n5000\n"
    assert "node2.example" in ctx.locks.lockset(LockLevel.NODE)
    assert "node2.example" in ctx.locks.lockset(LockLevel.NODE_RES)
    assert any(f"Added node node2.example with UUID {node.uuid}" in str(m) for m in job.log)
    check_invariants(store)


def test_add_with_a_wrong_token_leaves_the_config_alone(tmp_path: Path) -> None:
    store = _store(tmp_path, nodes=1)
    serial = store.serial
    with pytest.raises(JoinError) as err:
        _run(store, _rpc(store), _add("node2", "192.0.2.2", token="bad"))
    assert "node2" in err.value.message and "token is wrong" in err.value.message
    assert store.find("node", "node2") is None and store.serial == serial


def test_add_of_an_unreachable_node_says_so(tmp_path: Path) -> None:
    store = _store(tmp_path, nodes=1)
    rpc = _rpc(store)

    async def refused(node: Node, token: str, *,
                      timeout: float = 30.0) -> RpcResult:  # noqa: ASYNC109 - NodeRpc's
        return RpcResult(node.name, error=NodeUnreachableError(
            f"node {node.name} is unreachable: connection refused"))

    rpc.join = refused  # type: ignore[method-assign]
    with pytest.raises(NodeUnreachableError, match=r"cannot join node node2: .* refused"):
        _run(store, rpc, _add("node2", "192.0.2.2"))
    assert store.find("node", "node2") is None


def test_add_failing_version_check_makes_the_node_leave(tmp_path: Path) -> None:
    store = _store(tmp_path, nodes=1)

    def old(node: Node, args: Mapping[str, Any]) -> dict[str, Any]:
        return {"rpc_version": 0, "version": "ancient"}

    rpc = _rpc(store, version=old)
    with pytest.raises(OpExecError, match="RPC version 0"):
        _run(store, rpc, _add("node2", "192.0.2.2"))
    assert rpc.procedures("node2") == ["version", "node_leave"]
    assert store.find("node", "node2") is None

    rpc = _rpc(store)
    rpc.down.add("node2")
    with pytest.raises(NodeUnreachableError, match="node2"):
        _run(store, rpc, _add("node2", "192.0.2.2"))
    assert store.find("node", "node2") is None


@pytest.mark.parametrize(("op", "error", "text"), [
    (_add("node2", "192.0.2.2"), AlreadyExistsError, "already in the cluster"),
    (_add("node9", "192.0.2.3"), AlreadyExistsError, "192.0.2.3 of new node node9 is already "
                                                      "used by node node3"),
    (_add("node9", "192.0.2.9", group="nogroup"), NotFoundError, "nogroup"),
    (_add("node9", "192.0.2.9", secondary_ip="198.51.100.9"), OpPrereqError,
     "no separate secondary network"),
    ({"OP_ID": "OP_NODE_ADD", "node_name": "node9", "token": "t"}, ParameterError,
     "--primary-ip"),
    ({"OP_ID": "OP_NODE_ADD", "node_name": "node9", "primary_ip": "192.0.2.9"},
     ParameterError, "--token"),
    (_add("node9", "300.1.1.1"), ParameterError, "not an IPv4 or IPv6 address"),
    (_add("bad_name!", "192.0.2.9"), ParameterError, "invalid node name"),
    (_add("node9", "192.0.2.9", hv_state={"kvm": {}}), ParameterError, "hv_state"),
    (_add("node9", "192.0.2.9", ndparams={"nosuch": 1}), UnknownParameterError, "nosuch"),
    (_add("node9", "192.0.2.9", readd=True), NotFoundError, "without --readd"),
    (_add("node1", "192.0.2.1", readd=True), OpPrereqError, "master"),
])
def test_add_refuses_bad_requests(tmp_path: Path, op: dict[str, Any],
                                  error: type[Exception], text: str) -> None:
    store = _store(tmp_path)
    rpc = _rpc(store)
    with pytest.raises(error, match=text):
        _run(store, rpc, op)
    assert rpc.joined == []
    assert store.find("node", "node9") is None


def test_add_respects_pool_size_group_and_capabilities(tmp_path: Path) -> None:
    store = _store(tmp_path, nodes=2, pool=2)
    with store.transaction() as txn:
        txn.add(NodeGroup(name="rack2"))
    _run(store, _rpc(store), _add("node3", "192.0.2.3", group="rack2",
                             ndparams={"ssh_port": "2222"}))
    node3 = store.get("node", "node3")
    assert not node3.master_candidate
    assert node3.group == store.get("nodegroup", "rack2").uuid
    assert node3.ndparams == {"ssh_port": 2222}
    _run(store, _rpc(store), _add("node4", "192.0.2.4", master_capable=False, vm_capable=False))
    node4 = store.get("node", "node4")
    assert (node4.master_capable, node4.vm_capable, node4.master_candidate) == (
        False, False, False)


def test_add_dry_run_changes_nothing(tmp_path: Path) -> None:
    store = _store(tmp_path, nodes=1)
    rpc = _rpc(store)
    assert _run(store, rpc, {**_add("node2", "192.0.2.2"), "dry_run": True}) is None
    assert rpc.joined == [] and store.find("node", "node2") is None


def test_readd_rejoins_and_brings_the_node_back_online(tmp_path: Path) -> None:
    store = _store(tmp_path)
    with store.transaction() as txn:
        node = txn.get("node", "node3")
        node.offline, node.master_candidate = True, False
        txn.update(node)
    uuid = node.uuid
    rpc = _rpc(store)
    new = rpc.nodes.wait_for_join("node3", "new")  # reinstalled: it printed a new token
    _run(store, rpc, {"OP_ID": "OP_NODE_ADD", "node_name": "node3", "readd": True,
                      "token": new})
    node = store.get("node", "node3")
    assert node.uuid == uuid and not node.offline and node.master_candidate
    assert rpc.joined == [("node3", new)]


# -- OP_NODE_REMOVE ------------------------------------------------------------------------


def test_remove_forgets_the_node_drops_locks_and_refills_the_pool(tmp_path: Path) -> None:
    store = _store(tmp_path, nodes=4, pool=3)
    with store.transaction() as txn:
        node4 = txn.get("node", "node4")
        node4.master_candidate = False
        txn.update(node4)
    rpc = _rpc(store)
    processor, ctx = make_processor(store, rpc)
    job = JobCtx()
    run_op(processor, {"OP_ID": "OP_NODE_REMOVE", "node_name": "node3"}, job)
    assert store.find("node", "node3") is None
    assert store.get("node", "node4").master_candidate
    assert rpc.procedures("node3") == ["node_leave"]
    assert "node3" not in ctx.locks.lockset(LockLevel.NODE)
    assert "node3" not in ctx.locks.lockset(LockLevel.NODE_RES)
    assert any("Promoted to master candidate: node4" in str(m) for m in job.log)
    check_invariants(store)


def test_remove_of_an_unreachable_node_warns_and_goes_on(tmp_path: Path) -> None:
    store = _store(tmp_path)
    rpc = _rpc(store)
    rpc.down.add("node2")
    job = JobCtx()
    _run(store, rpc, {"OP_ID": "OP_NODE_REMOVE", "node_name": "node2"}, job)
    assert store.find("node", "node2") is None
    assert any("Warning: node node2 could not be told to leave" in str(m) for m in job.log)


def test_remove_refuses_master_and_nodes_with_instances(tmp_path: Path) -> None:
    store = _store(tmp_path)
    with store.transaction() as txn:
        txn.add(Instance(name="web1", primary_node=store.get("node", "node2").uuid))
    with pytest.raises(OpPrereqError, match="master-failover"):
        _run(store, _rpc(store), {"OP_ID": "OP_NODE_REMOVE", "node_name": "node1"})
    with pytest.raises(OpPrereqError, match="node node2 still has instances: web1"):
        _run(store, _rpc(store), {"OP_ID": "OP_NODE_REMOVE", "node_name": "node2"})
    with pytest.raises(NotFoundError, match="nodeX"):
        _run(store, _rpc(store), {"OP_ID": "OP_NODE_REMOVE", "node_name": "nodeX"})
    assert store.count("node") == 3


def test_remove_accepts_a_uuid_and_dry_run(tmp_path: Path) -> None:
    store = _store(tmp_path)
    uuid = store.get("node", "node3").uuid
    rpc = _rpc(store)
    _run(store, rpc, {"OP_ID": "OP_NODE_REMOVE", "node_name": uuid, "dry_run": True})
    assert store.find("node", "node3") is not None and rpc.calls == []
    _run(store, rpc, {"OP_ID": "OP_NODE_REMOVE", "node_name": uuid})
    assert store.find("node", "node3") is None


# -- OP_NODE_SET_PARAMS --------------------------------------------------------------------


def _modify(name: str, **params: Any) -> dict[str, Any]:
    return {"OP_ID": "OP_NODE_SET_PARAMS", "node_name": name, **params}


def test_offline_and_drained_demote_and_report_ganeti_changes(tmp_path: Path) -> None:
    store = _store(tmp_path)
    result = _run(store, _rpc(store), _modify("node3", offline=True))
    assert result == [["master_candidate", "False"], ["offline", "True"]]
    assert _roles(store)["node3"] == (False, False, True)
    result = _run(store, _rpc(store), _modify("node2", drained=True, ndparams={"ssh_port": 2200}))
    assert result == [["ndparams", "{'ssh_port': 2200}"], ["master_candidate", "False"],
                      ["drained", "True"]]
    assert _roles(store)["node2"] == (False, True, False)


def test_demotion_below_the_pool_needs_auto_promote_or_force(tmp_path: Path) -> None:
    store = _store(tmp_path, nodes=3, pool=2)
    with store.transaction() as txn:
        node3 = txn.get("node", "node3")
        node3.master_candidate = False
        txn.update(node3)
    with pytest.raises(OpPrereqError, match="--auto-promote"):
        _run(store, _rpc(store), _modify("node2", master_candidate=False))
    assert _roles(store)["node2"] == (True, False, False)
    job = JobCtx()
    _run(store, _rpc(store), _modify("node2", master_candidate=False, auto_promote=True), job)
    assert _roles(store)["node2"] == (False, False, False)
    assert _roles(store)["node3"] == (True, False, False)
    assert any("Promoted to master candidate: node3" in str(m) for m in job.log)
    _run(store, _rpc(store), _modify("node3", drained=True, force=True))
    assert _roles(store)["node3"] == (False, True, False)
    assert _roles(store)["node2"] == (False, False, False)  # force: the pool stays short


def test_master_flags_cannot_change(tmp_path: Path) -> None:
    store = _store(tmp_path)
    for params in ({"offline": True}, {"drained": True}, {"master_candidate": False},
                   {"master_capable": False}):
        with pytest.raises(OpPrereqError, match="master"):
            _run(store, _rpc(store), _modify("node1", **params))
    assert _roles(store)["node1"] == (True, False, False)


def test_bringing_a_node_online_asks_it_first(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _run(store, _rpc(store), _modify("node3", offline=True))
    rpc = _rpc(store)
    rpc.down.add("node3")
    with pytest.raises(OpPrereqError, match="node node3 cannot be set online"):
        _run(store, rpc, _modify("node3", offline=False))
    assert _roles(store)["node3"] == (False, False, True)
    rpc = _rpc(store)
    job = JobCtx()
    with store.transaction() as txn:  # changed while node3 was offline
        cluster = txn.cluster()
        cluster.uid_pool = [(4000, 4000)]
        txn.update(cluster)
    result = _run(store, rpc, _modify("node3", offline=False), job)
    # Back online, it gets the uid pool it may have missed.
    assert rpc.procedures("node3") == ["version", "config_replicate", "upload_files"]
    assert rpc.nodes.paths("node3").uid_pool.read_text() == "4000\n"
    assert result == [["master_candidate", "True"], ["offline", "False"]]
    assert "Auto-promoting node to master candidate" in job.log


@pytest.mark.parametrize(("params", "error", "text"), [
    ({}, ParameterError, "nothing to change"),
    ({"offline": True, "drained": True}, ParameterError, "only one of the roles"),
    ({"powered": True}, OpPrereqError, "out-of-band"),
    ({"secondary_ip": "x"}, ParameterError, "not an IPv4"),
    ({"secondary_ip": "192.0.2.3"}, AlreadyExistsError, "node3"),
    ({"vm_capable": False}, OpPrereqError, "hosts instances \\(web1\\)"),
    ({"ndparams": {"ssh_port": "many"}}, ParameterError, "ssh_port"),
])
def test_set_params_refuses_bad_requests(tmp_path: Path, params: dict[str, Any],
                                         error: type[Exception], text: str) -> None:
    store = _store(tmp_path)
    with store.transaction() as txn:
        txn.add(Instance(name="web1", primary_node=store.get("node", "node2").uuid))
    serial = store.serial
    with pytest.raises(error, match=text):
        _run(store, _rpc(store), _modify("node2", **params))
    assert store.serial == serial


def test_not_master_capable_cannot_be_candidate_and_capability_changes(tmp_path: Path) -> None:
    store = _store(tmp_path)
    job = JobCtx()
    result = _run(store, _rpc(store), _modify("node3", master_capable=False), job)
    assert result == [["master_capable", "False"], ["master_candidate", "False"]]
    assert "Demoting from master candidate" in job.log
    with pytest.raises(OpPrereqError, match="not master capable"):
        _run(store, _rpc(store), _modify("node3", master_candidate=True))
    result = _run(store, _rpc(store), _modify("node3", master_capable=True))
    assert result == [["master_capable", "True"], ["master_candidate", "True"]]
    job = JobCtx()
    _run(store, _rpc(store), _modify("node3", offline=False), job)
    assert "Ignoring request to unset flag offline, already unset" in job.log


# -- node query ----------------------------------------------------------------------------


def _info(node: Node, args: Mapping[str, Any]) -> dict[str, Any]:
    # Scripted on purpose: the fake hypervisor reports the host's /proc/meminfo, and
    # these tests need a memory picture that differs per node.
    n = int(node.name[-1])
    return {"memory_total": 1000 * n, "memory_free": 500 * n, "memory_dom0": 100,
            "cpu_count": 4, "bootid": f"boot-{n}",
            "storage": {d: {"size": 2048 * n, "free": 1024 * n} for d in args["storage_dirs"]}}


def _query(store: ConfigStore, rpc: LocalRpc, fields: list[str], qfilter: Any = None
           ) -> list[list[Any]]:
    processor, _ctx = make_processor(store, rpc)
    answer = run_op(processor, {"OP_ID": "OP_QUERY", "what": "node", "fields": fields,
                                "qfilter": qfilter})
    return [[cell if cell[0] else cell[1] for cell in row] for row in answer["data"]]


def test_node_config_fields_ask_no_node(tmp_path: Path) -> None:
    store = _store(tmp_path)
    with store.transaction() as txn:
        txn.add(Instance(name="web1", primary_node=store.get("node", "node2").uuid))
        node3 = txn.get("node", "node3")
        node3.master_candidate, node3.drained, node3.tags = False, True, ["b", "a"]
        txn.update(node3)
    rpc = _rpc(store, node_info=_info)
    rows = _query(store, rpc, ["name", "pip", "sip", "role", "master", "pinst_cnt",
                               "pinst_list", "sinst_cnt", "group", "tags", "ndp/ssh_port",
                               "custom_ndparams", "nosuch"])
    assert rows == [
        ["node1", "192.0.2.1", "192.0.2.1", "M", True, 0, [], 0, "default", [], 22, {},
         [1, None]],
        ["node2", "192.0.2.2", "192.0.2.2", "C", False, 1, ["web1"], 0, "default", [], 22,
         {}, [1, None]],
        ["node3", "192.0.2.3", "192.0.2.3", "D", False, 0, [], 0, "default", ["a", "b"], 22,
         {}, [1, None]],
    ]
    assert rpc.calls == []


def test_live_fields_ask_online_nodes_once(tmp_path: Path) -> None:
    store = _store(tmp_path)
    with store.transaction() as txn:
        cluster = txn.cluster()
        cluster.file_storage_dir = "/srv/corral/file-storage"
        txn.update(cluster)
        node3 = txn.get("node", "node3")
        node3.offline, node3.master_candidate = True, False
        txn.update(node3)
    rpc = _rpc(store, node_info=_info)
    rpc.down.add("node2")
    rows = _query(store, rpc, ["name", "mtotal", "mfree", "mnode", "ctotal", "dtotal",
                               "dfree", "bootid"])
    assert rows == [
        ["node1", 1000, 500, 100, 4, 2048, 1024, "boot-1"],
        ["node2", *[[int(ResultStatus.NODATA), None]] * 7],
        ["node3", *[[int(ResultStatus.OFFLINE), None]] * 7],
    ]
    assert [(c.node, c.procedure) for c in rpc.calls] == [("node1", "node_info"),
                                                          ("node2", "node_info")]
    assert rpc.calls[0].args == {"storage_dirs": ["/srv/corral/file-storage"],
                                 "hypervisors": ["fake"]}
    rpc.handlers["node_info"] = lambda node, args: {"memory_total": 1000, "memory_free": 600,
                                                    "memory_hv": 300}
    assert _query(store, rpc, ["name", "mnode", "bootid"])[0] == [
        "node1", 100, [int(ResultStatus.UNAVAIL), None]]


def test_live_fields_from_the_real_node_info(tmp_path: Path) -> None:
    store = _store(tmp_path, nodes=1)
    with store.transaction() as txn:
        cluster = txn.cluster()
        cluster.file_storage_dir = "/srv/corral/file-storage"
        txn.update(cluster)
    rpc = _rpc(store)
    ((name, mtotal, mfree, ctotal, dtotal, dfree, bootid),) = _query(
        store, rpc, ["name", "mtotal", "mfree", "ctotal", "dtotal", "dfree", "bootid"])
    assert name == "node1" and ctotal == os.cpu_count()
    assert isinstance(mtotal, int) and 0 < mfree <= mtotal
    assert isinstance(dtotal, int) and 0 < dfree <= dtotal
    assert bootid == Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def test_a_filter_on_a_live_field_fetches_live_data(tmp_path: Path) -> None:
    store = _store(tmp_path)
    rpc = _rpc(store, node_info=_info)
    rows = _query(store, rpc, ["name"], [">", "mtotal", 1500])
    assert rows == [["node2"], ["node3"]]
    assert len(rpc.calls) == 3


def test_node_fields_have_ganeti_titles(tmp_path: Path) -> None:
    store = _store(tmp_path)
    processor, _ctx = make_processor(store, _rpc(store))
    answer = run_op(processor, {"OP_ID": "OP_QUERY_FIELDS", "what": "node",
                                "fields": ["name", "dtotal", "mfree", "pinst_cnt", "role"]})
    assert [(f["title"], f["kind"]) for f in answer["fields"]] == [
        ("Node", "text"), ("DTotal", "unit"), ("MFree", "unit"), ("Pinst", "number"),
        ("Role", "text")]


# -- groups --------------------------------------------------------------------------------


def test_group_add_rename_assign_modify_remove(tmp_path: Path) -> None:
    store = _store(tmp_path)
    processor, ctx = make_processor(store, _rpc(store))
    run_op(processor, {"OP_ID": "OP_GROUP_ADD", "group_name": "rack2",
                       "alloc_policy": "last_resort", "ndparams": {"ssh_port": 2222},
                       "diskparams": {"plain": {"stripes": 2}}, "ipolicy": {}})
    group = store.get("nodegroup", "rack2")
    assert (group.alloc_policy, group.ndparams, group.diskparams) == (
        "last_resort", {"ssh_port": 2222}, {"plain": {"stripes": 2}})
    assert "rack2" in ctx.locks.lockset(LockLevel.NODEGROUP)
    assert run_op(processor, {"OP_ID": "OP_GROUP_RENAME", "group_name": group.uuid,
                              "new_name": "rack3"}) == "rack3"
    assert store.get("nodegroup", group.uuid).name == "rack3"
    assert "rack3" in ctx.locks.lockset(LockLevel.NODEGROUP)
    assert "rack2" not in ctx.locks.lockset(LockLevel.NODEGROUP)
    run_op(processor, {"OP_ID": "OP_GROUP_ASSIGN_NODES", "group_name": "rack3",
                       "nodes": ["node2", store.get("node", "node3").uuid]})
    assert {n.name for n in store.all("node") if n.group == group.uuid} == {"node2", "node3"}
    result = run_op(processor, {"OP_ID": "OP_GROUP_SET_PARAMS", "group_name": "rack3",
                                "alloc_policy": "preferred", "ndparams": {"ssh_port": None}})
    assert result == [["ndparams", "{}"], ["alloc_policy", "preferred"]]
    with pytest.raises(OpPrereqError, match="still has nodes: node2, node3"):
        run_op(processor, {"OP_ID": "OP_GROUP_REMOVE", "group_name": "rack3"})
    run_op(processor, {"OP_ID": "OP_GROUP_ASSIGN_NODES", "group_name": "default",
                       "nodes": ["node2", "node3"]})
    run_op(processor, {"OP_ID": "OP_GROUP_REMOVE", "group_name": "rack3"})
    assert store.find("nodegroup", "rack3") is None
    assert "rack3" not in ctx.locks.lockset(LockLevel.NODEGROUP)
    check_invariants(store)


@pytest.mark.parametrize(("op", "error", "text"), [
    ({"OP_ID": "OP_GROUP_ADD", "group_name": "default"}, AlreadyExistsError, "already exists"),
    ({"OP_ID": "OP_GROUP_ADD", "group_name": "g", "ipolicy": {"std": {"cpu-count": 2}}},
     ParameterError, "std cannot appear in group instance specs"),
    ({"OP_ID": "OP_GROUP_ADD", "group_name": "g", "ipolicy": {"vcpu-ratio": "x"}},
     ParameterError, "Invalid value for attribute 'vcpu-ratio'"),
    ({"OP_ID": "OP_GROUP_ADD", "group_name": "g", "hv_state": {"fake": {"mem_total": 1}}},
     ParameterError, "hv_state"),
    ({"OP_ID": "OP_GROUP_ADD", "group_name": "g", "diskparams": {"drbd": {}}},
     UnknownParameterError, "drbd"),
    ({"OP_ID": "OP_GROUP_ADD", "group_name": "g", "diskparams": {"plain": {"x": 1}}},
     UnknownParameterError, "'x'"),
    ({"OP_ID": "OP_GROUP_ADD", "group_name": "g", "alloc_policy": "sometimes"},
     ParameterError, "alloc_policy"),
    ({"OP_ID": "OP_GROUP_REMOVE", "group_name": "default"}, OpPrereqError, "still has nodes"),
    ({"OP_ID": "OP_GROUP_RENAME", "group_name": "default", "new_name": "other"},
     AlreadyExistsError, "exists"),
    ({"OP_ID": "OP_GROUP_RENAME", "group_name": "nosuch", "new_name": "x"}, NotFoundError,
     "nosuch"),
    ({"OP_ID": "OP_GROUP_SET_PARAMS", "group_name": "default"}, ParameterError,
     "nothing to change"),
    ({"OP_ID": "OP_GROUP_ASSIGN_NODES", "group_name": "other", "nodes": ["nodeX"]},
     NotFoundError, "nodeX"),
])
def test_group_ops_refuse_bad_requests(tmp_path: Path, op: dict[str, Any],
                                       error: type[Exception], text: str) -> None:
    store = _store(tmp_path)
    with store.transaction() as txn:
        txn.add(NodeGroup(name="other"))
    serial = store.serial
    with pytest.raises(error, match=text):
        _run(store, _rpc(store), op)
    assert store.serial == serial


def test_the_last_group_cannot_be_removed(tmp_path: Path) -> None:
    store = _store(tmp_path)
    with store.transaction() as txn:
        txn.add(NodeGroup(name="empty"))
    _run(store, _rpc(store), {"OP_ID": "OP_GROUP_ASSIGN_NODES", "group_name": "empty",
                         "nodes": ["node1", "node2", "node3"]})
    _run(store, _rpc(store), {"OP_ID": "OP_GROUP_REMOVE", "group_name": "default"})
    assert [g.name for g in store.all("nodegroup")] == ["empty"]
    with pytest.raises(OpPrereqError, match="last group"):
        _run(store, _rpc(store), {"OP_ID": "OP_GROUP_REMOVE", "group_name": "empty"})


def test_group_query(tmp_path: Path) -> None:
    store = _store(tmp_path)
    with store.transaction() as txn:
        txn.add(NodeGroup(name="rack2", ndparams={"ssh_port": 2222}))
        txn.add(Instance(name="web1", primary_node=store.get("node", "node2").uuid))
    processor, _ctx = make_processor(store, _rpc(store))
    answer = run_op(processor, {"OP_ID": "OP_QUERY", "what": "group", "fields": [
        "name", "node_cnt", "node_list", "pinst_cnt", "pinst_list", "alloc_policy",
        "ndp/ssh_port", "custom_ndparams"]})
    assert [[v for _s, v in row] for row in answer["data"]] == [
        ["default", 3, ["node1", "node2", "node3"], 1, ["web1"], "preferred", 22, {}],
        ["rack2", 0, [], 0, [], "preferred", 2222, {"ssh_port": 2222}],
    ]


# -- tags ----------------------------------------------------------------------------------


def test_tags_of_nodes_groups_and_instances(tmp_path: Path) -> None:
    store = _store(tmp_path)
    with store.transaction() as txn:
        txn.add(Instance(name="web1", primary_node=store.get("node", "node2").uuid))
    processor, _ctx = make_processor(store, _rpc(store))
    for kind, name in (("node", "node2"), ("nodegroup", "default"), ("instance", "web1"),
                       ("cluster", None)):
        run_op(processor, {"OP_ID": "OP_TAGS_SET", "kind": kind, "name": name,
                           "tags": ["role:web", f"k:{kind}"]})
    uuid = store.get("node", "node2").uuid
    assert run_op(processor, {"OP_ID": "OP_TAGS_GET", "kind": "node", "name": uuid}) == [
        "k:node", "role:web"]
    run_op(processor, {"OP_ID": "OP_TAGS_DEL", "kind": "nodegroup", "name": "default",
                       "tags": ["role:web"]})
    assert store.get("nodegroup", "default").tags == ["k:nodegroup"]
    assert run_op(processor, {"OP_ID": "OP_TAGS_SEARCH", "pattern": "^role"}) == [
        ["/cluster", "role:web"], ["/instances/web1", "role:web"], ["/nodes/node2", "role:web"]]
    assert run_op(processor, {"OP_ID": "OP_TAGS_SEARCH", "pattern": "^k:n"}) == [
        ["/nodes/node2", "k:node"], ["/nodegroup/default", "k:nodegroup"]]
    with pytest.raises(OpPrereqError, match="not found on node node2"):
        run_op(processor, {"OP_ID": "OP_TAGS_DEL", "kind": "node", "name": "node2",
                           "tags": ["nosuch"]})
    with pytest.raises(NotFoundError, match=r"^Node 'nodeX' not known"):
        run_op(processor, {"OP_ID": "OP_TAGS_SET", "kind": "node", "name": "nodeX",
                           "tags": ["a"]})
    with pytest.raises(ParameterError, match="need the name"):
        run_op(processor, {"OP_ID": "OP_TAGS_GET", "kind": "instance"})
    # Reading tags finds the object as a query does, and says so in Ganeti's words
    # (list-tags); changing them names it as other opcodes do.
    with pytest.raises(NotFoundError, match=r"^Node name nodeX not found\n"):
        run_op(processor, {"OP_ID": "OP_TAGS_GET", "kind": "node", "name": "nodeX"})
    with pytest.raises(ParameterError, match="kind"):
        run_op(processor, {"OP_ID": "OP_TAGS_GET", "kind": "storage", "name": "n"})


def test_add_gives_the_new_node_the_vnc_password_files(tmp_path: Path) -> None:
    """A node that joins gets the VNC password files the configuration names at once
    (as from redistribute-conf), so a kvm guest with VNC can start there; files of the
    user-files list, which the new node has not agreed to, are not sent."""
    store = _store(tmp_path, nodes=1)
    master_paths = Paths(tmp_path / "master-files")
    secret = master_paths.node_path("/etc/corral/vnc-cluster-password")
    secret.parent.mkdir(parents=True)
    secret.write_text("s3cret\n")
    with store.transaction() as txn:
        cluster = txn.cluster()
        cluster.hvparams.setdefault("kvm", {})["vnc_password_file"] = \
            "/etc/corral/vnc-cluster-password"
        txn.update(cluster)
    rpc = _rpc(store)
    processor, ctx = make_processor(store, rpc)
    ctx.ancillary_files = lambda: [
        *read_ancillary_files(master_paths, vnc_password_files(store)),
        {"path": "/etc/motd", "data": "aGkK", "mode": 0o644, "candidates_only": False}]
    job = JobCtx()
    run_op(processor, _add("node2.example", "192.0.2.2"), job)
    joined = rpc.nodes.paths("node2.example")
    copy = joined.node_path("/etc/corral/vnc-cluster-password")
    assert copy.read_text() == "s3cret\n"
    assert copy.stat().st_mode & 0o777 == 0o400
    assert not joined.node_path("/etc/motd").exists()
    assert not any("Warning" in str(m) for m in job.log), job.log
