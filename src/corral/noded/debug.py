"""The node side of ``gnt-debug delay -n NODE``: sleep on this node for the master.

``test_delay`` takes ``{"duration": seconds}`` (a number, at least 0), sleeps that
long without blocking the daemon's other work, logs the start and the end so that
an administrator sees on the node that the delay ran there, and answers
``{"node_slept": seconds}``.
"""

from __future__ import annotations

import asyncio
import logging
import time

from corral.paths import Paths
from corral.rpc.args import MAX_DELAY, TestDelayArgs

__all__ = ["MAX_DELAY", "test_delay"]

log = logging.getLogger(__name__)


async def test_delay(paths: Paths, args: TestDelayArgs) -> dict[str, float]:
    """Sleep ``args.duration`` seconds on this node; answer how long it slept."""
    del paths  # the delay touches nothing on the node
    duration = args.duration
    log.info("test delay: sleeping %g s for the master", duration)
    start = time.monotonic()
    await asyncio.sleep(duration)
    slept = time.monotonic() - start
    log.info("test delay: slept %.3f s", slept)
    return {"node_slept": slept}
