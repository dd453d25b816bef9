"""Every configuration invariant: each violation is refused, naming the object and
the conflict, and neither the model nor the file changes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from corral.config import ConfigStore, Transaction
from corral.errors import AlreadyExistsError, ConfigurationError, NotFoundError
from corral.objects import NIC, Cluster, Disk, FilterRule, Instance, Node, NodeGroup
from tests.unit.config_helpers import check_invariants, new_store, snapshot

MAC1 = "aa:00:00:00:00:01"
IP1 = "10.0.0.1"


@dataclass
class World:
    """A store with: groups default and empty; nodes node1 (master), node2;
    disk d1 on node1 used by instance web1 (NIC MAC1/IP1); disk spare unused."""

    store: ConfigStore
    path: Path

    def uuid(self, kind: str, name: str) -> str:
        return self.store.get(kind, name).uuid


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    path = tmp_path / "config.db"
    store = new_store(path)
    node1 = store.get("node", "node1").uuid
    with store.transaction() as txn:
        txn.add(NodeGroup(name="empty"))
        txn.add(Node(name="node2", primary_ip="192.0.2.2",
                     group=store.get("nodegroup", "default").uuid))
        disk = Disk(name="d1", nodes=[node1], size=1024)
        txn.add(disk)
        txn.add(Disk(name="spare", nodes=[node1], size=512))
        txn.add(Disk(name=None, nodes=[node1]))
        txn.add(Instance(name="web1", primary_node=node1, disks=[disk.uuid],
                         nics=[NIC(mac=MAC1, ip=IP1), NIC(mac="aa:00:00:00:00:02")]))
    check_invariants(store)
    yield World(store, path)
    store.close()


def refused(world: World, error: type[Exception], fragment: str,
            change: Callable[[Transaction, World], None]) -> None:
    """Assert ``change`` is refused with ``error`` mentioning ``fragment``, and that
    neither the model nor the file changed."""
    before = snapshot(world.store)
    with pytest.raises(error) as info, world.store.transaction() as txn:
        change(txn, world)
    assert fragment in str(info.value), str(info.value)
    assert snapshot(world.store) == before
    check_invariants(world.store)
    world.store.close()
    world.store = ConfigStore.open(world.path)
    assert snapshot(world.store) == before


def _node(w: World, name: str = "node3", group: str | None = None) -> Node:
    return Node(name=name, primary_ip="192.0.2.3", group=group or w.uuid("nodegroup", "default"))


def _instance(w: World, name: str = "web2", **kwargs: object) -> Instance:
    return Instance(name=name, primary_node=w.uuid("node", "node1"), **kwargs)  # type: ignore[arg-type]


# -- unique names ----------------------------------------------------------------------

def test_duplicate_node_name(world: World) -> None:
    refused(world, AlreadyExistsError, "node 'node2' already exists",
            lambda txn, w: txn.add(_node(w, "node2")))


def test_duplicate_group_name(world: World) -> None:
    refused(world, AlreadyExistsError, "node group 'empty' already exists",
            lambda txn, w: txn.add(NodeGroup(name="empty")))


def test_duplicate_instance_name(world: World) -> None:
    refused(world, AlreadyExistsError, "instance 'web1' already exists",
            lambda txn, w: txn.add(_instance(w, "web1")))


def test_duplicate_disk_name(world: World) -> None:
    refused(world, AlreadyExistsError, "disk 'spare' already exists",
            lambda txn, w: txn.add(Disk(name="spare")))


def test_unnamed_disks_do_not_clash(world: World) -> None:
    with world.store.transaction() as txn:
        txn.add(Disk(nodes=[world.uuid("node", "node1")]))
    assert [d.name for d in world.store.all("disk")].count(None) == 2


def test_rename_onto_existing_name(world: World) -> None:
    def change(txn: Transaction, w: World) -> None:
        node = txn.get("node", "node2")
        node.name = "node1"
        txn.update(node)

    refused(world, AlreadyExistsError, "node 'node1' already exists", change)


def test_two_new_objects_with_one_name(world: World) -> None:
    def change(txn: Transaction, w: World) -> None:
        txn.add(_instance(w, "twin"))
        txn.add(_instance(w, "twin"))

    refused(world, AlreadyExistsError, "instance 'twin' already exists", change)


def test_same_name_in_different_kinds_is_fine(world: World) -> None:
    with world.store.transaction() as txn:
        txn.add(_instance(world, "node2"))
    assert world.store.get("instance", "node2").name == "node2"


def test_empty_name(world: World) -> None:
    refused(world, ConfigurationError, "the name must not be empty",
            lambda txn, w: txn.add(_instance(w, "")))


def test_swapping_names_in_one_transaction(world: World) -> None:
    with world.store.transaction() as txn:
        txn.add(_instance(world, "web2"))
    with world.store.transaction() as txn:
        one, two = txn.get("instance", "web1"), txn.get("instance", "web2")
        one.name, two.name = "web2", "web1"
        txn.update(one)
        txn.update(two)
    assert world.store.get("instance", "web2").disks  # the former web1
    check_invariants(world.store)


# -- unique uuids ----------------------------------------------------------------------

def test_uuid_used_by_another_kind(world: World) -> None:
    refused(world, AlreadyExistsError, "is already used by node 'node1'",
            lambda txn, w: txn.add(FilterRule(uuid=w.uuid("node", "node1"))))


def test_uuid_used_twice_in_one_transaction(world: World) -> None:
    def change(txn: Transaction, w: World) -> None:
        txn.add(FilterRule(uuid="f1"))
        txn.add(FilterRule(uuid="f1"))

    refused(world, AlreadyExistsError, "uuid f1 is already used", change)


def test_uuid_added_concurrently(world: World) -> None:
    slow = world.store.transaction()
    slow.add(FilterRule(uuid="f1"))
    with world.store.transaction() as fast:
        fast.add(FilterRule(uuid="f1", priority=1))
    before = snapshot(world.store)
    with pytest.raises(AlreadyExistsError, match="uuid f1"):
        slow.commit()
    assert snapshot(world.store) == before


def test_second_cluster(world: World) -> None:
    refused(world, AlreadyExistsError, "only one cluster",
            lambda txn, w: txn.add(Cluster(name="other", master_node=w.uuid("node", "node1"))))


def test_cluster_cannot_be_removed(world: World) -> None:
    refused(world, ConfigurationError, "cluster object cannot be removed",
            lambda txn, w: txn.remove("cluster", w.store.cluster.uuid))


# -- NIC IPs and MACs ------------------------------------------------------------------

def test_duplicate_ip(world: World) -> None:
    refused(world, ConfigurationError, f"instance 'web2': NIC 0 IP {IP1} is already used by "
            "instance 'web1'",
            lambda txn, w: txn.add(_instance(w, nics=[NIC(mac="aa:00:00:00:00:09", ip=IP1)])))


def test_duplicate_mac_ignores_case(world: World) -> None:
    refused(world, ConfigurationError, f"NIC 1 MAC {MAC1} is already used by instance 'web1'",
            lambda txn, w: txn.add(_instance(w, nics=[NIC(mac="aa:00:00:00:00:08"),
                                                      NIC(mac=MAC1.upper())])))


def test_duplicate_mac_within_one_instance(world: World) -> None:
    mac = "aa:00:00:00:00:07"
    refused(world, ConfigurationError, f"NIC 1 MAC {mac} is also its NIC 0 MAC {mac}",
            lambda txn, w: txn.add(_instance(w, nics=[NIC(mac=mac), NIC(mac=mac)])))


def test_nics_without_ip_do_not_clash(world: World) -> None:
    with world.store.transaction() as txn:
        txn.add(_instance(world, nics=[NIC(mac="aa:00:00:00:00:0a", ip=None)]))
        txn.add(_instance(world, "web3", nics=[NIC(mac="aa:00:00:00:00:0b", ip=None)]))
    check_invariants(world.store)


def test_moving_an_ip_between_instances_in_one_transaction(world: World) -> None:
    with world.store.transaction() as txn:
        web1 = txn.get("instance", "web1")
        web1.nics[0].ip = None
        txn.update(web1)
        txn.add(_instance(world, nics=[NIC(mac="aa:00:00:00:00:0c", ip=IP1)]))
    assert world.store.get("instance", "web2").nics[0].ip == IP1


def test_ip_freed_by_removal_is_reusable(world: World) -> None:
    with world.store.transaction() as txn:
        txn.remove("instance", "web1")
        txn.add(_instance(world, nics=[NIC(mac=MAC1, ip=IP1)]))
    check_invariants(world.store)


def test_modifying_nic_onto_taken_mac(world: World) -> None:
    with world.store.transaction() as txn:
        txn.add(_instance(world, nics=[NIC(mac="aa:00:00:00:00:0d")]))

    def change(txn: Transaction, w: World) -> None:
        web2 = txn.get("instance", "web2")
        web2.nics[0].mac = MAC1
        txn.update(web2)

    refused(world, ConfigurationError, "already used by instance 'web1'", change)


def test_duplicate_node_primary_ip(world: World) -> None:
    refused(world, ConfigurationError,
            "node 'node3': primary IP 192.0.2.2 is already used by node 'node2'",
            lambda txn, w: txn.add(Node(name="node3", primary_ip="192.0.2.2",
                                        group=w.uuid("nodegroup", "default"))))


def test_node_secondary_ip_clashing_with_another_nodes_primary(world: World) -> None:
    refused(world, ConfigurationError,
            "node 'node3': secondary IP 192.0.2.1 is already used by node 'node1'",
            lambda txn, w: txn.add(Node(name="node3", primary_ip="192.0.2.3",
                                        secondary_ip="192.0.2.1",
                                        group=w.uuid("nodegroup", "default"))))


def test_node_may_use_its_primary_ip_as_secondary_and_nic_ips_are_apart(world: World) -> None:
    with world.store.transaction() as txn:
        txn.add(Node(name="node3", primary_ip="192.0.2.3", secondary_ip="192.0.2.3",
                     group=world.uuid("nodegroup", "default")))
        # Instance NIC addresses live in their own namespace, as in Ganeti.
        txn.add(_instance(world, nics=[NIC(mac="aa:00:00:00:00:0e", ip="192.0.2.3")]))
    check_invariants(world.store)


# -- references ------------------------------------------------------------------------

def test_node_in_missing_group(world: World) -> None:
    refused(world, ConfigurationError, "node 'node3': its group 'nope' does not exist",
            lambda txn, w: txn.add(_node(w, group="nope")))


def test_instance_on_missing_node(world: World) -> None:
    refused(world, ConfigurationError, "instance 'web2': its primary node 'node9' does not exist",
            lambda txn, w: txn.add(Instance(name="web2", primary_node="node9")))


def test_reference_to_object_of_wrong_kind(world: World) -> None:
    refused(world, ConfigurationError, "is node group 'default', not a node",
            lambda txn, w: txn.add(Instance(name="web2",
                                            primary_node=w.uuid("nodegroup", "default"))))


def test_instance_with_missing_disk(world: World) -> None:
    refused(world, ConfigurationError, "instance 'web2': its disk 0 'nodisk' does not exist",
            lambda txn, w: txn.add(_instance(w, disks=["nodisk"])))


def test_disk_on_missing_node(world: World) -> None:
    refused(world, ConfigurationError, "disk 'd2': its node 1 'gone' does not exist",
            lambda txn, w: txn.add(Disk(name="d2", nodes=[w.uuid("node", "node1"), "gone"])))


def test_master_node_must_exist(world: World) -> None:
    def change(txn: Transaction, w: World) -> None:
        cluster = txn.cluster()
        cluster.master_node = "elsewhere"
        txn.update(cluster)

    refused(world, ConfigurationError, "its master node 'elsewhere' does not exist", change)


def test_disk_in_two_instances(world: World) -> None:
    refused(world, ConfigurationError, "is already used by instance 'web1'",
            lambda txn, w: txn.add(_instance(w, disks=[w.uuid("disk", "d1")])))


def test_disk_twice_in_one_instance(world: World) -> None:
    def change(txn: Transaction, w: World) -> None:
        spare = w.uuid("disk", "spare")
        txn.add(_instance(w, disks=[spare, spare]))

    refused(world, ConfigurationError, "disk 1", change)


def test_reference_to_object_removed_in_same_transaction(world: World) -> None:
    def change(txn: Transaction, w: World) -> None:
        txn.remove("disk", "spare")
        txn.add(_instance(w, disks=[w.uuid("disk", "spare")]))

    refused(world, ConfigurationError, "is being removed", change)


def test_new_objects_may_refer_to_each_other(world: World) -> None:
    with world.store.transaction() as txn:
        group = NodeGroup(name="rack2")
        node = Node(name="node3", primary_ip="192.0.2.3", group=group.uuid)
        disk = Disk(name="d3", nodes=[node.uuid])
        txn.add(_instance(world, "web3", disks=[disk.uuid]))
        txn.add(disk)
        txn.add(node)
        txn.add(group)
    check_invariants(world.store)


# -- removals --------------------------------------------------------------------------

def test_remove_group_with_nodes(world: World) -> None:
    refused(world, ConfigurationError,
            "cannot remove node group 'default': node 'node1' still refers to it as its group",
            lambda txn, w: txn.remove("nodegroup", "default"))


def test_remove_node_used_by_instance(world: World) -> None:
    with world.store.transaction() as txn:
        txn.add(Instance(name="web9", primary_node=world.uuid("node", "node2")))
    refused(world, ConfigurationError,
            "cannot remove node 'node2': instance 'web9' still refers to it as its primary node",
            lambda txn, w: txn.remove("node", "node2"))


def test_removal_message_counts_other_referrers(world: World) -> None:
    # node1 holds three disks, web1 and the cluster's master role.
    refused(world, ConfigurationError, "(and 4 other objects do too)",
            lambda txn, w: txn.remove("node", "node1"))


def test_remove_node_used_by_disk_only(world: World) -> None:
    with world.store.transaction() as txn:
        txn.add(Disk(name="on2", nodes=[world.uuid("node", "node2")]))
    refused(world, ConfigurationError,
            "cannot remove node 'node2': disk 'on2' still refers to it as its node 0",
            lambda txn, w: txn.remove("node", "node2"))


def test_remove_master_node(world: World) -> None:
    def change(txn: Transaction, w: World) -> None:
        txn.remove("instance", "web1")
        for disk in w.store.all("disk"):
            txn.remove("disk", disk.uuid)
        txn.remove("node", "node1")

    refused(world, ConfigurationError,
            "cannot remove node 'node1': cluster 'cluster.example.com' still refers to it as "
            "its master node", change)


def test_remove_disk_used_by_instance(world: World) -> None:
    refused(world, ConfigurationError,
            "cannot remove disk 'd1': instance 'web1' still refers to it as its disk 0",
            lambda txn, w: txn.remove("disk", "d1"))


def test_remove_with_referrers_in_the_same_transaction(world: World) -> None:
    with world.store.transaction() as txn:
        txn.remove("instance", "web1")
        txn.remove("disk", "d1")
        txn.remove("nodegroup", "empty")
    with world.store.transaction() as txn:
        node = txn.get("node", "node2")
        node.group = world.uuid("nodegroup", "default")
        txn.update(node)
    check_invariants(world.store)
    assert world.store.find("disk", "d1") is None


def test_detach_disk_then_remove_it(world: World) -> None:
    with world.store.transaction() as txn:
        web1 = txn.get("instance", "web1")
        web1.disks = []
        txn.update(web1)
        txn.remove("disk", "d1")
    check_invariants(world.store)


def test_remove_missing_object(world: World) -> None:
    refused(world, NotFoundError, "node 'node9'", lambda txn, w: txn.remove("node", "node9"))


def test_failed_commit_leaves_indexes_intact(world: World) -> None:
    # After a refused commit, the indexes still answer exactly as before.
    refused(world, ConfigurationError, "already used",
            lambda txn, w: txn.add(_instance(w, nics=[NIC(mac=MAC1)])))
    refused(world, AlreadyExistsError, "already exists",
            lambda txn, w: txn.add(_instance(w, "web1")))
    with world.store.transaction() as txn:
        txn.add(_instance(world, "web2", nics=[NIC(mac="aa:00:00:00:00:0e", ip="10.0.0.2")]))
    check_invariants(world.store)


# -- named placement aggregates ------------------------------------------------------

AGG = "44444444-4444-4444-8444-444444444444"


def _name_aggregate(world: World, aggregates: dict[str, str]) -> None:
    with world.store.transaction() as txn:
        cluster = txn.cluster()
        cluster.aggregates = aggregates
        txn.update(cluster)


def test_a_node_is_only_in_named_aggregates(world: World) -> None:
    def join(txn: Transaction, w: World) -> None:
        node = txn.get("node", "node2")
        node.aggregates = [AGG]
        txn.update(node)

    refused(world, ConfigurationError, f"its aggregate(s) {AGG} are not named", join)
    _name_aggregate(world, {"rack1": AGG})
    with world.store.transaction() as txn:
        join(txn, world)
    assert world.store.get("node", "node2").aggregates == [AGG]


def test_a_named_aggregate_with_nodes_stays(world: World) -> None:
    _name_aggregate(world, {"rack1": AGG})
    with world.store.transaction() as txn:
        node = txn.get("node", "node2")
        node.aggregates = [AGG]
        txn.update(node)

    def forget(txn: Transaction, w: World) -> None:
        cluster = txn.cluster()
        cluster.aggregates = {}
        txn.update(cluster)

    refused(world, ConfigurationError, "cannot remove aggregate rack1: node 'node2'", forget)
    refused(world, ConfigurationError, "two aggregate names share one aggregate UUID",
            lambda txn, w: (setattr(c := txn.cluster(), "aggregates",
                                    {"rack1": AGG, "rack2": AGG}), txn.update(c)))
