"""The placement store: resource providers, inventories, traits, aggregates,
allocations and usages, kept in memory with indexes for fast queries.

Semantics follow OpenStack Placement (microversion 1.39): resource providers form trees
(``root``, ``parent``) and carry a ``generation`` that every change to them increments; a
change based on an older generation raises :class:`PlacementConcurrentUpdateError`
(Placement's ``placement.concurrent_update``), so two writers never silently overwrite
each other. Consumers (whatever holds allocations, an instance for corral) have a
generation too.

Data layout (why it is shaped so): each provider gets a *slot*, a small integer that never
changes while it lives. Aggregate and trait membership are Python ints used as bitsets
over slots (``1 << slot``), so "providers in A or B but not in C" is two ORs and an AND
NOT, whatever the number of providers. Per resource class, numpy arrays over slots hold
capacity, usage and the unit constraints, updated incrementally when an inventory or an
allocation changes; "which providers can give 1024 MEMORY_MB" is one vectorised
comparison. :mod:`corral.placement.candidates` builds allocation candidates on these.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from corral.errors import (
    PlacementConcurrentUpdateError,
    PlacementConflictError,
    PlacementError,
    PlacementNotFoundError,
)
from corral.placement.names import STANDARD_RESOURCE_CLASSES, STANDARD_TRAITS, is_valid_custom

__all__ = ["Consumer", "Inventory", "PlacementStore", "ProviderSummary", "Renamed",
           "ResourceProvider", "Snapshot",
           "bits_to_mask", "mask_to_bits"]

#: A fresh generation for a consumer that has none yet (a new consumer).
NEW_CONSUMER: None = None


@dataclass(frozen=True)
class Inventory:
    """An amount of one resource class a provider offers, with Placement's defaults."""

    total: int
    reserved: int = 0
    min_unit: int = 1
    max_unit: int | None = None  # None: the total
    step_size: int = 1
    allocation_ratio: float = 1.0

    def __post_init__(self) -> None:
        if self.max_unit is None:
            object.__setattr__(self, "max_unit", self.total)
        for name in ("total", "min_unit", "max_unit", "step_size"):
            if getattr(self, name) < 1:
                raise PlacementError(f"Inventory field '{name}' must be at least 1; "
                                     f"got {getattr(self, name)}.")
        if self.reserved < 0 or self.allocation_ratio <= 0:
            raise PlacementError("Inventory 'reserved' must be at least 0 and "
                                 "'allocation_ratio' greater than 0.")
        if self.reserved > self.total:
            raise PlacementError(f"Unable to update inventory: reserved ({self.reserved}) "
                                 f"is greater than total ({self.total}).")

    @property
    def capacity(self) -> int:
        """What may be allocated in all: ``(total - reserved) * allocation_ratio``,
        rounded down as Placement does."""
        return int((self.total - self.reserved) * self.allocation_ratio)


@dataclass
class Renamed:
    """The providers and consumers a renamed resource class touched."""

    providers: set[str] = field(default_factory=set)
    consumers: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Snapshot:
    """Providers' inventories and generations and consumers (None: absent) as they
    were (:meth:`PlacementStore.snapshot`)."""

    providers: dict[str, tuple[dict[str, Inventory], int]]
    consumers: dict[str, Consumer | None]


@dataclass(frozen=True)
class ResourceProvider:
    """A read-only view of a resource provider."""

    uuid: str
    name: str
    generation: int
    root_uuid: str
    parent_uuid: str | None


@dataclass(frozen=True)
class ProviderSummary:
    """What a caller needs to know of a provider named in the candidates."""

    uuid: str
    #: resource class -> (capacity, used), for every inventory of the provider
    resources: dict[str, tuple[int, int]]
    traits: frozenset[str]
    parent_uuid: str | None
    root_uuid: str


@dataclass
class Consumer:
    """What holds allocations; ``allocations`` maps provider uuid to resource class to
    amount."""

    uuid: str
    generation: int
    project_id: str
    user_id: str
    consumer_type: str = "UNKNOWN"
    allocations: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass
class _Provider:
    uuid: str
    name: str
    slot: int
    root: int
    parent: int | None
    generation: int = 0
    children: set[int] = field(default_factory=set)
    inventories: dict[str, Inventory] = field(default_factory=dict)
    traits: set[str] = field(default_factory=set)
    aggregates: set[str] = field(default_factory=set)
    #: resource class -> amount allocated in all
    used: dict[str, int] = field(default_factory=dict)
    #: consumers holding something here
    consumers: set[str] = field(default_factory=set)


def mask_to_bits(mask: npt.NDArray[np.bool_]) -> int:
    """A boolean array over slots as a bitset (bit ``i`` set where ``mask[i]``)."""
    return int.from_bytes(np.packbits(mask, bitorder="little").tobytes(), "little")


def bits_to_mask(bits: int, size: int) -> npt.NDArray[np.bool_]:
    """A bitset over slots as a boolean array of ``size`` elements."""
    raw = bits.to_bytes((size + 7) // 8 or 1, "little")
    return np.unpackbits(np.frombuffer(raw, dtype=np.uint8), bitorder="little")[:size].astype(bool)


def slots_of(bits: int) -> list[int]:
    """The slots set in a bitset, in increasing order."""
    out: list[int] = []
    while bits:
        low = bits & -bits
        out.append(low.bit_length() - 1)
        bits ^= low
    return out


class _Column:
    """Capacity, usage and unit constraints of one resource class over all slots."""

    def __init__(self, size: int) -> None:
        self.present = np.zeros(size, dtype=bool)
        self.capacity = np.zeros(size, dtype=np.int64)
        self.used = np.zeros(size, dtype=np.int64)
        self.min_unit = np.zeros(size, dtype=np.int64)
        self.max_unit = np.zeros(size, dtype=np.int64)
        self.step = np.ones(size, dtype=np.int64)

    def grow(self, size: int) -> None:
        for name in ("present", "capacity", "used", "min_unit", "max_unit", "step"):
            old = getattr(self, name)
            new = (np.ones if name == "step" else np.zeros)(size, dtype=old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)

    def fits(self, amount: int) -> npt.NDArray[np.bool_]:
        """Slots that can take ``amount`` more of this class in one allocation."""
        fits: npt.NDArray[np.bool_] = (
            self.present & (self.capacity - self.used >= amount)
            & (self.min_unit <= amount) & (self.max_unit >= amount)
            & (amount % self.step == 0))
        return fits


def _is_uuid(value: str) -> bool:
    try:
        return str(uuidlib.UUID(value)) == value
    except ValueError:
        return False


class PlacementStore:
    """All placement data of one service, in memory, with its query indexes.

    Not thread-safe: one asyncio event loop owns it (methods never await), which makes
    each method atomic; a method that fails changes nothing.
    """

    def __init__(self) -> None:
        self._by_uuid: dict[str, _Provider] = {}
        self._by_name: dict[str, str] = {}
        self._slots: list[_Provider | None] = []
        #: slot -> provider uuid ("" for a free slot); read-only for callers
        self.uuid_at: list[str] = []
        self._size = 64
        #: slot -> root slot (-1 for a free slot)
        self.root_of = np.full(self._size, -1, dtype=np.int64)
        self._columns: dict[str, _Column] = {}
        #: aggregate uuid -> bitset of the providers associated with it
        self._agg_bits: dict[str, int] = {}
        #: trait -> bitset of the providers that have it
        self._trait_bits: dict[str, int] = {}
        self._alive_bits = 0
        self._custom_classes: set[str] = set()
        self._custom_traits: set[str] = set()
        self._consumers: dict[str, Consumer] = {}
        #: slot -> ((generation, root slot) it was made at, summary)
        self._summaries: dict[int, tuple[tuple[int, int], ProviderSummary]] = {}

    # ----- resource classes and traits -----

    def resource_classes(self) -> list[str]:
        """Every resource class name: the standard ones, then the custom ones sorted."""
        return [*STANDARD_RESOURCE_CLASSES, *sorted(self._custom_classes)]

    def has_resource_class(self, name: str) -> bool:
        """Whether ``name`` is a standard or an existing custom resource class."""
        return name in self._custom_classes or name in STANDARD_RESOURCE_CLASSES

    def create_resource_class(self, name: str) -> bool:
        """Create custom class ``name``; False if it already existed."""
        if not is_valid_custom(name):
            raise PlacementError(f"Resource class name '{name}' is invalid: a custom "
                                 "resource class is CUSTOM_ followed by A-Z, 0-9 and _.")
        if name in self._custom_classes:
            return False
        self._custom_classes.add(name)
        return True

    def delete_resource_class(self, name: str) -> None:
        """Delete custom class ``name``; refused while an inventory uses it."""
        if name in STANDARD_RESOURCE_CLASSES:
            raise PlacementError(f"Cannot delete standard resource class {name}: "
                                 "only custom classes may be deleted.")
        if name not in self._custom_classes:
            raise PlacementNotFoundError(f"No such resource class {name}.")
        column = self._columns.get(name)
        if column is not None and column.present.any():
            raise PlacementConflictError(f"Unable to delete resource class {name}. "
                                         "Class is in use in inventory.")
        self._custom_classes.discard(name)
        self._columns.pop(name, None)

    def rename_resource_class(self, name: str, new: str) -> Renamed:
        """Rename custom class ``name`` to ``new`` wherever it is used (Placement
        1.2-1.6); what changed, so that a caller can save it."""
        if name not in self._custom_classes:
            raise PlacementNotFoundError(f"No such resource class {name}.")
        if not is_valid_custom(new):
            raise PlacementError(f"Resource class name '{new}' is invalid.")
        if new == name:
            return Renamed()
        if self.has_resource_class(new):
            raise PlacementConflictError(f"Resource class already exists: {new}")
        renamed = Renamed()
        self._custom_classes.discard(name)
        self._custom_classes.add(new)
        column = self._columns.pop(name, None)
        if column is not None:
            self._columns[new] = column
        for rp in self._by_uuid.values():
            if name in rp.inventories:
                rp.inventories[new] = rp.inventories.pop(name)
                if name in rp.used:
                    rp.used[new] = rp.used.pop(name)
                self._summaries.pop(rp.slot, None)
                renamed.providers.add(rp.uuid)
        for consumer in self._consumers.values():
            for resources in consumer.allocations.values():
                if name in resources:
                    resources[new] = resources.pop(name)
                    renamed.consumers.add(consumer.uuid)
        return renamed

    def traits(self) -> list[str]:
        """Every trait name, sorted."""
        return sorted(STANDARD_TRAITS | self._custom_traits)

    def has_trait(self, name: str) -> bool:
        """Whether ``name`` is a standard or an existing custom trait."""
        return name in self._custom_traits or name in STANDARD_TRAITS

    def create_trait(self, name: str) -> bool:
        """Create custom trait ``name``; False if it already existed."""
        if not is_valid_custom(name):
            raise PlacementError(f"The trait name '{name}' is invalid: a custom trait is "
                                 "CUSTOM_ followed by A-Z, 0-9 and _.")
        if name in self._custom_traits:
            return False
        self._custom_traits.add(name)
        return True

    def delete_trait(self, name: str) -> None:
        """Delete custom trait ``name``; refused while a provider has it."""
        if name in STANDARD_TRAITS:
            raise PlacementError(f"Cannot delete standard trait {name}.")
        if name not in self._custom_traits:
            raise PlacementNotFoundError(f"No such trait(s): {name}")
        if self._trait_bits.get(name):
            raise PlacementConflictError(f"The trait {name} is in use by a resource provider.")
        self._custom_traits.discard(name)

    # ----- providers -----

    def _get(self, rp_uuid: str) -> _Provider:
        rp = self._by_uuid.get(rp_uuid)
        if rp is None:
            raise PlacementNotFoundError(f"No resource provider with uuid {rp_uuid} found")
        return rp

    def _view(self, rp: _Provider) -> ResourceProvider:
        root = self._slots[rp.root]
        parent = self._slots[rp.parent] if rp.parent is not None else None
        assert root is not None
        return ResourceProvider(rp.uuid, rp.name, rp.generation, root.uuid,
                                parent.uuid if parent is not None else None)

    def _check_generation(self, rp: _Provider, generation: int | None) -> None:
        if generation is not None and generation != rp.generation:
            raise PlacementConcurrentUpdateError(
                f"resource provider generation conflict: provider {rp.uuid} is at "
                f"generation {rp.generation}, the change was based on {generation}")

    def create_provider(self, name: str, rp_uuid: str | None = None,
                        parent_uuid: str | None = None) -> ResourceProvider:
        """Create a provider (a root, or a child of ``parent_uuid``)."""
        rp_uuid = rp_uuid or str(uuidlib.uuid4())
        if not _is_uuid(rp_uuid):
            raise PlacementError(f"'{rp_uuid}' is not a 'uuid'")
        if not name or len(name) > 200:
            raise PlacementError("A resource provider name must be 1 to 200 characters.")
        if rp_uuid in self._by_uuid:
            raise PlacementConflictError(f"Conflicting resource provider uuid: {rp_uuid} "
                                         "already exists.",
                                         placement_code="placement.duplicate_uuid")
        if name in self._by_name:
            raise PlacementConflictError(f"Conflicting resource provider name: {name} "
                                         "already exists.",
                                         placement_code="placement.duplicate_name")
        parent = self._get(parent_uuid) if parent_uuid is not None else None
        slot = len(self._slots)
        if slot >= self._size:
            self._grow()
        rp = _Provider(rp_uuid, name, slot, parent.root if parent else slot,
                       parent.slot if parent else None)
        self._slots.append(rp)
        self.uuid_at.append(rp_uuid)
        self._by_uuid[rp_uuid] = rp
        self._by_name[name] = rp_uuid
        self.root_of[slot] = rp.root
        self._alive_bits |= 1 << slot
        if parent is not None:
            parent.children.add(slot)
        return self._view(rp)

    def _grow(self) -> None:
        self._size *= 2
        root = np.full(self._size, -1, dtype=np.int64)
        root[: len(self.root_of)] = self.root_of
        self.root_of = root
        for column in self._columns.values():
            column.grow(self._size)

    def update_provider(self, rp_uuid: str, name: str, parent_uuid: str | None = None,
                        *, allow_reparenting: bool = False) -> ResourceProvider:
        """Rename a provider and set its parent. A root may be given a parent at any
        microversion; moving a child to another parent or making it a root needs
        ``allow_reparenting`` (Placement 1.37). Like Placement, this does not change
        the provider's generation."""
        rp = self._get(rp_uuid)
        if name != rp.name and name in self._by_name:
            raise PlacementConflictError(f"Conflicting resource provider {name} already "
                                         "exists.", placement_code="placement.duplicate_name")
        current_parent = self._slots[rp.parent] if rp.parent is not None else None
        current_uuid = current_parent.uuid if current_parent is not None else None
        if parent_uuid != current_uuid:
            def refused(action: str, reason: str) -> PlacementError:
                return PlacementError(f"Unable to save resource provider {rp_uuid}: Object "
                                      f"action {action} failed because: {reason}")
            if parent_uuid is None:
                if not allow_reparenting:
                    raise refused("update", "un-parenting a provider is not currently "
                                            "allowed.")
                self._move(rp, None)
            else:
                parent = self._by_uuid.get(parent_uuid)
                if parent is None:
                    raise refused("create", "parent provider UUID does not exist.")
                if current_parent is not None and not allow_reparenting:
                    raise refused("update", "re-parenting a provider is not currently "
                                            "allowed.")
                if parent.slot in self.subtree(rp.slot):
                    raise refused("update", "creating loop in the provider tree is not "
                                            "allowed.")
                self._move(rp, parent)
        del self._by_name[rp.name]
        rp.name = name
        self._by_name[name] = rp.uuid
        return self._view(rp)

    def _move(self, rp: _Provider, parent: _Provider | None) -> None:
        """Hang ``rp`` (and its subtree) under ``parent``, or make it a root."""
        if rp.parent is not None:
            old = self._slots[rp.parent]
            assert old is not None
            old.children.discard(rp.slot)
        rp.parent = parent.slot if parent is not None else None
        root = parent.root if parent is not None else rp.slot
        if parent is not None:
            parent.children.add(rp.slot)
        for slot in self.subtree(rp.slot):
            node = self._slots[slot]
            assert node is not None
            node.root = root
            self.root_of[slot] = root
            self._summaries.pop(slot, None)  # its parent changed, its generation did not

    def delete_provider(self, rp_uuid: str) -> None:
        """Delete a provider without children or allocations."""
        rp = self._get(rp_uuid)
        if rp.children:
            raise PlacementConflictError(
                f"Unable to delete parent resource provider {rp_uuid}: It has child "
                "resource providers.",
                placement_code="placement.resource_provider.cannot_delete_parent")
        if rp.consumers:
            raise PlacementConflictError(f"Unable to delete resource provider {rp_uuid}: "
                                         "Resource provider has allocations.")
        for rc in list(rp.inventories):
            self._columns[rc].present[rp.slot] = False
        bit = 1 << rp.slot
        for agg in rp.aggregates:
            self._agg_bits[agg] &= ~bit
        for trait in rp.traits:
            self._trait_bits[trait] &= ~bit
        self._alive_bits &= ~bit
        if rp.parent is not None:
            parent = self._slots[rp.parent]
            assert parent is not None
            parent.children.discard(rp.slot)
        self._slots[rp.slot] = None
        self._summaries.pop(rp.slot, None)
        self.uuid_at[rp.slot] = ""
        self.root_of[rp.slot] = -1
        del self._by_uuid[rp_uuid]
        del self._by_name[rp.name]

    def provider(self, rp_uuid: str) -> ResourceProvider:
        """The provider ``rp_uuid``."""
        return self._view(self._get(rp_uuid))

    def providers(self) -> list[ResourceProvider]:
        """Every provider, in creation order."""
        return [self._view(rp) for rp in self._slots if rp is not None]

    def subtree(self, slot: int) -> list[int]:
        """``slot`` and every descendant of it (depth first, children in slot order)."""
        out, pending = [], [slot]
        while pending:
            current = pending.pop()
            out.append(current)
            node = self._slots[current]
            assert node is not None
            pending.extend(sorted(node.children, reverse=True))
        return out

    # ----- the indexes, for queries (corral.placement.candidates) -----

    @property
    def size(self) -> int:
        """How many slots the index arrays have (at least every slot ever used)."""
        return self._size

    @property
    def alive_bits(self) -> int:
        """Bitset of the slots that hold a provider."""
        return self._alive_bits

    def at(self, slot: int) -> _Provider:
        """The provider record in ``slot`` (read it, never change it)."""
        rp = self._slots[slot]
        assert rp is not None
        return rp

    def uuid_named(self, name: str) -> str | None:
        """The UUID of the provider called ``name``, None if there is none."""
        return self._by_name.get(name)

    def slot_of(self, rp_uuid: str) -> int | None:
        """The slot of provider ``rp_uuid``, None if there is none."""
        rp = self._by_uuid.get(rp_uuid)
        return rp.slot if rp is not None else None

    def column(self, rc: str) -> _Column | None:
        """The capacity/usage arrays of resource class ``rc`` (None: no inventory of it
        was ever set)."""
        return self._columns.get(rc)

    def aggregate_bits(self, aggregate: str) -> int:
        """Bitset of the providers associated with ``aggregate`` themselves."""
        return self._agg_bits.get(aggregate, 0)

    def trait_bits(self, trait: str) -> int:
        """Bitset of the providers that have ``trait``."""
        return self._trait_bits.get(trait, 0)

    def summary(self, slot: int) -> ProviderSummary:
        """The provider in ``slot`` as allocation candidates summarise it; kept until
        the provider's generation (or its root) changes."""
        rp = self.at(slot)
        cached = self._summaries.get(slot)
        if cached is not None and cached[0] == (rp.generation, rp.root):
            return cached[1]
        summary = ProviderSummary(
            rp.uuid, {rc: (inv.capacity, rp.used.get(rc, 0))
                      for rc, inv in rp.inventories.items()},
            frozenset(rp.traits), self.uuid_at[rp.parent] if rp.parent is not None else None,
            self.uuid_at[rp.root])
        self._summaries[slot] = ((rp.generation, rp.root), summary)
        return summary

    # ----- inventories -----

    def inventories(self, rp_uuid: str) -> dict[str, Inventory]:
        """A provider's inventories by resource class."""
        return dict(self._get(rp_uuid).inventories)

    def set_inventories(self, rp_uuid: str, generation: int | None,
                        inventories: Mapping[str, Inventory]) -> int:
        """Replace all of a provider's inventories; its new generation.

        Refused when a resource class is unknown or when a class that is removed still has
        allocations (``placement.inventory.inuse``)."""
        rp = self._get(rp_uuid)
        self._check_generation(rp, generation)
        for rc in inventories:
            if not self.has_resource_class(rc):
                raise PlacementError(f"Unknown resource class in inventory for resource "
                                     f"provider {rp_uuid}: {rc}")
        removed = [rc for rc in rp.inventories if rc not in inventories and rp.used.get(rc)]
        if removed:
            # Listed in resource class order (standard ones first), as Placement does.
            order = {rc: i for i, rc in enumerate(STANDARD_RESOURCE_CLASSES)}
            removed.sort(key=lambda rc: (order.get(rc, len(order)), rc))
            raise PlacementConflictError(
                f"Inventory for '{', '.join(removed)}' on resource provider "
                f"'{rp_uuid}' in use.", placement_code="placement.inventory.inuse")
        for rc in list(rp.inventories):
            if rc not in inventories:
                self._columns[rc].present[rp.slot] = False
                del rp.inventories[rc]
        for rc, inventory in inventories.items():
            column = self._columns.get(rc)
            if column is None:
                column = self._columns[rc] = _Column(self._size)
            column.present[rp.slot] = True
            column.capacity[rp.slot] = inventory.capacity
            column.used[rp.slot] = rp.used.get(rc, 0)
            column.min_unit[rp.slot] = inventory.min_unit
            column.max_unit[rp.slot] = inventory.max_unit or inventory.total
            column.step[rp.slot] = inventory.step_size
            rp.inventories[rc] = inventory
        rp.generation += 1
        return rp.generation

    # ----- traits and aggregates of a provider -----

    def provider_traits(self, rp_uuid: str) -> set[str]:
        """A provider's traits."""
        return set(self._get(rp_uuid).traits)

    def set_provider_traits(self, rp_uuid: str, generation: int | None,
                            traits: Iterable[str]) -> int:
        """Replace a provider's traits; its new generation."""
        rp = self._get(rp_uuid)
        self._check_generation(rp, generation)
        wanted = set(traits)
        unknown = sorted(t for t in wanted if not self.has_trait(t))
        if unknown:
            raise PlacementError(f"No such trait(s): {', '.join(unknown)}")
        bit = 1 << rp.slot
        for trait in rp.traits - wanted:
            self._trait_bits[trait] &= ~bit
        for trait in wanted - rp.traits:
            self._trait_bits[trait] = self._trait_bits.get(trait, 0) | bit
        rp.traits = wanted
        rp.generation += 1
        return rp.generation

    def provider_aggregates(self, rp_uuid: str) -> set[str]:
        """The aggregates a provider is associated with (its own, not its root's)."""
        return set(self._get(rp_uuid).aggregates)

    def set_provider_aggregates(self, rp_uuid: str, generation: int | None,
                                aggregates: Iterable[str], *, increment: bool = True) -> int:
        """Replace a provider's aggregates; its new generation. ``increment=False``
        leaves the generation as it is (Placement before 1.19)."""
        rp = self._get(rp_uuid)
        self._check_generation(rp, generation)
        wanted = set(aggregates)
        bad = sorted(a for a in wanted if not _is_uuid(a))
        if bad:
            raise PlacementError(f"Aggregates must be UUIDs; got {', '.join(bad)}.")
        bit = 1 << rp.slot
        for agg in rp.aggregates - wanted:
            self._agg_bits[agg] &= ~bit
        for agg in wanted - rp.aggregates:
            self._agg_bits[agg] = self._agg_bits.get(agg, 0) | bit
        rp.aggregates = wanted
        if increment:
            rp.generation += 1
        return rp.generation

    # ----- allocations and usages -----

    def consumer(self, consumer_uuid: str) -> Consumer | None:
        """The consumer ``consumer_uuid``, or None when it holds nothing."""
        return self._consumers.get(consumer_uuid)

    def set_allocations(self, consumer_uuid: str, allocations: Mapping[str, Mapping[str, int]],
                        *, consumer_generation: int | None, project_id: str, user_id: str,
                        consumer_type: str = "UNKNOWN") -> None:
        """Replace what one consumer holds (an empty mapping removes it all)."""
        self.set_allocations_many({consumer_uuid: (allocations, consumer_generation,
                                                   project_id, user_id, consumer_type)})

    def set_allocations_many(
        self, changes: Mapping[str, tuple[Mapping[str, Mapping[str, int]], int | None,
                                          str, str, str]],
        *, bump_emptied: bool = True, enforce: bool = True,
    ) -> None:
        """Replace the allocations of several consumers at once, all or nothing.

        ``changes`` maps a consumer uuid to ``(allocations, consumer_generation,
        project_id, user_id, consumer_type)``; ``consumer_generation`` is None for a
        consumer that must be new. Capacity is checked for the sum of every change.
        ``bump_emptied=False`` leaves the generations of the providers a consumer
        leaves entirely (``DELETE /allocations/{consumer}`` in Placement).

        ``enforce=False`` records allocations that already exist elsewhere (the
        cluster's instances, :mod:`corral.placement.cluster`): the inventory's unit
        limits and the capacity are not checked, only that the inventory exists."""
        delta: dict[tuple[str, str], int] = {}
        for consumer_uuid, (allocations, generation, _p, _u, _t) in changes.items():
            existing = self._consumers.get(consumer_uuid)
            if (existing.generation if existing else None) != generation:
                raise PlacementConcurrentUpdateError(
                    f"consumer generation conflict - expected "
                    f"{'null' if generation is None else generation} but got "
                    f"{'null' if existing is None else existing.generation}")
            if existing is not None:
                for rp_uuid, resources in existing.allocations.items():
                    for rc, amount in resources.items():
                        delta[rp_uuid, rc] = delta.get((rp_uuid, rc), 0) - amount
            for rp_uuid, wanted in allocations.items():
                rp = self._get(rp_uuid)
                for rc, amount in wanted.items():
                    inventory = rp.inventories.get(rc)
                    if inventory is None:
                        raise PlacementConflictError(
                            f"Unable to allocate inventory: Inventory for '{rc}' on resource "
                            f"provider '{rp_uuid}' invalid.")
                    assert inventory.max_unit is not None
                    if enforce and (amount < inventory.min_unit or amount > inventory.max_unit
                            or amount % inventory.step_size):
                        raise PlacementConflictError(
                            f"Unable to allocate inventory: Unable to create allocation for "
                            f"'{rc}' on resource provider '{rp_uuid}'. The requested amount "
                            "would violate inventory constraints.")
                    delta[rp_uuid, rc] = delta.get((rp_uuid, rc), 0) + amount
        for (rp_uuid, rc), change in delta.items():
            rp = self._get(rp_uuid)
            if (enforce and change > 0
                    and rp.used.get(rc, 0) + change > rp.inventories[rc].capacity):
                raise PlacementConflictError(
                    f"Unable to allocate inventory: Unable to create allocation for '{rc}' "
                    f"on resource provider '{rp_uuid}'. The requested amount would exceed "
                    "the capacity.")
        # As in Placement, the providers of the new allocations move to a new
        # generation (those of a consumer's old ones when it is left with nothing).
        touched: set[str] = set()
        for consumer_uuid, (allocations, *_rest) in changes.items():
            if any(allocations.values()):
                touched.update(rp for rp, res in allocations.items() if res)
            elif bump_emptied and (gone := self._consumers.get(consumer_uuid)) is not None:
                touched.update(gone.allocations)
        for (rp_uuid, rc), change in delta.items():
            if change:
                rp = self._by_uuid[rp_uuid]
                rp.used[rc] = rp.used.get(rc, 0) + change
                self._columns[rc].used[rp.slot] = rp.used[rc]
                self._summaries.pop(rp.slot, None)  # a usage may change, the generation not
        for consumer_uuid, (allocations, _g, project, user, ctype) in changes.items():
            existing = self._consumers.pop(consumer_uuid, None)
            if existing is not None:
                for rp_uuid in existing.allocations:
                    self._by_uuid[rp_uuid].consumers.discard(consumer_uuid)
            kept = {rp: dict(res) for rp, res in allocations.items() if res}
            if kept:
                self._consumers[consumer_uuid] = Consumer(
                    consumer_uuid, (existing.generation + 1) if existing else 1,
                    project, user, ctype, kept)
                for rp_uuid in kept:
                    self._by_uuid[rp_uuid].consumers.add(consumer_uuid)
        for rp_uuid in touched:
            self._by_uuid[rp_uuid].generation += 1

    def usages(self, rp_uuid: str) -> dict[str, int]:
        """What is allocated on a provider, per resource class of its inventory."""
        rp = self._get(rp_uuid)
        return {rc: rp.used.get(rc, 0) for rc in rp.inventories}

    def total_usages(self, project_id: str, user_id: str | None = None) -> dict[str, int]:
        """What a project (and user) holds in all, per resource class."""
        out: dict[str, int] = {}
        for consumer in self._consumers.values():
            if consumer.project_id != project_id or (user_id and consumer.user_id != user_id):
                continue
            for resources in consumer.allocations.values():
                for rc, amount in resources.items():
                    out[rc] = out.get(rc, 0) + amount
        return out

    def consumers(self) -> list[Consumer]:
        """Every consumer that holds something."""
        return list(self._consumers.values())

    # ----- loading a saved state -----

    def restore_provider(self, rp_uuid: str, name: str, parent_uuid: str | None,
                         generation: int, inventories: Mapping[str, Inventory],
                         traits: Iterable[str], aggregates: Iterable[str]) -> None:
        """Put back a provider as it was saved (its parent first), generation included;
        custom classes and traits it names must have been restored before."""
        self.create_provider(name, rp_uuid, parent_uuid)
        self.set_inventories(rp_uuid, None, inventories)
        self.set_provider_traits(rp_uuid, None, traits)
        self.set_provider_aggregates(rp_uuid, None, aggregates)
        self._by_uuid[rp_uuid].generation = generation

    def snapshot(self, providers: Iterable[str], consumers: Iterable[str]) -> Snapshot:
        """What :meth:`rollback` needs to put these providers' inventories and
        generations and these consumers back as they are now."""
        return Snapshot(
            {rp: (dict(self._get(rp).inventories), self._get(rp).generation)
             for rp in providers},
            {c: self._copy_consumer(c) for c in consumers})

    def _copy_consumer(self, consumer_uuid: str) -> Consumer | None:
        found = self._consumers.get(consumer_uuid)
        if found is None:
            return None
        return Consumer(found.uuid, found.generation, found.project_id, found.user_id,
                        found.consumer_type,
                        {rp: dict(res) for rp, res in found.allocations.items()})

    def rollback(self, snapshot: Snapshot) -> None:
        """Undo a change made of several steps (the reshaper's) since ``snapshot``,
        which must name every provider and consumer the steps touched."""
        for consumer_uuid in snapshot.consumers:
            now = self._consumers.get(consumer_uuid)
            if now is not None:
                self.set_allocations_many({consumer_uuid: (
                    {}, now.generation, now.project_id, now.user_id, now.consumer_type)},
                    bump_emptied=False)
        for rp_uuid, (inventories, _generation) in snapshot.providers.items():
            self.set_inventories(rp_uuid, None, inventories)
        for consumer in snapshot.consumers.values():
            if consumer is not None:
                self.restore_consumer(consumer)
        for rp_uuid, (_inventories, generation) in snapshot.providers.items():
            self._by_uuid[rp_uuid].generation = generation

    def restore_consumer(self, consumer: Consumer, *, enforce: bool = True) -> None:
        """Put back a saved consumer with its generation; the providers' generations
        are left as they were restored (they already count its allocations).
        ``enforce=False`` skips the capacity and unit checks (a node provider whose
        live figures shrank since the allocation was made)."""
        saved = {rp: self._get(rp).generation for rp in consumer.allocations}
        self.set_allocations_many({consumer.uuid: (
            consumer.allocations, None, consumer.project_id, consumer.user_id,
            consumer.consumer_type)}, enforce=enforce)
        self._consumers[consumer.uuid].generation = consumer.generation
        for rp_uuid, generation in saved.items():
            self._by_uuid[rp_uuid].generation = generation
