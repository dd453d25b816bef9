"""An asyncio event loop whose clock moves only when the test moves it.

Lock timeouts are ``loop.call_later`` handles, so with this loop a test can say "two
seconds pass" and see exactly the timers due by then fire, with no real waiting and
no dependence on machine speed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class VirtualLoop:
    """Drives a private event loop step by step; ``now`` is its clock."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.now = 0.0
        self.loop.time = lambda: self.now  # type: ignore[method-assign]

    def spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Start a task; it runs at the next :meth:`settle`."""
        return self.loop.create_task(coro)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine that must finish without the clock moving."""
        task = self.spawn(coro)
        self.settle()
        assert task.done(), "coroutine is still waiting; advance the clock or release"
        return task.result()

    def settle(self) -> None:
        """Run everything that is ready, until nothing more is (the clock stays put)."""
        for _ in range(100_000):
            self.loop.run_until_complete(asyncio.sleep(0))
            if not self.loop._ready:  # type: ignore[attr-defined]
                return
        raise AssertionError("event loop never settled")

    def advance(self, seconds: float) -> None:
        """Move the clock forward and run what became due."""
        self.now += seconds
        self.settle()

    def close(self) -> None:
        """Cancel whatever is still running and close the loop."""
        pending = asyncio.all_tasks(self.loop)
        for task in pending:
            task.cancel()
        if pending:
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.loop.close()
