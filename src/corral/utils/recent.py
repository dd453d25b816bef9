"""Answers worth keeping a while, asked once however many tasks want them at once.

The master asks nodes things that seldom change (does this node have that OS, how
much memory does it have in all) on behalf of many concurrent jobs: creating twenty
instances at once should ask each node once, not twenty times. :class:`RecentAnswers`
keeps an answer for ``ttl`` seconds and shares one question in flight per key among
the tasks that want it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["RecentAnswers"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class RecentAnswers(Generic[K, V]):
    """Answers by key, kept ``ttl`` seconds; one question in flight per key.

    ``keep(answer)`` says whether an answer is worth keeping (a node that did not
    answer, say, is not); an answer not kept, or an error, goes to the tasks that
    waited for that question only.
    """

    def __init__(self, ttl: float, keep: Callable[[V], bool] = lambda _answer: True) -> None:
        self.ttl = ttl
        self._keep = keep
        self._known: dict[K, tuple[float, V]] = {}
        self._asking: dict[K, asyncio.Future[V]] = {}

    async def get(self, key: K, ask: Callable[[], Awaitable[V]]) -> V:
        """The answer for ``key``: a kept one while it is fresh, else ``ask()``'s,
        shared with every task asking for ``key`` meanwhile."""
        known = self._known.get(key)
        if known is not None and time.monotonic() - known[0] < self.ttl:
            return known[1]
        asking = self._asking.get(key)
        if asking is None:
            asking = asyncio.ensure_future(ask())
            self._asking[key] = asking
            asking.add_done_callback(lambda done: self._learn(key, done))
        return await asyncio.shield(asking)

    def _learn(self, key: K, done: asyncio.Future[V]) -> None:
        self._asking.pop(key, None)
        if done.cancelled() or done.exception() is not None:
            return
        answer = done.result()
        if self._keep(answer):
            self._known[key] = (time.monotonic(), answer)
