"""Helpers for the configuration store tests: a small cluster and an independent
checker that recomputes every invariant from scratch (deliberately not using the
store's own indexes)."""

from __future__ import annotations

import ipaddress
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec

from corral.config import ConfigStore
from corral.objects import KINDS, Cluster, Disk, Instance, Network, Node, NodeGroup
from corral.objects.ipolicy import lenient_bounds

__all__ = ["check_invariants", "new_store", "snapshot"]


def new_store(path: Path) -> ConfigStore:
    """A store with cluster 'cluster.example.com', group 'default' and master 'node1'."""
    group = NodeGroup(name="default")
    node = Node(name="node1", primary_ip="192.0.2.1", group=group.uuid)
    cluster = Cluster(name="cluster.example.com", master_node=node.uuid)
    # small test instances, as on the testbed (Ganeti's defaults refuse disks < 1 GiB)
    cluster.ipolicy["minmax"] = lenient_bounds()
    return ConfigStore.create(path, cluster, group, node)


def snapshot(store: ConfigStore) -> dict[str, Any]:
    """Everything observable about the store, as builtins (for equality checks)."""
    return {
        "serial": store.serial,
        "objects": {kind: msgspec.to_builtins(store.all(kind)) for kind in KINDS},
    }


def _dupes(values: list[str]) -> list[str]:
    return [value for value, count in Counter(values).items() if count > 1]


def check_invariants(store: ConfigStore) -> None:
    """Assert every configuration invariant by brute force."""
    objects = {kind: store.all(kind) for kind in KINDS}
    uuids = {obj.uuid: kind for kind, objs in objects.items() for obj in objs}
    assert sum(len(objs) for objs in objects.values()) == len(uuids), "duplicate uuids"
    assert len(objects["cluster"]) == 1
    for kind, objs in objects.items():
        assert store.count(kind) == len(objs)
        for obj in objs:
            assert obj.uuid and store.get(kind, obj.uuid) is obj
            assert obj.serial_no >= 1
    nodes = [n for n in objects["node"] if isinstance(n, Node)]
    groups = [g for g in objects["nodegroup"] if isinstance(g, NodeGroup)]
    disks = [d for d in objects["disk"] if isinstance(d, Disk)]
    instances = [i for i in objects["instance"] if isinstance(i, Instance)]
    for kind, named in (("node", nodes), ("nodegroup", groups), ("instance", instances)):
        names = [o.name for o in named]
        assert all(names), f"empty {kind} name"
        assert not _dupes(names), f"duplicate {kind} names {_dupes(names)}"
        for obj in named:
            assert store.get(kind, obj.name) is obj
    disk_names = [d.name for d in disks if d.name is not None]
    assert not _dupes(disk_names), f"duplicate disk names {_dupes(disk_names)}"
    ips = [nic.ip for i in instances for nic in i.nics if nic.ip]
    macs = [nic.mac.lower() for i in instances for nic in i.nics if nic.mac]
    assert not _dupes(ips), f"duplicate IPs {_dupes(ips)}"
    node_ips = [n.primary_ip for n in nodes] + [
        n.secondary_ip for n in nodes if n.secondary_ip and n.secondary_ip != n.primary_ip
    ]
    assert not _dupes(node_ips), f"duplicate node IPs {_dupes(node_ips)}"
    assert not _dupes(macs), f"duplicate MACs {_dupes(macs)}"
    owned = [d for i in instances for d in i.disks]
    assert not _dupes(owned), f"disks in two instances {_dupes(owned)}"
    for node in nodes:
        assert uuids.get(node.group) == "nodegroup", f"node {node.name}: bad group"
    for inst in instances:
        assert uuids.get(inst.primary_node) == "node", f"instance {inst.name}: bad node"
        for disk_uuid in inst.disks:
            assert uuids.get(disk_uuid) == "disk", f"instance {inst.name}: bad disk"
    for disk in disks:
        for node_uuid in disk.nodes:
            assert uuids.get(node_uuid) == "node", f"disk {disk.uuid}: bad node"
    assert uuids.get(store.cluster.master_node) == "node", "bad master node"
    networks = {n.uuid: n for n in objects["network"] if isinstance(n, Network)}
    net_names = [n.name for n in networks.values()]
    assert not _dupes(net_names), f"duplicate network names {_dupes(net_names)}"
    for group in groups:
        for net_uuid in group.networks:
            assert net_uuid in networks, f"group {group.name}: bad network {net_uuid}"
    for inst in instances:
        for index, nic in enumerate(inst.nics):
            if not nic.network:
                continue
            net = networks.get(nic.network)
            assert net is not None, f"instance {inst.name} NIC {index}: bad network"
            if nic.ip:
                inside = ipaddress.ip_address(nic.ip) in ipaddress.ip_network(net.network)
                assert inside, f"instance {inst.name} NIC {index}: {nic.ip} outside {net.name}"
                assert nic.ip not in net.ext_reservations, \
                    f"instance {inst.name} NIC {index}: {nic.ip} reserved in {net.name}"
