"""Instance life cycle logical units, against a real
configuration store and lock manager and node daemons in this process (the real noded
procedures over the fake hypervisor, file storage and the dumpenv test OS)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from corral.cmdlib import Processor
from corral.cmdlib.base import MasterContext, RpcArgs
from corral.errors import (
    AlreadyExistsError,
    CorralError,
    HypervisorError,
    NodeUnreachableError,
    NotFoundError,
    OpExecError,
    OpPrereqError,
    OsError,
    OsScriptError,
    ParameterError,
)
from corral.locking import LockLevel
from corral.objects import Node
from corral.opcodes import op_from_dict
from corral.rpc.protocol import RpcResult
from tests.unit.config_helpers import snapshot
from tests.unit.instance_helpers import OS_SEARCH, REASON, Cluster, fail, open_cluster, query_rows
from tests.unit.lu_helpers import JobCtx, LocalRpc, make_processor


@pytest.fixture
def cl(tmp_path: Path) -> Iterator[Cluster]:
    yield from open_cluster(tmp_path)


# -- create -------------------------------------------------------------------

def test_create_file_instance(cl: Cluster) -> None:
    job = JobCtx()
    assert cl.create(job=job) == ["node1"]  # Ganeti's result: the instance's nodes
    assert cl.rpc.procedures("node1") == [
        "node_info", "os_get", "os_validate", "blockdev_create", "instance_os_add",
        "instance_start"]
    inst = cl.store.get("instance", "web1")
    assert inst.admin_state == "up"
    assert inst.os == "corral-ext4+default"
    assert inst.disk_template == "file"
    assert inst.last_reason == REASON
    assert inst.primary_node == cl.store.get("node", "node1").uuid
    # Design 2.1 reports the new uuid on creation: in the job log.
    assert any(f"Added instance web1 with UUID {inst.uuid}" in str(m) for m in job.log)
    (disk_uuid,) = inst.disks
    disk = cl.store.get("disk", disk_uuid)
    assert disk.size == 1024 and disk.mode == "rw" and disk.dev_type == "file"
    storage_dir = cl.store.cluster.file_storage_dir
    assert disk.logical_id == ["loop", f"{storage_dir}/{inst.uuid}/{disk_uuid}.disk0"]
    (nic,) = inst.nics
    assert nic.mac.startswith(cl.store.cluster.mac_prefix + ":") and len(nic.mac) == 17
    install = next(c for c in cl.rpc.calls if c.procedure == "instance_os_add")
    assert install.args["reinstall"] is False
    spec = install.args["instance"]
    assert spec["name"] == "web1" and spec["disks"][0]["logical_id"] == disk.logical_id
    assert spec["nics"][0]["mode"] == "bridged"
    assert "web1" in cl.instance_locks()
    assert cl.nodes.running["node1"]["web1"]["state"] == "running"


def test_create_diskless_no_start_and_parameters(cl: Cluster) -> None:
    cl.create("db1", disk_template="diskless", disks=[], start=False, pnode="node2",
              beparams={"maxmem": "512M", "minmem": 256, "vcpus": "2"},
              nics=[{"mac": "AA:00:00:12:34:56", "ip": "198.51.100.7", "mode": "routed",
                     "link": "table1"}])
    inst = cl.store.get("instance", "db1")
    assert inst.admin_state == "down" and inst.disks == []
    assert inst.beparams == {"maxmem": 512, "minmem": 256, "vcpus": 2}
    assert inst.nics[0].mac == "aa:00:00:12:34:56" and inst.nics[0].ip == "198.51.100.7"
    assert inst.nics[0].nicparams == {"mode": "routed", "link": "table1"}
    assert "instance_start" not in cl.rpc.procedures()
    assert "blockdev_create" not in cl.rpc.procedures()


def test_os_without_parameters_is_not_verified(cl: Cluster) -> None:
    cl.create(os_type="plainos", disk_template="diskless", disks=[])
    assert cl.rpc.procedures() == ["os_get", "instance_os_add", "instance_start"]


def test_no_install_skips_os_and_start(cl: Cluster) -> None:
    job = JobCtx()
    cl.create(no_install=True, os_type="whatever", job=job)
    assert cl.rpc.procedures() == ["node_info", "blockdev_create"]
    assert cl.store.get("instance", "web1").admin_state == "down"
    cl.create("web2", no_install=True, os_type=None, disk_template="diskless", disks=[])
    assert cl.store.get("instance", "web2").os == ""
    with pytest.raises(ParameterError, match="has no OS yet"):
        cl.run("OP_INSTANCE_REINSTALL", instance_name="web2")
    cl.run("OP_INSTANCE_REINSTALL", instance_name="web2", os_type="plainos")
    assert cl.store.get("instance", "web2").os == "plainos"
    assert any("not started" in str(line) for line in job.log)


def test_dry_run_checks_but_changes_nothing(cl: Cluster) -> None:
    before = snapshot(cl.store)
    assert cl.create(dry_run=True) == ["node1"]
    assert snapshot(cl.store) == before
    assert cl.rpc.procedures() == ["node_info", "os_get", "os_validate"]
    assert "web1" not in cl.instance_locks()
    with pytest.raises(OsError, match="available OSes: corral-ext4"):
        cl.create(dry_run=True, os_type="nope")


def test_file_disks_larger_than_the_free_storage_are_refused(cl: Cluster) -> None:
    cl.nodes.limit_storage("node1", 1000)
    before = snapshot(cl.store)
    with pytest.raises(OpPrereqError) as err:
        cl.create(disks=[{"size": 600}, {"size": 600}], dry_run=True)
    message = err.value.message
    assert "disks 0, 1 (together 1200 MiB) of instance web1 need more space than node " \
        "node1 has free in /srv/corral/file-storage: 1000 MiB free" in message
    assert "--ignore-ipolicy (RAPI/opcode: ignore_ipolicy=true)" in message
    with pytest.raises(OpPrereqError, match=r"disk 0 \(1001 MiB\) of instance web1 needs"):
        cl.create(disks=[{"size": 1001}])
    assert snapshot(cl.store) == before
    assert "blockdev_create" not in cl.rpc.procedures()
    assert "web1" not in cl.instance_locks()
    (call, *_rest) = [c for c in cl.rpc.calls if c.procedure == "node_info"]
    assert call.node == "node1" and call.args["storage_dirs"] == ["/srv/corral/file-storage"]

    # What fits is created; a file_storage_dir subdirectory is asked about as such,
    # and sharedfile disks are checked in the shared directory.
    cl.create(disks=[{"size": 500}, {"size": 500}], start=False, no_install=True)
    cl.create("web2", file_storage_dir="sub", disks=[{"size": 10}], start=False,
              no_install=True)
    cl.create("web3", disk_template="sharedfile", disks=[{"size": 10}], start=False,
              no_install=True)
    asked = [c.args["storage_dirs"] for c in cl.rpc.calls if c.procedure == "node_info"]
    assert asked[-2:] == [["/srv/corral/file-storage/sub"], ["/srv/corral/shared"]]


def test_ignore_ipolicy_creates_file_disks_larger_than_the_free_storage(cl: Cluster) -> None:
    cl.nodes.limit_storage("node1", 1000)
    job = JobCtx()
    cl.create(disks=[{"size": 2000}], ignore_ipolicy=True, job=job)
    assert cl.store.get("disk", cl.store.get("instance", "web1").disks[0]).size == 2000
    assert "blockdev_create" in cl.rpc.procedures()
    assert any("WARNING: disk 0 (2000 MiB) of instance web1 needs more space" in str(line)
               for line in job.log)


def test_free_storage_unknown_is_reported_and_accepted(cl: Cluster) -> None:
    # Scripted: a node that does not report its storage (the real procedure always does).
    cl.rpc.handlers["node_info"] = lambda node, args: {"memory_total": 4096}
    job = JobCtx()
    cl.create(disks=[{"size": 2000}], job=job)
    assert any("did not tell the free space of /srv/corral/file-storage" in str(line)
               for line in job.log)


def test_failed_install_removes_disks_and_leaves_config(cl: Cluster) -> None:
    before = snapshot(cl.store)
    # The dumpenv OS's create script fails on request.
    with pytest.raises(OsScriptError, match="installing OS .* failed on node node1: .*create"
                                            r"(.|\n)*dumpenv: failure line 15"):
        cl.create(disks=[{"size": 10}, {"size": 20}], osparams={"fail": "create"})
    assert snapshot(cl.store) == before
    assert cl.rpc.procedures() == ["node_info", "os_get", "os_validate", "blockdev_create",
                                   "blockdev_create", "instance_os_add", "blockdev_remove",
                                   "blockdev_remove"]
    assert "web1" not in cl.instance_locks()


def test_failed_disk_creation_removes_earlier_disks(cl: Cluster) -> None:
    created: list[int] = []

    def create(node: Node, args: Mapping[str, Any]) -> Any:
        if args["disk"]["index"] == 1:
            raise CorralError("no space left: need 20 MiB, 5 MiB free")
        created.append(args["disk"]["index"])
        return {"path": "/p"}

    cl.rpc.handlers["blockdev_create"] = create  # the second disk fails on purpose
    with pytest.raises(CorralError, match="creating disk 1 of instance web1 failed on node node1"):
        cl.create(disks=[{"size": 10}, {"size": 20}])
    removed = [c.args["disk"]["index"] for c in cl.rpc.calls if c.procedure == "blockdev_remove"]
    assert removed == [0]
    assert cl.store.find("instance", "web1") is None


def test_unreachable_node_fails_naming_it(cl: Cluster) -> None:
    cl.rpc.down.add("node3")
    with pytest.raises(NodeUnreachableError, match="node3"):
        cl.create(pnode="node3")
    assert cl.store.count("instance") == 0 and cl.store.count("disk") == 0


def test_start_failure_keeps_the_instance_stopped(cl: Cluster) -> None:
    # On purpose: the master's memory check passed, the hypervisor still refuses.
    cl.rpc.handlers["instance_start"] = fail("not enough memory: 128 MiB needed, 64 free",
                                             HypervisorError)
    with pytest.raises(OpExecError, match=r"created but could not be started.*not enough memory"):
        cl.create()
    inst = cl.store.get("instance", "web1")
    assert inst.admin_state == "down"
    assert "web1" in cl.instance_locks()


@pytest.mark.parametrize(
    ("params", "error", "message"),
    [
        ({"mode": "import"}, NotFoundError, "no node has an export named 'web1'"),
        ({"mode": "remote-import"}, OpPrereqError, "this cluster has no cluster domain secret"),
        ({"iallocator": "hail"}, ParameterError, "Do not specify both, iallocator and node"),
        ({"pnode": "node9"}, NotFoundError, "Node 'node9' not known"),
        ({"snode": "node2"}, ParameterError, "secondary node"),
        ({"os_type": None}, ParameterError, "an OS is needed.*no_install"),
        ({"instance_name": "bad name"}, ParameterError, "invalid instance name"),
        ({"disk_template": "drbd"}, OpPrereqError, "'drbd' is not available in corral"),
        ({"disk_template": "floppy"}, ParameterError, "unknown disk template"),
        ({"disk_template": "diskless"}, ParameterError, "takes no disks"),
        ({"disks": []}, ParameterError, "at least one disk"),
        ({"disks": [{"size": "big"}]}, ParameterError, "invalid size"),
        ({"disks": [{}]}, ParameterError, "size is missing"),
        ({"disks": [{"size": 1, "mode": "rx"}]}, ParameterError, "valid: rw, ro"),
        ({"disks": [{"size": 1, "adopt": "lv"}]}, ParameterError,
         "Disk adoption is not supported for the 'file' disk template"),
        ({"disks": [{"size": 1, "vg": "xenvg"}]}, ParameterError, "'vg' is only for disks"),
        ({"disks": [{"size": 1, "colour": 1}]}, ParameterError, "unknown key"),
        ({"nics": [{"mode": "routed"}]}, ParameterError, "routed mode needs an IP"),
        ({"nics": [{"mode": "nat"}]}, ParameterError, "valid: bridged, routed"),
        ({"nics": [{"ip": "pool"}]}, ParameterError, "if ip=pool, parameter network must"),
        ({"nics": [{"ip": "300.1.1.1"}]}, ParameterError, "invalid IP"),
        ({"nics": [{"network": "net1"}]}, NotFoundError, "Network 'net1' not found"),
        ({"nics": [{"mac": "zz:00:00:00:00:00"}]}, ParameterError, "invalid MAC"),
        ({"hypervisor": "kvm"}, OpPrereqError, "not enabled"),
        ({"hvparams": {"migration_mode": "live"}}, ParameterError, "global"),
        ({"hvparams": {"acpi": True}}, ParameterError, "unknown hypervisor parameter"),
        ({"beparams": {"minmem": 512, "maxmem": 256}}, ParameterError, "must not exceed"),
        ({"os_type": "corral-ext4+big"}, OsError, r"no variant 'big'.*\+default, .*\+minimal"),
        ({"os_type": "corral-ext4"}, OsError, r"give exactly one.*ext4\+default, .*\+minimal"),
        ({"os_type": "plainos+x"}, OsError, "has no variants"),
        ({"os_type": "nope"}, OsError, "available OSes: corral-ext4"),
        ({"osparams": {"colour": "red"}}, OsError, "does not have the parameter"),
        ({"file_storage_dir": "/abs"}, ParameterError, "relative path"),
        ({"tags": ["bad tag"]}, ParameterError, "invalid characters"),
        ({"file_driver": "blktap"}, ParameterError, "use 'loop'"),
        ({"pnode_uuid": "not-node1"}, ParameterError, "different nodes"),
        ({"osparams_private": {"pw": "x"}}, ParameterError, "private"),
    ],
)
def test_create_refuses(cl: Cluster, params: dict[str, Any], error: type[Exception],
                        message: str) -> None:
    before = snapshot(cl.store)
    with pytest.raises(error, match=message):
        cl.create(**params)
    assert snapshot(cl.store) == before
    assert "blockdev_create" not in cl.rpc.procedures()
    assert "web1" not in cl.instance_locks()


def test_os_name_without_variant_is_accepted_when_forced(cl: Cluster) -> None:
    cl.create(os_type="corral-ext4", force_variant=True)
    assert cl.store.get("instance", "web1").os == "corral-ext4"


def test_os_parameters_are_matched_without_case(cl: Cluster) -> None:
    # The test OS declares them lower-case; an upper-case name (as Ganeti stores a
    # parameter declared TRACK) is accepted and verified on the node.
    cl.create(osparams={"FILESYSTEM": "ext3"})
    validate = next(c for c in cl.rpc.calls if c.procedure == "os_validate")
    assert validate.args["osparams"] == {"filesystem": "ext3"}
    assert cl.store.get("instance", "web1").osparams == {"filesystem": "ext3"}
    # Two spellings of one parameter would be one OSP_ variable: refused, nothing made.
    with pytest.raises(ParameterError, match="'FILESYSTEM', 'filesystem' name the same"):
        cl.create("web2", osparams={"filesystem": "ext3", "FILESYSTEM": "xfs"})
    assert [i.name for i in cl.store.all("instance")] == ["web1"]
    # A name a Ganeti configuration stored upper-case still overrides the cluster's.
    with cl.store.transaction() as txn:
        cluster = txn.cluster()
        cluster.osparams = {"corral-ext4": {"filesystem": "ext2"}}
        txn.update(cluster)
        inst = txn.get("instance", "web1")
        inst.osparams = {"FILESYSTEM": "ext3"}
        txn.update(inst)
    cl.rpc.calls.clear()
    cl.run("OP_INSTANCE_SHUTDOWN", instance_name="web1")
    cl.run("OP_INSTANCE_REINSTALL", instance_name="web1")
    install = next(c for c in cl.rpc.calls if c.procedure == "instance_os_add")
    assert install.args["instance"]["osparams"] == {"filesystem": "ext3"}
    cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", osparams={"Filesystem": "xfs"})
    assert cl.store.get("instance", "web1").osparams == {"filesystem": "xfs"}


def test_force_variant_and_os_parameters(cl: Cluster) -> None:
    cl.create(os_type="corral-ext4+custom", force_variant=True,
              osparams={"filesystem": "ext3"})
    get = next(c for c in cl.rpc.calls if c.procedure == "os_get")
    assert get.args["name"] == "corral-ext4"
    validate = next(c for c in cl.rpc.calls if c.procedure == "os_validate")
    assert validate.args["osparams"] == {"filesystem": "ext3"}
    assert cl.store.get("instance", "web1").osparams == {"filesystem": "ext3"}


def test_cluster_os_parameters_are_validated_filled(cl: Cluster) -> None:
    cl.set_cluster(osparams={"corral-ext4": {"filesystem": "ext2"},
                             "corral-ext4+default": {"fail": "verify"}})
    # The variant's cluster parameters make the dumpenv OS's verify script fail.
    with pytest.raises(OsScriptError, match=r"validating the parameters.*failed on node node1"):
        cl.create(osparams={"filesystem": "xfs"})
    validate = next(c for c in cl.rpc.calls if c.procedure == "os_validate")
    assert validate.args["osparams"] == {"filesystem": "xfs", "fail": "verify"}


def test_blacklisted_os_is_refused_for_new_installs(cl: Cluster) -> None:
    cl.set_cluster(blacklisted_os=["corral-ext4"])
    with pytest.raises(OsError, match="blacklisted"):
        cl.create()
    cl.create(no_install=True)  # nothing is installed: allowed


def test_blacklisted_variant_entry_counts_for_the_whole_os(cl: Cluster) -> None:
    # An older configuration may hold an OS+variant entry: states are per OS.
    cl.set_cluster(blacklisted_os=["corral-ext4+minimal"])
    with pytest.raises(OsError, match="blacklisted"):
        cl.create(os_type="corral-ext4+default")


def test_offline_drained_and_not_vm_capable_nodes_are_refused(cl: Cluster) -> None:
    cl.set_node("node2", offline=True)
    cl.set_node("node3", drained=True)
    cl.set_node("node4", vm_capable=False)
    with pytest.raises(OpPrereqError, match="node node2 is offline"):
        cl.create(pnode="node2")
    with pytest.raises(OpPrereqError, match="drained"):
        cl.create(pnode="node3")
    with pytest.raises(OpPrereqError, match="vm_capable"):
        cl.create(pnode="node4")


def test_names_macs_and_ips_are_unique(cl: Cluster) -> None:
    cl.create(nics=[{"mac": "aa:00:00:00:00:01", "ip": "198.51.100.1"}])
    with pytest.raises(AlreadyExistsError, match="instance 'web1' already exists"):
        cl.create()
    assert "web1" in cl.instance_locks()  # the existing instance keeps its lock
    with pytest.raises(AlreadyExistsError, match="MAC aa:00:00:00:00:01"):
        cl.create("web2", nics=[{"mac": "aa:00:00:00:00:01"}])
    with pytest.raises(AlreadyExistsError, match=r"IP 198\.51\.100\.1"):
        cl.create("web2", nics=[{"ip": "198.51.100.1"}])
    with pytest.raises(ParameterError, match="used twice"):
        cl.create("web2", disks=[{"size": 1, "name": "a"}, {"size": 1, "name": "a"}])


def test_generated_macs_skip_used_ones(cl: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    cl.create(nics=[{"mac": "aa:00:00:00:00:01"}])
    values = iter([1, 1, 2, 3])
    monkeypatch.setattr("corral.cmdlib.instance_base.secrets.randbits", lambda _bits: next(values))
    cl.create("web2", nics=[{}, {"mac": "generate"}])
    macs = [n.mac for n in cl.store.get("instance", "web2").nics]
    assert macs == ["aa:00:00:00:00:02", "aa:00:00:00:00:03"]


def test_pnode_by_uuid_and_legacy_memory(cl: Cluster) -> None:
    node2 = cl.store.get("node", "node2")
    assert cl.create(pnode=None, pnode_uuid=node2.uuid, beparams={"memory": 256}) == ["node2"]
    assert cl.store.get("instance", "web1").beparams == {"maxmem": 256, "minmem": 256}


def test_identify_defaults_drops_default_values(cl: Cluster) -> None:
    cl.create(identify_defaults=True, beparams={"vcpus": 1, "maxmem": 1024})
    assert cl.store.get("instance", "web1").beparams == {"maxmem": 1024}


class GatedRpc(LocalRpc):
    """Holds every OS installation until ``release`` is set, counting those in flight."""

    def __init__(self, cl: Cluster, root: Path) -> None:
        super().__init__(cl.store, root)
        self.allow_storage("/srv/corral/file-storage", "/srv/corral/shared")
        self.install_os(OS_SEARCH, "corral-ext4", variants=["default"])
        self.release = asyncio.Event()
        self.in_flight = 0
        self.most = 0

    async def call(self, nodes: Sequence[Node], procedure: str, args: RpcArgs, *,
                   timeout: float = 60.0) -> dict[str, RpcResult]:  # noqa: ASYNC109
        if procedure == "instance_os_add":
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            await self.release.wait()
            self.in_flight -= 1
        return await super().call(nodes, procedure, args, timeout=timeout)


def _gated(cl: Cluster, tmp_path: Path) -> tuple[Processor, MasterContext, GatedRpc]:
    rpc = GatedRpc(cl, tmp_path / "gated")
    processor, ctx = make_processor(cl.store, rpc)
    return processor, ctx, rpc


def _create_op(name: str, node: str) -> Any:
    return op_from_dict({
        "OP_ID": "OP_INSTANCE_CREATE", "instance_name": name, "disk_template": "file",
        "disks": [{"size": 1}], "os_type": "corral-ext4+default", "pnode": node,
    })


def test_creates_run_in_parallel_on_different_and_same_nodes(cl: Cluster,
                                                             tmp_path: Path) -> None:
    processor, _ctx, rpc = _gated(cl, tmp_path)
    jobs = [("a", "node1"), ("b", "node2"), ("c", "node3"), ("d", "node4"), ("e", "node1")]

    async def main() -> list[Any]:
        tasks = [asyncio.create_task(processor.execute(_create_op(n, node), JobCtx(i + 1)))
                 for i, (n, node) in enumerate(jobs)]
        # Disk creation runs in worker threads: give every job real time to get there.
        for _ in range(1000):
            if rpc.in_flight == len(jobs):
                break
            await asyncio.sleep(0.01)
        rpc.release.set()
        return await asyncio.gather(*tasks)

    results = asyncio.run(main())
    assert rpc.most == len(jobs)
    assert results == [[node] for _n, node in jobs]
    assert sorted(i.name for i in cl.store.all("instance")) == ["a", "b", "c", "d", "e"]


def test_concurrent_creates_of_one_name_one_wins(cl: Cluster, tmp_path: Path) -> None:
    processor, ctx, rpc = _gated(cl, tmp_path)

    async def main() -> tuple[Any, Any]:
        first = asyncio.create_task(processor.execute(_create_op("x", "node1"), JobCtx(1)))
        for _ in range(1000):
            if rpc.in_flight:
                break
            await asyncio.sleep(0.01)
        second = asyncio.create_task(processor.execute(_create_op("x", "node2"), JobCtx(2)))
        await asyncio.sleep(0.2)
        assert rpc.in_flight == 1  # the second waits for the name's lock
        rpc.release.set()
        return await asyncio.gather(first, second, return_exceptions=True)

    ok, refused = asyncio.run(main())
    assert ok == ["node1"]
    assert isinstance(refused, AlreadyExistsError)
    assert cl.store.get("instance", "x").primary_node == cl.store.get("node", "node1").uuid
    assert ctx.locks.lockset(LockLevel.INSTANCE).names() == ["x"]


# -- remove -------------------------------------------------------------------

def test_remove_shuts_down_removes_disks_and_forgets(cl: Cluster) -> None:
    cl.create(disks=[{"size": 1}, {"size": 2}])
    inst = cl.store.get("instance", "web1")
    cl.rpc.calls.clear()
    cl.run("OP_INSTANCE_REMOVE", instance_name=inst.uuid)  # a UUID works as a name
    assert cl.rpc.procedures() == ["instance_shutdown", "blockdev_remove", "blockdev_remove"]
    assert cl.store.count("instance") == 0 and cl.store.count("disk") == 0
    assert cl.instance_locks() == []
    assert cl.nodes.running["node1"] == {}


def test_remove_with_unreachable_node(cl: Cluster) -> None:
    cl.create()
    cl.rpc.down.add("node1")
    with pytest.raises(NodeUnreachableError, match=r"node1.*ignore_failures"):
        cl.run("OP_INSTANCE_REMOVE", instance_name="web1")
    assert cl.store.find("instance", "web1") is not None
    job = JobCtx()
    cl.run("OP_INSTANCE_REMOVE", job, instance_name="web1", ignore_failures=True)
    assert cl.store.find("instance", "web1") is None
    assert any("Warning" in str(line) for line in job.log)


def test_remove_unknown_instance(cl: Cluster) -> None:
    with pytest.raises(NotFoundError, match="Instance 'ghost' not known"):
        cl.run("OP_INSTANCE_REMOVE", instance_name="ghost")
    cl.create()
    with pytest.raises(ParameterError, match="different instances"):
        cl.run("OP_INSTANCE_REMOVE", instance_name="web1", instance_uuid="other")


# -- startup, shutdown, reboot ---------------------------------------------------

def test_shutdown_and_startup_record_state_and_reason(cl: Cluster) -> None:
    cl.create()
    reason = [["user", "maintenance", 5]]
    cl.run("OP_INSTANCE_SHUTDOWN", instance_name="web1", timeout=7, reason=reason)
    inst = cl.store.get("instance", "web1")
    assert inst.admin_state == "down" and inst.last_reason == reason
    assert cl.rpc.calls[-1].args["timeout"] == 7.0
    assert "web1" not in cl.nodes.running["node1"]
    cl.run("OP_INSTANCE_STARTUP", instance_name="web1", beparams={"maxmem": 256},
           startup_paused=True)
    assert cl.store.get("instance", "web1").admin_state == "up"
    start = cl.rpc.calls[-1]
    assert start.procedure == "instance_start" and start.args["startup_paused"] is True
    assert start.args["instance"]["beparams"]["maxmem"] == 256
    assert cl.store.get("instance", "web1").beparams == {}  # temporary only


def test_startup_of_running_instance_only_records(cl: Cluster) -> None:
    cl.create()
    job = JobCtx()
    cl.run("OP_INSTANCE_STARTUP", job, instance_name="web1")
    assert cl.rpc.procedures()[-1] == "instance_info"
    assert any("already running" in str(line) for line in job.log)


def test_no_remember_keeps_admin_state(cl: Cluster) -> None:
    cl.create()
    cl.run("OP_INSTANCE_SHUTDOWN", instance_name="web1", no_remember=True)
    assert cl.store.get("instance", "web1").admin_state == "up"
    assert "web1" not in cl.nodes.running["node1"]


def test_offline_node_needs_ignore_offline_nodes(cl: Cluster) -> None:
    cl.create()
    cl.set_node("node1", offline=True)
    with pytest.raises(OpPrereqError, match="node1 is offline"):
        cl.run("OP_INSTANCE_SHUTDOWN", instance_name="web1")
    calls = len(cl.rpc.calls)
    cl.run("OP_INSTANCE_SHUTDOWN", instance_name="web1", ignore_offline_nodes=True)
    assert len(cl.rpc.calls) == calls
    assert cl.store.get("instance", "web1").admin_state == "down"


def test_shutdown_failure_names_the_node(cl: Cluster) -> None:
    cl.create()
    cl.rpc.down.add("node1")
    with pytest.raises(NodeUnreachableError,
                       match="shutting down instance web1 failed on node node1"):
        cl.run("OP_INSTANCE_SHUTDOWN", instance_name="web1")


def test_reboot_types(cl: Cluster) -> None:
    cl.create()
    cl.rpc.calls.clear()
    cl.run("OP_INSTANCE_REBOOT", instance_name="web1", reboot_type="hard")
    assert cl.rpc.procedures() == ["instance_info", "instance_reboot"]
    assert cl.rpc.calls[-1].args["reboot_type"] == "hard"
    cl.rpc.calls.clear()
    cl.run("OP_INSTANCE_REBOOT", instance_name="web1", reboot_type="full")
    assert cl.rpc.procedures() == ["instance_info", "instance_shutdown", "instance_start"]
    cl.run("OP_INSTANCE_SHUTDOWN", instance_name="web1")
    cl.rpc.calls.clear()
    cl.run("OP_INSTANCE_REBOOT", instance_name="web1", reboot_type="soft")
    assert cl.rpc.procedures() == ["instance_info", "instance_start"]
    assert cl.store.get("instance", "web1").admin_state == "up"


def test_reboot_type_is_checked() -> None:
    with pytest.raises(ParameterError, match="reboot_type"):
        op_from_dict({"OP_ID": "OP_INSTANCE_REBOOT", "instance_name": "x",
                      "reboot_type": "gentle"})


# -- reinstall and rename ---------------------------------------------------------

def test_reinstall_needs_a_stopped_instance(cl: Cluster) -> None:
    cl.create()
    with pytest.raises(OpPrereqError, match="shut it down first"):
        cl.run("OP_INSTANCE_REINSTALL", instance_name="web1")
    cl.run("OP_INSTANCE_SHUTDOWN", instance_name="web1", no_remember=True)
    with pytest.raises(OpPrereqError, match="marked to run"):
        cl.run("OP_INSTANCE_REINSTALL", instance_name="web1")


def test_reinstall_with_new_os_even_if_blacklisted(cl: Cluster) -> None:
    cl.create(start=False, osparams={"filesystem": "ext3"})
    cl.set_cluster(blacklisted_os=["corral-ext4"])
    cl.rpc.calls.clear()
    reason = [["user", "fresh install", 9]]
    cl.run("OP_INSTANCE_REINSTALL", instance_name="web1", os_type="corral-ext4+minimal",
           osparams={"fail": "no"}, reason=reason)
    assert cl.rpc.procedures() == ["instance_info", "os_get", "os_validate", "instance_os_add"]
    install = cl.rpc.calls[-1].args
    assert install["reinstall"] is True
    assert install["instance"]["os"] == "corral-ext4+minimal"
    assert install["instance"]["osparams"] == {"filesystem": "ext3", "fail": "no"}
    inst = cl.store.get("instance", "web1")
    assert inst.os == "corral-ext4+minimal" and inst.osparams == {"filesystem": "ext3"}
    assert inst.last_reason == REASON  # a reinstall is no status change: creation's stays


def test_reinstall_failure_keeps_old_os(cl: Cluster) -> None:
    cl.create(start=False)
    cl.set_cluster(osparams={"corral-ext4+minimal": {"fail": "create"}})
    with pytest.raises(OsScriptError, match="dumpenv: failure line"):
        cl.run("OP_INSTANCE_REINSTALL", instance_name="web1", os_type="corral-ext4+minimal")
    assert cl.store.get("instance", "web1").os == "corral-ext4+default"


def test_rename(cl: Cluster) -> None:
    cl.create(start=False)
    assert cl.run("OP_INSTANCE_RENAME", instance_name="web1", new_name="web9") == "web9"
    inst = cl.store.get("instance", "web9")
    assert cl.store.find("instance", "web1") is None
    assert cl.instance_locks() == ["web9"]
    call = cl.rpc.calls[-1]
    assert call.procedure == "instance_run_rename"
    assert call.args["old_name"] == "web1" and call.args["instance"]["name"] == "web9"
    assert inst.last_reason == REASON  # a rename is no status change: creation's stays


def test_rename_script_failure_is_a_warning(cl: Cluster) -> None:
    cl.create(start=False, osparams={"fail": "rename"})  # dumpenv's rename then fails
    job = JobCtx()
    cl.run("OP_INSTANCE_RENAME", job, instance_name="web1", new_name="web2")
    assert cl.store.find("instance", "web2") is not None
    assert any("dumpenv: failure line" in str(line) for line in job.log)


def test_rename_refusals(cl: Cluster) -> None:
    cl.create()
    cl.create("web2", start=False)
    with pytest.raises(OpPrereqError, match="shut it down before renaming"):
        cl.run("OP_INSTANCE_RENAME", instance_name="web1", new_name="web3")
    with pytest.raises(AlreadyExistsError, match="'web1' already exists"):
        cl.run("OP_INSTANCE_RENAME", instance_name="web2", new_name="web1")
    with pytest.raises(ParameterError, match="invalid instance name"):
        cl.run("OP_INSTANCE_RENAME", instance_name="web2", new_name="a b")
    assert cl.instance_locks() == ["web1", "web2"]


def test_sharedfile_and_storage_dirs(cl: Cluster) -> None:
    cl.create(disk_template="sharedfile", file_storage_dir="team/a")
    inst = cl.store.get("instance", "web1")
    disk = cl.store.get("disk", inst.disks[0])
    assert disk.dev_type == "sharedfile"
    assert disk.logical_id[1].startswith(f"/srv/corral/shared/team/a/{inst.uuid}/")
    cl.set_cluster(file_storage_dir="")
    with pytest.raises(OpPrereqError, match="no file storage directory"):
        cl.create("web2")


def test_failed_start_keeps_the_wanted_state(cl: Cluster) -> None:
    cl.create(start=False)
    cl.rpc.handlers["instance_start"] = fail("disk 0 is missing", HypervisorError)  # on purpose
    with pytest.raises(HypervisorError, match="starting instance web1 failed on node node1"):
        cl.run("OP_INSTANCE_STARTUP", instance_name="web1")
    assert cl.store.get("instance", "web1").admin_state == "up"
    (row,) = query_rows(cl, ["status"])
    assert row == [[0, "ERROR_down"]]
