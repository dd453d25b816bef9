"""LockAttemptStrategy, and the seed's demonstration of why it exists.

Seed 002: operation A holds inst4; B wants every instance lock and waits for inst4
holding inst1..inst3; C wants only inst1. Without retries C waits for B, which waits
for A. With the strategy B gives up its locks when an attempt times out, so C gets
inst1 and finishes while A still holds inst4.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

import pytest

from corral.errors import LockError, ParameterError
from corral.locking import ALL_SET, LockAttemptStrategy, LockLevel, LockManager
from tests.unit.virtual_time import VirtualLoop

INSTANCES = ["inst1", "inst2", "inst3", "inst4"]


@pytest.fixture
def vl() -> Iterator[VirtualLoop]:
    loop = VirtualLoop()
    yield loop
    loop.close()


def test_timeouts_double_from_the_first_and_end_blocking() -> None:
    assert LockAttemptStrategy().timeouts() == [1.0, 2.0, 4.0, 8.0, 16.0, None]
    assert LockAttemptStrategy(first_timeout=0.5, attempts=3).timeouts() == [
        0.5, 1.0, 2.0, None]
    assert LockAttemptStrategy(attempts=0).timeouts() == [None]


@pytest.mark.parametrize("kwargs", [
    {"first_timeout": 0}, {"first_timeout": -1.0}, {"attempts": -1}, {"max_pause": -0.1},
])
def test_bad_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ParameterError, match="first_timeout > 0"):
        LockAttemptStrategy(**kwargs)  # type: ignore[arg-type]


def test_retries_with_each_timeout_releasing_in_between(vl: VirtualLoop) -> None:
    strategy = LockAttemptStrategy(first_timeout=1.0, attempts=3, max_pause=0.5,
                                   rng=random.Random(1))
    given: list[tuple[float | None, float]] = []
    released: list[float] = []

    async def attempt(timeout: float | None) -> bool:
        given.append((timeout, vl.now))
        return timeout is None

    task = vl.spawn(strategy.run(attempt, lambda: released.append(vl.now)))
    for _ in range(10):
        vl.advance(0.5)
    assert task.result() == 4
    assert [t for t, _ in given] == [1.0, 2.0, 4.0, None]
    assert len(released) == 3, "everything is released after each failed attempt"
    starts = [at for _, at in given]
    assert all(0 <= later - earlier <= 1.0 for earlier, later in itertools.pairwise(starts))


def test_an_attempt_that_raises_is_released_and_the_error_passes(vl: VirtualLoop) -> None:
    released: list[bool] = []

    async def attempt(timeout: float | None) -> bool:
        raise LockError("boom")

    with pytest.raises(LockError, match="boom"):
        vl.run(LockAttemptStrategy().run(attempt, lambda: released.append(True)))
    assert released == [True]


def test_a_blocking_attempt_that_fails_is_a_bug_reported_as_such(vl: VirtualLoop) -> None:
    async def attempt(timeout: float | None) -> bool:
        return False

    with pytest.raises(LockError, match="blocking lock attempt"):
        vl.run(LockAttemptStrategy(attempts=0).run(attempt, lambda: None))


def _demonstration(vl: VirtualLoop, retry: bool) -> dict[str, float]:
    """Run the seed's A/B/C scenario; return when each event happened."""
    locks = LockManager(instances=INSTANCES)
    events: dict[str, float] = {}

    async def operation_b() -> None:
        async def attempt(timeout: float | None) -> bool:
            got = await locks.acquire(LockLevel.INSTANCE, ALL_SET, timeout=timeout, owner="B")
            return got is not None

        if retry:
            strategy = LockAttemptStrategy(first_timeout=1.0, attempts=4,
                                           rng=random.Random(0))
            await strategy.run(attempt, lambda: locks.release_all(owner="B"))
        else:
            await attempt(None)
        events["B has all"] = vl.now
        locks.release_all(owner="B")

    async def operation_c() -> None:
        await locks.acquire(LockLevel.INSTANCE, ["inst1"], owner="C")
        events["C done"] = vl.now
        locks.release_all(owner="C")

    assert vl.run(locks.acquire(LockLevel.INSTANCE, ["inst4"], owner="A"))
    b = vl.spawn(operation_b())
    vl.settle()
    assert locks.owned_locks(LockLevel.INSTANCE, owner="B") == frozenset()
    holders = {info.name: info.holders for info in locks.info()}
    assert holders["instance/inst1"] == ("B",), "B holds inst1..3 while it waits for inst4"
    c = vl.spawn(operation_c())
    vl.settle()
    assert "C done" not in events, "C first has to wait for B"
    for _ in range(60):  # A works for 30 seconds
        vl.advance(0.5)
    events["A releases"] = vl.now
    locks.release_all(owner="A")
    for _ in range(100):
        vl.advance(1.0)
    assert b.done() and c.done()
    b.result()
    c.result()
    return events


def test_with_the_retry_strategy_c_finishes_before_a_releases_inst4(vl: VirtualLoop) -> None:
    events = _demonstration(vl, retry=True)
    assert events["C done"] < events["A releases"]
    assert events["C done"] <= 1.0 + 0.1, "C gets inst1 as soon as B's first attempt fails"
    assert events["B has all"] >= events["A releases"]


def test_without_retries_c_waits_for_a(vl: VirtualLoop) -> None:
    events = _demonstration(vl, retry=False)
    assert events["C done"] >= events["A releases"]
