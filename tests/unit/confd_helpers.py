"""A configuration with every node role and instance NICs on two links, for the confd
tests (unit and integration)."""

from __future__ import annotations

from pathlib import Path

from corral.config import ConfigStore
from corral.objects import NIC, Cluster, Instance, Node, NodeGroup

__all__ = ["KEY", "build_config"]

#: An HMAC key in the format gnt-cluster init writes (64 hex digits).
KEY = b"5f0c3ad1c9e54c3c8e1a0d4f7b2a6e9d5f0c3ad1c9e54c3c8e1a0d4f7b2a6e9d"


def build_config(path: Path) -> ConfigStore:
    """Cluster ``confd.example.com`` (master IP 192.0.2.254, default NIC link
    ``xen-br0``) with nodes

    * ``node1`` 192.0.2.1: master
    * ``node2`` 192.0.2.2: candidate
    * ``node3`` 192.0.2.3: regular (not a candidate)
    * ``node4`` 192.0.2.4: drained candidate
    * ``node5`` 192.0.2.5: offline

    and instances ``web1`` (node2; 198.51.100.1 on the default link, 203.0.113.1 on
    ``br1``), ``web2`` (node3; 198.51.100.2) and ``db1`` (node1; no IP).
    """
    group = NodeGroup(name="default")
    n1 = Node(name="node1", primary_ip="192.0.2.1", group=group.uuid)
    cluster = Cluster(name="confd.example.com", master_node=n1.uuid, master_ip="192.0.2.254")
    store = ConfigStore.create(path, cluster, group, n1)
    n2 = Node(name="node2", primary_ip="192.0.2.2", group=group.uuid)
    n3 = Node(name="node3", primary_ip="192.0.2.3", group=group.uuid, master_candidate=False)
    n4 = Node(name="node4", primary_ip="192.0.2.4", group=group.uuid, drained=True)
    n5 = Node(name="node5", primary_ip="192.0.2.5", group=group.uuid, offline=True,
              master_candidate=False)
    with store.transaction() as txn:
        for node in (n2, n3, n4, n5):
            txn.add(node)
        txn.add(Instance(name="web1", primary_node=n2.uuid, nics=[
            NIC(ip="198.51.100.1", mac="aa:00:00:00:00:01"),
            NIC(ip="203.0.113.1", mac="aa:00:00:00:00:02", nicparams={"link": "br1"}),
        ]))
        txn.add(Instance(name="web2", primary_node=n3.uuid, nics=[
            NIC(ip="198.51.100.2", mac="aa:00:00:00:00:03")]))
        txn.add(Instance(name="db1", primary_node=n1.uuid, nics=[
            NIC(mac="aa:00:00:00:00:04")]))
    return store
