"""Natural ("nice") ordering of names: ``node2`` before ``node10``.

Ganeti lists nodes, groups, instances and fields in this order. A name is split into
runs of digits and runs of other characters; digit runs compare as numbers and come
before text runs at the same position, text runs compare as strings.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TypeVar

__all__ = ["nice_key", "nice_sorted"]

T = TypeVar("T")

_RUNS = re.compile(r"\d+|\D+")


def nice_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """The sort key of ``name`` in natural order."""
    return tuple((0, int(run)) if run[0].isdigit() else (1, run)
                 for run in _RUNS.findall(name))


def nice_sorted(items: Iterable[T], key: Callable[[T], str] | None = None) -> list[T]:
    """``items`` in natural order of ``key(item)`` (the item itself by default); items
    with equal keys keep their order."""
    if key is None:
        return sorted(items, key=lambda item: nice_key(str(item)))
    get = key
    return sorted(items, key=lambda item: nice_key(get(item)))
