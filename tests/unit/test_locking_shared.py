"""SharedLock, scenario by scenario: the seed's queue rules, timeouts, deletion, misuse."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from corral.errors import LockDeletedError, LockError
from corral.locking import PendingInfo, SharedLock
from tests.unit.virtual_time import VirtualLoop


@pytest.fixture
def vl() -> Iterator[VirtualLoop]:
    loop = VirtualLoop()
    yield loop
    loop.close()


def _hold(vl: VirtualLoop, lock: SharedLock, owner: str, shared: bool = False) -> None:
    assert vl.run(lock.acquire(shared, owner=owner)) is True


def _wait(
    vl: VirtualLoop, lock: SharedLock, owner: str, shared: bool = False,
    timeout: float | None = None, priority: int = 0,
) -> asyncio.Task[bool]:
    task = vl.spawn(lock.acquire(shared, timeout, priority, owner=owner))
    vl.settle()
    return task


def _queue(lock: SharedLock) -> list[tuple[str, tuple[str, ...]]]:
    return [(p.mode, p.owners) for p in lock.info().pending]


def test_free_lock_is_granted_at_once_in_either_mode(vl: VirtualLoop) -> None:
    lock = SharedLock("l")
    _hold(vl, lock, "a", shared=True)
    _hold(vl, lock, "b", shared=True)
    assert lock.info().mode == "shared" and lock.info().holders == ("a", "b")
    lock.release(owner="a")
    lock.release(owner="b")
    _hold(vl, lock, "c")
    assert lock.info().mode == "exclusive" and lock.info().holders == ("c",)
    assert lock.is_owned(owner="c") and lock.is_owned(False, owner="c")
    assert not lock.is_owned(True, owner="c") and not lock.is_owned(owner="a")


def test_exclusive_waits_for_every_shared_holder(vl: VirtualLoop) -> None:
    lock = SharedLock("l")
    _hold(vl, lock, "a", shared=True)
    _hold(vl, lock, "b", shared=True)
    x = _wait(vl, lock, "x")
    lock.release(owner="a")
    vl.settle()
    assert not x.done()
    lock.release(owner="b")
    vl.settle()
    assert x.result() is True and lock.info().holders == ("x",)


def test_shared_waiters_behind_an_exclusive_waiter_do_not_pass_it(vl: VirtualLoop) -> None:
    lock = SharedLock("l")
    _hold(vl, lock, "a", shared=True)
    x = _wait(vl, lock, "x")
    s = _wait(vl, lock, "s", shared=True)
    assert not s.done(), "a shared acquire must queue behind a waiting exclusive one"
    assert _queue(lock) == [("exclusive", ("x",)), ("shared", ("s",))]
    lock.release(owner="a")
    vl.settle()
    assert x.result() is True and not s.done()
    lock.release(owner="x")
    vl.settle()
    assert s.result() is True


def test_shared_acquires_join_the_active_entry_and_pass_exclusive_waiters(
    vl: VirtualLoop,
) -> None:
    """The seed's batching: S1 queues, X1 queues behind it, S2 joins S1 and so passes X1."""
    lock = SharedLock("l")
    _hold(vl, lock, "h")
    s1 = _wait(vl, lock, "s1", shared=True)
    x1 = _wait(vl, lock, "x1")
    s2 = _wait(vl, lock, "s2", shared=True)
    assert _queue(lock) == [("shared", ("s1", "s2")), ("exclusive", ("x1",))]
    lock.release(owner="h")
    vl.settle()
    assert s1.result() is True and s2.result() is True and not x1.done()
    # Once granted, the entry is gone: a new shared waiter queues behind x1.
    s3 = _wait(vl, lock, "s3", shared=True)
    assert _queue(lock) == [("exclusive", ("x1",)), ("shared", ("s3",))]
    lock.release(owner="s1")
    lock.release(owner="s2")
    vl.settle()
    assert x1.result() is True and not s3.done()


def test_exclusive_waiters_of_one_priority_are_served_in_arrival_order(
    vl: VirtualLoop,
) -> None:
    lock = SharedLock("l")
    _hold(vl, lock, "h")
    waiters = [_wait(vl, lock, f"x{i}") for i in range(5)]
    order = []
    holder = "h"
    for _ in range(5):
        lock.release(owner=holder)
        vl.settle()
        (holder,) = lock.info().holders
        order.append(holder)
    assert order == [f"x{i}" for i in range(5)]
    assert all(w.result() for w in waiters)


def test_higher_priority_is_served_first_and_lower_number_is_higher(vl: VirtualLoop) -> None:
    lock = SharedLock("l")
    _hold(vl, lock, "h")
    low = _wait(vl, lock, "low", priority=10)
    normal = _wait(vl, lock, "normal", priority=0)
    high = _wait(vl, lock, "high", priority=-10)
    assert [p.priority for p in lock.info().pending] == [-10, 0, 10]
    lock.release(owner="h")
    vl.settle()
    assert high.result() and not normal.done() and not low.done()


def test_higher_priority_shared_acquire_passes_a_waiting_exclusive(vl: VirtualLoop) -> None:
    lock = SharedLock("l")
    _hold(vl, lock, "a", shared=True)
    x = _wait(vl, lock, "x", priority=0)
    s = _wait(vl, lock, "s", shared=True, priority=-5)
    assert s.result() is True and not x.done()


def test_timeout_returns_false_and_leaves_no_trace(vl: VirtualLoop) -> None:
    lock = SharedLock("l")
    _hold(vl, lock, "h")
    t = _wait(vl, lock, "t", timeout=2.0)
    s = _wait(vl, lock, "s", shared=True, timeout=5.0)
    vl.advance(1.9)
    assert not t.done()
    vl.advance(0.2)
    assert t.result() is False
    assert _queue(lock) == [("shared", ("s",))]
    vl.advance(3.0)
    assert s.result() is False
    assert lock.info().pending == ()
    assert not lock.is_owned(owner="t") and not lock.is_owned(owner="s")


def test_timed_out_waiter_at_the_top_lets_the_next_entry_in(vl: VirtualLoop) -> None:
    lock = SharedLock("l")
    _hold(vl, lock, "a", shared=True)
    x = _wait(vl, lock, "x", timeout=1.0)
    s = _wait(vl, lock, "s", shared=True)
    assert not s.done()
    vl.advance(1.0)
    assert x.result() is False and s.result() is True


def test_zero_timeout_only_tries(vl: VirtualLoop) -> None:
    lock = SharedLock("l")
    _hold(vl, lock, "h")
    assert vl.run(lock.acquire(timeout=0, owner="t")) is False
    assert lock.info().pending == ()
    lock.release(owner="h")
    assert vl.run(lock.acquire(timeout=0, owner="t")) is True


def test_cancelled_waiter_leaves_no_trace(vl: VirtualLoop) -> None:
    lock = SharedLock("l")
    _hold(vl, lock, "h")
    c = _wait(vl, lock, "c")
    s = _wait(vl, lock, "s", shared=True)
    c.cancel()
    vl.settle()
    assert c.cancelled()
    assert _queue(lock) == [("shared", ("s",))]
    lock.release(owner="h")
    vl.settle()
    assert s.result() is True and not lock.is_owned(owner="c")


def test_cancellation_racing_a_grant_hands_the_lock_on(vl: VirtualLoop) -> None:
    lock = SharedLock("l")
    _hold(vl, lock, "h")
    c = _wait(vl, lock, "c")
    n = _wait(vl, lock, "n")
    lock.release(owner="h")  # grants c, whose task has not run yet ...
    c.cancel()  # ... and is cancelled before it could see the grant
    vl.settle()
    assert c.cancelled()
    assert n.result() is True and lock.info().holders == ("n",)


def test_delete_fails_every_pending_and_later_acquire(vl: VirtualLoop) -> None:
    lock = SharedLock("l")
    _hold(vl, lock, "h")
    waiters = [_wait(vl, lock, "x"), _wait(vl, lock, "s", shared=True)]
    assert vl.run(lock.delete(owner="h")) is True
    assert lock.is_deleted and lock.info().mode == "deleted" and lock.info().pending == ()
    for w in waiters:
        with pytest.raises(LockDeletedError, match="deleted while waiting"):
            w.result()
    with pytest.raises(LockDeletedError):
        vl.run(lock.acquire(shared=True, owner="late"))
    with pytest.raises(LockDeletedError):
        vl.run(lock.delete(owner="h"))


def test_delete_acquires_exclusively_and_can_time_out(vl: VirtualLoop) -> None:
    lock = SharedLock("l")
    _hold(vl, lock, "a", shared=True)
    d = vl.spawn(lock.delete(timeout=1.0, owner="d"))
    vl.settle()
    vl.advance(1.0)
    assert d.result() is False and not lock.is_deleted
    d = vl.spawn(lock.delete(owner="d"))
    vl.settle()
    assert not d.done()
    lock.release(owner="a")
    vl.settle()
    assert d.result() is True and lock.is_deleted


def test_delete_while_holding_shared_is_refused(vl: VirtualLoop) -> None:
    lock = SharedLock("l")
    _hold(vl, lock, "a", shared=True)
    with pytest.raises(LockError, match="holds it shared"):
        vl.run(lock.delete(owner="a"))
    assert not lock.is_deleted and lock.is_owned(True, owner="a")


def test_misuse_is_an_error(vl: VirtualLoop) -> None:
    lock = SharedLock("l")
    with pytest.raises(LockError, match="does not hold it"):
        lock.release(owner="nobody")
    _hold(vl, lock, "a", shared=True)
    with pytest.raises(LockError, match="already held by a"):
        vl.run(lock.acquire(owner="a"))
    with pytest.raises(LockError, match="does not hold it"):
        lock.release(owner="b")


def test_default_owner_is_the_current_task() -> None:
    async def scenario() -> None:
        lock = SharedLock("l")
        assert await lock.acquire()
        assert lock.is_owned()
        other = asyncio.create_task(lock.acquire(timeout=0))
        assert await other is False, "another task is another owner"
        lock.release()
        name = asyncio.current_task().get_name()  # type: ignore[union-attr]
        assert await lock.acquire(shared=True)
        assert lock.info().holders == (name,)
        lock.release()

    asyncio.run(scenario())


def test_owner_is_required_outside_a_task() -> None:
    with pytest.raises(LockError, match="no lock owner"):
        SharedLock("l").release()


def test_info_lists_holders_and_queue_with_priorities(vl: VirtualLoop) -> None:
    lock = SharedLock("instance/web1")
    _hold(vl, lock, "job/1")
    _wait(vl, lock, "job/2", shared=True)
    _wait(vl, lock, "job/3", priority=-10)
    info = lock.info()
    assert info.name == "instance/web1" and info.mode == "exclusive"
    assert info.holders == ("job/1",)
    assert info.pending == (
        PendingInfo(mode="exclusive", priority=-10, owners=("job/3",)),
        PendingInfo(mode="shared", priority=0, owners=("job/2",)),
    )
