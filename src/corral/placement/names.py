"""Resource class and trait names: OpenStack's standard ones and ``CUSTOM_*``.

The standard lists come from the ``os-resource-classes`` and ``os-traits`` packages,
where OpenStack maintains them; an upgrade of those packages brings new names. A custom
name is ``CUSTOM_`` followed by upper-case letters, digits and underscores (at most 255
characters in all), as Placement accepts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import os_resource_classes  # type: ignore[import-untyped]
import os_traits  # type: ignore[import-untyped]

__all__ = ["CUSTOM_NAME", "SHARING_TRAIT", "STANDARD_RESOURCE_CLASSES", "STANDARD_TRAITS",
           "is_custom", "is_valid_custom", "trait_order"]

#: What a custom resource class or trait name looks like.
CUSTOM_NAME = re.compile(r"^CUSTOM_[A-Z0-9_]+$")

#: The trait that makes a provider share its inventory with the trees of the providers
#: it shares an aggregate with.
SHARING_TRAIT = "MISC_SHARES_VIA_AGGREGATE"

#: The standard resource classes, in os-resource-classes' order.
STANDARD_RESOURCE_CLASSES: tuple[str, ...] = tuple(os_resource_classes.STANDARDS)

#: The standard traits (os-traits).
STANDARD_TRAITS: frozenset[str] = frozenset(os_traits.get_traits())


#: Where each standard trait comes in os-traits' list (Placement numbers them so).
_TRAIT_RANK: dict[str, int] = {name: i for i, name in enumerate(os_traits.get_traits())}


def trait_order(traits: Iterable[str]) -> list[str]:
    """Traits in Placement's order: the standard ones as os-traits lists them, then
    the custom ones by name (Placement lists a provider's traits by their ids)."""
    return sorted(traits, key=lambda t: (t not in _TRAIT_RANK, _TRAIT_RANK.get(t, 0), t))


def is_custom(name: str) -> bool:
    """Whether ``name`` is in the custom namespace (starts with ``CUSTOM_``)."""
    return name.startswith("CUSTOM_")


def is_valid_custom(name: str) -> bool:
    """Whether ``name`` is a well-formed custom resource class or trait name."""
    return len(name) <= 255 and CUSTOM_NAME.match(name) is not None
