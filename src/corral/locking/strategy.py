"""LockAttemptStrategy: retry lock acquisition with growing timeouts (seed 002).

An operation that needs several locks must not sit on the ones it got while waiting
for the rest. Otherwise one slow holder stalls everybody queued behind the waiter as
well (the seed's operations A, B and C). The strategy makes a number of attempts, each
with a longer timeout than the one before (``first_timeout * 2**tries``, the seed's
``2**tries`` seconds by default). After a failed attempt it releases everything,
sleeps a short random time so that competing retries do not move in lockstep, and
tries again. The last attempt blocks until it gets the locks, so progress is certain.

The job processor uses it around the whole lock acquisition of an opcode (all levels),
since an attempt may fail at any level after succeeding at the ones above.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

from corral.errors import LockError, ParameterError

__all__ = ["LockAttemptStrategy"]


class LockAttemptStrategy:
    """Growing per-attempt timeouts, release between attempts, then one blocking attempt."""

    def __init__(
        self,
        *,
        first_timeout: float = 1.0,
        attempts: int = 5,
        max_pause: float = 0.1,
        rng: random.Random | None = None,
    ) -> None:
        if first_timeout <= 0 or attempts < 0 or max_pause < 0:
            raise ParameterError(
                "lock attempt strategy needs first_timeout > 0, attempts >= 0 and "
                f"max_pause >= 0 (got {first_timeout}, {attempts}, {max_pause})")
        self.first_timeout = first_timeout
        self.attempts = attempts
        self.max_pause = max_pause
        self._rng = rng or random.Random()

    def timeouts(self) -> list[float | None]:
        """The timeout of each attempt in turn; the final None is the blocking attempt."""
        timed: list[float | None] = [self.first_timeout * 2**t for t in range(self.attempts)]
        return [*timed, None]

    async def run(
        self,
        attempt: Callable[[float | None], Awaitable[bool]],
        release: Callable[[], None],
    ) -> int:
        """Call ``attempt(timeout)`` until it returns True; return how many calls it took.

        ``attempt`` tries to take every lock within the timeout it is given (None: wait
        as long as needed). ``release`` gives up whatever the attempt holds. It is called
        after every failed attempt and when an attempt raises or is cancelled.
        """
        for number, timeout in enumerate(self.timeouts(), start=1):
            try:
                if await attempt(timeout):
                    return number
            except BaseException:
                release()
                raise
            release()
            if timeout is None:
                raise LockError("a blocking lock attempt returned without the locks")
            await asyncio.sleep(self._rng.uniform(0, self.max_pause))
        raise AssertionError("unreachable: the last timeout is None")
