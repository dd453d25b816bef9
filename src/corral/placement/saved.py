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

from corral.objects.model import (
    PlacementConsumer,
    PlacementName,
    PlacementProvider,
    placement_name_uuid,
)
from corral.placement.model import Consumer, Inventory, PlacementStore

__all__ = ["Rows", "load", "rows_for"]


@dataclass
class Rows:
    """Rows to write (``put``; a new or changed object) and UUIDs of rows to delete."""

    put: list[PlacementProvider | PlacementConsumer | PlacementName] = field(
        default_factory=list)
    delete: list[tuple[str, str]] = field(default_factory=list)


def _inventory_fields(inv: Inventory) -> dict[str, float]:
    return {"total": inv.total, "reserved": inv.reserved, "min_unit": inv.min_unit,
            "max_unit": inv.max_unit if inv.max_unit is not None else inv.total,
            "step_size": inv.step_size, "allocation_ratio": inv.allocation_ratio}


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


def load(providers: Iterable[PlacementProvider], consumers: Iterable[PlacementConsumer],
         names: Iterable[PlacementName]) -> PlacementStore:
    """A store holding what the rows say: custom names, then providers in their
    creation order (a parent always before its children), then consumers."""
    store = PlacementStore()
    for name_row in names:
        if name_row.kind == "resource_class":
            store.create_resource_class(name_row.name)
        else:
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
            store.restore_provider(row.uuid, row.name, row.parent_uuid, row.generation,
                                   inventories, row.traits, row.aggregates)
        if len(later) == len(pending):
            raise ValueError("placement providers whose parents are missing: "
                             + ", ".join(r.uuid for r in later))
        pending = later
    for c in consumers:
        store.restore_consumer(Consumer(c.uuid, c.generation, c.project_id, c.user_id,
                                        c.consumer_type, {rp: dict(res) for rp, res
                                                          in c.allocations.items()}))
    return store
