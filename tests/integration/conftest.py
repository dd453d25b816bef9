"""Integration suite settings: every daemon runs with the event-loop check.

Each test's daemons inherit ``CORRAL_LOOP_CHECK`` (see :mod:`corral.utils.loopcheck`)
from this process: a callback that holds a daemon's event loop longer than the
threshold (100 ms unless the variable is already set, e.g. ``CORRAL_LOOP_CHECK=250``
for a slower machine, or ``0`` to turn the check off) is logged by the daemon. After
the test, and after its daemons stopped, a report in any daemon log under the test's
temporary directory fails the test, naming the daemon and the callback.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.utils import loopcheck


@pytest.fixture(autouse=True, scope="session")
def _loop_check_environment() -> Iterator[None]:
    """Turn the loop check on for every daemon the suite starts."""
    before = os.environ.get(loopcheck.LOOP_CHECK_ENV)
    if before is None:
        os.environ[loopcheck.LOOP_CHECK_ENV] = str(loopcheck.DEFAULT_THRESHOLD_MS)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(loopcheck.LOOP_CHECK_ENV, None)


@pytest.fixture(autouse=True)
def _no_blocked_event_loop(tmp_path: Path) -> Iterator[None]:
    """Fail the test when one of its daemons reported a blocked event loop (checked
    last: this fixture is set up before the test's testbed, so torn down after it)."""
    yield
    found = loopcheck.reports(tmp_path)
    if found:
        pytest.fail("a daemon blocked its event loop:\n" + "\n".join(found), pytrace=False)
