"""The storage logical units over in-process nodes (file disks, the fake hypervisor):
storage units, verify-disks, disk status, recreate, replace and repair.

What file disks cannot show here (an inactive or faulty disk) a node's answer is
scripted for, and the test says so; LVM itself is tested on loop devices in
tests/system/test_storage_*.py.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from corral.errors import NotFoundError, OpExecError, OpPrereqError, ParameterError
from corral.noded import procedures
from corral.opcodes import OpCode
from tests.unit.instance_helpers import Cluster, open_cluster
from tests.unit.lu_helpers import JobCtx

STORAGE = "/srv/corral/file-storage"


@pytest.fixture
def cl(tmp_path: Path) -> Iterator[Cluster]:
    yield from open_cluster(tmp_path)


def disk_path(cl: Cluster, name: str, node: str = "node1", index: int = 0) -> Path:
    inst = cl.store.get("instance", name)
    disk = cl.store.get("disk", inst.disks[index])
    return cl.rpc.nodes.paths(node).node_path(disk.logical_id[1])


def make(cl: Cluster, name: str, node: str = "node1", **params: Any) -> None:
    """A file instance (one 8 MiB disk, no OS, stopped unless ``params`` say)."""
    cl.create(name, pnode=node, **{"disks": [{"size": 8}], "no_install": True,
                                   "start": False, **params})


def script_find(cl: Cluster, node: str, **status: Any) -> None:
    """``node`` reports each disk with ``status`` changed (what file disks cannot be:
    inactive, faulty); other nodes answer for real."""
    paths = cl.rpc.nodes.paths

    async def find(name: str, args: Mapping[str, Any]) -> Any:
        answer = await procedures.dispatch(paths(name), "blockdev_find", args)
        if name == node:
            answer = [None if entry is None else {**entry, **status} for entry in answer]
        return answer

    cl.rpc.nodes.overrides["blockdev_find"] = find


# -- storage units ---------------------------------------------------------------------


def test_list_storage_rows_by_node_and_unit(cl: Cluster) -> None:
    rows = cl.run("OP_NODE_QUERY_STORAGE", storage_type="file",
                  output_fields=["node", "type", "name", "allocatable"])
    assert rows == [[f"node{n}", "file", STORAGE, True] for n in (1, 2, 3, 4)]
    only = cl.run("OP_NODE_QUERY_STORAGE", output_fields=["name", "node"], nodes=["node3"])
    assert only == [[STORAGE, "node3"]]  # the type of the first enabled template: file


def test_a_node_that_fails_is_a_warning(cl: Cluster) -> None:
    cl.rpc.nodes.down.add("node2")
    job = JobCtx()
    rows = cl.run("OP_NODE_QUERY_STORAGE", job, storage_type="file", output_fields=["node"])
    assert rows == [["node1"], ["node3"], ["node4"]]
    assert any("Can't get storage data from node node2" in line for line in job.log)


@pytest.mark.parametrize(("op", "params", "error", "message"), [
    ("OP_NODE_QUERY_STORAGE", {"storage_type": "lvm-pv", "output_fields": ["name"]},
     OpPrereqError, "No disk template of storage type 'lvm-vg' is enabled"),
    ("OP_NODE_QUERY_STORAGE", {"storage_type": "file", "output_fields": ["name", "x"]},
     ParameterError, "Unknown output fields selected: x"),
    ("OP_NODE_QUERY_STORAGE", {"storage_type": "file", "output_fields": ["name"],
                               "nodes": ["node9"]}, NotFoundError, "Node 'node9' not known"),
    ("OP_NODE_MODIFY_STORAGE", {"node_name": "node1", "storage_type": "lvm-pv",
                                "name": "/dev/sdb", "changes": {"size": 1}},
     ParameterError, "can not be modified for storage units of type 'lvm-pv': \\['size'\\]"),
    ("OP_NODE_MODIFY_STORAGE", {"node_name": "node1", "storage_type": "file",
                                "name": STORAGE, "changes": {}},
     ParameterError, "Storage units of type 'file' can not be modified"),
    ("OP_REPAIR_NODE_STORAGE", {"node_name": "node1", "storage_type": "lvm-pv",
                                "name": "/dev/sdb"},
     ParameterError, "Storage units of type 'lvm-pv' can not be repaired"),
    ("OP_REPAIR_NODE_STORAGE", {"node_name": "node1", "storage_type": "lvm-vg",
                                "name": "xenvg"},
     OpPrereqError, "No disk template of storage type 'lvm-vg' is enabled"),
    ("OP_NODE_QUERYVOLS", {"output_fields": ["name", "colour"]},
     ParameterError, "Unknown output fields selected: colour"),
])
def test_storage_refusals(cl: Cluster, op: str, params: dict[str, Any],
                          error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        cl.run(op, **params)


def test_repair_storage_checks_the_other_copies(cl: Cluster) -> None:
    cl.set_cluster(enabled_disk_templates=["file", "plain"], volume_group_name="xenvg")
    make(cl, "web1", start=True, no_install=False)
    # Give the disk a second home, as a mirrored disk has, whose copy is faulty (file
    # disks never are: the node's answer is scripted).
    with cl.store.transaction() as txn:
        disk = txn.get("disk", cl.store.get("instance", "web1").disks[0])
        disk.nodes = [disk.nodes[0], cl.store.get("node", "node2").uuid]
        txn.update(disk)
    repaired: list[tuple[str, Any]] = []
    cl.rpc.nodes.overrides["storage_execute"] = lambda name, args: repaired.append(
        (name, dict(args)))
    base = {"node_name": "node1", "storage_type": "lvm-vg", "name": "xenvg"}
    # The copy on node2 is missing, then there but faulty: no copy to rely on either way.
    with pytest.raises(OpPrereqError, match="Instance 'web1' has faulty disks on node "
                                            "'node2'"):
        cl.run("OP_REPAIR_NODE_STORAGE", **base)
    copy = disk_path(cl, "web1", node="node2")
    copy.parent.mkdir(parents=True)
    copy.write_bytes(b"")
    script_find(cl, "node2", ldisk_status="faulty", is_degraded=True)
    with pytest.raises(OpPrereqError, match="Instance 'web1' has faulty disks on node "
                                            "'node2'"):
        cl.run("OP_REPAIR_NODE_STORAGE", **base)
    assert repaired == []
    job = JobCtx()
    cl.run("OP_REPAIR_NODE_STORAGE", job, ignore_consistency=True, **base)
    assert repaired == [("node1", {"su_type": "lvm-vg", "su_args": [], "name": "xenvg",
                                   "operation": "fix-consistency"})]
    assert "Repairing storage unit 'xenvg' on node1 ..." in job.log
    assert any("WARNING: Instance 'web1' has faulty disks" in line for line in job.log)


# -- verify-disks -----------------------------------------------------------------------


def test_group_verify_disks_reports_lost_and_inactive_disks(cl: Cluster) -> None:
    for name in ("web1", "web2", "web3"):
        make(cl, name, node="node1" if name != "web3" else "node2", no_install=False,
             start=name != "web3")
    group = cl.store.all("nodegroup")[0].name
    assert cl.run("OP_GROUP_VERIFY_DISKS", group_name=group) == [{}, [], {}]
    lost = disk_path(cl, "web2")
    lost.unlink()
    cluster_path = cl.store.get("disk", cl.store.get("instance", "web2").disks[0]).logical_id[1]
    assert cl.run("OP_GROUP_VERIFY_DISKS", group_name=group) == [
        {}, [], {"web2": [["node1", cluster_path]]}]
    # web3 is stopped: its disks need not be active, so it is not looked at.
    disk_path(cl, "web3", "node2").unlink()
    script_find(cl, "node1", active=False)  # file disks are always active: scripted
    assert cl.run("OP_GROUP_VERIFY_DISKS", group_name=group) == [
        {}, ["web1"], {"web2": [["node1", cluster_path]]}]
    cl.rpc.nodes.down.add("node1")
    errors, to_activate, missing = cl.run("OP_GROUP_VERIFY_DISKS", group_name=group)
    assert list(errors) == ["node1"] and to_activate == [] and missing == {}


def test_cluster_verify_disks_submits_one_job_per_group(cl: Cluster) -> None:
    submitted: list[Sequence[Sequence[OpCode]]] = []

    async def submit(jobs: Sequence[Sequence[OpCode]]) -> list[tuple[bool, int | str]]:
        submitted.append(jobs)
        return [(True, 100 + n) for n in range(len(jobs))]

    cl.ctx.submit_jobs = submit
    assert cl.run("OP_CLUSTER_VERIFY_DISKS") == {"jobs": []}  # no instances: no jobs
    make(cl, "web1")
    cl.run("OP_GROUP_ADD", group_name="other")
    assert cl.run("OP_CLUSTER_VERIFY_DISKS") == {"jobs": [[True, 100], [True, 101]]}
    assert [[op.OP_ID for op in job] for job in submitted[0]] == [
        ["OP_GROUP_VERIFY_DISKS"], ["OP_GROUP_VERIFY_DISKS"]]
    assert sorted(job[0].group_name for job in submitted[0]) == ["default", "other"]
    assert cl.run("OP_CLUSTER_VERIFY_DISKS", group_name="other") == {"jobs": [[True, 100]]}


# -- an instance's disks -----------------------------------------------------------------


def test_disk_status_and_query_data(cl: Cluster) -> None:
    make(cl, "web1", disks=[{"size": 8}, {"size": 4}])
    status = cl.run("OP_INSTANCE_DISK_STATUS", instance_name="web1")
    assert [(e["index"], e["node"], e["status"]) for e in status] == [
        (0, "node1", "ok"), (1, "node1", "ok")]
    disk_path(cl, "web1", index=1).unlink()
    assert [e["status"] for e in cl.run("OP_INSTANCE_DISK_STATUS",
                                        instance_name="web1")] == ["ok", "missing"]
    data = cl.run("OP_INSTANCE_QUERY_DATA", instances=["web1"])["web1"]
    first, second = data["disks"]
    assert first["pstatus"] == [str(disk_path(cl, "web1")), None, None, None, None, False, 1]
    assert second["pstatus"] is None
    static = cl.run("OP_INSTANCE_QUERY_DATA", instances=["web1"], static=True)["web1"]
    assert static["disks"][0]["pstatus"] is None


@pytest.mark.parametrize(("params", "error", "message"), [
    ({"disks": [0, 0]}, ParameterError, "specified more than once: 0"),
    ({"disks": [3]}, ParameterError, "Invalid disk index '3'"),
    ({"disks": [[0, {"vg": "x"}]]}, ParameterError, "unmodifyable parameter\\(s\\): vg"),
    ({"disks": [0], "nodes": ["node2"]}, ParameterError,
     "Can't recreate disks partially and change the nodes at the same time"),
    ({"nodes": ["node2", "node3"]}, ParameterError,
     "currently has 1 nodes, but 2 replacement nodes were specified"),
    ({"iallocator": "hail"}, ParameterError, "name the node with nodes"),
])
def test_recreate_disks_refusals(cl: Cluster, params: dict[str, Any], error: type[Exception],
                                 message: str) -> None:
    make(cl, "web1", disks=[{"size": 8}, {"size": 4}])
    with pytest.raises(error, match=message):
        cl.run("OP_INSTANCE_RECREATE_DISKS", instance_name="web1", **params)


def test_recreate_disks_makes_only_lost_disks(cl: Cluster) -> None:
    make(cl, "web1", disks=[{"size": 8}, {"size": 4}])
    disk_path(cl, "web1", index=1).unlink()
    with pytest.raises(OpPrereqError, match="disk/0 of instance web1 exists on node node1"):
        cl.run("OP_INSTANCE_RECREATE_DISKS", instance_name="web1")
    cl.run("OP_INSTANCE_RECREATE_DISKS", instance_name="web1", disks=[[1, {"size": "6M"}]])
    assert disk_path(cl, "web1", index=1).stat().st_size == 6 * 1024 * 1024
    assert cl.store.get("disk", cl.store.get("instance", "web1").disks[1]).size == 6


def test_recreate_disks_on_a_new_node_after_the_old_one_failed(cl: Cluster) -> None:
    make(cl, "web1", start=True, no_install=False)
    cl.set_node("node1", offline=True)
    job = JobCtx()
    cl.run("OP_INSTANCE_RECREATE_DISKS", job, instance_name="web1", nodes=["node3"])
    inst = cl.store.get("instance", "web1")
    node3 = cl.store.get("node", "node3")
    assert inst.primary_node == node3.uuid
    assert cl.store.get("disk", inst.disks[0]).nodes == [node3.uuid]
    assert disk_path(cl, "web1", node="node3").exists()
    assert any("Changing the instance's nodes" in line for line in job.log)


def test_replace_disks_without_a_mirror(cl: Cluster) -> None:
    make(cl, "web1")
    with pytest.raises(OpPrereqError, match="strange layout, expected one secondary but "
                                            "found 0") as err:
        cl.run("OP_INSTANCE_REPLACE_DISKS", instance_name="web1", mode="replace_on_primary")
    assert err.value.ecode == "internal_error"
    with pytest.raises(ParameterError, match="either an iallocator script must be used"):
        cl.run("OP_INSTANCE_REPLACE_DISKS", instance_name="web1",
               mode="replace_new_secondary")
    with pytest.raises(ParameterError, match="only be used when changing the secondary"):
        cl.run("OP_INSTANCE_REPLACE_DISKS", instance_name="web1", mode="replace_auto",
               remote_node="node2")


def test_repair_disks_activates_what_is_there_and_refuses_what_is_lost(cl: Cluster) -> None:
    make(cl, "web1", disks=[{"size": 8}, {"size": 4}])
    job = JobCtx()
    assert cl.run("OP_INSTANCE_REPAIR_DISKS", job, instance_name="web1") == []
    assert "The disks of instance web1 need no repair" in job.log
    script_find(cl, "node1", active=False)  # file disks are always active: scripted
    before = len([c for c in cl.rpc.nodes.calls if c.procedure == "blockdev_assemble"])
    assert cl.run("OP_INSTANCE_REPAIR_DISKS", instance_name="web1") == [
        [0, "node1", "activated"], [1, "node1", "activated"]]
    assert len([c for c in cl.rpc.nodes.calls
                if c.procedure == "blockdev_assemble"]) == before + 1
    del cl.rpc.nodes.overrides["blockdev_find"]
    disk_path(cl, "web1", index=1).unlink()
    with pytest.raises(OpExecError, match=r"disk/1 on node node1 is missing and disk "
                                          r"template file keeps no other copy of it: its "
                                          r"data is lost; 'gnt-instance recreate-disks "
                                          r"--disk=1 web1' makes it again, empty"):
        cl.run("OP_INSTANCE_REPAIR_DISKS", instance_name="web1")


def test_node_volumes_on_nodes_without_volumes(cl: Cluster) -> None:
    cl.rpc.nodes.overrides["node_volumes"] = lambda name, args: (
        [{"name": "x.disk0", "size": "8.00", "dev": "/dev/sdb", "vg": "xenvg"}]
        if name == "node2" else [])  # no LVM in a unit test: scripted
    rows = cl.run("OP_NODE_QUERYVOLS", output_fields=["node", "phys", "vg", "name", "size",
                                                      "instance"])
    assert rows == [["node2", "/dev/sdb", "xenvg", "x.disk0", "8", "-"]]


def test_wait_for_sync_reports_in_sync(cl: Cluster) -> None:
    make(cl, "web1")
    job = JobCtx()
    result = cl.run("OP_INSTANCE_ACTIVATE_DISKS", job, instance_name="web1",
                    wait_for_sync=True)
    assert result == [["node1", "disk/0", str(disk_path(cl, "web1"))]]
    assert job.log[-2:] == [" - INFO: Waiting for instance web1 to sync disks",
                            " - INFO: Instance web1's disks are in sync"]

