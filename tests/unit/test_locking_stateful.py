"""Stateful property tests of SharedLock under random acquires, releases, timeouts,
cancellations and deletion, on a virtual clock.

After every step the machine checks:

* safety: an exclusive holder is the only holder; holders are exactly the owners
  whose acquire returned True and who have not released;
* no lost wakeups: whenever anybody waits, the top queue entry really cannot be
  granted (exclusive top: somebody holds; shared top: somebody holds exclusively);
* the queue is exactly the owners still waiting: timeouts and cancellations leave no
  trace, and a waiter past its deadline is never still waiting;
* order: every request is ranked by (priority, place in queue), a shared request
  taking the rank of the entry it joined. Nobody granted in a step may have a
  still-waiting request ranked at or ahead of it. This is FIFO among equal
  priorities, priority order, no jumping, and a shared entry granted as one;
* batching: a shared request that finds a shared entry of its priority waiting joins
  that entry;
* after deletion every waiter has failed with LockDeletedError.

At the end all holders release, repeatedly, and the clock runs out every timeout:
every waiter must be granted, time out or see the deletion.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from corral.errors import LockDeletedError
from corral.locking import SharedLock
from tests.unit.virtual_time import VirtualLoop

OWNERS = [f"o{i}" for i in range(6)]
Rank = tuple[int, float]


@dataclass
class Request:
    """One acquire (or delete) in flight."""

    owner: str
    shared: bool
    priority: int
    deadline: float
    rank: Rank
    task: asyncio.Task[bool]
    delete: bool = False


class SharedLockMachine(RuleBasedStateMachine):
    """Random owners drive one lock; see the module docstring for what is checked."""

    def __init__(self) -> None:
        super().__init__()
        self.vl = VirtualLoop()
        self.lock = SharedLock("l")
        self.waiting: dict[str, Request] = {}
        self.holding: dict[str, bool] = {}  # owner -> shared?
        self.deleted = False

    def teardown(self) -> None:
        try:
            self._drain()
        finally:
            self.vl.close()

    # -- helpers ----------------------------------------------------------------------

    def _ranks(self) -> dict[str, Rank]:
        ranks: dict[str, Rank] = {}
        for index, entry in enumerate(self.lock.info().pending):
            for owner in entry.owners:
                ranks[owner] = (entry.priority, index)
        return ranks

    def _step(self) -> None:
        """Settle the loop, then account for every request that finished."""
        self.vl.settle()
        granted: list[Request] = []
        finished = [r for r in self.waiting.values() if r.task.done()]
        # A delete that succeeded in this step explains the other waiters' errors.
        finished.sort(key=lambda r: not (r.delete and not r.task.cancelled()
                                         and r.task.exception() is None))
        for req in finished:
            owner = req.owner
            del self.waiting[owner]
            if req.task.cancelled():
                continue
            error = req.task.exception()
            if isinstance(error, LockDeletedError):
                assert self.deleted, "LockDeletedError from a lock that was not deleted"
                continue
            assert error is None, f"unexpected error: {error!r}"
            if req.task.result():
                granted.append(req)
                if req.delete:
                    self.deleted = True
                else:
                    self.holding[owner] = req.shared
            else:
                assert req.deadline <= self.vl.now, "timed out before its deadline"
        for req in granted:
            if self.deleted and not req.delete:
                continue
            for other in self.waiting.values():
                assert other.rank > req.rank, (
                    f"{req.owner} (rank {req.rank}) was granted while {other.owner} "
                    f"(rank {other.rank}) waits ahead of it or in the same entry")
        # Surviving waiters keep their place; refresh ranks from the queue itself.
        ranks = self._ranks()
        for owner, req in self.waiting.items():
            req.rank = ranks[owner]

    def _drain(self) -> None:
        for _ in range(100):
            for owner in list(self.holding):
                self.lock.release(owner=owner)
                del self.holding[owner]
            self._step()
            if not self.waiting:
                break
            self.vl.advance(100.0)
            self._step()
        assert not self.waiting, f"waiters never finished: {sorted(self.waiting)}"
        assert self.lock.info().pending == ()

    # -- rules ------------------------------------------------------------------------

    @rule(
        owner=st.sampled_from(OWNERS),
        shared=st.booleans(),
        priority=st.sampled_from([-1, 0, 0, 1]),
        timeout=st.sampled_from([None, None, 0.0, 1.0, 2.5]),
    )
    def acquire(self, owner: str, shared: bool, priority: int, timeout: float | None) -> None:
        if owner in self.waiting or owner in self.holding:
            return
        if self.deleted:
            try:
                self.vl.run(self.lock.acquire(shared, timeout, priority, owner=owner))
            except LockDeletedError:
                return
            raise AssertionError("acquire of a deleted lock did not fail")
        before = self.lock.info().pending
        joined: Rank | None = None
        if shared:
            for index, entry in enumerate(before):
                if entry.mode == "shared" and entry.priority == priority:
                    joined = (priority, index)
        deadline = math.inf if timeout is None else self.vl.now + timeout
        task = self.vl.spawn(self.lock.acquire(shared, timeout, priority, owner=owner))
        self.waiting[owner] = Request(
            owner, shared, priority, deadline, joined or (priority, math.inf), task)
        self._step()
        if joined is not None and owner in self.waiting:
            companions = before[joined[1]].owners
            entry = next(e for e in self.lock.info().pending if owner in e.owners)
            assert set(companions) & set(self.waiting) <= set(entry.owners), (
                "a shared acquire did not join the waiting shared entry of its priority")

    @rule(owner=st.sampled_from(OWNERS))
    def release(self, owner: str) -> None:
        if owner not in self.holding:
            return
        self.lock.release(owner=owner)
        del self.holding[owner]
        self._step()

    @rule(seconds=st.sampled_from([0.5, 1.0, 3.0]))
    def advance(self, seconds: float) -> None:
        self.vl.advance(seconds)
        self._step()

    @rule(owner=st.sampled_from(OWNERS))
    def cancel(self, owner: str) -> None:
        req = self.waiting.get(owner)
        if req is None:
            return
        req.task.cancel()
        self._step()
        assert owner not in self.holding or (req.task.done() and not req.task.cancelled())

    @precondition(lambda self: not self.deleted)
    @rule(owner=st.sampled_from(OWNERS), timeout=st.sampled_from([None, 1.0]))
    def delete(self, owner: str, timeout: float | None) -> None:
        if owner in self.waiting or self.holding.get(owner, False):
            return
        holds = owner in self.holding
        deadline = math.inf if timeout is None else self.vl.now + timeout
        task = self.vl.spawn(self.lock.delete(timeout, owner=owner))
        self.waiting[owner] = Request(
            owner, False, 0, deadline, (0, math.inf), task, delete=True)
        if holds:
            del self.holding[owner]  # delete() implies release
        self._step()

    # -- invariants -------------------------------------------------------------------

    @invariant()
    def holders_are_consistent(self) -> None:
        info = self.lock.info()
        if self.deleted:
            assert info.mode == "deleted" and not info.holders and not info.pending
            assert not self.holding and all(r.delete for r in self.waiting.values())
            return
        exclusive = [o for o, shared in self.holding.items() if not shared]
        assert not exclusive or len(self.holding) == 1, f"exclusive among others: {self.holding}"
        assert set(info.holders) == set(self.holding)
        assert info.mode == (None if not self.holding else "shared" if not exclusive
                             else "exclusive")

    @invariant()
    def queue_is_exactly_the_waiters(self) -> None:
        if self.deleted:
            return
        queued = [o for entry in self.lock.info().pending for o in entry.owners]
        assert sorted(queued) == sorted(self.waiting), "queue holds a trace of a gone waiter"
        for req in self.waiting.values():
            assert req.deadline > self.vl.now, f"{req.owner} waits past its deadline"

    @invariant()
    def no_lost_wakeup(self) -> None:
        pending = self.lock.info().pending
        if self.deleted or not pending:
            return
        top = pending[0]
        if top.mode == "exclusive":
            assert self.holding, "an exclusive waiter is on top of a free lock"
        else:
            assert any(not s for s in self.holding.values()), (
                "a shared entry is on top while nobody holds exclusively")


SharedLockMachine.TestCase.settings = settings(
    max_examples=250, stateful_step_count=40, deadline=None)
TestSharedLockMachine = SharedLockMachine.TestCase
