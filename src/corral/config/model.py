"""The in-memory configuration: every object by kind and UUID, plus the indexes.

The indexes answer, without scanning, the questions a commit must ask:

* ``claims``: which object holds a name, an IP, a MAC or a disk
  (``(namespace, key) -> uuid``, see :mod:`corral.config.relations`);
* ``referrers``: which objects refer to a UUID (group -> nodes, node -> instances
  and disks, disk -> instance).

:meth:`Model.apply` updates objects and indexes for the changed objects only.
Objects in the model are shared with readers and never mutated: a change replaces
the object.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from corral.config.relations import claims, name_namespace, references, sort_key
from corral.objects import KINDS, ConfigObject

__all__ = ["Change", "Model"]


@dataclass(frozen=True, slots=True)
class Change:
    """One object's change in a commit: added (``old`` None), updated or removed (``new`` None)."""

    kind: str
    old: ConfigObject | None
    new: ConfigObject | None


class Model:
    """All configuration objects with incrementally maintained indexes."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, ConfigObject]] = {kind: {} for kind in KINDS}
        #: uuid -> kind, over all kinds (UUIDs are unique across kinds).
        self.kind_of: dict[str, str] = {}
        self.claims: dict[tuple[str, str], str] = {}
        self.referrers: dict[str, set[str]] = {}
        self._sorted: dict[str, list[ConfigObject]] = {}

    def lookup(self, kind: str, key: str) -> ConfigObject | None:
        """The object of ``kind`` whose UUID, or else name, is ``key``."""
        objects = self.objects[kind]
        found = objects.get(key)
        if found is not None:
            return found
        uuid = self.claims.get((name_namespace(kind), key))
        return objects.get(uuid) if uuid is not None else None

    def get_any(self, uuid: str) -> ConfigObject | None:
        """The object with ``uuid``, whatever its kind."""
        kind = self.kind_of.get(uuid)
        return self.objects[kind].get(uuid) if kind is not None else None

    def sorted(self, kind: str) -> list[ConfigObject]:
        """Objects of ``kind`` ordered by name (UUID when unnamed); a fresh list."""
        cached = self._sorted.get(kind)
        if cached is None:
            cached = sorted(self.objects[kind].values(), key=sort_key)
            self._sorted[kind] = cached
        return list(cached)

    def apply(self, changes: Mapping[str, Change]) -> None:
        """Install checked changes (keyed by UUID); cost is proportional to ``changes``.

        Old claims and references of every changed object are released before the
        new ones are taken, so objects may swap names or IPs within one commit.
        """
        for uuid, change in changes.items():
            if change.old is None:
                continue
            for claim in claims(change.kind, change.old):
                if self.claims.get(claim.slot) == uuid:
                    del self.claims[claim.slot]
            for ref in references(change.old):
                holders = self.referrers.get(ref.uuid)
                if holders is not None:
                    holders.discard(uuid)
                    if not holders:
                        del self.referrers[ref.uuid]
        for uuid, change in changes.items():
            objects = self.objects[change.kind]
            self._sorted.pop(change.kind, None)
            if change.new is None:
                objects.pop(uuid, None)
                self.kind_of.pop(uuid, None)
                continue
            objects[uuid] = change.new
            self.kind_of[uuid] = change.kind
            for claim in claims(change.kind, change.new):
                self.claims[claim.slot] = uuid
            for ref in references(change.new):
                self.referrers.setdefault(ref.uuid, set()).add(uuid)
