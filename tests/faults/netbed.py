"""The testbed of the network, disk and clock faults, shared by their four modules.

Three nodes on a private network (:class:`corral.testbed.netns.NodeNetwork`): node 1,
the master, on the host with its data directory (``/var/lib/corral``: the
configuration store and the job queue) on a small ext4 file system of its own (an
image on a loop device, so that the test can fill it); nodes 2 and 3, master
candidates, each in a network namespace of its own, so that a test can cut one off.
The master gives up on a node that acknowledges nothing after
:data:`DEAD_PEER_TIMEOUT` seconds (``CORRAL_RPC_DEAD_PEER_TIMEOUT``, see
:mod:`corral.rpc.deadpeer`), so that a cut node fails the operation in seconds.

It is made once per test session, at the first test that asks for it, and torn
down at the session's end even when tests failed: daemons stopped, network removed,
file system unmounted, loop device detached. Every test leaves it as it found it
(links up, daemons running with the right clock, disk space free).

Everything system-wide is named with ``cfj`` (helper J's prefix) and the pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from corral import daemons
from corral.paths import Paths
from corral.rpc.deadpeer import DEAD_PEER_ENV
from corral.testbed import core
from corral.testbed.netns import NodeNetwork, netns_available
from corral.utils import loopcheck
from corral.utils.process import running_pid, stop_daemon
from tests.conftest import TestbedHandle
from tests.faults.invariants import FaultCluster

__all__ = ["DEAD_PEER_TIMEOUT", "MASTER_FS_MIB", "FaultBed", "fault_bed"]

#: Seconds after which the master gives up on a silent node in these tests.
DEAD_PEER_TIMEOUT = 2
#: The size of the master's data file system.
MASTER_FS_MIB = 48
PREFIX = "cfj"


def _run(*argv: str) -> str:
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise OSError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    return result.stdout.strip()


@contextlib.contextmanager
def _environment(changes: Mapping[str, str | None]) -> Iterator[None]:
    """``os.environ`` with ``changes`` (None removes) for the daemons started inside."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in changes.items():
            if value is None:
                patch.delenv(name, raising=False)
            else:
                patch.setenv(name, value)
        yield


def _daemon_env() -> dict[str, str | None]:
    """The environment the testbed's daemons start with: the short dead-peer limit,
    and the event-loop check as in the integration suite."""
    return {DEAD_PEER_ENV: str(DEAD_PEER_TIMEOUT),
            loopcheck.LOOP_CHECK_ENV: os.environ.get(
                loopcheck.LOOP_CHECK_ENV, str(loopcheck.DEFAULT_THRESHOLD_MS))}


@dataclass
class FaultBed:
    """The shared testbed, its network and the master's file system."""

    directory: Path
    network: NodeNetwork
    handle: TestbedHandle
    mount: Path
    cleanups: list[Callable[[], object]] = field(default_factory=list)
    seen_reports: list[str] = field(default_factory=list)

    @property
    def cluster(self) -> FaultCluster:
        """The invariant checks' view of it."""
        return FaultCluster.from_testbed(self.directory)

    def paths(self, node: int) -> Paths:
        """Node ``node``'s (1-based) paths."""
        return Paths(self.directory / f"node{node}")

    def name(self, node: int) -> str:
        """Node ``node``'s name."""
        return f"node{node}.testbed"


    def restart(self, node: int, *, extra_env: Mapping[str, str | None] | None = None,
                only: tuple[str, ...] = ("noded", "confd")) -> None:
        """Stop the daemons ``only`` of ``node`` and start them again (noded first,
        inside the node's namespace), with ``extra_env`` on top of the usual
        environment."""
        paths = self.paths(node)
        for name in reversed(only):
            stop_daemon(paths.pid_file(name))
        with _environment({**_daemon_env(), **(extra_env or {})}):
            daemons.start(paths, only=list(only), launcher=self.network.launcher(node))

    def new_loop_reports(self) -> list[str]:
        """Blocked-loop reports in the daemons' logs since the last call."""
        found = loopcheck.reports(self.directory)
        new = found[len(self.seen_reports):] if found[:len(self.seen_reports)] == \
            self.seen_reports else [line for line in found if line not in self.seen_reports]
        self.seen_reports = found
        return new

    def teardown(self) -> None:
        """Undo everything, last made first; every step runs even when one fails."""
        errors = []
        while self.cleanups:
            try:
                self.cleanups.pop()()
            except Exception as err:  # the remaining steps still run
                errors.append(str(err))
        if errors:
            raise OSError("tearing the fault testbed down: " + "; ".join(errors))


def _why_not() -> str | None:
    reason = netns_available()
    if reason is not None:
        return reason
    for tool in ("losetup", "mkfs.ext4", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"no {tool} command (util-linux, e2fsprogs: 'make sysdeps')"
    return None


_SHARED: dict[str, FaultBed] = {}


def _build(config: pytest.Config) -> FaultBed:
    directory = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
    cleanups: list[Callable[[], object]] = [lambda: shutil.rmtree(directory, True)]
    config.add_cleanup(lambda: _teardown_all(cleanups))
    network = NodeNetwork.create(3, [2, 3], prefix=PREFIX)
    cleanups.append(network.destroy)
    # the master's data directory on a file system of its own
    image = directory / "master-fs.img"
    with open(image, "wb") as sparse:
        sparse.truncate(MASTER_FS_MIB << 20)
    _run("mkfs.ext4", "-q", "-m", "0", "-F", str(image))
    device = _run("losetup", "-f", "--show", str(image))
    cleanups.append(lambda: _run("losetup", "-d", device))
    tb = directory / "tb"
    mount = Paths(tb / "node1").data_dir
    mount.mkdir(parents=True)
    _run("mount", device, str(mount))
    cleanups.append(lambda: _unmount(mount))
    (mount / "lost+found").rmdir()
    cleanups.append(lambda: _down(tb))
    with _environment(_daemon_env()):
        core.up(tb, 3, addresses=network.addresses(),
                launchers=[network.launcher(i) for i in (1, 2, 3)])
    handle = TestbedHandle(tb, json.loads((tb / "testbed.json").read_text()))
    return FaultBed(directory=tb, network=network, handle=handle, mount=mount,
                    cleanups=cleanups)


def _down(tb: Path) -> None:
    core.down(tb)
    left = [p for p in tb.glob("*/run/corral/*.pid") if running_pid(p) is not None]
    if left:
        raise OSError(f"daemons left running: {left}")


def _unmount(mount: Path) -> None:
    for _ in range(50):
        result = subprocess.run(["umount", str(mount)], capture_output=True, text=True,
                                check=False)
        if result.returncode == 0:
            return
        time.sleep(0.1)  # a daemon's last file handle closing
    raise OSError(f"umount {mount}: {result.stderr.strip()}")


def _teardown_all(cleanups: list[Callable[[], object]]) -> None:
    bed = _SHARED.pop("bed", None)
    if bed is not None:
        bed.teardown()
        return
    while cleanups:
        with contextlib.suppress(Exception):
            cleanups.pop()()


def fault_bed(request: pytest.FixtureRequest) -> FaultBed:
    """The session's fault testbed, made at the first call (skips where the host
    cannot make network namespaces or loop file systems)."""
    reason = _why_not()
    if reason is not None:
        pytest.skip(f"the network and disk fault tests cannot run here: {reason}")
    bed = _SHARED.get("bed")
    if bed is None:
        bed = _SHARED["bed"] = _build(request.config)
    return bed
