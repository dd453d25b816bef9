"""``gnt-debug delay`` on a real testbed: on nodes through their node daemons, and
interruptible through the socket the job log names."""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

import pytest

from corral.paths import Paths
from tests.conftest import TestbedHandle

pytestmark = pytest.mark.integration


def _node(tb: TestbedHandle, master: bool) -> dict[str, str]:
    return next(n for n in tb.state["nodes"] if n["master"] is master)


@pytest.mark.shared_testbed
def test_delay_on_a_node_runs_in_that_nodes_daemon(testbed: TestbedHandle) -> None:
    other = _node(testbed, master=False)
    log = Paths(Path(other["root"])).log_file("noded")
    before = log.read_text().count("test delay: slept")
    start = time.monotonic()
    testbed.run("gnt-debug", "delay", "--no-master", "-n", other["name"], "1.5")
    assert time.monotonic() - start >= 1.5
    assert log.read_text().count("test delay: slept") == before + 1

    unknown = testbed.run("gnt-debug", "delay", "-n", "no-such-node.testbed", "0", check=False)
    assert unknown.returncode != 0
    assert "no node 'no-such-node.testbed' in the cluster" in unknown.stderr


def _socket_path(tb: TestbedHandle, job_id: int, timeout: float = 30.0) -> str:
    """The interrupt socket a running interruptible delay wrote to its job log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = tb.run("gnt-job", "info", str(job_id)).stdout
        found = re.search(r"delay-test.*?(/[^'\"\s,\]]*/sock)", info)
        if found:
            return found.group(1)
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} logged no interrupt socket:\n{info}")


@pytest.mark.shared_testbed
def test_interruptible_delay_ends_by_its_socket_or_a_cancel(testbed: TestbedHandle) -> None:
    proc = testbed.run("gnt-debug", "delay", "--interruptible", "--submit", "--print-jobid",
                       "--repeat", "3", "600")
    job_id = int(proc.stdout.split()[0])
    path = _socket_path(testbed, job_id)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        sock.sendall(b"x")
    start = time.monotonic()
    testbed.run("gnt-job", "wait", str(job_id))
    assert time.monotonic() - start < 30
    info = testbed.run("gnt-job", "info", str(job_id)).stdout
    assert "  Status: success" in info
    assert "Interrupted, time spent waiting" in info
    assert "Test delay iteration 1/2" not in info  # the repetitions ended with it

    # gnt-job cancel stops a running interruptible delay too; the job ends canceled.
    proc = testbed.run("gnt-debug", "delay", "-i", "--submit", "--print-jobid", "600")
    job_id = int(proc.stdout.split()[0])
    _socket_path(testbed, job_id)  # it runs
    cancel = testbed.run("gnt-job", "cancel", str(job_id))
    assert f"Job {job_id} will be canceled" in cancel.stdout
    waited = testbed.run("gnt-job", "wait", str(job_id), check=False)
    assert waited.returncode == 1 and "was canceled" in waited.stderr
    assert waited.stderr.startswith(f"Job {job_id} failed: Unhandled Ganeti error: Job was "
                                    "canceled\n")
    assert "  Status: canceled" in testbed.run("gnt-job", "info", str(job_id)).stdout
