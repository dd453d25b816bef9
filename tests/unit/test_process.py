"""Pid files, readiness handshake and stopping daemons by pid."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from corral.errors import DaemonError
from corral.utils.process import PidFile, running_pid, start_daemon, stop_daemon


def test_pid_file_is_exclusive_and_stale_files_do_not_count(tmp_path: Path) -> None:
    path = tmp_path / "d.pid"
    pid_file = PidFile(path)
    assert running_pid(path) == os.getpid()
    with pytest.raises(DaemonError, match=f"already running with pid {os.getpid()}"):
        PidFile(path)
    pid_file.remove()
    assert running_pid(path) is None
    # A leftover pid file naming a live process (pid 1) is stale: nobody holds its lock.
    path.write_text("1\n")
    assert running_pid(path) is None
    assert stop_daemon(path) is None


def _script(tmp_path: Path, body: str) -> list[str]:
    script = tmp_path / "daemon.py"
    script.write_text(textwrap.dedent(body))
    return [sys.executable, str(script)]


def test_start_waits_for_ready_and_stop_terminates(tmp_path: Path) -> None:
    pid_path = tmp_path / "d.pid"
    argv = _script(tmp_path, f"""
        import signal, sys, time
        sys.path.insert(0, {str(Path(__file__).parents[2] / "src")!r})
        from corral.utils.process import PidFile, notify_ready
        pid = PidFile(__import__("pathlib").Path({str(pid_path)!r}))
        signal.signal(signal.SIGTERM, lambda *a: (pid.remove(), sys.exit(0)))
        notify_ready()
        while True:
            time.sleep(1)
    """)
    pid = start_daemon("test", argv, log_file=tmp_path / "d.log", timeout=20)
    assert running_pid(pid_path) == pid
    assert stop_daemon(pid_path) == pid
    assert running_pid(pid_path) is None


def test_start_reports_the_daemons_own_reason(tmp_path: Path) -> None:
    argv = _script(tmp_path, f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parents[2] / "src")!r})
        from corral.utils.process import notify_failed
        notify_failed("the store /x/config.db is corrupt")
        sys.exit(1)
    """)
    with pytest.raises(DaemonError, match=r"the store /x/config\.db is corrupt"):
        start_daemon("test", argv, log_file=tmp_path / "d.log", timeout=20)


def test_start_reports_a_silent_exit(tmp_path: Path) -> None:
    argv = _script(tmp_path, "import sys; print('oops'); sys.exit(3)")
    with pytest.raises(DaemonError, match="exited with status 3"):
        start_daemon("test", argv, log_file=tmp_path / "d.log", timeout=20)
    assert "oops" in (tmp_path / "d.log").read_text()
