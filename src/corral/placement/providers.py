"""Listing resource providers with filters (``GET /resource_providers``).

Unlike the allocation candidates' unsuffixed group, every filter here judges a provider
by what it has **itself**: its own aggregate associations (a root's aggregates do not
reach its children, in either direction: MEMBER_OF_SPEC.md §5a), its own traits, its own
inventory for ``resources``. Filters combine with AND; the answer is in creation order.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from corral.errors import PlacementError
from corral.placement.candidates import ProviderMasks
from corral.placement.model import PlacementStore, ResourceProvider
from corral.placement.query import (
    Version,
    parse_member_of,
    parse_required,
    parse_resources,
    schema_error,
)

__all__ = ["ProviderFilter", "parse_resource_providers", "resource_providers"]


@dataclass(frozen=True)
class ProviderFilter:
    """The filters of a ``GET /resource_providers`` request (each optional)."""

    name: str | None = None
    uuid: str | None = None
    member_of: tuple[frozenset[str], ...] = ()
    forbidden_aggs: frozenset[str] = frozenset()
    in_tree: str | None = None
    resources: dict[str, int] | None = None
    required_traits: tuple[frozenset[str], ...] = ()
    forbidden_traits: frozenset[str] = frozenset()


def _is_uuid_format(value: str) -> bool:
    """JSON schema's ``uuid`` format: a UUID with its dashes where they belong."""
    try:
        uuidlib.UUID(value)
    except ValueError:
        return False
    return all(len(value) > i and value[i] == "-" for i in (8, 13, 18, 23))


def parse_resource_providers(params: Sequence[tuple[str, str]], version: Version,
                             ) -> ProviderFilter:
    """Parse a ``GET /resource_providers`` query string at microversion ``version``,
    with Placement's checks and messages (``member_of`` from 1.3, ``resources`` 1.4,
    ``in_tree`` 1.14, ``required`` 1.18)."""
    allowed = ["name", "uuid"]
    for first, key in (((1, 3), "member_of"), ((1, 4), "resources"), ((1, 14), "in_tree"),
                       ((1, 18), "required")):
        if version >= first:
            allowed.append(key)
    last = dict(params)
    extras = [k for k in dict.fromkeys(k for k, _ in params) if k not in allowed]
    if extras:
        listed = ", ".join(repr(k) for k in extras)
        raise schema_error(f"Additional properties are not allowed ({listed} "
                      f"{'was' if len(extras) == 1 else 'were'} unexpected)")
    for key in ("uuid", "in_tree"):
        if key in last and not _is_uuid_format(last[key]):
            raise schema_error(f"{last[key]!r} is not a 'uuid'")
    member_of: tuple[frozenset[str], ...] = ()
    forbidden_aggs: frozenset[str] = frozenset()
    if "member_of" in last:
        member_of, forbidden_aggs = parse_member_of(
            [v for k, v in params if k == "member_of"], version)
    required: tuple[frozenset[str], ...] = ()
    forbidden: frozenset[str] = frozenset()
    if "required" in last:
        required, forbidden = parse_required(params, "required", version)
    resources = parse_resources(last["resources"]) if "resources" in last else None
    return ProviderFilter(last.get("name"), last.get("uuid"), member_of, forbidden_aggs,
                          last.get("in_tree"), resources, required, forbidden)


def resource_providers(store: PlacementStore, wanted: ProviderFilter,
                       ) -> list[ResourceProvider]:
    """The providers that pass every filter of ``wanted``, in creation order.

    Raises :class:`~corral.errors.PlacementError` for an unknown resource class or
    trait, with Placement's messages."""
    for rc in wanted.resources or {}:
        if not store.has_resource_class(rc):
            raise PlacementError("Invalid resource class in resources parameter: No such "
                                 f"resource class {rc}.")
    traits = set(wanted.forbidden_traits).union(*wanted.required_traits)
    unknown = sorted(t for t in traits if not store.has_trait(t))
    if unknown:
        raise PlacementError(f'Invalid trait(s) in "required" parameter: No such trait(s): '
                             f"{', '.join(unknown)}.")
    q = ProviderMasks(store)
    ok = q.alive.copy()
    for extra in (q.in_all(wanted.member_of, "agg"), q.in_all(wanted.required_traits, "trait")):
        if extra is not None:
            ok &= extra
    for excluded in (q.in_any(wanted.forbidden_aggs, "agg"),
                     q.in_any(wanted.forbidden_traits, "trait")):
        if excluded is not None:
            ok &= ~excluded
    tree = q.tree_of(wanted.in_tree)
    if tree is not None:
        ok &= q.root == tree
    for rc, amount in (wanted.resources or {}).items():
        ok &= q.fits(rc, amount)
    found = []
    for slot in np.nonzero(ok)[0].tolist():
        view = store.provider(store.uuid_at[slot])
        if (wanted.name is None or view.name == wanted.name) and (
                wanted.uuid is None or view.uuid == wanted.uuid):
            found.append(view)
    return found
