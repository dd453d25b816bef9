"""Locking for the master daemon (engine layer): asyncio-native, fair, with timeouts.

    lock = SharedLock("instance/web1")
    if await lock.acquire(shared=True, timeout=5.0):
        try:
            ...
        finally:
            lock.release()

    locks = LockManager(nodes=["node1", "node2"], instances=["web1"])
    await locks.acquire(LockLevel.INSTANCE, ["web1"], owner=job)
    await locks.acquire(LockLevel.NODE, ALL_SET, shared=True, owner=job)
    locks.release_all(owner=job)

Owners are tokens: by default the current asyncio task, and the job processor passes
the job itself. :class:`LockAttemptStrategy` is the retry policy (growing timeouts,
release in between, finally blocking) the processor wraps around an opcode's locking.
Waiting with a timeout never polls; see :mod:`corral.locking.shared` for the queue.
"""

from __future__ import annotations

from corral.locking.lockset import ALL_SET, AllSet, LockSet
from corral.locking.manager import BGL, LockLevel, LockManager
from corral.locking.shared import LockInfo, PendingInfo, SharedLock, owner_name
from corral.locking.strategy import LockAttemptStrategy

__all__ = [
    "ALL_SET",
    "BGL",
    "AllSet",
    "LockAttemptStrategy",
    "LockInfo",
    "LockLevel",
    "LockManager",
    "LockSet",
    "PendingInfo",
    "SharedLock",
    "owner_name",
]
