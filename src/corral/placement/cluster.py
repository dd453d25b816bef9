"""The cluster as placement data: every node a root provider, every instance a consumer.

A node is a root provider with the node's UUID and name, ``VCPU`` (the node's CPUs
with its group's ``vcpu-ratio`` as the allocation ratio), ``MEMORY_MB`` (total memory,
what the node itself uses reserved) and ``DISK_GB`` (the size of the storage the
disk template in question uses) inventories, its node group's UUID and its named
aggregates as aggregates, and its traits. An instance is a consumer (the instance's
UUID) holding its VCPUs, maximum memory and disk space on its primary node.

Two entry points: :func:`cluster_store` builds a fresh store for one query;
:func:`sync` brings an existing store (say, the one served under ``/placement/``) in
step with the configuration, touching only the providers that are nodes (marked
with :data:`NODE_TRAIT`) and the consumers that are instances (project
:data:`CLUSTER_PROJECT`, type :data:`INSTANCE_CONSUMER_TYPE`).

The configuration's allocations are recorded as they are, even where they exceed a
node's capacity (an instance placed with ``--ignore-ipolicy``, a node whose memory
shrank): the node then simply has nothing left to offer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from corral.errors import PlacementConflictError
from corral.iallocator import ClusterView
from corral.iallocator.request import disk_space
from corral.objects import fill_params
from corral.objects.ipolicy import group_policy
from corral.placement.model import Inventory, PlacementStore
from corral.placement.names import is_valid_custom

if TYPE_CHECKING:
    from corral.config import ConfigStore
    from corral.objects import Instance

__all__ = ["CLUSTER_PROJECT", "INSTANCE_CONSUMER_TYPE", "NODE_TRAIT", "NodeResources",
           "Synced", "cluster_store", "instance_resources", "node_inventories", "sync"]

#: The trait every node provider carries, so that :func:`sync` tells the providers it
#: owns from the others of a shared store.
NODE_TRAIT: Final = "CUSTOM_CORRAL_NODE"
#: ``project_id`` and ``user_id`` of the instances' consumers.
CLUSTER_PROJECT: Final = "corral"
#: ``consumer_type`` of the instances' consumers (Placement's word for a server).
INSTANCE_CONSUMER_TYPE: Final = "INSTANCE"

_MIB_PER_GIB: Final = 1024


@dataclass(frozen=True, slots=True)
class NodeResources:
    """What a node has to offer, as its node daemon reported it."""

    cpus: int = 0
    memory_mb: int = 0
    #: memory the node itself uses (not for instances)
    memory_reserved_mb: int = 0
    #: size of the storage instances' disks take space from, MiB
    disk_mb: int = 0

    @classmethod
    def from_node_info(cls, info: Mapping[str, Any], disk_mb: int = 0) -> NodeResources:
        """From a ``node_info`` answer (the same keys the iallocator input reads) and the
        size of the storage in question."""
        def number(*keys: str) -> int:
            for key in keys:
                value = info.get(key)
                if isinstance(value, int | float) and not isinstance(value, bool):
                    return int(value)
            return 0

        total = number("memory_total")
        reserved = (number("memory_dom0") if "memory_dom0" in info
                    else total - number("memory_free") - number("memory_hv"))
        return cls(cpus=number("cpu_total", "cpu_count"), memory_mb=total,
                   memory_reserved_mb=min(max(0, reserved), total), disk_mb=disk_mb)


def node_inventories(resources: NodeResources, vcpu_ratio: float) -> dict[str, Inventory]:
    """A node's inventories; a resource it has none of gets no inventory."""
    inventories: dict[str, Inventory] = {}
    if resources.cpus > 0:
        capacity = int(resources.cpus * vcpu_ratio)
        # Ganeti caps an instance's VCPUs by the ratio only, not by the node's CPUs
        inventories["VCPU"] = Inventory(total=resources.cpus, allocation_ratio=vcpu_ratio,
                                        max_unit=max(resources.cpus, capacity))
    if resources.memory_mb > 0:
        inventories["MEMORY_MB"] = Inventory(total=resources.memory_mb,
                                             reserved=resources.memory_reserved_mb)
    disk_gb = resources.disk_mb // _MIB_PER_GIB
    if disk_gb > 0:
        inventories["DISK_GB"] = Inventory(total=disk_gb)
    return inventories


def instance_resources(vcpus: int, memory_mb: int, disk_mb: int) -> dict[str, int]:
    """What an instance holds (or asks for): VCPU, MEMORY_MB and DISK_GB (its disks'
    space rounded up to whole GiB); amounts of 0 are left out."""
    wanted = {"VCPU": vcpus, "MEMORY_MB": memory_mb,
              "DISK_GB": -(-disk_mb // _MIB_PER_GIB)}
    return {rc: amount for rc, amount in wanted.items() if amount > 0}


def cluster_store(config: ConfigStore | ClusterView,
                  live: Mapping[str, NodeResources]) -> PlacementStore:
    """A fresh store holding the cluster: its nodes (with the resources ``live`` gives
    by node name; a node missing there has no inventories) and its instances."""
    store = PlacementStore()
    sync(store, config, live)
    return store


@dataclass
class Synced:
    """What :func:`sync` changed, for a caller that saves a store (the ``/placement/``
    service): providers created, changed or deleted, consumers whose allocations
    changed (or that are gone), custom traits created."""

    providers: set[str] = field(default_factory=set)
    consumers: set[str] = field(default_factory=set)
    traits: set[str] = field(default_factory=set)
    #: Nodes whose provider could not be made, renamed or deleted (a name taken by
    #: another provider, children made by a client), by node UUID: why.
    refused: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.providers or self.consumers or self.traits)


def sync(store: PlacementStore, config: ConfigStore | ClusterView,
         live: Mapping[str, NodeResources]) -> Synced:
    """Bring ``store`` in step with the configuration: node providers created, renamed,
    given their inventories, aggregates and traits, or deleted with their node; the
    instances' allocations set, changed or removed. Other providers and consumers are
    left alone (a consumer that also held something on a removed node loses just
    that); a provider already holding the values it should is not changed (its
    generation stays). Returns what changed; a node whose provider cannot be made or
    renamed (its name is another provider's) or deleted (a client made children under
    it) is skipped and named in :attr:`Synced.refused`, the others are synced.
    """
    view = config if isinstance(config, ClusterView) else ClusterView.of(config)
    cluster = view.cluster
    nodes = {node.uuid: node for node in view.nodes}
    synced = Synced()
    before = {rp.uuid: rp.generation for rp in store.providers()}
    for trait in {NODE_TRAIT, *(t for n in view.nodes for t in n.traits)}:
        if is_valid_custom(trait) and not store.has_trait(trait):
            store.create_trait(trait)
            synced.traits.add(trait)
    owned = [rp.uuid for rp in store.providers()
             if rp.parent_uuid is None and NODE_TRAIT in store.provider_traits(rp.uuid)]
    # first what goes: the allocations of instances that are gone or moved, then the
    # providers of removed nodes (a provider with allocations cannot be deleted)
    wanted = _wanted_allocations(view)
    changes: dict[str, tuple[Mapping[str, Mapping[str, int]], int | None, str, str, str]] = {}
    for rp_uuid in owned:
        slot = store.slot_of(rp_uuid)
        assert slot is not None
        for consumer_uuid in store.at(slot).consumers:
            consumer = store.consumer(consumer_uuid)
            if (consumer is not None and consumer_uuid not in wanted
                    and consumer.project_id == CLUSTER_PROJECT
                    and consumer.consumer_type == INSTANCE_CONSUMER_TYPE):
                changes[consumer_uuid] = ({}, consumer.generation, CLUSTER_PROJECT,
                                          CLUSTER_PROJECT, INSTANCE_CONSUMER_TYPE)
    if changes:
        store.set_allocations_many(changes, enforce=False)
        synced.consumers.update(changes)
    for rp_uuid in owned:
        if rp_uuid not in nodes:
            synced.consumers.update(_release(store, rp_uuid))
            try:
                store.delete_provider(rp_uuid)
            except PlacementConflictError as err:
                synced.refused[rp_uuid] = err.message
    ratios = {uuid: float(group_policy(cluster.ipolicy, group.ipolicy).get("vcpu-ratio")
                          or 1.0) for uuid, group in view.groups.items()}
    default_ratio = float(cluster.ipolicy.get("vcpu-ratio") or 1.0)
    classes: dict[str, set[str]] = {}
    for node in view.nodes:
        resources = live.get(node.name)
        try:
            classes[node.uuid] = _sync_node(
                store, node.uuid, node.name,
                node_inventories(resources, ratios.get(node.group, default_ratio))
                if resources else {},
                {node.group, *node.aggregates}, {NODE_TRAIT, *node.traits})
        except PlacementConflictError as err:  # its name is another provider's
            synced.refused[node.uuid] = err.message
    changes = {}
    for consumer_uuid, allocations in wanted.items():
        fitting = {rp: {rc: n for rc, n in res.items() if rc in classes[rp]}
                   for rp, res in allocations.items() if rp in classes}
        consumer = store.consumer(consumer_uuid)
        if consumer is not None and consumer.allocations == {
                rp: res for rp, res in fitting.items() if res}:
            continue
        changes[consumer_uuid] = (fitting, consumer.generation if consumer else None,
                                  CLUSTER_PROJECT, CLUSTER_PROJECT, INSTANCE_CONSUMER_TYPE)
    if changes:
        store.set_allocations_many(changes, enforce=False)
        synced.consumers.update(changes)
    after = {rp.uuid: rp.generation for rp in store.providers()}
    synced.providers = {uuid for uuid in before.keys() | after.keys()
                        if before.get(uuid) != after.get(uuid)}
    return synced


def _release(store: PlacementStore, rp_uuid: str) -> set[str]:
    """Take every allocation off a provider (a removed node's leftovers); the consumers
    changed."""
    slot = store.slot_of(rp_uuid)
    assert slot is not None
    changes: dict[str, tuple[Mapping[str, Mapping[str, int]], int | None, str, str, str]] = {}
    for consumer_uuid in store.at(slot).consumers:
        consumer = store.consumer(consumer_uuid)
        assert consumer is not None
        kept = {rp: res for rp, res in consumer.allocations.items() if rp != rp_uuid}
        changes[consumer_uuid] = (kept, consumer.generation, consumer.project_id,
                                  consumer.user_id, consumer.consumer_type)
    if changes:
        store.set_allocations_many(changes, enforce=False)
    return set(changes)


def _sync_node(store: PlacementStore, rp_uuid: str, name: str,
               inventories: Mapping[str, Inventory], aggregates: set[str],
               traits: set[str]) -> set[str]:
    """One node's provider as it should be, changed only where it differs; the resource
    classes it has inventories of."""
    if store.slot_of(rp_uuid) is None:
        store.create_provider(name, rp_uuid)
    elif store.provider(rp_uuid).name != name:
        store.update_provider(rp_uuid, name)
    current = store.inventories(rp_uuid)
    if current != inventories:
        # a class the node no longer reports but instances still hold keeps its
        # inventory until they are gone (Placement refuses to drop one in use)
        used = store.usages(rp_uuid)
        kept = {rc: inv for rc, inv in current.items()
                if rc not in inventories and used.get(rc)}
        current = {**kept, **inventories}
        store.set_inventories(rp_uuid, None, current)
    if store.provider_aggregates(rp_uuid) != aggregates:
        store.set_provider_aggregates(rp_uuid, None, aggregates)
    if store.provider_traits(rp_uuid) != traits:
        store.set_provider_traits(rp_uuid, None, traits)
    return set(current)


def _wanted_allocations(view: ClusterView) -> dict[str, dict[str, dict[str, int]]]:
    """Every instance's allocation on its primary node, by instance UUID."""
    cluster = view.cluster
    be_defaults = cluster.beparams.get("default", {})
    group_be = {uuid: fill_params(be_defaults, g.beparams) for uuid, g in view.groups.items()}
    node_group = {node.uuid: node.group for node in view.nodes}
    wanted: dict[str, dict[str, dict[str, int]]] = {}
    for inst in view.instances:
        if inst.primary_node not in node_group:
            continue  # a dangling reference: the configuration's invariants forbid it
        be = fill_params(group_be.get(node_group[inst.primary_node], be_defaults),
                         inst.beparams)
        resources = instance_resources(int(be.get("vcpus") or 0), int(be.get("maxmem") or 0),
                                       _disk_mb(view, inst))
        if resources:
            wanted[inst.uuid] = {inst.primary_node: resources}
    return wanted


def _disk_mb(view: ClusterView, inst: Instance) -> int:
    disks = [view.disks.get(uuid) for uuid in inst.disks]
    return disk_space([{"dev_type": d.dev_type, "size": d.size} for d in disks
                       if d is not None])
