"""The placement engine's state as configuration rows, and back.

The master daemon keeps placement in the configuration store
(:class:`~corral.objects.model.PlacementProvider`,
:class:`~corral.objects.model.PlacementConsumer`,
:class:`~corral.objects.model.PlacementName`), so it is committed, replicated to the
master candidates and found again after a restart or a failover like every other
object. The engine is rebuilt from the rows when the master daemon starts
(:func:`load`); after each change, the rows of what changed are written
(:func:`rows_for`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from corral.errors import PlacementError
from corral.objects.model import (
    PlacementConsumer,
    PlacementName,
    PlacementProvider,
    placement_name_uuid,
)
from corral.placement.model import Consumer, Inventory, PlacementStore
from corral.placement.names import is_valid_custom

__all__ = ["Restored", "Rows", "load", "restore", "rows_for"]


@dataclass
class Rows:
    """Rows to write (``put``; a new or changed object) and UUIDs of rows to delete."""

    put: list[PlacementProvider | PlacementConsumer | PlacementName] = field(
        default_factory=list)
    delete: list[tuple[str, str]] = field(default_factory=list)


def _inventory_fields(inv: Inventory) -> dict[str, float]:
    # floats, as the row's type reads them back: a row must encode to the bytes it was
    # stored as, or the configuration store rewrites it (a commit) at every open
    fields = {"total": inv.total, "reserved": inv.reserved, "min_unit": inv.min_unit,
              "max_unit": inv.max_unit if inv.max_unit is not None else inv.total,
              "step_size": inv.step_size, "allocation_ratio": inv.allocation_ratio}
    return {key: float(value) for key, value in fields.items()}


def rows_for(store: PlacementStore, *, providers: Iterable[str] = (),
             consumers: Iterable[str] = (), resource_classes: Iterable[str] = (),
             traits: Iterable[str] = (),
             order_of: Callable[[str], int | None] = lambda _uuid: None,
             next_order: int = 0) -> Rows:
    """The rows of the named objects as the engine has them now (a missing one is a
    deletion). A provider keeps its saved place in the creation order (``order_of``);
    new ones are numbered from ``next_order`` in creation order."""
    rows = Rows()
    present = []
    for rp_uuid in providers:
        slot = store.slot_of(rp_uuid)
        if slot is None:
            rows.delete.append(("placement_provider", rp_uuid))
        else:
            present.append((slot, rp_uuid))
    for slot, rp_uuid in sorted(present):
        order = order_of(rp_uuid)
        if order is None:
            order, next_order = next_order, next_order + 1
        rp = store.provider(rp_uuid)
        record = store.at(slot)
        rows.put.append(PlacementProvider(
            uuid=rp_uuid, name=rp.name, parent_uuid=rp.parent_uuid,
            generation=rp.generation,
            inventories={rc: _inventory_fields(inv) for rc, inv in record.inventories.items()},
            traits=sorted(record.traits), aggregates=sorted(record.aggregates),
            order=order))
    for consumer_uuid in consumers:
        consumer = store.consumer(consumer_uuid)
        if consumer is None:
            rows.delete.append(("placement_consumer", consumer_uuid))
        else:
            rows.put.append(PlacementConsumer(
                uuid=consumer_uuid, project_id=consumer.project_id,
                user_id=consumer.user_id, consumer_type=consumer.consumer_type,
                generation=consumer.generation,
                allocations={rp: dict(res) for rp, res in consumer.allocations.items()}))
    kinds: tuple[tuple[Literal["resource_class", "trait"], Iterable[str],
                       Callable[[str], bool]], ...] = (
        ("resource_class", resource_classes, store.has_resource_class),
        ("trait", traits, store.has_trait))
    for kind, names, exists in kinds:
        for name in names:
            uuid = placement_name_uuid(kind, name)
            if exists(name):
                rows.put.append(PlacementName(uuid=uuid, kind=kind, name=name))
            else:
                rows.delete.append(("placement_name", uuid))
    return rows


@dataclass
class Restored:
    """What :func:`restore` could not put in the store yet: provider rows it skipped
    (a name taken, their parent skipped) and consumer rows whose allocations name a
    provider or an inventory the store lacks (say, a node provider before the node's
    first live figures). Their rows stay as they are; nothing is lost."""

    providers: list[PlacementProvider] = field(default_factory=list)
    consumers: list[PlacementConsumer] = field(default_factory=list)


def load(providers: Iterable[PlacementProvider], consumers: Iterable[PlacementConsumer],
         names: Iterable[PlacementName]) -> PlacementStore:
    """A store holding what the rows say: custom names, then providers in their
    creation order (a parent always before its children), then consumers.

    :raises ValueError: a row cannot be restored (see :func:`restore`).
    """
    store = PlacementStore()
    left = restore(store, providers, consumers, names)
    if left.providers or left.consumers:
        raise ValueError("placement rows that cannot be restored: " + ", ".join(
            [row.uuid for row in left.providers] + [row.uuid for row in left.consumers]))
    return store


def restore(store: PlacementStore, providers: Iterable[PlacementProvider],
            consumers: Iterable[PlacementConsumer], names: Iterable[PlacementName],
            ) -> Restored:
    """Add what the rows say to ``store``, which may already hold other providers and
    consumers (the cluster's nodes and instances, :mod:`corral.masterd.placement_sync`):
    custom names, providers in their creation order (a parent always before its
    children), then consumers (without capacity checks: what was allocated stays
    allocated). A custom trait a provider names is created when missing (one the
    cluster's sync had made). Returns what could not be added."""
    left = Restored()
    for name_row in names:
        if name_row.kind == "resource_class":
            if not store.has_resource_class(name_row.name):
                store.create_resource_class(name_row.name)
        elif not store.has_trait(name_row.name):
            store.create_trait(name_row.name)
    pending = sorted(providers, key=lambda row: (row.order, row.ctime, row.uuid))
    while pending:
        later = []
        for row in pending:
            if row.parent_uuid is not None and store.slot_of(row.parent_uuid) is None:
                later.append(row)
                continue
            inventories = {rc: Inventory(
                total=int(f["total"]), reserved=int(f.get("reserved", 0)),
                min_unit=int(f.get("min_unit", 1)), max_unit=int(f.get("max_unit",
                                                                      f["total"])),
                step_size=int(f.get("step_size", 1)),
                allocation_ratio=float(f.get("allocation_ratio", 1.0)))
                for rc, f in row.inventories.items()}
            for trait in row.traits:
                if is_valid_custom(trait) and not store.has_trait(trait):
                    store.create_trait(trait)
            existed = store.slot_of(row.uuid) is not None
            try:
                store.restore_provider(row.uuid, row.name, row.parent_uuid, row.generation,
                                       inventories, row.traits, row.aggregates)
            except PlacementError:
                if not existed and store.slot_of(row.uuid) is not None:
                    store.delete_provider(row.uuid)  # created, then a later step failed
                left.providers.append(row)
        if len(later) == len(pending):
            left.providers.extend(later)
            break
        pending = later
    for c in consumers:
        try:
            store.restore_consumer(
                Consumer(c.uuid, c.generation, c.project_id, c.user_id, c.consumer_type,
                         {rp: dict(res) for rp, res in c.allocations.items()}),
                enforce=False)
        except PlacementError:
            left.consumers.append(c)
    return left
