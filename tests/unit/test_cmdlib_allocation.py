"""Logical units that ask an allocator, with node daemons in this process and a
scripted built-in allocator: create without a node, the default allocator list tried
in turn, dry-run, failures that name the allocator and create nothing, migration
without a target, node evacuation and migration, change-group, multi-allocation and
OP_TEST_ALLOCATOR."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from corral.errors import OpExecError, OpPrereqError, ParameterError
from corral.iallocator import PluginRunner
from corral.objects import NodeGroup
from corral.opcodes import OpCode, op_to_dict

from .config_helpers import snapshot
from .instance_change_helpers import Cluster as MoveCluster
from .instance_helpers import Cluster
from .lu_helpers import JobCtx, make_processor, run_op

Answerer = Callable[[dict[str, Any]], dict[str, Any]]


class Allocator:
    """The built-in allocator, scripted: answers what ``answer`` says and keeps every
    input it was given."""

    def __init__(self, answer: Answerer) -> None:
        self.answer = answer
        self.inputs: list[dict[str, Any]] = []

    def __call__(self, data: dict[str, Any]) -> dict[str, Any]:
        self.inputs.append(data)
        return self.answer(data)


def _ok(result: Any) -> Answerer:
    return lambda data: {"success": True, "info": "", "result": result}


class Jobs:
    """A stand-in for the job queue's submission: keeps the jobs, answers ids."""

    def __init__(self) -> None:
        self.jobs: list[list[dict[str, Any]]] = []

    async def __call__(self, jobs: Sequence[Sequence[OpCode]]) -> list[tuple[bool, int | str]]:
        start = 100 + len(self.jobs)
        self.jobs.extend([op_to_dict(op) for op in job] for job in jobs)
        return [(True, start + i) for i in range(len(jobs))]


def _set_cluster(store: Any, **changes: Any) -> None:
    with store.transaction() as txn:
        cluster = txn.cluster()
        for key, value in changes.items():
            setattr(cluster, key, value)
        txn.update(cluster)


@pytest.fixture
def cl(tmp_path: Path) -> Cluster:
    return Cluster(tmp_path)


def _use(cl: Cluster, answer: Answerer) -> Allocator:
    allocator = Allocator(answer)
    cl.ctx.iallocators = PluginRunner(builtin=allocator)
    return allocator


def test_create_without_a_node_asks_the_default_allocator(cl: Cluster) -> None:
    allocator = _use(cl, _ok(["node3"]))
    job = JobCtx()
    assert cl.create(pnode=None, job=job) == ["node3"]
    assert cl.store.get("node", cl.store.get("instance", "web1").primary_node).name == "node3"
    assert " - INFO: Selected nodes for instance web1 via iallocator corral: node3" in job.log
    (data,) = allocator.inputs
    request = data["request"]
    assert (request["type"], request["name"], request["disk_template"]) == (
        "allocate", "web1", "file")
    assert request["disks"] == [{"size": 1024, "mode": "rw", "vg": None, "name": None,
                                 "dev_type": "file"}]
    assert request["nics"][0]["mac"] == "auto"
    assert sorted(data["nodes"]) == ["node1", "node2", "node3", "node4"]
    assert data["nodes"]["node3"]["total_memory"] > 0


def test_the_default_allocators_are_tried_in_turn(cl: Cluster) -> None:
    _set_cluster(cl.store, default_iallocators=["nosuch", "corral"])
    _use(cl, _ok(["node2"]))
    job = JobCtx()
    assert cl.create(pnode=None, job=job) == ["node2"]
    assert any("iallocator 'nosuch' gave no solution: Failure while running the iallocator "
               "script: iallocator module 'nosuch' not found" in line and "trying 'corral'"
               in line for line in job.log)


def test_no_solution_names_every_allocator_and_creates_nothing(cl: Cluster) -> None:
    _set_cluster(cl.store, default_iallocators=["corral", "nosuch"])
    _use(cl, lambda data: {"success": False, "info": "Request failed: FailMem: 4",
                           "result": []})
    before = snapshot(cl.store)
    with pytest.raises(OpPrereqError) as err:
        cl.create(pnode=None)
    lines = err.value.message.splitlines()
    assert lines[0] == "Can't compute nodes using iallocator 'corral': Request failed: FailMem: 4"
    assert "iallocator module 'nosuch' not found" in lines[1]
    assert err.value.ecode == "insufficient_resources"
    assert snapshot(cl.store) == before
    assert "blockdev_create" not in cl.rpc.procedures()


def test_a_single_named_allocator_fails_in_ganetis_words(cl: Cluster) -> None:
    _use(cl, _ok(["node1", "node2"]))
    with pytest.raises(OpExecError, match=r"^iallocator returned invalid number of nodes "
                                          r"\(2\), required 1\n") as err:
        cl.create(pnode=None, iallocator="corral")
    assert err.value.message.splitlines()[1] == (
        """iallocator 'corral' answered: '{"success":true,"info":"","result":"""
        """["node1","node2"]}'""")
    _set_cluster(cl.store, default_iallocators=[])
    with pytest.raises(ParameterError, match=r"^No iallocator or node given and no cluster-wide "
                                             r"default iallocator found"):
        cl.create(pnode=None)


def test_dry_run_answers_the_node_and_creates_nothing(cl: Cluster) -> None:
    _use(cl, _ok(["node4"]))
    before = snapshot(cl.store)
    assert cl.create(pnode=None, dry_run=True) == ["node4"]
    assert snapshot(cl.store) == before
    assert "blockdev_create" not in cl.rpc.procedures()


def test_the_chosen_nodes_group_policy_applies(cl: Cluster) -> None:
    _use(cl, _ok(["node2"]))
    with cl.store.transaction() as txn:
        group = txn.get("nodegroup", "default")
        group.ipolicy = {"disk-templates": ["diskless"]}
        txn.update(group)
    with pytest.raises(OpPrereqError, match=r"violates policy: Disk template file is not "
                                            r"allowed \(allowed templates: diskless\)"):
        cl.create(pnode=None)
    assert cl.create(pnode=None, ignore_ipolicy=True) == ["node2"]


# -- moving instances -------------------------------------------------------------


@pytest.fixture
def mc(tmp_path: Path) -> MoveCluster:
    return MoveCluster(tmp_path)


def _processor(mc: MoveCluster, answer: Answerer) -> tuple[Any, Allocator, Jobs]:
    processor, ctx = make_processor(mc.store, mc.rpc)
    allocator = Allocator(answer)
    ctx.iallocators = PluginRunner(builtin=allocator)
    jobs = Jobs()
    ctx.submit_jobs = jobs
    return processor, allocator, jobs


def test_migrate_without_a_target_relocates(mc: MoveCluster) -> None:
    mc.add_instance("shared", template="sharedfile", up=True)
    processor, allocator, _jobs = _processor(mc, _ok(["node3"]))
    job = JobCtx()
    run_op(processor, {"OP_ID": "OP_INSTANCE_MIGRATE", "instance_name": "shared"}, job)
    assert mc.store.get("node", mc.instance("shared").primary_node).name == "node3"
    (data,) = allocator.inputs
    assert data["request"] == {"name": "shared", "disk_space_total": 1024, "required_nodes": 1,
                               "relocate_from": ["node1"], "type": "relocate"}
    assert " - INFO: Selected nodes for instance shared via iallocator corral: node3" in job.log


def test_failover_refuses_an_allocators_odd_choice(mc: MoveCluster) -> None:
    mc.add_instance("shared", template="sharedfile")
    processor, _allocator, _jobs = _processor(mc, _ok(["node1"]))
    with pytest.raises(OpPrereqError, match="already its primary node"):
        run_op(processor, {"OP_ID": "OP_INSTANCE_FAILOVER", "instance_name": "shared"})
    assert mc.store.get("node", mc.instance("shared").primary_node).name == "node1"


def test_node_evacuate_submits_the_allocators_jobs(mc: MoveCluster) -> None:
    mc.add_instance("a", template="sharedfile", up=True)
    mc.add_instance("b", template="diskless")
    migrate = {"OP_ID": "OP_INSTANCE_MIGRATE", "instance_name": "a", "target_node": "node2",
               "allow_failover": True}
    failover = {"OP_ID": "OP_INSTANCE_FAILOVER", "instance_name": "b", "target_node": "node3"}
    processor, allocator, jobs = _processor(mc, _ok(
        [[["a", "default", ["node2"]], ["b", "default", ["node3"]]], [],
         [[migrate], [failover]]]))
    job = JobCtx(priority=3)
    result = run_op(processor, {"OP_ID": "OP_NODE_EVACUATE", "node_name": "node1",
                                "mode": "all", "reason": [["user", "maintenance", 1]],
                                "priority": 3}, job)
    assert result == {"jobs": [[True, 100], [True, 101]]}
    assert allocator.inputs[0]["request"] == {"instances": ["a", "b"],
                                              "evac_mode": "primary-only",
                                              "type": "node-evacuate"}
    assert " - INFO: Evacuating instances from node 'node1': a, b" in job.log
    assert " - INFO: Instances to be moved: a (to node2), b (to node3)" in job.log
    (first,), (second,) = jobs.jobs
    assert (first["OP_ID"], first["instance_name"], first["target_node"]) == (
        "OP_INSTANCE_MIGRATE", "a", "node2")
    assert first["comment"] == "Submitted by OP_NODE_EVACUATE" and first["priority"] == 3
    assert list(first["reason"][-1][:2]) == ["user", "maintenance"]
    assert second["OP_ID"] == "OP_INSTANCE_FAILOVER"
    # nothing moved yet: the jobs do that
    assert mc.store.get("node", mc.instance("a").primary_node).name == "node1"


def test_node_evacuate_failures_and_dry_run(mc: MoveCluster) -> None:
    mc.add_instance("a", template="sharedfile")
    processor, _allocator, jobs = _processor(mc, _ok([[], [["a", "no room"]], []]))
    with pytest.raises(OpExecError, match=r"^Unable to evacuate instances a \(no room\)$"):
        run_op(processor, {"OP_ID": "OP_NODE_EVACUATE", "node_name": "node1",
                           "mode": "primary-only"})
    processor, _allocator, jobs = _processor(mc, _ok([[["a", "default", ["node2"]]], [], [[
        {"OP_ID": "OP_INSTANCE_FAILOVER", "instance_name": "a", "target_node": "node2"}]]]))
    result = run_op(processor, {"OP_ID": "OP_NODE_EVACUATE", "node_name": "node1",
                                "mode": "primary-only", "dry_run": True})
    assert result == {"jobs": [], "moved": [["a", "default", ["node2"]]], "failed": []}
    assert jobs.jobs == []
    processor, _allocator, jobs = _processor(mc, _ok([[], [], [[{"OP_ID": "OP_INSTANCE_MIGRATE",
                                                                  "bogus": 1}]]]))
    with pytest.raises(OpExecError, match="returned a job corral cannot run"):
        run_op(processor, {"OP_ID": "OP_NODE_EVACUATE", "node_name": "node1",
                           "mode": "primary-only"})


def test_node_migrate_makes_a_job_per_primary_instance(mc: MoveCluster) -> None:
    mc.add_instance("a", template="sharedfile", up=True)
    mc.add_instance("b", template="sharedfile", node="node2", up=True)
    processor, _allocator, jobs = _processor(mc, _ok([]))
    result = run_op(processor, {"OP_ID": "OP_NODE_MIGRATE", "node_name": "node1",
                                "iallocator": "corral", "mode": "non-live"})
    assert result == {"jobs": [[True, 100]]}
    ((op,),) = jobs.jobs
    assert (op["OP_ID"], op["instance_name"], op["iallocator"], op["mode"]) == (
        "OP_INSTANCE_MIGRATE", "a", "corral", "non-live")


def test_change_group(mc: MoveCluster) -> None:
    mc.add_instance("a", template="sharedfile")
    with mc.store.transaction() as txn:
        txn.add(NodeGroup(name="rack2"))
    rack2 = mc.store.get("nodegroup", "rack2")
    processor, allocator, jobs = _processor(mc, _ok([[["a", "rack2", ["node9"]]], [], [[
        {"OP_ID": "OP_INSTANCE_FAILOVER", "instance_name": "a", "target_node": "node3"}]]]))
    job = JobCtx()
    result = run_op(processor, {"OP_ID": "OP_INSTANCE_CHANGE_GROUP", "instance_name": "a",
                                "target_groups": ["rack2"]}, job)
    assert result == {"jobs": [[True, 100]]}
    assert allocator.inputs[0]["request"] == {"instances": ["a"], "target_groups": [rack2.uuid],
                                              "type": "change-group"}
    assert " - INFO: Instances to be moved: a (to rack2)" in job.log
    assert " - INFO: Iallocator returned 1 job(s) for changing group of instance 'a'" in job.log
    assert [[op["OP_ID"] for op in ops] for ops in jobs.jobs] == [["OP_INSTANCE_FAILOVER"]]
    with pytest.raises(OpPrereqError, match="they are used by the instance 'a'"):
        run_op(processor, {"OP_ID": "OP_INSTANCE_CHANGE_GROUP", "instance_name": "a",
                           "target_groups": ["default"]})


def test_multi_alloc(mc: MoveCluster) -> None:
    base = {"disk_template": "sharedfile", "disks": [{"size": 1024}], "nics": [],
            "os_type": "debian"}
    processor, allocator, jobs = _processor(mc, _ok([[["m1", ["node2"]]], ["m2"]]))
    result = run_op(processor, {"OP_ID": "OP_INSTANCE_MULTI_ALLOC", "instances": [
        {**base, "instance_name": "m1"}, {**base, "instance_name": "m2"}]})
    assert result == {"allocatable": ["m1"], "failed": ["m2"], "jobs": [[True, 100]]}
    request = allocator.inputs[0]["request"]
    assert request["type"] == "multi-allocate"
    assert [i["name"] for i in request["instances"]] == ["m1", "m2"]
    ((op,),) = jobs.jobs
    assert (op["OP_ID"], op["instance_name"], op["pnode"]) == ("OP_INSTANCE_CREATE", "m1",
                                                               "node2")
    dry = run_op(processor, {"OP_ID": "OP_INSTANCE_MULTI_ALLOC", "dry_run": True,
                             "instances": [{**base, "instance_name": "m1"}]})
    assert dry["jobs"] == [] and dry["nodes"] == {"m1": ["node2"]}
    with pytest.raises(ParameterError, match="There are duplicate instance names: m1"):
        run_op(processor, {"OP_ID": "OP_INSTANCE_MULTI_ALLOC", "instances": [
            {**base, "instance_name": "m1"}, {**base, "instance_name": "m1"}]})
    with pytest.raises(ParameterError, match="providing pnode/snode while others do not"):
        run_op(processor, {"OP_ID": "OP_INSTANCE_MULTI_ALLOC", "instances": [
            {**base, "instance_name": "m1", "pnode": "node1"}, {**base, "instance_name": "m2"}]})


def test_test_allocator(mc: MoveCluster) -> None:
    mc.add_instance("a", template="sharedfile")
    processor, allocator, _jobs = _processor(mc, _ok(["node2"]))
    text = run_op(processor, {"OP_ID": "OP_TEST_ALLOCATOR", "direction": "in",
                              "mode": "allocate", "name": "new1", "memory": 256, "vcpus": 1,
                              "disks": [{"size": 1024, "mode": "rw"}], "disk_template": "file",
                              "nics": [{"mac": "00:11:22:33:44:55", "ip": None,
                                        "bridge": None}], "os": "debian"})
    data = json.loads(text)
    assert data["request"]["name"] == "new1" and data["request"]["memory"] == 256
    assert data["request"]["hypervisor"] == "fake"
    out = run_op(processor, {"OP_ID": "OP_TEST_ALLOCATOR", "direction": "out",
                             "mode": "relocate", "name": "a", "iallocator": "corral"})
    assert json.loads(out)["result"] == ["node2"]
    assert allocator.inputs[-1]["request"]["relocate_from"] == ["node1"]
    with pytest.raises(ParameterError, match="Missing allocator name"):
        run_op(processor, {"OP_ID": "OP_TEST_ALLOCATOR", "direction": "out",
                           "mode": "relocate", "name": "a"})
    with pytest.raises(ParameterError, match="Invalid contents of the 'disks' parameter"):
        run_op(processor, {"OP_ID": "OP_TEST_ALLOCATOR", "direction": "in",
                           "mode": "allocate", "name": "new1", "disks": [{"size": "x"}]})


def test_the_event_loop_is_not_blocked_by_the_allocator() -> None:
    """A slow built-in allocator runs in a worker thread: the loop keeps turning."""
    import time

    def slow(data: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.3)
        return {"success": True, "info": "", "result": []}

    async def main() -> int:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.ensure_future(tick())
        await PluginRunner(builtin=slow).run("corral", {}, search_path=[], params={},
                                             timeout=5)
        ticker.cancel()
        return ticks

    assert asyncio.run(main()) > 5


# -- placement constraints ------------------------------------------------------------


def test_constraints_restrict_the_allocator_to_the_nodes_placement_allows(cl: Cluster) -> None:
    """node1 in rack1, node2 in rack2, node4 with CUSTOM_SSD: the allocator is asked
    with Ganeti's restrict-to-nodes holding the nodes the engine allows."""
    rack1 = "11111111-1111-4111-8111-111111111111"
    rack2 = "22222222-2222-4222-8222-222222222222"
    cl.set_cluster(aggregates={"rack1": rack1, "rack2": rack2})
    cl.set_node("node1", aggregates=[rack1])
    cl.set_node("node2", aggregates=[rack2])
    cl.set_node("node4", traits=["CUSTOM_SSD"])
    allocator = _use(cl, lambda data: {"success": True, "info": "",
                                       "result": data["request"]["restrict-to-nodes"][:1]})
    assert cl.create(pnode=None, member_of=["!in:rack1,rack2"]) == ["node3"]
    assert allocator.inputs[-1]["request"]["restrict-to-nodes"] == ["node3", "node4"]
    assert cl.create("web2", pnode=None, member_of=["!rack1"], required_traits=["CUSTOM_SSD"],
                     dry_run=True) == ["node4"]
    assert cl.create("web2", pnode=None, member_of=[rack2], dry_run=True) == ["node2"]
    before = snapshot(cl.store)
    with pytest.raises(OpPrereqError, match=r"no node meets the placement constraints of "
                       r"instance web2 \(member_of rack1, member_of in:rack1,group default, "
                       r"required trait CUSTOM_SSD\)"):
        cl.create("web2", pnode=None, member_of=["rack1", "in:rack1,default"],
                  required_traits=["CUSTOM_SSD"])
    with pytest.raises(OpPrereqError, match="node node1 does not meet the placement "
                       "constraints of instance web2: it is in aggregate rack1, which "
                       r"member_of !in:rack1,rack2 forbids"):
        cl.create("web2", member_of=["!in:rack1,rack2"])
    with pytest.raises(ParameterError, match="unknown aggregate 'rack9'"):
        cl.create("web2", pnode=None, member_of=["rack9"])
    with pytest.raises(ParameterError, match="both required and forbidden"):
        cl.create("web2", pnode=None, required_traits=["CUSTOM_SSD"],
                  forbidden_traits=["CUSTOM_SSD"])
    assert snapshot(cl.store) == before


def test_multi_alloc_with_an_allocator_refuses_constraints(mc: MoveCluster) -> None:
    processor, _allocator, _jobs = _processor(mc, _ok([[], []]))
    with pytest.raises(ParameterError, match=r"placement constraints .* are not supported "
                       r"when an allocator places several instances at once \(m1\)"):
        run_op(processor, {"OP_ID": "OP_INSTANCE_MULTI_ALLOC", "instances": [
            {"disk_template": "diskless", "disks": [], "nics": [], "os_type": "debian",
             "instance_name": "m1", "member_of": ["default"]}]})
