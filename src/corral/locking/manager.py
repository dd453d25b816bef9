"""LockManager: one :class:`LockSet` per level, acquired strictly top-down.

The levels, top to bottom, are cluster, node group, instance, node, node resources and
network. An owner may acquire at a level only while it holds nothing at any level below
it. Together with the sorted order inside each set, this is the whole deadlock-avoidance
rule of the master daemon: every owner takes locks in one global order. Releasing is
allowed in any order.

The cluster level holds the single lock :data:`BGL` (Ganeti's name). The node and the
node-resource levels start with the same names; they are separate locks so that an
operation can hold a node's resources without blocking work on the node itself.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Iterable

from corral.errors import LockError
from corral.locking.lockset import AllSet, LockSet, _name_list
from corral.locking.shared import LockInfo, resolve_owner

__all__ = ["BGL", "LockLevel", "LockManager"]

#: The one lock of the cluster level.
BGL = "BGL"


class LockLevel(enum.IntEnum):
    """Lock levels in acquisition order; ``str()`` is the name listings use."""

    CLUSTER = 0
    NODEGROUP = 1
    INSTANCE = 2
    NODE = 3
    NODE_RES = 4
    NETWORK = 5

    def __str__(self) -> str:
        return self.name.lower().replace("_", "-")


class LockManager:
    """All the master daemon's locks, by level."""

    def __init__(
        self,
        *,
        nodes: Iterable[str] = (),
        nodegroups: Iterable[str] = (),
        instances: Iterable[str] = (),
        networks: Iterable[str] = (),
    ) -> None:
        nodes = list(nodes)
        members: dict[LockLevel, Iterable[str]] = {
            LockLevel.CLUSTER: [BGL],
            LockLevel.NODEGROUP: nodegroups,
            LockLevel.INSTANCE: instances,
            LockLevel.NODE: nodes,
            LockLevel.NODE_RES: nodes,
            LockLevel.NETWORK: networks,
        }
        self._sets = {level: LockSet(names, str(level)) for level, names in members.items()}

    def lockset(self, level: LockLevel) -> LockSet:
        """The set of one level, for membership questions."""
        return self._sets[level]

    async def acquire(
        self,
        level: LockLevel,
        names: str | Iterable[str] | AllSet,
        *,
        shared: bool = False,
        timeout: float | None = None,
        priority: int = 0,
        owner: Hashable | None = None,
    ) -> frozenset[str] | None:
        """Acquire at one level (see :meth:`LockSet.acquire`) after checking the level order."""
        owner = resolve_owner(owner)
        self._check_order(level, owner, "acquire")
        return await self._sets[level].acquire(
            names, shared=shared, timeout=timeout, priority=priority, owner=owner)

    def release(
        self,
        level: LockLevel,
        names: str | Iterable[str] | None = None,
        *,
        owner: Hashable | None = None,
    ) -> None:
        """Release some or all of ``owner``'s locks at one level."""
        self._sets[level].release(names, owner=resolve_owner(owner))

    def release_all(self, *, owner: Hashable | None = None) -> None:
        """Release everything ``owner`` holds, bottom level first; holding nothing is fine."""
        owner = resolve_owner(owner)
        for level in reversed(LockLevel):
            if self._sets[level].is_owned(owner=owner):
                self._sets[level].release(owner=owner)

    async def add(
        self,
        level: LockLevel,
        names: str | Iterable[str],
        *,
        acquired: bool = False,
        shared: bool = False,
        owner: Hashable | None = None,
    ) -> None:
        """Add locks at a level, e.g. for a new instance (see :meth:`LockSet.add`)."""
        owner = resolve_owner(owner)
        self._check_order(level, owner, "add")
        await self._sets[level].add(names, acquired=acquired, shared=shared, owner=owner)

    async def remove(
        self, level: LockLevel, names: str | Iterable[str], *, owner: Hashable | None = None
    ) -> list[str]:
        """Remove locks at a level (see :meth:`LockSet.remove`)."""
        owner = resolve_owner(owner)
        wanted = set(_name_list(names))
        if not wanted <= self._sets[level].list_owned(owner=owner):
            # Removing a lock we do not hold means waiting for it.
            self._check_order(level, owner, "remove")
        return await self._sets[level].remove(sorted(wanted), owner=owner)

    def owned_locks(self, level: LockLevel, *, owner: Hashable | None = None) -> frozenset[str]:
        """Names ``owner`` holds at ``level``."""
        return self._sets[level].list_owned(owner=resolve_owner(owner))

    def is_owned(self, level: LockLevel, *, owner: Hashable | None = None) -> bool:
        """Whether ``owner`` holds anything at ``level``."""
        return self._sets[level].is_owned(owner=resolve_owner(owner))

    def info(self) -> list[LockInfo]:
        """Every lock of every level, top level first: what ``gnt-debug locks`` lists."""
        return [lock for level in LockLevel for lock in self._sets[level].info()]

    def _check_order(self, level: LockLevel, owner: Hashable, action: str) -> None:
        for lower in LockLevel:
            if lower > level and self._sets[lower].is_owned(owner=owner):
                held = sorted(self._sets[lower].list_owned(owner=owner)) or ["the whole set"]
                raise LockError(
                    f"cannot {action} {level} locks while holding {lower} locks "
                    f"({', '.join(held)}): levels go in the order "
                    f"{', '.join(str(lv) for lv in LockLevel)}")
