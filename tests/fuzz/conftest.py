"""The fuzz suite's settings and its one testbed.

Every daemon-facing fuzz test sends what Hypothesis generates to a real daemon of one
3-node testbed shared by the whole ``tests/fuzz`` package (started once: a testbed
costs seconds and the suite has a time budget), then checks that the daemon answered
with a clear error, not an internal one, and still answers a valid request.

How much is generated: each test asks :func:`examples` for its number of examples,
scaled by ``CORRAL_FUZZ_SCALE`` (default 1, what ``make test`` runs; e.g.
``CORRAL_FUZZ_SCALE=50`` for a long run outside CI, see docs/fuzzing.md). The daemons
run with the event-loop check of the integration suite, and a blocked loop fails the
suite.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from corral.utils import loopcheck
from tests.conftest import TestbedHandle, running_testbed

#: Environment variable multiplying every fuzz test's number of examples.
SCALE_ENV = "CORRAL_FUZZ_SCALE"
#: The request body limit of the fuzz testbed's node daemons (``CORRAL_RPC_MAX_BODY``),
#: small so that sending a body past it costs little.
RPC_MAX_BODY = 2 << 20


def scale() -> float:
    """The example multiplier ``CORRAL_FUZZ_SCALE`` asks for (default 1)."""
    text = os.environ.get(SCALE_ENV, "1")
    try:
        value = float(text)
    except ValueError:
        raise pytest.UsageError(
            f"{SCALE_ENV}={text!r}: expected a number such as 1 or 50") from None
    if value <= 0:
        raise pytest.UsageError(f"{SCALE_ENV}={text!r}: expected a number above 0")
    return value


def examples(count: int) -> settings:
    """Hypothesis settings for ``count`` examples (times the scale): no deadline (the
    machine is shared, a slow answer is not a failure), no example database (the
    runs are short and the daemons' state changes between them)."""
    return settings(max_examples=max(1, round(count * scale())), deadline=None,
                    database=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])


@pytest.fixture(autouse=True, scope="package")
def _loop_check_environment() -> Iterator[None]:
    """The daemons of the fuzz testbed run with the event-loop check (and noded with
    the small body limit :data:`RPC_MAX_BODY`)."""
    from corral.rpc.chunks import MAX_BODY_ENV

    wanted = {MAX_BODY_ENV: str(RPC_MAX_BODY)}
    if loopcheck.LOOP_CHECK_ENV not in os.environ:
        wanted[loopcheck.LOOP_CHECK_ENV] = str(loopcheck.DEFAULT_THRESHOLD_MS)
    with pytest.MonkeyPatch.context() as patch:
        for name, value in wanted.items():
            patch.setenv(name, value)
        yield


@pytest.fixture(scope="package")
def _fuzz_testbed(tmp_path_factory: pytest.TempPathFactory,
                  _loop_check_environment: None) -> Iterator[TestbedHandle]:
    with running_testbed(tmp_path_factory.mktemp("fuzz") / "tb") as handle:
        yield handle


@pytest.fixture
def fuzz_testbed(_fuzz_testbed: TestbedHandle) -> Iterator[TestbedHandle]:
    """The fuzz suite's shared 3-node testbed; a test fails when one of its daemons
    logged a blocked event loop or an internal error (an incident) during the test."""
    directory = _fuzz_testbed.dir
    before_loop = len(loopcheck.reports(directory))
    before_incidents = len(incidents(_fuzz_testbed))
    yield _fuzz_testbed
    blocked = loopcheck.reports(directory)[before_loop:]
    new_incidents = incidents(_fuzz_testbed)[before_incidents:]
    problems = []
    if blocked:
        problems.append("a daemon blocked its event loop:\n" + "\n".join(blocked))
    if new_incidents:
        problems.append("a daemon logged an internal error:\n" + "\n".join(new_incidents))
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def incidents(testbed: TestbedHandle) -> list[str]:
    """The internal-error lines (``... failed unexpectedly (incident X)``) in every
    daemon log of ``testbed``, in a stable order."""
    found: list[str] = []
    for log in sorted(testbed.dir.glob("*/var/log/corral/*.log")):
        with open(log, errors="replace") as lines:
            found.extend(f"{log.relative_to(testbed.dir).parts[0]}/{log.name}: "
                         f"{line.rstrip()}" for line in lines
                         if "(incident " in line or "unexpected failure" in line)
    return found
