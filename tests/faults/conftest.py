"""Fixtures of the fault suite: the seed, the number of rounds, a log of what was
injected and checked, and the cluster view of the checks.

* ``CORRAL_FAULT_SEED`` fixes the random choices (by default a new seed per run; the
  seed is printed, so a failing run can be repeated exactly);
* ``CORRAL_FAULT_ROUNDS`` sets the rounds of every test that repeats (soak mode: many
  rounds outside CI; each test has its own small default for ``make test``).

What each test injected and checked is printed in a section of pytest's summary, also
when the test passes.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from tests.conftest import TestbedHandle
from tests.faults.invariants import FaultCluster

SEED_ENV = "CORRAL_FAULT_SEED"
ROUNDS_ENV = "CORRAL_FAULT_ROUNDS"

#: The logs of the tests run so far, printed at the end of the session.
_LOGS: list[FaultLog] = []


@dataclass
class FaultLog:
    """What one test injected and checked, line by line."""

    test: str
    seed: int
    lines: list[str] = field(default_factory=list)

    def injected(self, what: str) -> None:
        """Record a fault put in."""
        self.lines.append(f"injected {what}")

    def checked(self, lines: list[str]) -> None:
        """Record the checks that passed (as :func:`check_cluster` returns them)."""
        self.lines.extend(f"  checked {line}" for line in lines)

    def note(self, what: str) -> None:
        """Record anything else worth reading (a repair, a round's start)."""
        self.lines.append(what)


def rounds(default: int) -> int:
    """The rounds a repeating test runs: ``CORRAL_FAULT_ROUNDS`` or ``default``."""
    text = os.environ.get(ROUNDS_ENV, "")
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise pytest.UsageError(f"{ROUNDS_ENV} must be a whole number of rounds, got "
                                f"{text!r}") from None
    if value < 1:
        raise pytest.UsageError(f"{ROUNDS_ENV} must be at least 1, got {value}")
    return value


@pytest.fixture
def fault_log(request: pytest.FixtureRequest) -> FaultLog:
    """The test's log; its seed comes from ``CORRAL_FAULT_SEED`` or is drawn anew."""
    text = os.environ.get(SEED_ENV, "")
    try:
        seed = int(text) if text else random.SystemRandom().randrange(2**32)
    except ValueError:
        raise pytest.UsageError(f"{SEED_ENV} must be a whole number, got {text!r}") from None
    log = FaultLog(request.node.nodeid, seed)
    _LOGS.append(log)
    print(f"{request.node.nodeid}: {SEED_ENV}={seed}")
    return log


@pytest.fixture
def rng(fault_log: FaultLog) -> random.Random:
    """The test's random generator, seeded with its log's seed."""
    return random.Random(fault_log.seed)


@pytest.fixture
def fault_cluster(testbed: TestbedHandle) -> Iterator[FaultCluster]:
    """The checks' view of the test's testbed."""
    yield FaultCluster.from_testbed(testbed.dir)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print what every fault test injected and checked."""
    if not _LOGS:
        return
    terminalreporter.section("faults injected and checked")
    for log in _LOGS:
        terminalreporter.write_line(f"{log.test} ({SEED_ENV}={log.seed})")
        for line in log.lines:
            terminalreporter.write_line(f"  {line}")
