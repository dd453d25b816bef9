"""Fixtures shared by the test suites: a real testbed cluster and CLI runner."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from corral.paths import Paths
from corral.testbed import core as testbed_core
from corral.utils import loopcheck
from corral.utils.process import running_pid

BIN = Path(sys.executable).parent


#: The slow-callback threshold (seconds) of the tests' own event loops; None: no check.
_TEST_LOOPS: dict[str, float | None] = {"limit": None}


def _checked_loop() -> asyncio.AbstractEventLoop:
    loop = asyncio.new_event_loop()
    limit = _TEST_LOOPS["limit"]
    if limit is not None:
        loopcheck.enable(loop, limit)
    return loop


def pytest_configure(config: pytest.Config) -> None:
    """With ``CORRAL_LOOP_CHECK`` set when pytest starts, the tests' own event loops
    run with the loop check as well, and a test whose loop was blocked fails. It is
    off by default: test code that sets up files from a coroutine trips it on a busy
    machine. (The integration suite's daemons are always checked, see
    tests/integration/conftest.py.)"""
    _TEST_LOOPS["limit"] = loopcheck.threshold()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _stop_on_sigterm)


def _stop_on_sigterm(signum: int, _frame: object) -> None:
    """A run stopped with SIGTERM (a CI time limit, ``timeout``) ends as Ctrl-C does:
    pytest still tears the fixtures down and runs the cleanups, so no testbed daemon,
    namespace, loop device or mount outlives the run."""
    raise KeyboardInterrupt(f"signal {signum}: stopping the run after cleaning up")


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item
                                  ) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """pytest-asyncio's loops, with the loop check of :mod:`corral.utils.loopcheck`
    when ``CORRAL_LOOP_CHECK`` asks for it (see :func:`pytest_configure`)."""
    return {"loopcheck": _checked_loop}


class _Reports(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if loopcheck.MARKER in message:
            self.lines.append(message)


@pytest.fixture(autouse=True)
def _test_loop_not_blocked() -> Iterator[None]:
    """Fail a test whose own event loop ran a callback past the threshold."""
    reports = _Reports()
    loggers = [logging.getLogger("corral.loopcheck")]
    for logger in loggers:
        logger.addHandler(reports)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeHandler(reports)
    if reports.lines:
        pytest.fail("the test's event loop was blocked:\n" + "\n".join(reports.lines),
                    pytrace=False)


def free_port(host: str = "127.0.0.1", kind: int = socket.SOCK_STREAM) -> int:
    """A port of ``kind`` (TCP by default) that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def run_tool(args: list[str], env: dict[str, str], check: bool = True,
             timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run a corral command-line tool (from this virtualenv) with ``env``."""
    exe = BIN / args[0]
    proc = subprocess.run([str(exe), *args[1:]], env=env, capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(args)} exited {proc.returncode}\nstdout:\n{proc.stdout}\n"
            f"stderr:\n{proc.stderr}"
        )
    return proc


@dataclass
class TestbedHandle:
    """A running testbed and helpers to drive it like an administrator would."""

    __test__ = False

    dir: Path
    state: dict[str, Any]

    @property
    def env(self) -> dict[str, str]:
        """Environment for CLI tools talking to this testbed's master."""
        return {**os.environ, **self.state["env"]}

    @property
    def paths(self) -> Paths:
        """The master node's paths."""
        return Paths(Path(self.state["env"]["CORRAL_ROOT"]))

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a CLI tool against the testbed."""
        return run_tool(list(args), self.env, check=check)

    def info(self) -> dict[str, Any]:
        """``gnt-cluster info --json`` parsed."""
        result: dict[str, Any] = json.loads(self.run("gnt-cluster", "info", "--json").stdout)
        return result

    def reload(self) -> None:
        """Re-read testbed.json."""
        self.state = json.loads((self.dir / "testbed.json").read_text())


def run_testbed(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m corral.testbed ...``."""
    return subprocess.run([sys.executable, "-m", "corral.testbed", *args], capture_output=True,
                          text=True, timeout=120)


@contextlib.contextmanager
def running_testbed(directory: Path) -> Iterator[TestbedHandle]:
    """A 3-node testbed brought up in ``directory``; brought down afterwards, even on
    failure, with a check that none of its daemons is left.

    It calls what ``python -m corral.testbed up`` and ``down`` call, in this process:
    a new interpreter importing the testbed's modules twice per testbed cost more
    than a second, and the commands themselves are tested on their own."""
    try:
        testbed_core.up(directory, 3)
        yield TestbedHandle(directory, json.loads((directory / "testbed.json").read_text()))
    finally:
        try:
            testbed_core.down(directory)
        finally:
            assert_no_daemons(directory)


@pytest.fixture
def testbed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestbedHandle]:
    """A 3-node testbed in a temporary directory, stopped afterwards even on failure.

    A test marked ``@pytest.mark.shared_testbed`` (or a module with that mark in its
    ``pytestmark``) gets the module's shared testbed instead: see :func:`shared_testbed`
    for which tests may share one."""
    if request.node.get_closest_marker("shared_testbed") is not None:
        shared: TestbedHandle = request.getfixturevalue("shared_testbed")
        yield shared
        return
    with running_testbed(tmp_path / "tb") as handle:
        yield handle


#: The blocked-loop reports already seen in each shared testbed's logs, by directory.
_SEEN_REPORTS: dict[Path, list[str]] = {}


@pytest.fixture(scope="module")
def _module_testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestbedHandle]:
    """One 3-node testbed for a whole test module (see :func:`shared_testbed`), stopped
    at the module's end even on failure; a blocked-loop report its daemons logged after
    the last test (while stopping) fails that test's teardown."""
    directory = tmp_path_factory.mktemp("shared") / "tb"
    _SEEN_REPORTS[directory] = []
    try:
        with running_testbed(directory) as handle:
            yield handle
    finally:
        new = _new_reports(directory)
        del _SEEN_REPORTS[directory]
    if new:
        pytest.fail("a daemon of the shared testbed blocked its event loop:\n"
                    + "\n".join(new), pytrace=False)


def _new_reports(directory: Path) -> list[str]:
    """The blocked-loop reports in the logs under ``directory`` not seen before (each is
    seen from now on)."""
    seen = Counter(_SEEN_REPORTS[directory])
    found = loopcheck.reports(directory)
    new: list[str] = []
    for line in found:
        if seen[line]:
            seen[line] -= 1
        else:
            new.append(line)
    _SEEN_REPORTS[directory] = found
    return new


@pytest.fixture
def shared_testbed(_module_testbed: TestbedHandle) -> Iterator[TestbedHandle]:
    """The module's shared 3-node testbed (started once per module, stopped at its end),
    for tests that only read, are refused, or create and remove their own uniquely named
    objects, leaving the cluster as they found it: a test must not rely on what another
    left behind (test order is random) and must restore any cluster-wide setting it
    changes. A test fails when the testbed's daemons logged a blocked event loop since the
    previous check (the testbed's start, or the end of the module's previous test that
    used it): the check ``tests/integration/conftest.py`` does for a test's own testbed."""
    yield _module_testbed
    new = _new_reports(_module_testbed.dir)
    if new:
        pytest.fail("a daemon of the shared testbed blocked its event loop:\n"
                    + "\n".join(new), pytrace=False)


def assert_no_daemons(directory: Path) -> None:
    """Fail if any corral daemon still holds a pid file under ``directory``."""
    survivors = [(p, running_pid(p)) for p in directory.glob("*/run/corral/*.pid")]
    survivors = [(p, pid) for p, pid in survivors if pid is not None]
    assert not survivors, f"daemons left running after 'down': {survivors}"
