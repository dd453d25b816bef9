"""Cleaning stale state on a node: the hook point every watcher pass calls.

A cleaner looks for leftovers of operations that died half-way and answers what it
removed, one line each. The keys of abandoned inter-cluster moves are one kind
(:func:`corral.noded.move_keys.clean_expired`); disk transfers whose node daemon died
(their processes, half-written files and status files, :mod:`corral.impexp.stale`)
another.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from corral.impexp.stale import clean_stale
from corral.noded import move_keys
from corral.paths import Paths

__all__ = ["CLEANERS", "Cleaner", "register", "run_cleaners"]

log = logging.getLogger("corral.watcher")

#: A cleaner: ``cleaner(paths)`` removes stale state of one kind on this node and
#: answers what it removed.
Cleaner = Callable[[Paths], list[str]]

#: The registered cleaners, by name (stale import/export state will be one).
CLEANERS: dict[str, Cleaner] = {}


def register(name: str, cleaner: Cleaner) -> None:
    """Run ``cleaner`` in every watcher pass from now on."""
    CLEANERS[name] = cleaner


def run_cleaners(paths: Paths) -> list[str]:
    """Run every cleaner; what they removed. A failing cleaner is logged and the
    others still run."""
    removed: list[str] = []
    for name, cleaner in sorted(CLEANERS.items()):
        try:
            found = cleaner(paths)
        except Exception:  # a cleaner's bug must not stop the watcher's other work
            log.exception("stale state cleaner %s failed", name)
            continue
        for item in found:
            log.info("%s: removed stale %s", name, item)
        removed.extend(found)
    return removed


register("move_keys", move_keys.clean_expired)
register("impexp", clean_stale)
