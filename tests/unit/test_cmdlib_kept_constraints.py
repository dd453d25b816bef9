"""Placement constraints an instance keeps after creation: stored with aggregates as
UUIDs, changed by ``modify`` (refused when the primary node breaks them), honoured by
every unit that gives an existing instance a new node (a named target is refused, an
allocator sees the nodes that break them drained), and reported by verify."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.cli.gnt_instance_query import instance_info_layout
from corral.cmdlib.aggregates import by_constraints, instance_constraints
from corral.errors import OpPrereqError, ParameterError
from corral.iallocator import PluginRunner
from corral.objects import NodeGroup
from corral.placement.constraints import Constraints

from .config_helpers import snapshot
from .instance_change_helpers import Cluster as MoveCluster
from .instance_helpers import Cluster, open_cluster
from .lu_helpers import JobCtx, make_processor, run_op
from .test_cmdlib_allocation import Allocator, Jobs
from .test_cmdlib_verify import verify_group, with_code

RACK1 = "11111111-1111-4111-8111-111111111111"
RACK2 = "22222222-2222-4222-8222-222222222222"


@pytest.fixture
def cl(tmp_path: Path) -> Iterator[Cluster]:
    yield from open_cluster(tmp_path)


def _racks(cluster: Any) -> None:
    """rack1 holds node2, rack2 holds node3; node3 has CUSTOM_SSD."""
    with cluster.store.transaction() as txn:
        info = txn.cluster()
        info.aggregates = {"rack1": RACK1, "rack2": RACK2}
        txn.update(info)
        for name, aggs, traits in (("node2", [RACK1], []), ("node3", [RACK2], ["CUSTOM_SSD"])):
            node = txn.get("node", name)
            node.aggregates, node.traits = aggs, traits
            txn.update(node)


# -- kept, shown, changed -----------------------------------------------------------------


def test_create_keeps_the_constraints_with_aggregates_as_uuids(cl: Cluster) -> None:
    _racks(cl)
    cl.create(member_of=["!rack1", "in:rack2,default"], forbidden_traits=["CUSTOM_SSD"],
              disk_template="diskless", disks=[])
    inst = cl.store.get("instance", "web1")
    group = cl.store.all("nodegroup")[0].uuid
    assert (inst.member_of, inst.required_traits, inst.forbidden_traits) == (
        [f"!{RACK1}", f"in:{RACK2},{group}"], [], ["CUSTOM_SSD"])
    fields = ["member_of", "member_of.uuid", "required_traits", "forbidden_traits"]
    rows = cl.run("OP_QUERY", what="instance", fields=fields)["data"]
    assert [value for _status, value in rows[0]] == [
        ["!rack1", "in:rack2,group default"], inst.member_of, [], ["CUSTOM_SSD"]]
    info = cl.run("OP_INSTANCE_QUERY_DATA", instances=["web1"], static=True)["web1"]
    line = ("Placement constraints", "member_of !rack1, member_of in:rack2,group default, "
            "forbidden trait CUSTOM_SSD")
    assert line in instance_info_layout(info)
    # the name goes, the constraint stays (by UUID) and is shown by UUID
    cl.set_node("node2", aggregates=[])
    cl.run("OP_CLUSTER_REMOVE_AGGREGATE", aggregate_name="rack1")
    info = cl.run("OP_INSTANCE_QUERY_DATA", instances=["web1"], static=True)["web1"]
    assert info["placement"].startswith(f"member_of !{RACK1}, ")
    # an instance without constraints shows no such line (Ganeti's info unchanged)
    cl.create("web2", disk_template="diskless", disks=[])
    info = cl.run("OP_INSTANCE_QUERY_DATA", instances=["web2"], static=True)["web2"]
    assert "Placement constraints" not in dict(instance_info_layout(info))


def test_modify_replaces_each_kind_given_and_refuses_what_the_node_breaks(
        cl: Cluster) -> None:
    _racks(cl)
    cl.create(disk_template="diskless", disks=[])   # on node1: no rack, no trait
    result = cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1",
                    member_of=["!in:rack1,rack2"], forbidden_traits=["CUSTOM_SSD"])
    assert result == [["placement", "member_of !in:rack1,rack2, forbidden trait CUSTOM_SSD"]]
    inst = cl.store.get("instance", "web1")
    assert (inst.member_of, inst.forbidden_traits) == ([f"!in:{RACK1},{RACK2}"], ["CUSTOM_SSD"])
    # only the kind given changes
    cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", member_of=["!rack2"])
    inst = cl.store.get("instance", "web1")
    assert (inst.member_of, inst.forbidden_traits) == ([f"!{RACK2}"], ["CUSTOM_SSD"])
    before = snapshot(cl.store)
    with pytest.raises(OpPrereqError, match=r"cannot give instance web1 these placement "
                       r"constraints \(member_of rack1, forbidden trait CUSTOM_SSD\): its "
                       r"primary node node1 does not meet them: it is not in aggregate rack1"):
        cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", member_of=["rack1"])
    with pytest.raises(OpPrereqError, match="it lacks the required trait CUSTOM_SSD"):
        cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", required_traits=["CUSTOM_SSD"],
               forbidden_traits=[])
    with pytest.raises(ParameterError, match="unknown aggregate 'rack9'"):
        cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", member_of=["rack9"])
    # a new primary node must meet the constraints kept
    with pytest.raises(OpPrereqError, match="node node3 does not meet the placement "
                       "constraints of instance web1: it is in aggregate rack2, which "
                       "member_of !rack2 forbids; it has the forbidden trait CUSTOM_SSD"):
        cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", pnode="node3")
    assert snapshot(cl.store) == before
    # empty lists drop them
    result = cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", member_of=[],
                    forbidden_traits=[])
    assert result == [["placement", "none"]]
    inst = cl.store.get("instance", "web1")
    assert instance_constraints(inst) == Constraints()


def test_verify_reports_an_instance_on_a_node_that_breaks_its_constraints(
        cl: Cluster) -> None:
    _racks(cl)
    cl.create(member_of=["!rack1"], disk_template="diskless", disks=[])
    assert not with_code(verify_group(cl)[1], "EINSTANCEUNSUITABLENODE")
    cl.set_node("node1", aggregates=[RACK1])    # behind the instance's back
    result, found, _job = verify_group(cl)
    assert result is False
    assert with_code(found, "EINSTANCEUNSUITABLENODE") == [(
        "ERROR", "web1", "instance lives on node node1, which does not meet its placement "
        "constraints: it is in aggregate rack1, which member_of !rack1 forbids")]
    result, found, _job = verify_group(cl, ignore_errors=["EINSTANCEUNSUITABLENODE"])
    assert with_code(found, "EINSTANCEUNSUITABLENODE")[0][0] == "WARNING"


# -- moves ----------------------------------------------------------------------------------


@pytest.fixture
def mc(tmp_path: Path) -> MoveCluster:
    cluster = MoveCluster(tmp_path)
    _racks(cluster)
    return cluster


def _keep(mc: MoveCluster, name: str, **constraints: list[str]) -> None:
    with mc.store.transaction() as txn:
        inst = txn.get("instance", name)
        for key, value in constraints.items():
            setattr(inst, key, value)
        txn.update(inst)


def _processor(mc: MoveCluster, answer: Any) -> tuple[Any, Allocator, Jobs]:
    processor, ctx = make_processor(mc.store, mc.rpc)
    allocator = Allocator(answer)
    ctx.iallocators = PluginRunner(builtin=allocator)
    jobs = Jobs()
    ctx.submit_jobs = jobs
    return processor, allocator, jobs


def _drained(data: dict[str, Any]) -> list[str]:
    return sorted(name for name, node in data["nodes"].items() if node["drained"])


def _first_allowed(data: dict[str, Any]) -> dict[str, Any]:
    """Relocate as an allocator that honours drained nodes: the first other node."""
    source = data["request"]["relocate_from"]
    free = [n for n in sorted(data["nodes"]) if n not in source and not data["nodes"][n]["drained"]]
    return {"success": bool(free), "info": "no node left" if not free else "",
            "result": free[:1]}


def test_a_named_target_that_breaks_the_constraints_is_refused(mc: MoveCluster) -> None:
    mc.add_instance("a", template="sharedfile")
    mc.add_instance("f", template="file")
    _keep(mc, "a", member_of=[f"!{RACK1}"])
    _keep(mc, "f", required_traits=["CUSTOM_SSD"])
    before = snapshot(mc.store)
    for op_id in ("OP_INSTANCE_FAILOVER", "OP_INSTANCE_MIGRATE"):
        with pytest.raises(OpPrereqError, match="node node2 does not meet the placement "
                           "constraints of instance a: it is in aggregate rack1, which "
                           "member_of !rack1 forbids"):
            mc.run(op_id, instance_name="a", target_node="node2")
    with pytest.raises(OpPrereqError, match="it lacks the required trait CUSTOM_SSD"):
        mc.run("OP_INSTANCE_MOVE", instance_name="f", target_node="node2")
    assert snapshot(mc.store) == before
    mc.run("OP_INSTANCE_FAILOVER", instance_name="a", target_node="node3")
    assert mc.node_name(mc.instance("a")) == "node3"


def test_an_allocator_sees_the_nodes_that_break_the_constraints_drained(
        mc: MoveCluster) -> None:
    mc.add_instance("a", template="sharedfile")
    mc.add_instance("b", template="sharedfile")
    _keep(mc, "a", member_of=[f"!{RACK2}"])
    processor, allocator, _jobs = _processor(mc, _first_allowed)
    job = JobCtx()
    run_op(processor, {"OP_ID": "OP_INSTANCE_FAILOVER", "instance_name": "a"}, job)
    assert _drained(allocator.inputs[0]) == ["node3"]
    assert mc.node_name(mc.instance("a")) == "node2"
    _keep(mc, "a", member_of=[f"!in:{RACK1},{RACK2}"])
    run_op(processor, {"OP_ID": "OP_INSTANCE_FAILOVER", "instance_name": "a"})
    assert _drained(allocator.inputs[1]) == ["node3"]     # node2 is the source
    assert mc.node_name(mc.instance("a")) == "node1"
    # nowhere left: the allocator's failure names the constraints
    _keep(mc, "a", member_of=[RACK2], forbidden_traits=["CUSTOM_SSD"])
    with pytest.raises(OpPrereqError, match=r"no node left \(nodes node2, node3 break the "
                       r"placement constraints of instance a: member_of rack2, forbidden "
                       r"trait CUSTOM_SSD\)"):
        run_op(processor, {"OP_ID": "OP_INSTANCE_FAILOVER", "instance_name": "a"})
    assert mc.node_name(mc.instance("a")) == "node1"
    # without constraints nothing is drained
    run_op(processor, {"OP_ID": "OP_INSTANCE_FAILOVER", "instance_name": "b"})
    assert _drained(allocator.inputs[-1]) == []


def test_node_evacuation_asks_once_per_set_of_constraints(mc: MoveCluster) -> None:
    for name in ("a", "b", "c"):
        mc.add_instance(name, template="sharedfile")
    _keep(mc, "a", member_of=[f"!{RACK1}"])
    _keep(mc, "c", member_of=[f"!{RACK1}"])
    processor, allocator, jobs = _processor(mc, lambda data: {
        "success": True, "info": "", "result": [[], [], []]})
    run_op(processor, {"OP_ID": "OP_NODE_EVACUATE", "node_name": "node1",
                       "mode": "primary-only"})
    asked = [(data["request"]["instances"], _drained(data)) for data in allocator.inputs]
    assert asked == [(["a", "c"], ["node2"]), (["b"], [])]
    assert jobs.jobs == []


def test_change_group_shows_the_nodes_that_break_the_constraints_drained(
        mc: MoveCluster) -> None:
    mc.add_instance("a", template="sharedfile")
    _keep(mc, "a", forbidden_traits=["CUSTOM_SSD"])
    with mc.store.transaction() as txn:
        txn.add(NodeGroup(name="other"))
    processor, allocator, _jobs = _processor(mc, lambda data: {
        "success": False, "info": "nothing fits", "result": []})
    with pytest.raises(OpPrereqError, match=r"nothing fits \(nodes node3 break its placement "
                       r"constraints: forbidden trait CUSTOM_SSD\)"):
        run_op(processor, {"OP_ID": "OP_INSTANCE_CHANGE_GROUP", "instance_name": "a",
                           "target_groups": ["other"]})
    assert _drained(allocator.inputs[0]) == ["node3"]


def test_by_constraints_groups_in_first_seen_order(mc: MoveCluster) -> None:
    for name in ("a", "b", "c"):
        mc.add_instance(name, template="diskless")
    _keep(mc, "b", required_traits=["CUSTOM_SSD"])
    grouped = by_constraints([mc.instance(n) for n in ("a", "b", "c")])
    assert [([i.name for i in batch], bool(key)) for key, batch in grouped] == [
        (["a", "c"], False), (["b"], True)]
