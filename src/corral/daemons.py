"""Which corral daemons run on a node, and starting, stopping and listing them.

Each daemon is started as ``python -m <module>`` with this interpreter, so a
virtualenv install works without its ``bin`` on ``PATH``. noded runs on every
node; masterd and rapi only where the configuration store is (the master node);
confd wherever there is a configuration to answer from: the master's store or a
master candidate's replica. A node that becomes a candidate gets its replica from
the master, and its node daemon then starts confd (see :func:`start`'s ``only``).

With privilege separation (:mod:`corral.daemon_users`: ``daemon-users.json`` in the
data directory), :func:`start` runs as root: it creates the daemons' accounts if
missing, gives every shared file its owner and mode, and starts each daemon but the
node daemon as its own user, groups set before the daemon's first instruction. The
daemons do not start as root and drop privileges later: none of their code runs as
root, and what a daemon reads at start and on a reload it reads with the same rights,
those the file modes give it. (Their ports, 1814, 1815, 1816 and 5080, need no root;
a daemon given a port below 1024 must be started by hand as root with ``--user``.)

A daemon inherits the environment of whoever starts it, so ``CORRAL_LOOP_CHECK``
(:mod:`corral.utils.loopcheck`: report callbacks that block an event loop), set
for ``corral-daemons start`` or the testbed, reaches every daemon, including those a
node daemon starts later (confd on a new candidate, masterd after a failover).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from corral import daemon_users
from corral.errors import DaemonError
from corral.paths import ROOT_ENV, Paths
from corral.utils.process import running_pid, start_daemon, stop_daemon

__all__ = ["DAEMONS", "TOKEN_TIMEOUT", "Daemon", "Role", "restart_as_users", "start",
           "status", "stop", "wait_for_token"]


#: Where a daemon runs: every node, the master only, or the master candidates (the
#: master included).
Role = Literal["node", "master", "candidate"]


@dataclass(frozen=True)
class Daemon:
    """A daemon corral runs on a node."""

    name: str
    module: str
    runs_on: Role
    #: A daemon the node works without (monitoring): one that cannot start is
    #: reported and the others start all the same.
    optional: bool = False

    @property
    def master_only(self) -> bool:
        """Whether it runs only where the configuration store is (the master node)."""
        return self.runs_on == "master"


#: In start order: the node daemon first (the master calls it as soon as it runs),
#: then the master daemon, the Remote API daemon (a client of the master daemon),
#: confd and the monitoring daemon. Stopping goes the other way.
DAEMONS: tuple[Daemon, ...] = (
    Daemon("noded", "corral.noded", runs_on="node"),
    Daemon("masterd", "corral.masterd", runs_on="master"),
    Daemon("rapi", "corral.rapi", runs_on="master"),
    Daemon("confd", "corral.confd", runs_on="candidate"),
    Daemon("mond", "corral.mond", runs_on="node", optional=True),
)


def _wanted(paths: Paths) -> list[Daemon]:
    is_master = paths.config_db.exists()
    is_candidate = is_master or paths.config_replica.exists()
    return [d for d in DAEMONS if d.runs_on == "node"
            or (d.runs_on == "master" and is_master)
            or (d.runs_on == "candidate" and is_candidate)]


def start(paths: Paths, only: Collection[str] | None = None, *,
          failed: dict[str, str] | None = None,
          launcher: Sequence[str] = ()) -> dict[str, int]:
    """Start every daemon this node should run that is not running (of those named in
    ``only``, if given); return their pids.

    All or nothing: when one daemon cannot start, those this call started are stopped
    again (by pid file) before the error is raised, so a refused start leaves no
    half-started node behind. An optional daemon (the monitoring daemon) that cannot
    start is left out instead, its reason put in ``failed`` (by name).

    ``launcher`` is a command prefix that runs each daemon where the node lives (a
    test network's ``ip netns exec NAMESPACE``); it must exec the daemon, so that the
    pid is the daemon's own.
    """
    env = dict(os.environ)
    env[ROOT_ENV] = str(paths.root)
    users = _prepare_accounts(paths)
    pids: dict[str, int] = {}
    started_now: list[Daemon] = []
    for daemon in _wanted(paths):
        if only is not None and daemon.name not in only:
            continue
        pid = running_pid(paths.pid_file(daemon.name))
        if pid is None:
            try:
                cred = None
                if users is not None and daemon.name in daemon_users.SEPARATED_DAEMONS:
                    cred = daemon_users.prepare_start(paths, users, daemon.name)
                    daemon_users.check_interpreter(cred, daemon.name)
                pid = start_daemon(
                    f"corral-{daemon.name}",
                    [*launcher, sys.executable, "-m", daemon.module],
                    log_file=paths.log_file(daemon.name),
                    env=env,
                    uid=None if cred is None else cred.uid,
                    gid=None if cred is None else cred.gid,
                    groups=None if cred is None else cred.groups,
                    umask=-1 if cred is None else daemon_users.DAEMON_UMASK,
                )
            except DaemonError as err:
                # Another starter (noded bringing up confd on a new candidate, the
                # watcher) may have won the race for the pid file: that is a start.
                raced = running_pid(paths.pid_file(daemon.name))
                if raced is not None:
                    pids[daemon.name] = raced
                    continue
                if daemon.optional:
                    if failed is not None:
                        failed[daemon.name] = err.message
                    continue
                for earlier in reversed(started_now):
                    stop_daemon(paths.pid_file(earlier.name))
                raise
            started_now.append(daemon)
        pids[daemon.name] = pid
    return pids


def _prepare_accounts(paths: Paths) -> daemon_users.DaemonUsers | None:
    """With privilege separation, the daemons' accounts and file modes, made right
    (idempotent, root only); None when the daemons run as their starter."""
    users = daemon_users.read_daemon_users(paths)
    if users is None:
        return None
    if os.geteuid() != 0:
        raise DaemonError(
            f"this node runs its daemons as users of their own ({paths.daemon_users}): "
            "start them as root, which starts each as its user")
    daemon_users.ensure_accounts(users, paths)
    daemon_users.ensure_modes(paths, users)
    return users


def restart_as_users(paths: Paths) -> list[str]:
    """Restart the daemons that run as another user than their account (a node that
    has just joined a cluster separating its daemons, whose monitoring daemon started
    as root before); the ones restarted."""
    users = daemon_users.read_daemon_users(paths)
    if users is None or os.geteuid() != 0:
        return []
    restarted = []
    for daemon in _wanted(paths):
        pid = running_pid(paths.pid_file(daemon.name))
        if pid is None or daemon.name not in daemon_users.SEPARATED_DAEMONS:
            continue
        try:
            uid = os.stat(f"/proc/{pid}").st_uid
        except OSError:
            continue
        if uid != daemon_users.credentials(users, daemon.name).uid:
            stop_daemon(paths.pid_file(daemon.name))
            start(paths, only={daemon.name})
            restarted.append(daemon.name)
    return restarted


def stop(paths: Paths) -> dict[str, int | None]:
    """Stop every corral daemon of this node (in reverse order); return the stopped pids."""
    return {d.name: stop_daemon(paths.pid_file(d.name)) for d in reversed(DAEMONS)}


def status(paths: Paths) -> dict[str, int | None]:
    """The pid of each daemon this node should run, ``None`` for those not running."""
    return {d.name: running_pid(paths.pid_file(d.name)) for d in _wanted(paths)}


#: Seconds to wait for a new node daemon to write its join token.
TOKEN_TIMEOUT = 30.0


def wait_for_token(paths: Paths, timeout: float = TOKEN_TIMEOUT) -> str:
    """The join token the node daemon of a node in no cluster writes at start."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(FileNotFoundError):
            token = paths.join_token.read_text().strip()
            if token:
                return token
        if time.monotonic() > deadline:
            raise DaemonError(f"the node daemon wrote no join token to {paths.join_token} "
                              f"within {timeout:g} s; see {paths.log_file('noded')}")
        time.sleep(0.05)
