"""Instance NICs on networks: ``network=NAME``, ``ip=pool``, the mode and link of the
group's connection, a full pool, conflicts, and addresses released with their NICs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.errors import NotFoundError, OpPrereqError, ParameterError
from tests.unit.instance_helpers import Cluster, open_cluster, query_rows
from tests.unit.lu_helpers import JobCtx


@pytest.fixture
def cl(tmp_path: Path) -> Iterator[Cluster]:
    cluster = next(gen := open_cluster(tmp_path))
    cluster.run("OP_NETWORK_ADD", network_name="net-a", network="10.0.0.0/29",
                gateway="10.0.0.1", mac_prefix="aa:bb:cc")
    cluster.run("OP_NETWORK_CONNECT", network_name="net-a", group_name="default",
                network_mode="routed", network_link="rt-a")
    yield cluster
    next(gen, None)


def _create(cl: Cluster, name: str, nics: list[dict[str, str]], job: JobCtx | None = None,
            **extra: object) -> None:
    cl.create(name, disk_template="diskless", disks=[], start=False, nics=nics, job=job,
              **extra)


def _free(cl: Cluster) -> int:
    cell = cl.run("OP_QUERY", what="network", fields=["free_count"], qfilter=None)
    return int(cell["data"][0][0][1])


def test_pool_addresses_and_the_connection_s_mode_and_link(cl: Cluster) -> None:
    job = JobCtx()
    _create(cl, "web1", [{"network": "net-a", "ip": "pool"}, {"network": "net-a", "ip": "pool"}],
            job=job)
    inst = cl.store.get("instance", "web1")
    net = cl.store.get("network", "net-a")
    assert [n.ip for n in inst.nics] == ["10.0.0.2", "10.0.0.3"]
    assert all(n.network == net.uuid for n in inst.nics)
    assert inst.nics[0].nicparams == {"mode": "routed", "link": "rt-a", "vlan": ""}
    assert inst.nics[0].mac.startswith("aa:bb:cc:")
    assert "Chose IP 10.0.0.2 from network net-a" in job.log
    assert query_rows(cl, ["nic.networks.names", "nic.network.name/1"]) == [
        [[0, ["net-a", "net-a"]], [0, "net-a"]]]
    assert _free(cl) == 3
    with pytest.raises(OpPrereqError, match="already in use or does not belong to network"):
        _create(cl, "web2", [{"network": "net-a", "ip": "10.0.0.3"}])
    with pytest.raises(OpPrereqError, match="belongs to network net-a, but the target NIC"):
        _create(cl, "web2", [{"ip": "10.0.0.4", "mode": "routed", "link": "x"}])
    _create(cl, "web2", [{"ip": "10.0.0.4", "mode": "routed", "link": "x"}],
            conflicts_check=False)


def test_a_full_pool_names_the_network_and_nothing_is_created(cl: Cluster) -> None:
    _create(cl, "web1", [{"network": "net-a", "ip": "pool"}] * 4)
    with pytest.raises(OpPrereqError, match=r"^Unable to get a free IP for NIC 1 from the "
                       r"address pool: network net-a \(10\.0\.0\.0/29\) is full"):
        _create(cl, "web2", [{"network": "net-a", "ip": "pool"}] * 2)
    assert cl.store.find("instance", "web2") is None


def test_networks_must_exist_and_be_connected_and_pool_needs_one(cl: Cluster) -> None:
    cl.run("OP_NETWORK_ADD", network_name="net-b", network="10.1.0.0/29")
    with pytest.raises(ParameterError, match="No netparams found for network net-b"):
        _create(cl, "web1", [{"network": "net-b", "ip": "pool"}])
    with pytest.raises(NotFoundError, match="Network 'net-z' not found"):
        _create(cl, "web1", [{"network": "net-z"}])
    with pytest.raises(ParameterError, match="no mode or link"):
        _create(cl, "web1", [{"network": "net-a", "mode": "bridged"}])


def test_modify_adds_and_removes_nics_and_the_pool_follows(cl: Cluster) -> None:
    _create(cl, "web1", [{"network": "net-a", "ip": "pool"}])
    cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1",
           nics=[["add", {"network": "net-a", "ip": "pool"}]])
    assert [n.ip for n in cl.store.get("instance", "web1").nics] == ["10.0.0.2", "10.0.0.3"]
    with pytest.raises(OpPrereqError, match=r"belongs to network net-a, but the target NIC"):
        cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1",
               nics=[["modify", 0, {"network": "none"}]])
    with pytest.raises(OpPrereqError, match=r"Conflicting IP addresses found.*web1: nic0"):
        cl.run("OP_NETWORK_DISCONNECT", network_name="net-a", group_name="default")
    cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", nics=[["remove", 0, {}]])
    assert _free(cl) == 4
    cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1",
           nics=[["modify", 0, {"ip": "pool"}]])
    assert [n.ip for n in cl.store.get("instance", "web1").nics] == ["10.0.0.2"]
    cl.run("OP_INSTANCE_REMOVE", instance_name="web1")
    assert _free(cl) == 5
    cl.run("OP_NETWORK_DISCONNECT", network_name="net-a", group_name="default")
    cl.run("OP_NETWORK_REMOVE", network_name="net-a")


def test_an_instance_does_not_move_to_a_group_without_its_networks(cl: Cluster) -> None:
    cl.run("OP_GROUP_ADD", group_name="other")
    cl.run("OP_GROUP_ASSIGN_NODES", group_name="other", nodes=["node3"])
    cl.create("web1", disk_template="diskless", disks=[], start=False,
              nics=[{"network": "net-a", "ip": "pool"}])
    with pytest.raises(OpPrereqError, match="node group other is not connected to"):
        cl.run("OP_INSTANCE_FAILOVER", instance_name="web1", target_node="node3")
    with pytest.raises(OpPrereqError, match="NIC 0 is on network net-a"):
        cl.run("OP_INSTANCE_SET_PARAMS", instance_name="web1", pnode="node3")
    cl.run("OP_NETWORK_CONNECT", network_name="net-a", group_name="other",
           network_mode="routed", network_link="rt-b")
    cl.run("OP_INSTANCE_FAILOVER", instance_name="web1", target_node="node3")
    assert cl.store.get("instance", "web1").primary_node == cl.store.get("node", "node3").uuid
