"""A daemon started by hand goes into the background once it serves, unless ``-f``."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from corral.paths import Paths
from corral.utils.process import running_pid, stop_daemon
from tests.conftest import BIN, free_port

pytestmark = pytest.mark.integration

HOST = "127.0.9.7"


def _node(tmp_path: Path) -> tuple[Paths, dict[str, str]]:
    paths = Paths(tmp_path)
    paths.noded_settings.parent.mkdir(parents=True, exist_ok=True)
    paths.noded_settings.write_text(json.dumps({"bind": HOST, "port": free_port(HOST)}))
    return paths, {**os.environ, "CORRAL_ROOT": str(tmp_path)}


def _stop(proc: subprocess.Popen[str] | subprocess.Popen[bytes]) -> None:
    """Stop a foreground daemon this test started: SIGTERM, then SIGKILL after 15 s."""
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_without_foreground_the_daemon_detaches_once_it_serves(tmp_path: Path) -> None:
    paths, env = _node(tmp_path)
    proc = subprocess.Popen([str(BIN / "corral-noded"), "--no-mlock"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        pid = running_pid(paths.pid_file("noded"))
        assert pid is not None and pid != proc.pid
        assert os.getsid(pid) == pid  # a session of its own, no controlling terminal
        assert paths.join_token.read_text().strip()  # it serves: a fresh node's token
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stop_daemon(paths.pid_file("noded"))


def test_with_foreground_the_daemon_stays(tmp_path: Path) -> None:
    paths, env = _node(tmp_path)
    proc = subprocess.Popen([str(BIN / "corral-noded"), "--no-mlock", "-f"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=3)
        assert running_pid(paths.pid_file("noded")) == proc.pid
    finally:
        _stop(proc)


def test_a_refusal_is_reported_by_the_command(tmp_path: Path) -> None:
    paths, env = _node(tmp_path)
    holder = subprocess.Popen([str(BIN / "corral-noded"), "--no-mlock", "-f"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while running_pid(paths.pid_file("noded")) != holder.pid:
            assert holder.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        second = subprocess.run([str(BIN / "corral-noded"), "--no-mlock"], env=env,
                                capture_output=True, text=True, timeout=30)
        assert second.returncode == 1
        assert "could not start" in second.stderr or "refusing" in second.stderr, second.stderr
    finally:
        _stop(holder)
