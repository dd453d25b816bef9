"""Instance changes besides the life cycle: modify, disks, console, migrate, failover, move.

The node daemons run in this process (the real noded procedures over the fake
hypervisor and file storage, each node in its own directory), so each test checks
what the nodes were asked, what they then run and what the configuration says.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest

from corral.cmdlib import Processor
from corral.cmdlib.common import instance_spec
from corral.cmdlib.instance_migration import progress_line
from corral.config import ConfigStore
from corral.errors import (
    AlreadyExistsError,
    BlockDeviceError,
    HypervisorError,
    NodeUnreachableError,
    NotFoundError,
    OpExecError,
    OpPrereqError,
    OsError,
    OsScriptError,
    ParameterError,
    UnknownParameterError,
)
from corral.noded import procedures
from corral.objects import NIC, Disk, Instance, Node
from corral.opcodes import op_from_dict
from corral.paths import Paths

from .config_helpers import new_store, snapshot
from .lu_helpers import JobCtx, LocalRpc, make_processor, run_op

REASON = [["gnt:client:gnt-instance", "modify", 1700000000000000000]]
FILE_DIR = "/srv/corral/file-storage"


OS_SEARCH = "/srv/ganeti/os"


def _sparse_copy(src: Path, dst: Path) -> int:
    """Copy only the data of sparse file ``src`` into ``dst``; its size in bytes."""
    size = src.stat().st_size
    with src.open("rb") as fin, dst.open("r+b" if dst.exists() else "wb") as fout:
        offset = 0
        while offset < size:
            try:
                start = os.lseek(fin.fileno(), offset, os.SEEK_DATA)
            except OSError:  # no data after offset
                break
            end = os.lseek(fin.fileno(), start, os.SEEK_HOLE)
            fin.seek(start)
            fout.seek(start)
            fout.write(fin.read(end - start))
            offset = end
        fout.truncate(size)
    return size


class Cluster:
    """A store with three nodes running in this process (the real noded procedures),
    with faults injected on request."""

    def __init__(self, tmp_path: Path) -> None:
        self.store: ConfigStore = new_store(tmp_path / "config.db")
        group = self.store.all("nodegroup")[0]
        with self.store.transaction() as txn:
            cluster = txn.cluster()
            cluster.file_storage_dir = FILE_DIR
            cluster.shared_file_storage_dir = "/srv/shared"
            cluster.blacklisted_os = ["oldos"]
            cluster.os_search_path = [OS_SEARCH]
            txn.update(cluster)
            txn.add(Node(name="node2", primary_ip="192.0.2.2", group=group.uuid))
            txn.add(Node(name="node3", primary_ip="192.0.2.3", group=group.uuid))
        self.rpc = LocalRpc(self.store, tmp_path / "cluster")
        self.rpc.allow_storage(FILE_DIR, "/srv/shared")
        # The shared file storage is one directory every node sees, as a mount would.
        shared = tmp_path / "shared-storage"
        shared.mkdir()
        for node in ("node1", "node2", "node3"):
            mount = self.rpc.nodes.paths(node).node_path("/srv/shared")
            mount.parent.mkdir(parents=True, exist_ok=True)
            mount.symlink_to(shared)
        self.rpc.install_os(OS_SEARCH, "debian", parameters=["flavour a flavour",
                                                             "fail fail on purpose"])
        #: A procedure that fails on every node with this error (fault injection).
        self.fail: dict[str, Exception] = {}
        #: What a node says it lacks when asked about an instance (instance_check_host):
        #: scripted, as a missing bridge cannot be made in a test.
        self.lacking: dict[str, list[str]] = {}
        for proc in procedures.PROCEDURES:
            self.rpc.nodes.overrides[proc] = self._handler(proc)
        self._processor: Processor | None = None

    def _paths(self, node: str) -> Paths:
        return self.rpc.nodes.paths(node)

    def _handler(self, proc: str) -> Any:
        async def handle(node: str, args: Mapping[str, Any]) -> Any:
            if proc in self.fail:
                raise self.fail[proc]
            if proc == "instance_check_host" and self.lacking.get(node):
                return {"missing": list(self.lacking[node])}
            if proc == "blockdev_copy_from":
                return self._copy(node, args)
            return await procedures.dispatch(self._paths(node), proc, args)
        return handle

    def _copy(self, node: str, args: Mapping[str, Any]) -> Any:
        """blockdev_copy_from reads the source node daemon's HTTPS disk stream, which
        in-process nodes do not serve: copy the source node's file instead."""
        source = next(n.name for n in self.store.all("node")
                      if n.primary_ip == args["source_ip"])
        src = self._paths(source).node_path(args["source_disk"]["logical_id"][1])
        dst = self._paths(node).node_path(args["disk"]["logical_id"][1])
        return {"bytes": _sparse_copy(src, dst)}

    def _on_node(self, node: str, proc: str, args: Mapping[str, Any]) -> Any:
        """Run a real procedure on ``node`` behind the master's back (not recorded)."""
        return asyncio.run(procedures.dispatch(self._paths(node), proc, args))

    def _spec(self, name: str) -> dict[str, Any]:
        spec = msgspec.to_builtins(instance_spec(self.store, self.instance(name)))
        return cast(dict[str, Any], spec)

    @property
    def running(self) -> dict[str, set[str]]:
        """Which instances each node's fake hypervisor runs."""
        return {node: set(self._on_node(node, "all_instances_info", {}))
                for node in ("node1", "node2", "node3")}

    def start_on(self, node: str, name: str) -> None:
        """Someone starts the instance on ``node`` without the master."""
        self._on_node(node, "instance_start", {"instance": self._spec(name)})

    def stop_on(self, node: str, name: str) -> None:
        """The instance stops on ``node`` on its own."""
        self._on_node(node, "instance_shutdown", {"instance": self._spec(name)})

    def add_instance(self, name: str, *, template: str = "file", disks: int = 1,
                     node: str = "node1", up: bool = False, nics: list[NIC] | None = None,
                     directory: str | None = None) -> Instance:
        pnode = self.store.get("node", node)
        inst = Instance(name=name, primary_node=pnode.uuid, os="debian", disk_template=template,
                        admin_state="up" if up else "down", nics=nics or [])
        directory = directory or (FILE_DIR if template == "file" else "/srv/shared")
        objs = []
        for index in range(disks if template != "diskless" else 0):
            disk = Disk(dev_type=template, size=1024, iv_name=f"disk/{index}",
                        nodes=[pnode.uuid])
            disk.logical_id = ["loop", f"{directory}/{inst.uuid}/{disk.uuid}.disk{index}"]
            objs.append(disk)
        inst.disks = [d.uuid for d in objs]
        with self.store.transaction() as txn:
            for disk in objs:
                txn.add(disk)
            txn.add(inst)
        spec = self._spec(name)
        for disk_spec in spec["disks"]:
            self._on_node(node, "blockdev_create", {"disk": disk_spec})
        if up:
            self.start_on(node, name)
        return self.store.get("instance", name)

    def run(self, op_id: str, **params: Any) -> Any:
        if self._processor is None:
            self._processor, _ctx = make_processor(self.store, self.rpc)
        return run_op(self._processor, {"OP_ID": op_id, "reason": REASON, **params})

    def instance(self, name: str) -> Instance:
        return self.store.get("instance", name)

    def node_name(self, inst: Instance) -> str:
        return self.store.get("node", inst.primary_node).name

    def calls(self, proc: str) -> list[tuple[str, Mapping[str, Any]]]:
        return [(c.node, c.args) for c in self.rpc.calls if c.procedure == proc]


@pytest.fixture
def cl(tmp_path: Path) -> Cluster:
    return Cluster(tmp_path)


# -- opcodes -----------------------------------------------------------------------------


def test_opcodes_take_ganeti_fields_and_defaults() -> None:
    op = op_from_dict({"OP_ID": "OP_INSTANCE_SET_PARAMS", "instance_name": "web1",
                       "disks": [["add", -1, {"size": 1024}]], "osparams": {"a": None}})
    assert op.wait_for_sync is True and op.offline is None  # type: ignore[attr-defined]
    migrate = op_from_dict({"OP_ID": "OP_INSTANCE_MIGRATE", "instance_name": "web1",
                            "mode": "non-live"})
    assert migrate.allow_failover is False  # type: ignore[attr-defined]
    grow = op_from_dict({"OP_ID": "OP_INSTANCE_GROW_DISK", "instance_name": "w", "disk": 0,
                         "amount": 512})
    assert grow.absolute is False and grow.wait_for_sync is True  # type: ignore[attr-defined]
    with pytest.raises(ParameterError, match="disk"):
        op_from_dict({"OP_ID": "OP_INSTANCE_GROW_DISK", "instance_name": "w", "disk": 16,
                      "amount": 1})
    with pytest.raises(ParameterError, match="target_node"):
        op_from_dict({"OP_ID": "OP_INSTANCE_MOVE", "instance_name": "w"})
    with pytest.raises(ParameterError, match="mode"):
        op_from_dict({"OP_ID": "OP_INSTANCE_MIGRATE", "instance_name": "w", "mode": "fast"})
    failover = op_from_dict({"OP_ID": "OP_INSTANCE_FAILOVER", "instance_name": "w"})
    assert failover.shutdown_timeout == 120  # type: ignore[attr-defined]


# -- modify: parameters ---------------------------------------------------------------------


def test_modify_parameters_reports_ganeti_changes_and_keeps_the_reason(cl: Cluster) -> None:
    inst = cl.add_instance("web1")
    result = cl.run("OP_INSTANCE_SET_PARAMS", instance_name=inst.uuid,
                    beparams={"maxmem": "512M", "vcpus": 2}, osparams={"flavour": "big"})
    assert result == [["be/maxmem", "512M"], ["be/vcpus", 2], ["os/flavour", "big"]]
    inst = cl.instance("web1")
    assert inst.beparams == {"maxmem": 512, "vcpus": 2}
    assert inst.osparams == {"flavour": "big"}
    assert inst.last_reason == []  # not a status change (seed 001): nothing recorded
    node, args = cl.calls("os_validate")[0]
    assert node == "node1" and args["osparams"] == {"flavour": "big"}
    result = cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1",
                    beparams={"vcpus": "default"}, osparams={"flavour": None})
    assert cl.instance("web1").beparams == {"maxmem": 512}
    assert cl.instance("web1").osparams == {}


@pytest.mark.parametrize(
    ("params", "error", "message"),
    [
        ({}, ParameterError, "no changes submitted"),
        ({"hvparams": {"migration_mode": "live"}}, ParameterError, "global"),
        ({"beparams": {"mem": 1}}, UnknownParameterError, "valid ones"),
        ({"beparams": {"vcpus": 0}}, ParameterError, "accepted: 1 or more"),
        ({"beparams": {"memory": 1 << 24}}, ParameterError, "more memory than any node"),
        ({"beparams": {"minmem": 4096}}, ParameterError, "must not exceed maxmem"),
        ({"disk_template": "sharedfile"}, OpPrereqError, "not supported"),
        ({"runtime_mem": 256}, ParameterError, "not supported by corral: runtime_mem"),
        ({"os_name": "oldos+v1"}, OsError, "blacklisted"),
        ({"disks": [["grow", 0, {}]]}, ParameterError, "accepted: add, remove, modify"),
        ({"disks": [["modify", 0, {"size": 10}]]}, ParameterError, "grow-disk"),
        ({"disks": [["modify", 5, {"mode": "ro"}]]}, OpPrereqError, "no disk 5"),
        ({"disks": [["add", -1, {"size": 10, "vg": "x"}]]}, UnknownParameterError, "vg"),
        ({"disks": [["remove", 0, {"size": 1}]]}, ParameterError, "no parameters"),
        ({"nics": [["add", -1, {"mode": "routed"}]]}, ParameterError, "needs an IP"),
        ({"nics": [["add", -1, {"ip": "300.1.1.1"}]]}, ParameterError, "invalid IP"),
        ({"nics": [["add", -1, {"mac": "zz"}]]}, ParameterError, "invalid MAC"),
        ({"nics": [["add", -1, {"mode": "nat"}]]}, ParameterError, "not one of"),
    ],
)
def test_modify_refuses_bad_changes_and_changes_nothing(
    cl: Cluster, params: dict[str, Any], error: type[Exception], message: str
) -> None:
    cl.add_instance("web1")
    before = snapshot(cl.store)
    with pytest.raises(error, match=message):
        cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", **params)
    assert snapshot(cl.store) == before
    assert not cl.calls("blockdev_create")


def test_modify_unknown_instance_lists_known_ones(cl: Cluster) -> None:
    cl.add_instance("web1")
    with pytest.raises(NotFoundError, match="web1"):
        cl.run("OP_INSTANCE_SET_PARAMS", instance_name="nope", beparams={"vcpus": 2})


def test_modify_os_name_checks_the_os_on_the_node(cl: Cluster) -> None:
    cl.add_instance("web1")
    with pytest.raises(OsError, match="available OSes: debian"):
        cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", os_name="ubuntu")
    assert cl.instance("web1").os == "debian"
    cl.rpc.install_os(OS_SEARCH, "ubuntu", variants=["focal"], parameters=["flavour f"])
    assert cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1",
                  os_name="ubuntu+focal") == [["os_name", "ubuntu+focal"]]
    assert cl.instance("web1").os == "ubuntu+focal"
    # Exactly one declared variant, unless forced (design 2.1).
    for name, message in (("ubuntu", "give exactly one.*ubuntu\\+focal"),
                          ("ubuntu+jammy", "no variant 'jammy'")):
        with pytest.raises(OsError, match=message):
            cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", os_name=name)
    cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", os_name="ubuntu+jammy",
           force_variant=True)
    assert cl.instance("web1").os == "ubuntu+jammy"


def test_modify_osparams_failing_verify_changes_nothing(cl: Cluster) -> None:
    cl.add_instance("web1")
    with pytest.raises(OsScriptError, match="dumpenv: failure line"):
        cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", osparams={"fail": "verify"})
    assert cl.instance("web1").osparams == {}


def test_offline_needs_the_instance_down(cl: Cluster) -> None:
    cl.add_instance("web1", up=True)
    cl.add_instance("db1")
    with pytest.raises(OpPrereqError, match="marked up"):
        cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", offline=True)
    assert cl.run("OP_INSTANCE_SET_PARAMS", instance_name="db1",
                  offline=True) == [["admin_state", "offline"]]
    assert cl.instance("db1").admin_state == "offline"
    assert cl.instance("db1").last_reason == REASON  # the admin state is the status
    cl.run("OP_INSTANCE_SET_PARAMS", instance_name="db1", offline=False)
    assert cl.instance("db1").admin_state == "down"


def test_dry_run_reports_without_changing(cl: Cluster) -> None:
    cl.add_instance("web1")
    before = snapshot(cl.store)
    result = cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", dry_run=True,
                    disks=[["add", -1, {"size": "2G"}]], beparams={"vcpus": 4})
    assert result == [["disk/1", "add:size=2048,mode=rw"], ["be/vcpus", 4]]
    assert snapshot(cl.store) == before
    assert not cl.calls("blockdev_create")


def test_new_primary_node_for_shared_disks_only(cl: Cluster) -> None:
    cl.add_instance("files")
    shared = cl.add_instance("shared", template="sharedfile")
    with pytest.raises(OpPrereqError, match="gnt-instance move"):
        cl.run("OP_INSTANCE_SET_PARAMS", instance_name="files", pnode="node2")
    assert cl.run("OP_INSTANCE_SET_PARAMS", instance_name="shared",
                  pnode="node2") == [["pnode", "node2"]]
    node2 = cl.store.get("node", "node2")
    assert cl.instance("shared").primary_node == node2.uuid
    assert cl.store.get("disk", shared.disks[0]).nodes == [node2.uuid]


# -- modify: disks ---------------------------------------------------------------------------


def test_add_disk_creates_it_on_the_primary_then_commits(cl: Cluster) -> None:
    inst = cl.add_instance("web1", node="node2")
    result = cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1",
                    disks=[["add", -1, {"size": 512, "name": "data", "mode": "ro"}]])
    assert result == [["disk/1", "add:size=512,mode=ro"]]
    inst = cl.instance("web1")
    assert len(inst.disks) == 2
    disk = cl.store.get("disk", inst.disks[1])
    assert (disk.name, disk.size, disk.mode, disk.iv_name) == ("data", 512, "ro", "disk/1")
    assert disk.logical_id == ["loop", f"{FILE_DIR}/{inst.uuid}/{disk.uuid}.disk1"]
    assert disk.nodes == [cl.store.get("node", "node2").uuid]
    node, args = cl.calls("blockdev_create")[0]
    assert node == "node2" and args["disk"]["uuid"] == disk.uuid
    assert args["disk"]["logical_id"] == disk.logical_id
    assert inst.last_reason == []


def test_added_disks_larger_than_the_free_storage_need_force(cl: Cluster) -> None:
    cl.add_instance("web1", node="node2")
    cl.add_instance("shared1", template="sharedfile", node="node3")

    def node_info(node: Node, args: Mapping[str, Any]) -> Any:
        return {"memory_total": 4096,
                "storage": {d: {"size": 8000, "free": 1000} for d in args["storage_dirs"]}}

    cl.rpc.handlers["node_info"] = node_info  # scripted: a nearly full storage directory
    before = snapshot(cl.store)
    with pytest.raises(OpPrereqError) as err:
        cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1",
               disks=[["add", -1, {"size": 600}], ["add", -1, {"size": 600}]])
    assert "disks 1, 2 (together 1200 MiB) of instance web1 need more space than node " \
        f"node2 has free in {FILE_DIR}: 1000 MiB free" in err.value.message
    assert "--force (RAPI/opcode: force=true)" in err.value.message
    with pytest.raises(OpPrereqError, match="node node3 has free in /srv/shared: 1000"):
        cl.run("OP_INSTANCE_SET_PARAMS", instance_name="shared1",
               disks=[["add", 0, {"size": 1001}]], dry_run=True)
    assert snapshot(cl.store) == before
    assert cl.calls("blockdev_create") == []
    assert [(n, a["storage_dirs"]) for n, a in cl.calls("node_info")] == [
        ("node2", [FILE_DIR]), ("node3", ["/srv/shared"])]

    cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", disks=[["add", -1, {"size": 1000}]])
    cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", force=True,
           disks=[["add", -1, {"size": 600}], ["add", -1, {"size": 600}]])
    sizes = [cl.store.get("disk", u).size for u in cl.instance("web1").disks]
    assert sizes == [1024, 1000, 600, 600]
    assert len(cl.calls("blockdev_create")) == 3


def test_add_disk_at_an_index_renumbers(cl: Cluster) -> None:
    cl.add_instance("web1")
    cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", disks=[["add", 0, {"size": 64}]])
    disks = [cl.store.get("disk", u) for u in cl.instance("web1").disks]
    assert [d.size for d in disks] == [64, 1024]
    assert [d.iv_name for d in disks] == ["disk/0", "disk/1"]


def test_failed_disk_creation_removes_created_disks(cl: Cluster) -> None:
    cl.add_instance("web1")
    before = snapshot(cl.store)
    created: list[str] = []

    def create(node: Node, args: Mapping[str, Any]) -> Any:
        if created:
            raise BlockDeviceError("not enough space: needs 2048 MiB, 100 MiB free")
        created.append(args["disk"]["uuid"])
        return {"path": "/x"}

    cl.rpc.handlers["blockdev_create"] = create
    with pytest.raises(BlockDeviceError, match="not enough space"):
        cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1",
               disks=[["add", -1, {"size": 10}], ["add", -1, {"size": 2048}]])
    assert snapshot(cl.store) == before
    assert [args["disk"]["uuid"] for _n, args in cl.calls("blockdev_remove")] == created


def test_remove_disk_needs_a_stopped_instance(cl: Cluster) -> None:
    inst = cl.add_instance("web1", disks=2, up=True)
    with pytest.raises(OpPrereqError, match="is running on node node1"):
        cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", disks=[["remove", 0, {}]])
    assert cl.instance("web1").disks == inst.disks
    cl.stop_on("node1", "web1")
    result = cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1",
                    disks=[["remove", 0, {}]])
    assert result == [["disk/0", "remove"]]
    assert cl.instance("web1").disks == inst.disks[1:]
    assert cl.store.find("disk", inst.disks[0]) is None
    assert cl.store.get("disk", inst.disks[1]).iv_name == "disk/0"
    [(node, args)] = cl.calls("blockdev_remove")
    assert node == "node1" and args["disk"]["uuid"] == inst.disks[0]


def test_removing_the_last_disk_makes_the_instance_diskless(cl: Cluster) -> None:
    cl.add_instance("web1")
    with pytest.raises(OpPrereqError, match=r"without disks.*--allow-diskless"):
        cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", disks=[["remove", -1, {}]])
    assert cl.instance("web1").disk_template == "file" and len(cl.instance("web1").disks) == 1
    cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", disks=[["remove", -1, {}]],
           allow_diskless=True)
    assert cl.instance("web1").disk_template == "diskless"
    with pytest.raises(ParameterError, match="dev_type"):
        cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1",
               disks=[["add", -1, {"size": 10}]])
    cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1",
           disks=[["add", -1, {"size": 10, "dev_type": "sharedfile"}]])
    assert cl.instance("web1").disk_template == "sharedfile"


def test_modify_disk_by_name_and_old_two_element_form(cl: Cluster) -> None:
    cl.add_instance("web1")
    assert cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1",
                  disks=[[0, {"name": "root"}]]) == [["disk.name/0", "root"]]
    assert cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1",
                  disks=[["modify", "root", {"mode": "ro"}]]) == [["disk.mode/0", "ro"]]
    disk = cl.store.get("disk", cl.instance("web1").disks[0])
    assert (disk.name, disk.mode) == ("root", "ro")


# -- modify: NICs ----------------------------------------------------------------------------


def test_add_nic_generates_a_unique_mac(cl: Cluster) -> None:
    cl.add_instance("web1", nics=[NIC(mac="aa:00:00:00:00:01", ip="192.0.2.50")])
    result = cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1",
                    nics=[["add", -1, {"ip": "192.0.2.51", "mode": "routed", "link": "100"}]])
    nic = cl.instance("web1").nics[1]
    assert nic.mac.startswith("aa:00:00:") and nic.mac != "aa:00:00:00:00:01"
    assert nic.nicparams == {"mode": "routed", "link": "100"}
    assert result == [["nic.1", f"add:mac={nic.mac},ip=192.0.2.51,mode=routed,link=100,"
                                "network=None"]]


def test_nic_addresses_stay_unique(cl: Cluster) -> None:
    cl.add_instance("web1", nics=[NIC(mac="aa:00:00:00:00:01", ip="192.0.2.50")])
    cl.add_instance("web2")
    with pytest.raises(AlreadyExistsError, match=r"192\.0\.2\.50 is already used by instance web1"):
        cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web2",
               nics=[["add", -1, {"ip": "192.0.2.50"}]])
    with pytest.raises(AlreadyExistsError, match="aa:00:00:00:00:01"):
        cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web2",
               nics=[["add", -1, {"mac": "AA:00:00:00:00:01"}]])


def test_modify_and_remove_nics(cl: Cluster) -> None:
    cl.add_instance("web1", nics=[NIC(mac="aa:00:00:00:00:01"), NIC(mac="aa:00:00:00:00:02")])
    result = cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1",
                    nics=[["modify", 1, {"ip": "192.0.2.9", "link": "br1"}],
                          ["remove", 0, {}]])
    assert result == [["nic.ip/1", "192.0.2.9"], ["nic.link/1", "br1"],
                      ["nic.mode/1", "bridged"], ["nic.vlan/1", ""], ["NIC/0", "remove"]]
    [nic] = cl.instance("web1").nics
    assert (nic.mac, nic.ip, nic.nicparams) == ("aa:00:00:00:00:02", "192.0.2.9",
                                                {"link": "br1"})
    with pytest.raises(ParameterError, match="needs an IP"):
        cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1",
               nics=[["modify", 0, {"ip": "none", "mode": "routed"}]])


# -- disks ------------------------------------------------------------------------------------


def test_activate_and_deactivate_disks(cl: Cluster) -> None:
    inst = cl.add_instance("web1", disks=2, node="node3")
    cl.add_instance("nodisk", template="diskless")
    result = cl.run("OP_INSTANCE_ACTIVATE_DISKS", instance_name="web1")
    disk0 = cl.store.get("disk", inst.disks[0])
    assert len(result) == 2
    assert result[0] == ["node3", "disk/0",
                         str(cl.rpc.nodes.paths("node3").node_path(disk0.logical_id[1]))]
    cl.run("OP_INSTANCE_DEACTIVATE_DISKS", instance_name="web1")
    [(node, args)] = cl.calls("blockdev_shutdown")
    assert node == "node3" and len(args["disks"]) == 2
    assert cl.run("OP_INSTANCE_ACTIVATE_DISKS", instance_name="nodisk") == []


def test_deactivate_disks_of_a_running_instance_needs_force(cl: Cluster) -> None:
    cl.add_instance("web1")
    cl.start_on("node1", "web1")
    with pytest.raises(OpPrereqError, match="is running on node node1"):
        cl.run("OP_INSTANCE_DEACTIVATE_DISKS", instance_name="web1")
    assert not cl.calls("blockdev_shutdown")
    cl.run("OP_INSTANCE_DEACTIVATE_DISKS", instance_name="web1", force=True)
    assert cl.calls("blockdev_shutdown")


def test_grow_disk_dry_runs_then_grows(cl: Cluster) -> None:
    inst = cl.add_instance("web1")
    cl.run("OP_INSTANCE_GROW_DISK", instance_name="web1", disk=0, amount=512)
    assert [args["dryrun"] for _n, args in cl.calls("blockdev_grow")] == [True, False]
    assert all(args["amount"] == 512 for _n, args in cl.calls("blockdev_grow"))
    assert cl.store.get("disk", inst.disks[0]).size == 1536
    cl.run("OP_INSTANCE_GROW_DISK", instance_name="web1", disk=0, amount=2048, absolute=True)
    assert cl.calls("blockdev_grow")[-1][1]["amount"] == 512
    assert cl.store.get("disk", inst.disks[0]).size == 2048
    with pytest.raises(OpPrereqError, match="cannot shrink"):
        cl.run("OP_INSTANCE_GROW_DISK", instance_name="web1", disk=0, amount=100,
               absolute=True)
    with pytest.raises(OpPrereqError, match="no disk 3"):
        cl.run("OP_INSTANCE_GROW_DISK", instance_name="web1", disk=3, amount=100)


def test_grow_disk_refusals(cl: Cluster) -> None:
    inst = cl.add_instance("web1")
    cl.add_instance("nodisk", template="diskless")
    with pytest.raises(OpPrereqError, match="no disks"):
        cl.run("OP_INSTANCE_GROW_DISK", instance_name="nodisk", disk=0, amount=1)
    cl.fail["blockdev_grow"] = BlockDeviceError("not enough space: needs 9999 MiB")  # scripted
    with pytest.raises(BlockDeviceError, match="not enough space"):
        cl.run("OP_INSTANCE_GROW_DISK", instance_name="web1", disk=0, amount=9999)
    assert cl.store.get("disk", inst.disks[0]).size == 1024


# -- console ----------------------------------------------------------------------------------


def test_console_of_running_instance(cl: Cluster) -> None:
    cl.add_instance("web1", up=True)
    assert cl.run("OP_INSTANCE_CONSOLE", instance_name="web1") == {
        "instance": "web1", "kind": "msg",
        "message": "instance web1 runs on the fake hypervisor, which has no console"}
    cl.stop_on("node1", "web1")
    with pytest.raises(OpPrereqError, match=r"web1 is not running \(state ERROR_down\)"):
        cl.run("OP_INSTANCE_CONSOLE", instance_name="web1")


# -- migrate / failover -----------------------------------------------------------------------


def test_migrate_needs_a_target_and_shared_disks(cl: Cluster) -> None:
    cl.add_instance("files", up=True)
    cl.add_instance("shared", template="sharedfile", up=True)
    with pytest.raises(OpPrereqError, match="target node is required"):
        cl.run("OP_INSTANCE_MIGRATE", instance_name="shared")
    with pytest.raises(ParameterError, match="iallocator"):
        cl.run("OP_INSTANCE_MIGRATE", instance_name="shared", iallocator="hail")
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


def test_hypervisor_parameters_per_instance(cl: Cluster) -> None:
    inst = cl.add_instance("vm1")
    with cl.store.transaction() as txn:
        copy = txn.get("instance", inst.uuid)
        copy.hypervisor = "kvm"
        txn.update(copy)
    assert cl.run("OP_INSTANCE_SET_PARAMS", instance_name="vm1",
                  hvparams={"acpi": "false", "kernel_args": "ro quiet"}) == [
        ["hv/acpi", "false"], ["hv/kernel_args", "ro quiet"]]
    assert cl.instance("vm1").hvparams == {"acpi": False, "kernel_args": "ro quiet"}
    cl.run("OP_INSTANCE_SET_PARAMS", instance_name="vm1", hvparams={"acpi": "default"})
    assert cl.instance("vm1").hvparams == {"kernel_args": "ro quiet"}
    with pytest.raises(ParameterError, match="global"):
        cl.run("OP_INSTANCE_SET_PARAMS", instance_name="vm1",
               hvparams={"migration_port": 9000})


def test_deactivate_disks_of_an_instance_marked_up_needs_force(cl: Cluster) -> None:
    cl.add_instance("web1", up=True)
    with pytest.raises(OpPrereqError, match="marked up"):
        cl.run("OP_INSTANCE_DEACTIVATE_DISKS", instance_name="web1")


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


def test_new_disks_go_where_the_instance_keeps_its_disks(cl: Cluster) -> None:
    inst = cl.add_instance("web1", directory=f"{FILE_DIR}/team-a")
    cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", disks=[["add", -1, {"size": 8}]])
    disk = cl.store.get("disk", cl.instance("web1").disks[1])
    assert disk.logical_id[1] == f"{FILE_DIR}/team-a/{inst.uuid}/{disk.uuid}.disk1"


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
