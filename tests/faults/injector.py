"""Faults put into a testbed, and the operator's repairs: kill -9 of a daemon by pid,
``corral-daemons start``, a watcher killed in the middle of its pass, a master failover.

Every function names what it did in its return value (for the fault log).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from random import Random

from corral.utils.process import running_pid
from tests.faults.invariants import FaultCluster, FaultNode

__all__ = ["KILLABLE", "kill9", "kill_watcher", "master_failover", "restart", "wait_luxi"]

#: The daemons kill -9 is tried on, and where they run.
KILLABLE = {"masterd": "master", "rapi": "master", "confd": "candidate", "noded": "node",
            "mond": "node"}

_BIN = Path(sys.executable).parent


def kill9(node: FaultNode, daemon: str) -> int | None:
    """kill -9 of ``daemon`` on ``node`` by the pid in its pid file; returns the pid,
    None when it was not running. Returns once the process is gone."""
    pid_file = node.paths.pid_file(daemon)
    pid = running_pid(pid_file)
    if pid is None:
        return None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    # the pid file's lock goes with the process: wait for that, as a restart needs it
    while running_pid(pid_file) == pid and time.monotonic() < deadline:
        time.sleep(0.01)
    return pid


def _tool(cluster: FaultCluster, node: FaultNode, *args: str) -> str:
    """Run a corral tool as on ``node``; raise with its output when it fails."""
    proc = subprocess.run([str(_BIN / args[0]), *args[1:]], env=cluster.tool_env(node),
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} on {node.name} exited {proc.returncode}: "
                             f"{proc.stdout}{proc.stderr}")
    return f"{' '.join(args)} on {node.name}"


def restart(cluster: FaultCluster, node: FaultNode) -> str:
    """``corral-daemons start`` on ``node``, as an operator repairs a node."""
    return _tool(cluster, node, "corral-daemons", "start")


def wait_luxi(cluster: FaultCluster, timeout: float = 30.0) -> float:
    """Wait until the master daemon answers luxi; the seconds it took."""
    from corral.errors import CorralError

    started = time.monotonic()
    while True:
        try:
            with cluster.client(timeout=5) as client:
                client.call("QueryClusterInfo")
            return time.monotonic() - started
        except (CorralError, OSError):
            if time.monotonic() - started > timeout:
                raise
            time.sleep(0.02)


def kill_watcher(cluster: FaultCluster, rng: Random) -> str:
    """Start a watcher pass on the master and kill -9 it at a random moment of it."""
    proc = subprocess.Popen([str(_BIN / "corral-watcher")], env=cluster.tool_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    delay = rng.uniform(0.0, 0.4)
    time.sleep(delay)
    finished = proc.poll() is not None
    if not finished:
        proc.kill()
    proc.wait()
    return (f"kill -9 of corral-watcher (pid {proc.pid}) {delay:.2f} s into its pass"
            + (" (it had finished already)" if finished else ""))


def master_failover(cluster: FaultCluster, node: FaultNode) -> str:
    """``gnt-cluster master-failover`` on ``node`` (the operator's way when the master
    is dead)."""
    return _tool(cluster, node, "gnt-cluster", "master-failover")
