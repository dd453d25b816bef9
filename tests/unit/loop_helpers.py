"""Watching an event loop from a test: does a coroutine let other work run?"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

__all__ = ["ticks_while"]


async def ticks_while(operation: Awaitable[Any]) -> int:
    """How often a 10 ms ticker ran while ``operation`` was awaited: a coroutine that
    blocks the loop for its whole run lets the ticker run at most once."""
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    try:
        await operation
    finally:
        stop.set()
        await task
    return ticks
