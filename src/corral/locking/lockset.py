"""LockSet: a named set of :class:`SharedLock` members acquired together, in sorted order.

Acquiring several members always goes in sorted name order, so two owners can never
wait for each other in a cycle within one set. A timeout covers the whole acquisition:
when it runs out, or the call fails or is cancelled, every member taken by that call is
released before returning (seed 002: never keep locks while failing to get all).

The set has one more lock of its own, the *set lock* (shown as ``<set>/[lockset]``).
Acquiring :data:`ALL_SET` takes it in the requested mode before taking every member.
:meth:`LockSet.add` takes it exclusively. So while somebody holds, or is acquiring, the
whole set, no member can appear under them. Removal needs each removed member
exclusively (it deletes the member's lock), so it waits for a whole-set holder as
well. A member removed while a whole-set acquisition was still on its way to it is
skipped; the acquisition returns the names it really holds.

Ganeti's rules on mixing these are kept because each one prevents a deadlock. An owner
acquires in a set only when it holds nothing there. It adds members only when it holds
no member, or holds the whole set exclusively. It removes only members it holds, or,
when it holds nothing in the set, any members.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable
from typing import Final, final

from corral.errors import LockDeletedError, LockError
from corral.locking.shared import LockInfo, SharedLock, owner_name, resolve_owner

__all__ = ["ALL_SET", "AllSet", "LockSet"]


@final
class AllSet:
    """The type of :data:`ALL_SET`; there is exactly one."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ALL_SET"


#: Passed instead of names: every member of the set, present and future-proof against adds.
ALL_SET: Final = AllSet()


def _name_list(names: str | Iterable[str]) -> list[str]:
    return [names] if isinstance(names, str) else list(names)


class LockSet:
    """Members named by strings, acquired in sorted order, plus a whole-set lock."""

    def __init__(self, names: Iterable[str], name: str) -> None:
        self.name = name
        self._locks: dict[str, SharedLock] = {n: SharedLock(f"{name}/{n}") for n in names}
        self._set_lock = SharedLock(f"{name}/[lockset]")
        #: What each owner holds; an owner that holds nothing has no entry.
        self._owned: dict[Hashable, frozenset[str]] = {}

    def __repr__(self) -> str:
        return f"<LockSet {self.name} of {len(self._locks)}>"

    def __contains__(self, name: object) -> bool:
        return name in self._locks

    def names(self) -> list[str]:
        """The members, sorted."""
        return sorted(self._locks)

    def list_owned(self, *, owner: Hashable | None = None) -> frozenset[str]:
        """Names of the members ``owner`` holds."""
        return frozenset(self._owned.get(resolve_owner(owner), ()))

    def is_owned(self, *, owner: Hashable | None = None) -> bool:
        """Whether ``owner`` holds any member or the set lock."""
        owner = resolve_owner(owner)
        return owner in self._owned or self._set_lock.is_owned(owner=owner)

    def owns_all(self, shared: bool | None = None, *, owner: Hashable | None = None) -> bool:
        """Whether ``owner`` acquired the whole set (in the given mode, if one is given)."""
        return self._set_lock.is_owned(shared, owner=owner)

    async def acquire(
        self,
        names: str | Iterable[str] | AllSet,
        *,
        shared: bool = False,
        timeout: float | None = None,
        priority: int = 0,
        owner: Hashable | None = None,
    ) -> frozenset[str] | None:
        """Acquire the named members, or all of them, in sorted order.

        Returns the names held, or None when ``timeout`` ran out (then nothing is held).
        Raises :class:`LockDeletedError` naming a member that does not exist or was
        removed while waiting. With :data:`ALL_SET`, removed members are skipped instead.
        """
        if owner is None:  # skip the call on the hot path when the owner is given
            owner = resolve_owner(None)
        if owner in self._owned or self._set_lock._holds(owner):
            raise LockError(
                f"{owner_name(owner)} already holds locks in {self.name} "
                f"({', '.join(sorted(self._owned.get(owner, ()))) or 'the whole set'}); "
                "release them before acquiring again")
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        whole = False
        if isinstance(names, AllSet):
            if not await self._set_lock.acquire(shared, timeout, priority, owner=owner):
                return None
            whole = True
            wanted = sorted(self._locks)
        elif isinstance(names, str):
            wanted = [names]
        else:
            wanted = sorted(set(names))
        locks = list(map(self._locks.get, wanted))
        if None in locks:
            missing = [n for n, lock in zip(wanted, locks, strict=True) if lock is None]
            raise LockDeletedError(
                f"no {self.name} lock named {', '.join(missing)} (it does not exist "
                "or was removed)")
        held: list[str] = []
        try:
            for lname, lock in zip(wanted, locks):  # noqa: B905 -- one list made from the other
                assert lock is not None
                try:
                    # Free members are taken synchronously; only contended ones wait.
                    if not lock._acquire_now(shared, owner):
                        remaining = (None if deadline is None
                                     else deadline - asyncio.get_running_loop().time())
                        if not await lock._wait(shared, remaining, priority, owner):
                            self._drop(held, whole, owner)
                            return None
                except LockDeletedError:
                    if whole:  # removed while we were on our way to it: skip it
                        continue
                    raise
                held.append(lname)
        except BaseException:
            self._drop(held, whole, owner)
            raise
        got = frozenset(held)
        if held or whole:
            self._owned[owner] = got
        return got

    def release(
        self, names: str | Iterable[str] | None = None, *, owner: Hashable | None = None
    ) -> None:
        """Release the given members, or everything ``owner`` holds in the set.

        Releasing any member also gives up the whole-set lock, since the set is then no
        longer wholly held. Releasing a member that ``owner`` does not hold is an error.
        """
        if owner is None:
            owner = resolve_owner(None)
        whole = self._set_lock._holds(owner)
        if names is None:
            owned = self._owned.pop(owner, None)
            if owned is None and not whole:
                raise LockError(f"{owner_name(owner)} holds no lock in {self.name}")
            self._drop(owned or (), whole, owner)
            return
        owned = self._owned.get(owner, frozenset())
        releasing = set(_name_list(names))
        stray = releasing - owned
        if stray:
            raise LockError(
                f"cannot release {self.name} lock(s) {', '.join(sorted(stray))}: "
                f"{owner_name(owner)} does not hold them")
        self._drop(releasing, whole, owner)
        self._set_owned(owner, owned - releasing)

    async def add(
        self,
        names: str | Iterable[str],
        *,
        acquired: bool = False,
        shared: bool = False,
        owner: Hashable | None = None,
    ) -> None:
        """Add members, optionally held by ``owner`` in the given mode right away.

        Waits while anybody else holds or is acquiring the whole set.
        """
        owner = resolve_owner(owner)
        new = _name_list(names)
        holds_whole = self._set_lock.is_owned(owner=owner)
        if holds_whole and self._set_lock.is_owned(True, owner=owner):
            raise LockError(f"cannot add to {self.name} while holding the whole set shared")
        if not holds_whole and owner in self._owned:
            raise LockError(
                f"cannot add to {self.name} while holding some of its locks; "
                "hold none, or the whole set exclusively")
        self._check_new(new)
        if not holds_whole:
            await self._set_lock.acquire(False, owner=owner)
        try:
            self._check_new(new)
            for lname in new:
                lock = self._locks[lname] = SharedLock(f"{self.name}/{lname}")
                if acquired:
                    await lock.acquire(shared, owner=owner)  # a new lock: granted at once
            if acquired:
                self._set_owned(owner, self._owned.get(owner, frozenset()).union(new))
        finally:
            if not holds_whole:
                self._set_lock.release(owner=owner)

    async def remove(
        self, names: str | Iterable[str], *, owner: Hashable | None = None
    ) -> list[str]:
        """Delete members' locks (acquiring each exclusively unless held); returns those removed.

        Names that are not (or no longer) members are skipped. Pending acquires of a
        removed member fail with :class:`LockDeletedError`.
        """
        owner = resolve_owner(owner)
        gone = _name_list(names)
        owned = self._owned.get(owner)
        if owned is not None and not owned.issuperset(gone):
            raise LockError(
                f"cannot remove {self.name} lock(s) "
                f"{', '.join(sorted(set(gone) - owned))}: {owner_name(owner)} holds other "
                "locks of the set but not these")
        held_shared = sorted(n for n in set(gone) if n in self._locks
                             and self._locks[n].is_owned(True, owner=owner))
        if held_shared:
            # Refused before deleting anything, so a refusal leaves the set as it was.
            raise LockError(
                f"cannot remove {self.name} lock(s) {', '.join(held_shared)}: "
                f"{owner_name(owner)} holds them shared; a lock is removed exclusively")
        removed: list[str] = []
        try:
            for lname in gone:
                lock = self._locks.get(lname)
                if lock is None:
                    continue
                try:
                    deleted = await lock.delete(owner=owner)
                except LockDeletedError:
                    continue
                if deleted:
                    removed.append(lname)
                    if self._locks.get(lname) is lock:
                        del self._locks[lname]
        finally:
            # Even if a later delete fails or is cancelled, what is gone is no longer owned.
            if owned is not None:
                self._set_owned(owner, owned.difference(removed))
        return removed

    def info(self) -> list[LockInfo]:
        """The set lock, then every member in name order."""
        return [self._set_lock.info()] + [self._locks[n].info() for n in sorted(self._locks)]

    def _check_new(self, names: list[str]) -> None:
        clash = sorted(n for n in set(names) if n in self._locks)
        if clash or len(set(names)) != len(names):
            raise LockError(f"cannot add {self.name} lock(s) {', '.join(clash or names)}: "
                            "already present or given twice")

    def _set_owned(self, owner: Hashable, names: frozenset[str]) -> None:
        """Record what ``owner`` holds now; a whole-set holder keeps an entry even if empty."""
        if names or self._set_lock._holds(owner):
            self._owned[owner] = names
        else:
            self._owned.pop(owner, None)

    def _drop(self, names: Iterable[str], whole: bool, owner: Hashable) -> None:
        if whole:
            self._set_lock._release(owner)
        locks = self._locks
        for lname in names:
            locks[lname]._release(owner)
