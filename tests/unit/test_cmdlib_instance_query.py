"""The instance query resource and OP_INSTANCE_QUERY_DATA over the in-process cluster of
:mod:`tests.unit.instance_helpers`: static fields ask no node, live ones ask only the
nodes concerned, and every commit is seen."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.errors import NotFoundError
from tests.unit.instance_helpers import REASON, Cluster, open_cluster, query_rows


@pytest.fixture
def cl(tmp_path: Path) -> Iterator[Cluster]:
    yield from open_cluster(tmp_path)


# -- information ---------------------------------------------------------------

def test_query_data(cl: Cluster) -> None:
    cl.create(nics=[{"ip": "198.51.100.3"}])
    cl.create("web2", start=False, disk_template="diskless", disks=[], pnode="node2")
    data = cl.run("OP_INSTANCE_QUERY_DATA", instances=["web1"])
    info = data["web1"]
    assert set(data) == {"web1"}
    assert info["config_state"] == "up" and info["run_state"] == "up"
    assert info["pnode"] == "node1" and info["pnode_group_name"] == "default"
    assert info["snodes"] == [] and info["disk_template"] == "file"
    assert info["disks"][0]["size"] == 1024 and info["disks"][0]["iv_name"] == "disk/0"
    name, _uuid, ip, mac, mode, _link, _vlan, network, _netinfo = info["nics"][0]
    assert (name, ip, mode, network) == (None, "198.51.100.3", "bridged", None)
    assert mac.startswith("aa:00:00:")
    assert info["be_actual"]["maxmem"] == 128 and info["be_instance"] == {}
    assert "migration_mode" not in info["hv_actual"]
    assert info["last_reason"] == REASON
    everything = cl.run("OP_INSTANCE_QUERY_DATA", static=True)
    assert set(everything) == {"web1", "web2"}
    assert everything["web2"]["run_state"] is None
    live = cl.run("OP_INSTANCE_QUERY_DATA", instances=["web2"])
    assert live["web2"]["run_state"] == "down"


def test_query_data_unknown_instance(cl: Cluster) -> None:
    with pytest.raises(NotFoundError, match=r"^Instance 'nope' not known\n"):
        cl.run("OP_INSTANCE_QUERY_DATA", instances=["nope"])


def test_query_follows_every_commit(cl: Cluster) -> None:
    """Queries share their per-instance rows while the configuration is unchanged; a
    commit (here of the cluster defaults the rows are filled from) is seen at once."""
    cl.create()
    assert [[v for _s, v in row] for row in query_rows(cl, ["name", "be/vcpus", "pnode"])] == [
        ["web1", 1, "node1"]]
    with cl.store.transaction() as txn:
        cluster = txn.cluster()
        cluster.beparams = {"default": {**cluster.beparams["default"], "vcpus": 4}}
        txn.update(cluster)
    assert [[v for _s, v in row] for row in query_rows(cl, ["be/vcpus"])] == [[4]]
    cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", beparams={"vcpus": 3})
    assert [[v for _s, v in row] for row in query_rows(cl, ["be/vcpus"])] == [[3]]


def test_query_static_fields_ask_no_node(cl: Cluster) -> None:
    cl.create(disks=[{"size": 512}, {"size": "1G"}], nics=[{"ip": "198.51.100.9"}],
              tags=["web"], beparams={"vcpus": 2})
    calls = len(cl.rpc.calls)
    fields = ["name", "pnode", "admin_state", "disk.count", "disk.sizes", "disk.size/1",
              "disk.size/2", "sda_size", "nic.ips", "nic.mode/0", "ip", "be/vcpus", "vcpus",
              "tags", "snodes", "disk_usage", "hv/migration_mode", "bridge", "pnode.group"]
    (row,) = query_rows(cl, fields)
    assert len(cl.rpc.calls) == calls
    values = [value for _status, value in row]
    assert values == ["web1", "node1", "up", 2, [512, 1024], 1024, None, 512,
                      ["198.51.100.9"], "bridged", "198.51.100.9", 2, 2, ["web"], [], 1536,
                      None, "xen-br0", "default"]
    assert row[6][0] == 3 and row[16][0] == 1  # unavailable disk 2; unknown (global) field


def test_query_live_fields_and_status(cl: Cluster) -> None:
    cl.create("up1")
    cl.create("down1", start=False, pnode="node2")
    cl.create("err1", pnode="node3")
    cl.create("off1", pnode="node4", start=False)
    cl.nodes.stop("node3", "err1")                 # should run, does not
    cl.nodes.start("node2", "down1", maxmem=64)    # runs, should not
    cl.set_node("node4", offline=True)
    cl.rpc.calls.clear()
    rows = query_rows(cl, ["name", "status", "oper_state", "oper_ram", "oper_vcpus"])
    table = {row[0][1]: [value for _s, value in row[1:]] for row in rows}
    assert table == {
        "down1": ["ERROR_up", True, 64, 1],
        "err1": ["ERROR_down", False, None, None],
        "off1": ["ERROR_nodeoffline", None, None, None],
        "up1": ["running", True, 128, 1],
    }
    assert sorted(c.node for c in cl.rpc.calls) == ["node1", "node2", "node3"]
    assert {c.procedure for c in cl.rpc.calls} == {"all_instances_info"}
    cl.rpc.down.add("node1")
    (row,) = query_rows(cl, ["status", "oper_state"], ["=", "name", "up1"])
    assert row == [[0, "ERROR_nodedown"], [2, None]]


def test_query_filter_on_static_fields_asks_only_matching_nodes(cl: Cluster) -> None:
    cl.create("a", pnode="node1")
    cl.create("b", pnode="node2")
    cl.rpc.calls.clear()
    rows = query_rows(cl, ["name", "status"], ["=", "pnode", "node2"])
    assert rows == [[[0, "b"], [0, "running"]]]
    assert [c.node for c in cl.rpc.calls] == ["node2"]
    rows = query_rows(cl, ["name"], ["=", "status", "running"])
    assert [r[0][1] for r in rows] == ["a", "b"]


def test_query_fields_have_ganeti_titles(cl: Cluster) -> None:
    fields = cl.ctx.queries["instance"].query_fields(
        ["name", "status", "disk.size/0", "be/maxmem", "oper_ram", "nic.mac/7", "nope"])
    assert [(f["name"], f["title"], f["kind"]) for f in fields["fields"]] == [
        ("name", "Instance", "text"), ("status", "Status", "text"),
        ("disk.size/0", "Disk/0", "unit"), ("be/maxmem", "ConfigMaxMem", "unit"),
        ("oper_ram", "Memory", "unit"), ("nic.mac/7", "NicMAC/7", "text"),
        ("nope", "nope", "unknown"),
    ]


def test_query_through_opquery_rows(cl: Cluster) -> None:
    cl.create()
    answer = cl.run("OP_QUERY", what="instance", fields=["name", "os"])
    assert answer["data"] == [[[0, "web1"], [0, "corral-ext4+default"]]]


def test_status_of_a_guest_that_powered_itself_off(cl: Cluster) -> None:
    """A hypervisor reporting a guest ``shutdown`` while it should run: ``USER_down`` for
    a kvm instance with ``user_shutdown`` (as Ganeti), ``ERROR_down`` without it, and
    ``ADMIN_down`` when it should not run anyway."""
    cl.set_cluster(enabled_hypervisors=["fake", "kvm"])
    for name, hvparams in (("plain", {}), ("user", {"user_shutdown": True}),
                           ("down", {"user_shutdown": True})):
        cl.create(name, start=False, hypervisor="kvm", hvparams=hvparams,
                  disk_template="diskless", disks=[], nics=[])
    for name in ("plain", "user"):
        with cl.store.transaction() as txn:
            inst = txn.get("instance", name)
            inst.admin_state = "up"
            txn.update(inst)

    async def all_instances_info(node: str, args: object) -> object:
        if node != "node1":
            return {}
        return {name: {"name": name, "state": "shutdown", "memory": 128, "vcpus": 1,
                       "time": 1.0} for name in ("plain", "user", "down")}

    cl.rpc.nodes.overrides["all_instances_info"] = all_instances_info
    rows = query_rows(cl, ["name", "status"])
    assert {row[0][1]: row[1][1] for row in rows} == {
        "down": "ADMIN_down", "plain": "ERROR_down", "user": "USER_down"}
