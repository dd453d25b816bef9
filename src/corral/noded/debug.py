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
from collections.abc import Mapping
from typing import Any

from corral.errors import ParameterError
from corral.paths import Paths

__all__ = ["MAX_DELAY", "test_delay"]

#: The longest delay a node accepts, in seconds (a week), so that a typo does not
#: park a request on a node for years.
MAX_DELAY = 7 * 24 * 3600.0

log = logging.getLogger(__name__)


async def test_delay(paths: Paths, args: Mapping[str, Any]) -> dict[str, float]:
    """Sleep ``args["duration"]`` seconds on this node; answer how long it slept."""
    del paths  # the delay touches nothing on the node
    duration = args.get("duration")
    if (isinstance(duration, bool) or not isinstance(duration, int | float)
            or not 0 <= duration <= MAX_DELAY):
        raise ParameterError(
            f"procedure test_delay: argument 'duration' is {duration!r}, expected a number "
            f"of seconds from 0 to {MAX_DELAY:g}")
    log.info("test delay: sleeping %g s for the master", duration)
    start = time.monotonic()
    await asyncio.sleep(duration)
    slept = time.monotonic() - start
    log.info("test delay: slept %.3f s", slept)
    return {"node_slept": slept}
