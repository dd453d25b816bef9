"""Which corral daemons run on a node, and starting, stopping and listing them.

Each daemon is started as ``python -m <module>`` with this interpreter, so a
virtualenv install works without its ``bin`` on ``PATH``. Later daemons (noded,
rapi, confd) join the table as they are written.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

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


DAEMONS: tuple[Daemon, ...] = (Daemon("masterd", "corral.masterd", master_only=True),)


def _wanted(paths: Paths) -> list[Daemon]:
    is_master = paths.config_db.exists()
    return [d for d in DAEMONS if is_master or not d.master_only]


def start(paths: Paths) -> dict[str, int]:
    """Start every daemon this node should run that is not running; return their pids."""
    env = dict(os.environ)
    env[ROOT_ENV] = str(paths.root)
    started: dict[str, int] = {}
    for daemon in _wanted(paths):
        pid = running_pid(paths.pid_file(daemon.name))
        if pid is None:
            pid = start_daemon(
                f"corral-{daemon.name}",
                [sys.executable, "-m", daemon.module],
                log_file=paths.log_file(daemon.name),
                env=env,
            )
        started[daemon.name] = pid
    return started


def stop(paths: Paths) -> dict[str, int | None]:
    """Stop every corral daemon of this node (in reverse order); return the stopped pids."""
    return {d.name: stop_daemon(paths.pid_file(d.name)) for d in reversed(DAEMONS)}


def status(paths: Paths) -> dict[str, int | None]:
    """The pid of each daemon this node should run, ``None`` for those not running."""
    return {d.name: running_pid(paths.pid_file(d.name)) for d in _wanted(paths)}
