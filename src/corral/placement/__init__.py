"""A placement engine with OpenStack Placement's semantics (engine layer, no HTTP).

:class:`PlacementStore` keeps resource providers, inventories, traits, aggregates and
allocations; :func:`parse_allocation_candidates` turns a query string into an
:class:`AllocationCandidatesRequest`; :func:`allocation_candidates` answers it. See
docs/placement.md.
"""

from __future__ import annotations

from corral.placement.model import Consumer, Inventory, PlacementStore, ResourceProvider

__all__ = ["Consumer", "Inventory", "PlacementStore", "ResourceProvider"]
