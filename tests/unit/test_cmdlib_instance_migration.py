"""Moving instances between nodes: migrate (live and non-live, fake and kvm with local
disks), failover and move.

The node daemons run in this process (:class:`Cluster`); kvm's node procedures are
scripted here, the kvm hypervisor itself runs in the system tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from corral.cmdlib.instance_migration import progress_line
from corral.errors import (
    HypervisorError,
    NodeUnreachableError,
    NotFoundError,
    OpExecError,
    OpPrereqError,
    ParameterError,
)
from corral.objects import Node

from .config_helpers import snapshot
from .instance_change_helpers import FILE_DIR, REASON, Cluster
from .lu_helpers import JobCtx, make_processor, run_op


@pytest.fixture
def cl(tmp_path: Path) -> Cluster:
    return Cluster(tmp_path)


# -- migrate / failover -----------------------------------------------------------------------


def test_migrate_needs_a_target_and_shared_disks(cl: Cluster) -> None:
    cl.add_instance("files", up=True)
    cl.add_instance("shared", template="sharedfile", up=True)
    with cl.store.transaction() as txn:
        cluster = txn.cluster()
        cluster.default_iallocators = []
        txn.update(cluster)
    with pytest.raises(ParameterError, match="No iallocator or node given and no cluster-wide"):
        cl.run("OP_INSTANCE_MIGRATE", instance_name="shared")
    with pytest.raises(ParameterError, match="Do not specify both, iallocator and node"):
        cl.run("OP_INSTANCE_MIGRATE", instance_name="shared", iallocator="hail",
               target_node="node2")
    with pytest.raises(OpPrereqError, match="gnt-instance move"):
        cl.run("OP_INSTANCE_MIGRATE", instance_name="files", target_node="node2")
    with pytest.raises(OpPrereqError, match="already its primary"):
        cl.run("OP_INSTANCE_MIGRATE", instance_name="shared", target_node="node1")
    with pytest.raises(OpPrereqError, match="gnt-instance move"):
        cl.run("OP_INSTANCE_FAILOVER", instance_name="files", target_node="node2")


def test_instance_value_of_a_global_hv_parameter_is_never_used(cl: Cluster) -> None:
    """Only the cluster sets a global hypervisor parameter (design 2.1): an instance
    value, which only an older store can hold, changes neither the migration nor the
    parameters the nodes get."""
    inst = cl.add_instance("shared", template="sharedfile", up=True)
    with cl.store.transaction() as txn:
        record = txn.get("instance", inst.uuid)
        record.hvparams = {"migration_mode": "non-live"}
        txn.update(record)
    assert cl.store.cluster.hvparams["fake"]["migration_mode"] == "live"
    cl.run("OP_INSTANCE_MIGRATE", instance_name="shared", target_node="node2")
    send = cl.calls("migration_send")[0][1]
    assert send["live"] is True
    assert send["instance"]["hvparams"]["migration_mode"] == "live"


def test_migrate_running_instance(cl: Cluster) -> None:
    cl.add_instance("shared", template="sharedfile", up=True)
    cl.run("OP_INSTANCE_MIGRATE", instance_name="shared", target_node="node2",
           mode="non-live")
    steps = [(c.node, c.procedure) for c in cl.rpc.calls
             if c.procedure.startswith("migration_")]
    assert steps == [("node1", "migration_info"), ("node2", "migration_accept"),
                     ("node1", "migration_send"),
                     ("node2", "migration_finish"), ("node1", "migration_finish_source")]
    send = cl.calls("migration_send")[0][1]
    assert send["target_ip"] == "192.0.2.2" and send["live"] is False
    inst = cl.instance("shared")
    # A live migration keeps the instance running: no status change to record.
    assert cl.node_name(inst) == "node2" and inst.last_reason == []
    assert cl.store.get("disk", inst.disks[0]).nodes == [inst.primary_node]


def test_failed_migration_leaves_instance_on_source(cl: Cluster) -> None:
    cl.add_instance("shared", template="sharedfile", up=True)
    before = snapshot(cl.store)
    cl.fail["migration_send"] = HypervisorError("connection reset")
    with pytest.raises(OpExecError, match=r"connection reset.*stays on node node1"):
        cl.run("OP_INSTANCE_MIGRATE", instance_name="shared", target_node="node2")
    assert snapshot(cl.store) == before
    [(node, args)] = cl.calls("migration_finish")
    assert node == "node2" and args["success"] is False
    [(node, args)] = cl.calls("migration_finish_source")
    assert node == "node1" and args["success"] is False


def test_migrating_a_stopped_instance(cl: Cluster) -> None:
    cl.add_instance("shared", template="diskless")
    with pytest.raises(OpPrereqError, match=r"not running.*allow_failover"):
        cl.run("OP_INSTANCE_MIGRATE", instance_name="shared", target_node="node2")
    cl.run("OP_INSTANCE_MIGRATE", instance_name="shared", target_node="node2",
           allow_failover=True)
    assert cl.node_name(cl.instance("shared")) == "node2"
    assert not cl.calls("migration_accept") and cl.calls("instance_shutdown")
    assert not cl.calls("instance_start")


def _kvm_instance(cl: Cluster, name: str, template: str = "file") -> dict[str, list[Any]]:
    """A running kvm instance on node1 whose node procedures are scripted: the kvm
    hypervisor itself runs in the system tests. Returns the calls made, by procedure."""
    cl.add_instance(name, template=template)
    with cl.store.transaction() as txn:
        cluster = txn.cluster()
        cluster.enabled_hypervisors = ["fake", "kvm"]
        txn.update(cluster)
        record = txn.get("instance", cl.instance(name).uuid)
        record.hypervisor, record.admin_state = "kvm", "up"
        txn.update(record)
    seen: dict[str, list[Any]] = {}
    where = {"node": "node1"}

    def script(proc: str, answer: Any) -> None:
        async def handle(node: str, args: Mapping[str, Any]) -> Any:
            seen.setdefault(proc, []).append((node, args))
            return answer(node, args) if callable(answer) else answer
        cl.rpc.nodes.overrides[proc] = handle

    script("instance_check_host", {"missing": []})
    script("node_info", {"memory_free": 4096})
    script("instance_info", lambda node, args: {"state": "running", "memory": 128}
           if node == where["node"] else None)
    script("migration_accept", {"port": 8102, "nbd_port": 10809})
    script("migration_status", {"status": "active", "expected_downtime": 30,
                                "ram": {"transferred": 50 << 20, "remaining": 70 << 20,
                                        "total": 128 << 20}})
    script("migration_finish", None)
    script("migration_finish_source", None)

    async def send(node: str, args: Mapping[str, Any]) -> Any:
        seen.setdefault("migration_send", []).append((node, args))
        await asyncio.sleep(1.2)  # long enough for the master to ask for progress
        if "send" in cl.fail:
            raise cl.fail["send"]
        where["node"] = "node2"
        return {"total_time": 300, "downtime": 10, "elapsed": 900}
    cl.rpc.nodes.overrides["migration_send"] = send
    return seen


def _run_logged(cl: Cluster, op_id: str, **params: Any) -> list[str]:
    job = JobCtx()
    if cl._processor is None:
        cl._processor, _ctx = make_processor(cl.store, cl.rpc)
    run_op(cl._processor, {"OP_ID": op_id, "reason": REASON, **params}, job)
    return [str(line) for line in job.log]


def _disk_file(cl: Cluster, node: str, name: str) -> Path:
    disk = cl.store.get("disk", cl.instance(name).disks[0])
    return cl.rpc.nodes.paths(node).node_path(disk.logical_id[1])


def test_kvm_migrates_local_disks_with_progress_in_the_job_log(cl: Cluster) -> None:
    seen = _kvm_instance(cl, "local")
    source_disk = _disk_file(cl, "node1", "local")
    assert source_disk.exists()
    log = _run_logged(cl, "OP_INSTANCE_MIGRATE", instance_name="local", target_node="node2")
    [(node, accept)] = seen["migration_accept"]
    assert node == "node2" and accept["mirror_disks"] is True
    assert accept["address"] == "192.0.2.2"
    [(node, send)] = seen["migration_send"]
    assert node == "node1" and send["nbd_port"] == 10809 and send["target_name"] == "node2"
    assert "migration active: memory: 50.0 MiB sent (39.1%), 70.0 MiB remaining, expected " \
        "downtime 30 ms" in log
    assert "migration done in 900 ms (memory 300 ms), guest stopped for 10 ms" in log
    inst = cl.instance("local")
    assert cl.node_name(inst) == "node2"
    assert cl.store.get("disk", inst.disks[0]).nodes == [inst.primary_node]
    assert _disk_file(cl, "node2", "local").exists() and not source_disk.exists()
    assert [n for n, a in seen["migration_finish_source"] if a["success"]] == ["node1"]


def test_the_target_starts_the_machine_the_source_runs(cl: Cluster) -> None:
    """As in Ganeti, the target starts from what the source's qemu was started with; the
    cluster's migration settings of now apply to the migration itself."""
    seen = _kvm_instance(cl, "shared", template="sharedfile")
    spec = cl._spec("shared")
    started = {"hvparams": {**spec["hvparams"], "kernel_args": "old args",
                            "migration_bandwidth": 1},
               "beparams": {**spec["beparams"], "maxmem": 96}}
    cl.rpc.nodes.overrides["migration_info"] = lambda node, args: started
    log = _run_logged(cl, "OP_INSTANCE_MIGRATE", instance_name="shared", target_node="node2")
    [(_, accept)] = seen["migration_accept"]
    assert accept["instance"]["hvparams"]["kernel_args"] == "old args"
    assert accept["instance"]["hvparams"]["migration_bandwidth"] == \
        spec["hvparams"]["migration_bandwidth"]
    assert accept["instance"]["beparams"]["maxmem"] == 96
    assert any("(kernel_args, maxmem changed since)" in line for line in log), log


def test_failed_kvm_migration_removes_the_target_copy(cl: Cluster) -> None:
    seen = _kvm_instance(cl, "local")
    before = snapshot(cl.store)
    cl.fail["send"] = HypervisorError("sending instance local's memory to 192.0.2.2 "
                                      "failed: Connection reset by peer")
    with pytest.raises(OpExecError, match=r"Connection reset by peer; instance local stays "
                                          r"on node node1"):
        cl.run("OP_INSTANCE_MIGRATE", instance_name="local", target_node="node2")
    assert snapshot(cl.store) == before
    assert _disk_file(cl, "node1", "local").exists()
    assert not _disk_file(cl, "node2", "local").exists()
    assert [(n, a["success"]) for n, a in seen["migration_finish"]] == [("node2", False)]
    assert [(n, a["success"]) for n, a in seen["migration_finish_source"]] == [
        ("node1", False)]


def test_unreachable_target_after_a_failure_leaves_the_source_alone(cl: Cluster) -> None:
    seen = _kvm_instance(cl, "shared", template="sharedfile")

    async def send(node: str, args: Mapping[str, Any]) -> Any:
        cl.rpc.down.add("node2")  # the target's node daemon dies while it receives
        raise NodeUnreachableError("node node1 is unreachable")
    cl.rpc.nodes.overrides["migration_send"] = send
    with pytest.raises(OpExecError, match=r"may be paused on node node1 or run on node "
                                          r"node2: run 'gnt-instance migrate --cleanup"):
        cl.run("OP_INSTANCE_MIGRATE", instance_name="shared", target_node="node2")
    assert "migration_finish_source" not in seen
    assert cl.node_name(cl.instance("shared")) == "node1"


def test_a_migration_that_arrived_despite_a_failed_send_stays(cl: Cluster) -> None:
    """The source's node daemon died after qemu completed the migration: the guest
    runs on the target, so the target keeps it."""
    _kvm_instance(cl, "shared", template="sharedfile")

    async def send(node: str, args: Mapping[str, Any]) -> Any:
        cl.rpc.nodes.overrides["instance_info"] = (
            lambda n, a: {"state": "running"} if n == "node2" else None)
        raise NodeUnreachableError("node node1 is unreachable: connection closed")
    cl.rpc.nodes.overrides["migration_send"] = send
    log = _run_logged(cl, "OP_INSTANCE_MIGRATE", instance_name="shared", target_node="node2")
    assert any("already runs on node node2: it stays there" in line for line in log)
    assert cl.node_name(cl.instance("shared")) == "node2"


def test_kvm_migration_to_a_node_short_of_memory_starts_nothing(cl: Cluster) -> None:
    seen = _kvm_instance(cl, "local")
    cl.rpc.nodes.overrides["node_info"] = lambda node, args: {"memory_free": 64}
    with pytest.raises(OpPrereqError, match="needs 128 MiB, 64 MiB free"):
        cl.run("OP_INSTANCE_MIGRATE", instance_name="local", target_node="node2")
    assert "migration_accept" not in seen and not cl.calls("blockdev_create")
    assert not _disk_file(cl, "node2", "local").exists()


def test_kvm_allows_file_disks_in_migrations_only(cl: Cluster) -> None:
    _kvm_instance(cl, "local")
    with pytest.raises(OpPrereqError, match="gnt-instance move"):
        cl.run("OP_INSTANCE_FAILOVER", instance_name="local", target_node="node2")


def test_progress_lines() -> None:
    assert progress_line({}) == ""
    assert progress_line({"status": "copying disks", "disks": [
        {"index": 0, "done": 1 << 20, "total": 4 << 20}]}) == (
        "migration copying disks: disk 0: 1.0 MiB of 4.0 MiB copied")


def test_failover_stops_switches_and_starts(cl: Cluster) -> None:
    cl.add_instance("shared", template="sharedfile", up=True)
    cl.run("OP_INSTANCE_FAILOVER", instance_name="shared", target_node="node3",
           shutdown_timeout=5)
    assert cl.calls("instance_shutdown")[0][0] == "node1"
    assert cl.calls("instance_shutdown")[0][1]["timeout"] == 5
    assert cl.calls("instance_start")[0][0] == "node3"
    assert cl.running == {"node1": set(), "node2": set(), "node3": {"shared"}}
    assert cl.node_name(cl.instance("shared")) == "node3"
    assert cl.instance("shared").last_reason == REASON  # stopped and started: recorded


def test_failover_from_an_unreachable_node(cl: Cluster) -> None:
    cl.add_instance("shared", template="sharedfile", up=True)
    cl.rpc.down.add("node1")
    before = snapshot(cl.store)
    with pytest.raises(OpExecError, match="ignore-consistency"):
        cl.run("OP_INSTANCE_FAILOVER", instance_name="shared", target_node="node2")
    assert snapshot(cl.store) == before
    cl.run("OP_INSTANCE_FAILOVER", instance_name="shared", target_node="node2",
           ignore_consistency=True)
    assert cl.node_name(cl.instance("shared")) == "node2"
    assert "shared" in cl.running["node2"]


def test_failover_checks_memory_on_the_target(cl: Cluster) -> None:
    cl.add_instance("shared", template="sharedfile", up=True)
    # Scripted: the fake hypervisor reports the host's memory, far more than 128 MiB.
    cl.rpc.handlers["node_info"] = lambda node, args: {"memory_free": 64}
    with pytest.raises(OpPrereqError, match="needs 128 MiB, 64 MiB free"):
        cl.run("OP_INSTANCE_FAILOVER", instance_name="shared", target_node="node2")


# -- move -------------------------------------------------------------------------------------


def test_move_copies_file_disks(cl: Cluster) -> None:
    inst = cl.add_instance("web1", disks=2, up=True)
    old = [cl.store.get("disk", u) for u in inst.disks]
    with cl.rpc.nodes.paths("node1").node_path(old[1].logical_id[1]).open("r+b") as disk1:
        disk1.seek(5 << 20)
        disk1.write(b"the data of disk 1")
    cl.run("OP_INSTANCE_MOVE", instance_name="web1", target_node="node2")
    node2 = cl.store.get("node", "node2")
    inst = cl.instance("web1")
    assert inst.primary_node == node2.uuid and inst.last_reason == REASON
    for index, disk in enumerate(cl.store.get("disk", u) for u in inst.disks):
        assert disk.nodes == [node2.uuid]
        assert disk.logical_id == ["loop", f"{FILE_DIR}/{inst.uuid}/{disk.uuid}.disk{index}"]
    copies = cl.calls("blockdev_copy_from")
    assert [node for node, _a in copies] == ["node2", "node2"]
    assert copies[0][1]["source_ip"] == "192.0.2.1"
    assert copies[0][1]["source_port"] == cl.store.cluster.noded_port
    assert copies[0][1]["source_disk"]["uuid"] == old[0].uuid
    assert [n for n, _a in cl.calls("blockdev_remove")] == ["node1", "node1"]
    order = [c.procedure for c in cl.rpc.calls if c.procedure != "node_info"]
    assert order.index("instance_shutdown") < order.index("blockdev_create")
    assert order.index("blockdev_remove") < order.index("instance_start")
    assert cl.running == {"node1": set(), "node2": {"web1"}, "node3": set()}
    moved = cl.rpc.nodes.paths("node2").node_path(
        cl.store.get("disk", inst.disks[1]).logical_id[1])
    with moved.open("rb") as disk1:
        disk1.seek(5 << 20)
        assert disk1.read(18) == b"the data of disk 1"
    assert not cl.rpc.nodes.paths("node1").node_path(old[1].logical_id[1]).exists()


def test_failed_move_restarts_on_source_and_changes_nothing(cl: Cluster) -> None:
    cl.add_instance("web1", disks=2, up=True)
    before = snapshot(cl.store)
    copies: list[str] = []

    def copy(node: Node, args: Mapping[str, Any]) -> Any:
        copies.append(args["disk"]["uuid"])
        if len(copies) == 2:
            raise NodeUnreachableError("node node1 did not answer within 60 s")
        return {"bytes": 1}

    cl.rpc.handlers["blockdev_copy_from"] = copy
    with pytest.raises(NodeUnreachableError, match="node1"):
        cl.run("OP_INSTANCE_MOVE", instance_name="web1", target_node="node2")
    assert snapshot(cl.store) == before
    assert [(n, a["disk"]["uuid"]) for n, a in cl.calls("blockdev_remove")] == [
        ("node2", copies[0]), ("node2", copies[1])]
    assert cl.running["node1"] == {"web1"}


def test_move_refuses_shared_disks_and_bad_targets(cl: Cluster) -> None:
    cl.add_instance("shared", template="sharedfile")
    cl.add_instance("web1")
    with pytest.raises(OpPrereqError, match="failover"):
        cl.run("OP_INSTANCE_MOVE", instance_name="shared", target_node="node2")
    with pytest.raises(NotFoundError, match="node9"):
        cl.run("OP_INSTANCE_MOVE", instance_name="web1", target_node="node9")
    with cl.store.transaction() as txn:
        node = txn.get("node", "node2")
        node.offline = True
        txn.update(node)
    with pytest.raises(OpPrereqError, match="node2 is offline"):
        cl.run("OP_INSTANCE_MOVE", instance_name="web1", target_node="node2")


def test_migrate_cleanup_records_where_the_instance_runs(cl: Cluster) -> None:
    cl.add_instance("shared", template="sharedfile", up=True)
    cl.stop_on("node1", "shared")
    cl.start_on("node2", "shared")
    cl.run("OP_INSTANCE_MIGRATE", instance_name="shared", target_node="node2", cleanup=True)
    assert cl.node_name(cl.instance("shared")) == "node2"
    cl.start_on("node1", "shared")
    cl.run("OP_INSTANCE_MIGRATE", instance_name="shared", target_node="node3", cleanup=True)
    assert cl.node_name(cl.instance("shared")) == "node2"
    assert cl.calls("migration_finish")[-1] == ("node3", cl.calls("migration_finish")[-1][1])
    assert cl.calls("migration_finish")[-1][1]["success"] is False


def test_move_of_a_diskless_instance_only_switches_nodes(cl: Cluster) -> None:
    cl.add_instance("light", template="diskless")
    cl.run("OP_INSTANCE_MOVE", instance_name="light", target_node="node3")
    assert cl.node_name(cl.instance("light")) == "node3"
    assert not cl.calls("blockdev_create") and not cl.calls("instance_start")


@pytest.mark.parametrize(("op_id", "extra"), [
    ("OP_INSTANCE_MIGRATE", {}), ("OP_INSTANCE_FAILOVER", {}),
])
def test_a_target_lacking_what_the_instance_needs_is_refused(cl: Cluster, op_id: str,
                                                             extra: dict[str, Any]) -> None:
    """The target node says what it lacks; nothing is started, sent or committed."""
    cl.add_instance("shared", template="sharedfile", up=True)
    cl.lacking["node2"] = ["missing bridges br-gone"]
    with pytest.raises(OpPrereqError, match="node node2: the node lacks what the instance "
                                            "needs: missing bridges br-gone"):
        cl.run(op_id, instance_name="shared", target_node="node2", **extra)
    assert cl.node_name(cl.instance("shared")) == "node1"
    assert not cl.calls("migration_accept") and not cl.calls("instance_shutdown")
