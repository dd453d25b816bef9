"""The event-loop check: a daemon that blocks its loop says so, and a test then fails."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from corral.utils import loopcheck

REPO = Path(__file__).resolve().parents[2]

#: A tiny daemon: logs like a corral daemon, runs its loop with loopcheck.run, and
#: has one callback that sleeps for SLEEP seconds on the loop.
DAEMON = textwrap.dedent("""
    import asyncio, sys, time
    from pathlib import Path
    from corral.utils import loopcheck
    from corral.utils.log import setup_daemon_logging

    setup_daemon_logging(Path(sys.argv[1]))

    async def hog_the_loop():
        time.sleep(float(sys.argv[2]))

    async def main():
        await asyncio.create_task(hog_the_loop())
        await asyncio.sleep(0.01)

    loopcheck.run(main())
""")


def _daemon(log: Path, sleep: float, check: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k != loopcheck.LOOP_CHECK_ENV}
    if check is not None:
        env[loopcheck.LOOP_CHECK_ENV] = check
    subprocess.run([sys.executable, "-c", DAEMON, str(log), str(sleep)], env=env,
                   check=True, timeout=60)


@pytest.mark.parametrize(("value", "seconds"), [
    (None, None), ("", None), ("0", None), ("off", None), ("1", 0.1), ("on", 0.1),
    ("250", 0.25), ("0.5", 0.0005),
])
def test_the_environment_sets_the_threshold(value: str | None, seconds: float | None) -> None:
    environ = {} if value is None else {loopcheck.LOOP_CHECK_ENV: value}
    assert loopcheck.threshold(environ) == seconds


def test_a_daemon_that_blocks_its_loop_logs_the_callback(tmp_path: Path) -> None:
    log = tmp_path / "node1" / "log" / "masterd.log"
    _daemon(log, 0.3, "100")
    found = loopcheck.reports(tmp_path)
    assert all(line.startswith("corral-masterd (node1/log/masterd.log): ") for line in found)
    # the report once the callback returned: the task's coroutine...
    after = [line for line in found if "(threshold 100 ms)" in line]
    assert len(after) == 1, found
    assert "hog_the_loop" in after[0] and "threshold 100 ms" in after[0]
    # ...and the watchdog's while it ran: where the loop thread was stuck
    during = [line for line in found if "thread is at" in line]
    assert len(during) == 1, found
    assert "hog_the_loop" in during[0].split("thread is at")[1]


def test_no_report_without_the_check_or_under_the_threshold(tmp_path: Path) -> None:
    _daemon(tmp_path / "off.log", 0.3, None)
    _daemon(tmp_path / "fast.log", 0.01, "200")
    assert (tmp_path / "off.log").exists() and (tmp_path / "fast.log").exists()
    assert loopcheck.reports(tmp_path) == []


def test_the_integration_suite_fails_a_test_whose_daemon_blocked(tmp_path: Path) -> None:
    """The integration suite's own conftest, around a test whose daemon blocks: the
    test body passes, the test fails at teardown naming the daemon and the callback;
    a daemon that does not block leaves its test green."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(
        (REPO / "tests" / "integration" / "conftest.py").read_text())
    (suite / "test_inner.py").write_text(textwrap.dedent(f"""
        import subprocess, sys
        DAEMON = {DAEMON!r}

        def _run(tmp_path, sleep):
            log = tmp_path / "node2" / "log" / "noded.log"
            subprocess.run([sys.executable, "-c", DAEMON, str(log), sleep], check=True)

        def test_blocking(tmp_path):
            _run(tmp_path, "0.4")

        def test_quiet(tmp_path):
            _run(tmp_path, "0")
    """))
    (suite / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if k != loopcheck.LOOP_CHECK_ENV}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite)],
        cwd=suite, env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout
    assert proc.returncode == 1, out
    assert "2 passed, 1 error" in out, out
    assert "ERROR at teardown of test_blocking" in out, out
    assert "a daemon blocked its event loop" in out
    assert "corral-noded (node2/log/noded.log)" in out
    assert "hog_the_loop" in out


@pytest.mark.parametrize("check", ["100", None])
def test_a_unit_test_that_blocks_its_own_loop_fails(tmp_path: Path, check: str | None
                                                    ) -> None:
    """With CORRAL_LOOP_CHECK set, the tests' own pytest-asyncio loops are checked
    too (tests/conftest.py); without it they are not."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text((REPO / "tests" / "conftest.py").read_text())
    (suite / "test_inner.py").write_text(textwrap.dedent("""
        import asyncio, time

        async def test_blocking():
            await asyncio.sleep(0)
            time.sleep(0.4)

        async def test_quiet():
            await asyncio.sleep(0.01)
    """))
    (suite / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\n")
    env = {k: v for k, v in os.environ.items() if k != loopcheck.LOOP_CHECK_ENV}
    if check is not None:
        env[loopcheck.LOOP_CHECK_ENV] = check
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite)],
        cwd=suite, env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout
    if check is None:
        assert "2 passed in" in out, out
        return
    assert "2 passed, 1 error" in out, out
    assert "ERROR at teardown of test_blocking" in out, out
    assert "the test's event loop was blocked" in out
    assert "test_inner.py:6 test_blocking" in out  # the watchdog names the line
