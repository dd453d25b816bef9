"""kill -9 of the master daemon during a stream of commits loses nothing acknowledged."""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import pytest

from corral.daemons import start
from corral.errors import CorralError
from corral.luxi import Client
from corral.utils.process import running_pid
from tests.conftest import TestbedHandle

pytestmark = pytest.mark.integration


def _commit_stream(client: Client, first: int, acked: list[int], stop: threading.Event) -> None:
    """Set vcpus to first, first+1, ... until the daemon dies; record what was acknowledged."""
    value = first
    while not stop.is_set():
        try:
            client.call("SetClusterParams", {"beparams": {"vcpus": value}}, [], False)
        except CorralError:
            return
        acked.append(value)
        value += 1


def test_kill_9_during_commits_keeps_old_or_new_config(testbed: TestbedHandle) -> None:
    paths = testbed.paths
    rng = random.Random(4711)
    first = testbed.info()["beparams"]["default"]["vcpus"] + 1  # every write is a change
    for _round in range(4):
        serial_before = testbed.info()["config_serial"]
        acked: list[int] = []
        stop = threading.Event()
        client = Client(paths.master_socket, timeout=10)
        writer = threading.Thread(target=_commit_stream, args=(client, first, acked, stop))
        writer.start()
        time.sleep(rng.uniform(0.2, 0.6))
        pid = running_pid(paths.pid_file("masterd"))
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        writer.join(timeout=30)
        stop.set()
        client.close()
        assert acked, "no commit was acknowledged before the kill"

        start(paths)
        info = testbed.info()
        vcpus = info["beparams"]["default"]["vcpus"]
        committed = info["config_serial"] - serial_before
        # Every acknowledged commit survived; at most the one in flight was added.
        assert committed in (len(acked), len(acked) + 1)
        assert vcpus == first + committed - 1
        first = vcpus + 1
