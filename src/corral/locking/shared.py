"""SharedLock: a shared/exclusive lock with one fair queue, native to asyncio (design 2.1).

Waiting is a future per waiter; a timeout is one ``loop.call_later`` handle on it, so a
waiter with a timeout costs nothing until it is granted or the handle fires: nothing
polls. Granting is a *hand-off*: whoever makes the lock available (a release, a
timed-out or cancelled waiter leaving the queue) decides at once who gets it next and
resolves their futures. The lock never wakes a waiter only to have it look again,
which is what the seed's conditions had to do under threads.

Queue discipline (seed 002, "SharedLock redesign"):

* there is one FIFO queue per priority; a lower number is served first (Ganeti's
  convention: -20 is the highest priority, 19 the lowest, 0 the default);
* each exclusive waiter is one entry; shared waiters of a priority share that priority's
  *active* shared entry, which is appended to the queue by the first shared waiter that
  finds none. Later shared waiters join it and so pass exclusive waiters queued behind
  it. When the entry reaches the top and is granted, all its waiters get the lock
  together and new shared waiters start a fresh entry at the tail. The seed keeps two
  shared conditions and swaps them because a notified condition must stay queued until
  its threads have woken. A hand-off resolves every waiter of the entry in one step, so
  the granted entry leaves the queue at once and the swap is simply a new entry;
* only the top entry of the highest-priority queue can be granted. Exclusive needs no
  other holder and shared needs no exclusive holder. Nobody jumps an entry that is ahead
  of it, except by joining an active shared entry or by having a higher priority;
* with nothing queued, an acquire that fits the current holders is granted at once
  without touching the queue.

Owners. A lock records *who* holds it by an owner token. By default it is the current
asyncio task, which is right for code that acquires and releases in one task. The job
processor passes the job (or opcode) as ``owner=`` instead, because one job's locks are
taken, kept and released across several tasks and callbacks. Any hashable object works.
An owner holds a lock at most once, in one mode.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Hashable
from typing import Final, Literal

import msgspec

from corral.errors import LockDeletedError, LockError

__all__ = ["LockInfo", "PendingInfo", "SharedLock", "owner_name", "resolve_owner"]

#: Outcomes a waiter's future resolves to.
_GRANTED: Final = 1
_TIMED_OUT: Final = 2
_DELETED: Final = 3

Mode = Literal["exclusive", "shared"]


class PendingInfo(msgspec.Struct, frozen=True):
    """One queue entry of a lock as ``gnt-debug locks`` shows it."""

    mode: Mode
    priority: int
    owners: tuple[str, ...]


class LockInfo(msgspec.Struct, frozen=True):
    """A snapshot of one lock: its mode, its holders and its queue, top first."""

    name: str
    mode: Literal["exclusive", "shared", "deleted"] | None
    holders: tuple[str, ...]
    pending: tuple[PendingInfo, ...]


def resolve_owner(owner: Hashable | None) -> Hashable:
    """Return ``owner``, or the current asyncio task when it is None."""
    if owner is not None:
        return owner
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running event loop
        task = None
    if task is None:
        raise LockError("no lock owner given and not running inside an asyncio task")
    return task


def owner_name(owner: Hashable) -> str:
    """How an owner is shown in lock listings: a task by its name, anything else by str()."""
    if isinstance(owner, asyncio.Task):
        return owner.get_name()
    return str(owner)


class _Entry:
    """One queue entry: a single exclusive waiter, or all shared waiters batched together."""

    __slots__ = ("priority", "queued", "shared", "waiters")

    def __init__(self, shared: bool, priority: int) -> None:
        self.shared = shared
        self.priority = priority
        self.queued = True
        self.waiters: dict[Hashable, asyncio.Future[int]] = {}


class SharedLock:
    """A lock held by one exclusive owner or by any number of shared owners."""

    __slots__ = ("_active_shared", "_deleted", "_exclusive", "_queues", "_shared", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._exclusive: Hashable | None = None
        self._shared: set[Hashable] = set()
        self._queues: dict[int, deque[_Entry]] = {}
        self._active_shared: dict[int, _Entry] = {}
        self._deleted = False

    def __repr__(self) -> str:
        return f"<SharedLock {self.name} {self.info().mode or 'free'}>"

    @property
    def is_deleted(self) -> bool:
        """True once :meth:`delete` succeeded; every acquire fails from then on."""
        return self._deleted

    def is_owned(self, shared: bool | None = None, *, owner: Hashable | None = None) -> bool:
        """Whether ``owner`` holds the lock: in any mode (None), shared (True) or exclusive."""
        owner = resolve_owner(owner)
        if shared is None:
            return self._holds(owner)
        exclusive = self._exclusive is not None and self._exclusive == owner
        return owner in self._shared if shared else exclusive

    async def acquire(
        self,
        shared: bool = False,
        timeout: float | None = None,
        priority: int = 0,
        *,
        owner: Hashable | None = None,
    ) -> bool:
        """Acquire the lock; False when ``timeout`` seconds pass first.

        ``timeout=None`` waits as long as it takes; ``timeout <= 0`` only tries. A waiter
        that times out or is cancelled leaves no trace in the queue. Raises
        :class:`LockDeletedError` if the lock is or becomes deleted, and
        :class:`LockError` if ``owner`` already holds it.
        """
        owner = resolve_owner(owner)
        if self._acquire_now(shared, owner):
            return True
        return await self._wait(shared, timeout, priority, owner)

    async def _wait(
        self, shared: bool, timeout: float | None, priority: int, owner: Hashable
    ) -> bool:
        """Queue for the lock once :meth:`_acquire_now` said no; the rest of :meth:`acquire`."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        entry = self._enqueue(owner, future, shared, priority)
        if self._exclusive is None and (shared or not self._shared):
            # The holders would let us in, so only the queue was in the way: a higher
            # priority than everybody queued makes us the new top.
            self._grant()
            if future.done():
                return True
        if timeout is not None and timeout <= 0:
            self._withdraw(entry, owner, future)
            return False
        expiry = None if timeout is None else loop.call_later(
            timeout, self._expire, entry, owner, future)
        try:
            outcome = await future
        except asyncio.CancelledError:
            if future.cancelled():
                self._withdraw(entry, owner, future)
            elif future.result() == _GRANTED:
                # Granted in the same loop iteration as the cancellation: hand it on.
                self._release(owner)
            raise
        finally:
            if expiry is not None:
                expiry.cancel()
        if outcome == _GRANTED:
            return True
        if outcome == _TIMED_OUT:
            return False
        raise LockDeletedError(f"lock {self.name} was deleted while waiting for it")

    def release(self, *, owner: Hashable | None = None) -> None:
        """Give the lock up and hand it to the next entry that can have it."""
        self._release(resolve_owner(owner))

    async def delete(
        self, timeout: float | None = None, priority: int = 0, *, owner: Hashable | None = None
    ) -> bool:
        """Delete the lock, acquiring it exclusively first unless ``owner`` already does.

        Returns False if the exclusive acquire timed out (nothing changed). Every pending
        and later acquire then raises :class:`LockDeletedError`. Deleting a lock held
        shared by ``owner`` is an error: it would have to wait for itself.
        """
        owner = resolve_owner(owner)
        if self._deleted:
            raise LockDeletedError(f"lock {self.name} was already deleted")
        if owner in self._shared:
            raise LockError(
                f"cannot delete lock {self.name} while {owner_name(owner)} holds it shared; "
                "it must be held exclusively or not at all")
        if not self.is_owned(False, owner=owner) and not (
            await self.acquire(False, timeout, priority, owner=owner)
        ):
            return False
        self._deleted = True
        self._exclusive = None
        for queue in self._queues.values():
            for entry in queue:
                entry.queued = False
                for future in entry.waiters.values():
                    if not future.done():
                        future.set_result(_DELETED)
        self._queues.clear()
        self._active_shared.clear()
        return True

    def info(self) -> LockInfo:
        """Mode, holders and queued waiters (top first, with their priority)."""
        mode: Literal["exclusive", "shared", "deleted"] | None = None
        holders: list[str] = []
        if self._deleted:
            mode = "deleted"
        elif self._exclusive is not None:
            mode = "exclusive"
            holders = [owner_name(self._exclusive)]
        elif self._shared:
            mode = "shared"
            holders = sorted(owner_name(o) for o in self._shared)
        pending = tuple(
            PendingInfo(
                mode="shared" if entry.shared else "exclusive",
                priority=priority,
                owners=tuple(sorted(
                    owner_name(o) for o, f in entry.waiters.items() if not f.done())),
            )
            for priority in sorted(self._queues)
            for entry in self._queues[priority]
        )
        return LockInfo(name=self.name, mode=mode, holders=tuple(holders), pending=pending)

    # -- queue mechanics -------------------------------------------------------------

    def _acquire_now(self, shared: bool, owner: Hashable) -> bool:
        """The seed's shortcut: with nothing queued, a fitting request needs no queue.

        Also checks the lock is usable by ``owner``. Synchronous, so that LockSet can
        take free members without the cost of a coroutine each.
        """
        if self._deleted:
            raise LockDeletedError(f"lock {self.name} was deleted")
        if self._holds(owner):
            raise LockError(f"lock {self.name} is already held by {owner_name(owner)}")
        if self._queues or self._exclusive is not None:
            return False
        if shared:
            self._shared.add(owner)
            return True
        if self._shared:
            return False
        self._exclusive = owner
        return True

    def _holds(self, owner: Hashable) -> bool:
        return (self._exclusive is not None and self._exclusive == owner) or owner in self._shared

    def _enqueue(
        self, owner: Hashable, future: asyncio.Future[int], shared: bool, priority: int
    ) -> _Entry:
        queue = self._queues.get(priority)
        if queue is None:
            queue = self._queues[priority] = deque()
        if shared:
            entry = self._active_shared.get(priority)
            if entry is None:
                entry = self._active_shared[priority] = _Entry(True, priority)
                queue.append(entry)
        else:
            entry = _Entry(False, priority)
            queue.append(entry)
        entry.waiters[owner] = future
        return entry

    def _grant(self) -> None:
        """Hand the lock to the top entries that fit, highest priority first."""
        queues = self._queues
        while queues:
            priority = min(queues) if len(queues) > 1 else next(iter(queues))
            queue = queues[priority]
            entry = queue[0]
            if entry.shared:
                if self._exclusive is not None:
                    return
                queue.popleft()
                entry.queued = False
                if self._active_shared.get(priority) is entry:
                    del self._active_shared[priority]
                for owner, future in entry.waiters.items():
                    # A cancelled waiter is on its way out; it gets nothing.
                    if not future.done():
                        self._shared.add(owner)
                        future.set_result(_GRANTED)
            else:
                ((owner, future),) = entry.waiters.items()
                if not future.done():
                    if self._exclusive is not None or self._shared:
                        return
                    self._exclusive = owner
                    future.set_result(_GRANTED)
                queue.popleft()
                entry.queued = False
            if not queue:
                del queues[priority]
            if self._exclusive is not None:
                return

    def _withdraw(self, entry: _Entry, owner: Hashable, future: asyncio.Future[int]) -> None:
        """Take a waiter that gave up out of the queue, then re-check the top."""
        if not entry.queued or entry.waiters.get(owner) is not future:
            return
        del entry.waiters[owner]
        if not entry.waiters:
            queue = self._queues[entry.priority]
            queue.remove(entry)
            entry.queued = False
            if self._active_shared.get(entry.priority) is entry:
                del self._active_shared[entry.priority]
            if not queue:
                del self._queues[entry.priority]
        self._grant()

    def _expire(self, entry: _Entry, owner: Hashable, future: asyncio.Future[int]) -> None:
        if future.done():
            return
        future.set_result(_TIMED_OUT)
        self._withdraw(entry, owner, future)

    def _release(self, owner: Hashable) -> None:
        if self._exclusive is not None and self._exclusive == owner:
            self._exclusive = None
        else:
            try:
                self._shared.remove(owner)
            except KeyError:
                raise LockError(
                    f"cannot release lock {self.name}: {owner_name(owner)} does not hold it"
                ) from None
        # While other shared holders remain nothing new can be granted: a shared entry on
        # top would already have been, so only a lock that became free is worth a look.
        if self._queues and not self._shared:
            self._grant()
