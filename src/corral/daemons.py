"""Which corral daemons run on a node, and starting, stopping and listing them.

Each daemon is started as ``python -m <module>`` with this interpreter, so a
virtualenv install works without its ``bin`` on ``PATH``. noded runs on every
node; masterd and rapi only where the configuration store is (the master node);
later daemons (confd) join the table as they are written.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from corral.errors import DaemonError
from corral.paths import ROOT_ENV, Paths
from corral.utils.process import running_pid, start_daemon, stop_daemon

__all__ = ["DAEMONS", "Daemon", "start", "status", "stop"]


@dataclass(frozen=True)
class Daemon:
    """A daemon corral runs on a node."""

    name: str
    module: str
    #: Runs only where the configuration store is (the master node).
    master_only: bool


#: In start order: the node daemon first (the master calls it as soon as it runs),
#: then the master daemon, then the Remote API daemon, a client of the master daemon.
#: Stopping goes the other way.
DAEMONS: tuple[Daemon, ...] = (
    Daemon("noded", "corral.noded", master_only=False),
    Daemon("masterd", "corral.masterd", master_only=True),
    Daemon("rapi", "corral.rapi", master_only=True),
)


def _wanted(paths: Paths) -> list[Daemon]:
    is_master = paths.config_db.exists()
    return [d for d in DAEMONS if is_master or not d.master_only]


def start(paths: Paths) -> dict[str, int]:
    """Start every daemon this node should run that is not running; return their pids.

    All or nothing: when one daemon cannot start, those this call started are stopped
    again (by pid file) before the error is raised, so a refused start leaves no
    half-started node behind.
    """
    env = dict(os.environ)
    env[ROOT_ENV] = str(paths.root)
    pids: dict[str, int] = {}
    started_now: list[Daemon] = []
    for daemon in _wanted(paths):
        pid = running_pid(paths.pid_file(daemon.name))
        if pid is None:
            try:
                pid = start_daemon(
                    f"corral-{daemon.name}",
                    [sys.executable, "-m", daemon.module],
                    log_file=paths.log_file(daemon.name),
                    env=env,
                )
            except DaemonError:
                for earlier in reversed(started_now):
                    stop_daemon(paths.pid_file(earlier.name))
                raise
            started_now.append(daemon)
        pids[daemon.name] = pid
    return pids


def stop(paths: Paths) -> dict[str, int | None]:
    """Stop every corral daemon of this node (in reverse order); return the stopped pids."""
    return {d.name: stop_daemon(paths.pid_file(d.name)) for d in reversed(DAEMONS)}


def status(paths: Paths) -> dict[str, int | None]:
    """The pid of each daemon this node should run, ``None`` for those not running."""
    return {d.name: running_pid(paths.pid_file(d.name)) for d in _wanted(paths)}
