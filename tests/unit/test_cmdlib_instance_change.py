"""Instance changes besides the life cycle and moves: modify, disks, console.

The node daemons run in this process (:class:`Cluster`), so each test checks what the
nodes were asked, what they then run and what the configuration says.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from corral.errors import (
    AlreadyExistsError,
    BlockDeviceError,
    NotFoundError,
    OpPrereqError,
    OsError,
    OsScriptError,
    ParameterError,
    UnknownParameterError,
)
from corral.objects import NIC, Node
from corral.opcodes import op_from_dict

from .config_helpers import snapshot
from .instance_change_helpers import FILE_DIR, OS_SEARCH, REASON, Cluster


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
        ({"beparams": {"memory": 1 << 24}, "ignore_ipolicy": True}, ParameterError,
         "more memory than any node"),
        ({"beparams": {"vcpus": 16}}, OpPrereqError,
         r"violates policy: cpu-count value 16 is not in range \[1, 8\]"),
        ({"beparams": {"minmem": 1 << 16, "maxmem": 1 << 16}}, OpPrereqError,
         r"violates policy: memory-size value 65536 is not in range \[1, 32768\]"),
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
    # beyond the group's instance policy: Ganeti's words, nothing grown
    grown = len(cl.calls("blockdev_grow"))
    with pytest.raises(OpPrereqError, match=r"^Growing disk 0 violates policy: disk-size/0 "
                                            r"value 1050624 is not in range \[1, 1048576\]$"):
        cl.run("OP_INSTANCE_GROW_DISK", instance_name="web1", disk=0, amount=1 << 20)
    assert len(cl.calls("blockdev_grow")) == grown


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


def test_new_disks_go_where_the_instance_keeps_its_disks(cl: Cluster) -> None:
    inst = cl.add_instance("web1", directory=f"{FILE_DIR}/team-a")
    cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", disks=[["add", -1, {"size": 8}]])
    disk = cl.store.get("disk", cl.instance("web1").disks[1])
    assert disk.logical_id[1] == f"{FILE_DIR}/team-a/{inst.uuid}/{disk.uuid}.disk1"
