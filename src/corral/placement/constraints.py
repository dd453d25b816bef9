"""Placement constraints of a new instance: ``member_of`` values, required and
forbidden traits; which nodes satisfy them, and why a given node does not.

The values are Placement's: ``AGG`` (in AGG), ``in:A,B`` (in A or B), ``!AGG`` (not in
AGG), ``!in:A,B`` (in neither), where an aggregate is named by the cluster's name for
it (``gnt-cluster add-aggregate``), a node group's name, or a UUID.
:func:`resolve_member_of` turns names into UUIDs; :func:`allowed_nodes` asks the
engine's allocation-candidates query, :func:`violations` explains a refusal.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from corral.errors import ParameterError, PlacementError
from corral.placement.candidates import allocation_candidates
from corral.placement.cluster import NODE_TRAIT
from corral.placement.model import PlacementStore
from corral.placement.names import STANDARD_TRAITS, is_valid_custom
from corral.placement.query import is_uuid_like, parse_allocation_candidates, parse_member_of

__all__ = ["AGGREGATE_NAME", "Constraints", "allowed_nodes", "check_aggregate_name",
           "check_traits", "resolve_member_of", "value_text", "violations"]

#: What an aggregate's name looks like: it must not read as a UUID or hold the
#: characters ``member_of`` values use (``!``, ``:``, ``,``) or a sign (``+``/``-``
#: of ``gnt-node modify --aggregates``).
AGGREGATE_NAME: Final = re.compile(r"^[A-Za-z][A-Za-z0-9._-]{0,62}$")
#: The microversion whose syntax the values follow (every form of ``member_of``).
_VERSION: Final = (1, 39)


@dataclass(frozen=True)
class Constraints:
    """Where an instance may go: ``member_of`` values with aggregates as UUIDs, and
    trait names."""

    member_of: tuple[str, ...] = ()
    required_traits: tuple[str, ...] = ()
    forbidden_traits: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.member_of or self.required_traits or self.forbidden_traits)


def check_aggregate_name(name: str) -> str:
    """``name`` if it may name an aggregate.

    :raises ParameterError: it may not, saying what is accepted.
    """
    if not AGGREGATE_NAME.match(name) or is_uuid_like(name):
        raise ParameterError(
            f"invalid aggregate name {name!r}: a name starts with a letter and has up to 63 "
            "letters, digits, '.', '_' and '-' (and does not look like a UUID)")
    return name


def check_traits(names: Iterable[str], what: str = "trait") -> list[str]:
    """The trait names, each a standard os-traits name or ``CUSTOM_*``, sorted.

    :raises ParameterError: a name is neither.
    """
    out: set[str] = set()
    for name in names:
        if name not in STANDARD_TRAITS and not is_valid_custom(name):
            raise ParameterError(
                f"invalid {what} {name!r}: a trait is a standard os-traits name (such as "
                "HW_CPU_X86_AVX2 or COMPUTE_STATUS_DISABLED) or CUSTOM_ followed by "
                "upper-case letters, digits and '_'")
        out.add(name)
    return sorted(out)


def resolve_member_of(values: Sequence[str], names: Mapping[str, str]) -> tuple[str, ...]:
    """``member_of`` values with every aggregate named by its UUID; ``names`` maps the
    names the cluster knows (aggregates, then node groups) to UUIDs.

    :raises ParameterError: a value is malformed or names an unknown aggregate.
    """
    out: list[str] = []
    for value in values:
        text = value.strip()
        prefix = next((p for p in ("!in:", "in:", "!") if text.startswith(p)), "")
        items = [item.strip() for item in text[len(prefix):].split(",")]
        if len(items) > 1 and prefix not in ("in:", "!in:"):
            raise ParameterError(
                f"invalid member_of {value!r}: several aggregates need 'in:' (in any of "
                "them) or '!in:' (in none of them): 'in:A,B', '!in:A,B'")
        uuids = []
        for item in items:
            if not item:
                raise ParameterError(f"invalid member_of {value!r}: an aggregate is empty; "
                                     "accepted: AGG, in:A,B, !AGG, !in:A,B")
            if item in names:
                uuids.append(names[item])
            elif is_uuid_like(item):
                uuids.append(item.lower())
            else:
                known = ", ".join(sorted(names)) or "none"
                raise ParameterError(
                    f"invalid member_of {value!r}: unknown aggregate {item!r} (known by "
                    f"name: {known}; any aggregate may also be given by its UUID)")
        resolved = prefix + ",".join(uuids)
        try:
            parse_member_of([resolved], _VERSION)
        except PlacementError as err:
            raise ParameterError(f"invalid member_of {value!r}: {err.message}") from None
        out.append(resolved)
    return tuple(out)


def allowed_nodes(store: PlacementStore, resources: Mapping[str, int],
                  constraints: Constraints) -> list[str]:
    """UUIDs of the node providers (:data:`~corral.placement.cluster.NODE_TRAIT`) that
    the allocation-candidates query gives for ``resources`` under ``constraints``, in
    the engine's order. A required custom trait no provider has leaves none."""
    required = [NODE_TRAIT, *constraints.required_traits]
    if any(not store.has_trait(t) for t in required):
        return []
    forbidden = [t for t in constraints.forbidden_traits if store.has_trait(t)]
    params = [("resources", ",".join(f"{rc}:{n}" for rc, n in resources.items() if n > 0)),
              ("required", ",".join([*required, *(f"!{t}" for t in forbidden)]))]
    params += [("member_of", value) for value in constraints.member_of]
    if not params[0][1]:
        params = params[1:]
        params.insert(0, ("resources", "VCPU:1"))
    found = allocation_candidates(store, parse_allocation_candidates(params, _VERSION))
    nodes: list[str] = []
    seen: set[str] = set()
    for request in found.allocation_requests:
        for rp_uuid in request.allocations:
            summary = found.provider_summaries.get(rp_uuid)
            root = summary.root_uuid if summary is not None else rp_uuid
            if root not in seen and NODE_TRAIT in store.provider_traits(root):
                seen.add(root)
                nodes.append(root)
    return nodes


def violations(aggregates: set[str], traits: set[str], constraints: Constraints,
               label: Callable[[str], str]) -> list[str]:
    """Why a node in ``aggregates`` with ``traits`` does not meet ``constraints``, one
    sentence per broken constraint (empty: it meets them); ``label`` names an
    aggregate UUID for people."""
    out: list[str] = []
    for value in constraints.member_of:
        any_of, forbidden = parse_member_of([value], _VERSION)
        for wanted in any_of:
            if not wanted & aggregates:
                names = " or ".join(label(a) for a in sorted(wanted, key=label))
                out.append(f"it is not in aggregate {names} (member_of {value_text(value, label)})")
        for agg in sorted(forbidden & aggregates, key=label):
            out.append(f"it is in aggregate {label(agg)}, which member_of "
                       f"{value_text(value, label)} forbids")
    for trait in constraints.required_traits:
        if trait not in traits:
            out.append(f"it lacks the required trait {trait}")
    for trait in constraints.forbidden_traits:
        if trait in traits:
            out.append(f"it has the forbidden trait {trait}")
    return out


def value_text(value: str, label: Callable[[str], str]) -> str:
    """A ``member_of`` value with its aggregates named for people."""
    prefix = next((p for p in ("!in:", "in:", "!") if value.startswith(p)), "")
    return prefix + ",".join(label(item) for item in value[len(prefix):].split(","))
