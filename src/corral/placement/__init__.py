"""A placement engine with OpenStack Placement's semantics (engine layer, no HTTP).

:class:`PlacementStore` keeps resource providers, inventories, traits, aggregates and
allocations; :func:`parse_allocation_candidates` turns a query string into an
:class:`AllocationCandidatesRequest`; :func:`allocation_candidates` answers it;
:func:`parse_resource_providers` and :func:`resource_providers` list providers with
filters. See docs/placement.md.
"""

from __future__ import annotations

from corral.placement.candidates import (
    AllocationCandidates,
    AllocationRequest,
    ProviderSummary,
    allocation_candidates,
)
from corral.placement.model import Consumer, Inventory, PlacementStore, ResourceProvider
from corral.placement.providers import (
    ProviderFilter,
    parse_resource_providers,
    resource_providers,
)
from corral.placement.query import (
    AllocationCandidatesRequest,
    RequestGroup,
    parse_allocation_candidates,
    parse_member_of,
)

__all__ = ["AllocationCandidates", "AllocationCandidatesRequest", "AllocationRequest",
           "Consumer", "Inventory", "PlacementStore", "ProviderFilter", "ProviderSummary",
           "RequestGroup", "ResourceProvider", "allocation_candidates",
           "parse_allocation_candidates", "parse_member_of", "parse_resource_providers",
           "resource_providers"]
