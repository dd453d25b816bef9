"""A real single-node Ceph cluster for tests, benchmarks and the demo: one monitor, one
manager and one OSD (BlueStore on a sparse file), started without systemd.

Everything lives in one directory: the configuration ``ceph.conf`` (its own cluster
name and fsid, the monitor on a free loopback port, messenger v2 only, no
authentication), the daemons' data and logs, and ``ceph.json`` with what was started.
Short-lived sockets go to a directory of their own below ``/tmp`` (a unix socket path
has at most 107 characters). The daemons run in the foreground as children of a new
session each, recorded by pid: :func:`stop` kills exactly those pids and removes the
directory, whatever state the cluster is in; the data is thrown away, so the daemons
are killed, not shut down.

Sizes are small for a test machine: a 1 GiB OSD file (sparse), caches of a few MiB,
one replica, 8 placement groups; the manager loads no Python modules (it is there
for ``ceph -s`` and the health checks, not for features; the 300 MB its modules take
would be wasted here, and ``ceph health`` reports them as failed). :func:`start`
returns once the pool exists and answers ``rbd``.

    python -m corral.testbed.ceph up --dir DIR [--testbed TESTBED_DIR]
    python -m corral.testbed.ceph down --dir DIR

(``--testbed`` gives every node of a testbed the cluster's configuration, see
:func:`install_conf`.)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["BINARIES", "CephCluster", "install_conf", "missing_binaries", "start", "stop"]

#: The programs this module runs (Debian: ceph-mon, ceph-osd, ceph-mgr, ceph-common).
BINARIES = ("ceph-mon", "ceph-osd", "ceph-mgr", "ceph", "rbd", "monmaptool")
STATE_FILE = "ceph.json"
#: How long :func:`start` waits for each step (the OSD coming up, the pool answering).
STEP_TIMEOUT = 90.0


@dataclass
class CephCluster:
    """A started single-node Ceph."""

    dir: str
    name: str
    fsid: str
    conf: str
    mon_addr: str
    pool: str
    run_dir: str
    pids: dict[str, int] = field(default_factory=dict)

    def command(self, program: str, *args: str) -> list[str]:
        """A Ceph command line (``ceph``, ``rbd``) for this cluster."""
        return [program, "-c", self.conf, *args]

    def run(self, program: str, *args: str, timeout: float = 60.0,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``program args`` against this cluster; its output."""
        proc = subprocess.run(self.command(program, *args), capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{program} {' '.join(args)} failed (exit {proc.returncode}):"
                               f" {proc.stderr.strip() or proc.stdout.strip()}")
        return proc


def missing_binaries() -> list[str]:
    """The Ceph programs this machine lacks (empty when a cluster can start)."""
    return [name for name in BINARIES if shutil.which(name) is None]


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _conf_text(cluster: CephCluster, base: Path) -> str:
    run = cluster.run_dir
    return f"""[global]
fsid = {cluster.fsid}
mon host = {cluster.mon_addr}
mon initial members = a
public addr = 127.0.0.1
ms bind msgr1 = false
auth cluster required = none
auth service required = none
auth client required = none
run dir = {run}
admin socket = {run}/$name.asok
pid file = {run}/$name.pid
log file = {base}/log/$name.log
log to stderr = false
err to stderr = false
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon data avail warn = 1
mon data avail crit = 0
mon warn on pool no redundancy = false
auth allow insecure global id reclaim = true
mon warn on insecure global id reclaim allowed = false
client mount timeout = 30
[mon]
mon data = {base}/mon/$id
[mgr]
mgr data = {base}/mgr/$id
mgr module path = {base}/mgr-modules
mgr initial modules =
[osd]
osd data = {base}/osd/$id
osd objectstore = bluestore
bluestore block path = {base}/osd/$id/block.file
bluestore block create = true
bluestore block size = 1073741824
bluestore cache autotune = false
bluestore cache size = 67108864
osd memory target = 939524096
osd max object name len = 256
osd max object namespace len = 64
"""


def _spawn(cluster: CephCluster, base: Path, name: str, argv: Sequence[str]) -> None:
    """Start a daemon in the foreground, in a session of its own; record its pid."""
    log = (base / "log" / f"{name}.stdout").open("ab")
    with log:
        proc = subprocess.Popen(
            [*argv, "-f", "--cluster", cluster.name, "-c", cluster.conf],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
    cluster.pids[name] = proc.pid
    _save(cluster)


def _save(cluster: CephCluster) -> None:
    path = Path(cluster.dir) / STATE_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(cluster), indent=1) + "\n")
    tmp.replace(path)


def _check(argv: Sequence[str], what: str, timeout: float = STEP_TIMEOUT) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise RuntimeError(f"Ceph set-up: {what} failed (exit {proc.returncode}): "
                           f"{(proc.stderr or proc.stdout).strip()[-2000:]}")
    return proc.stdout


def _wait(cluster: CephCluster, test: Sequence[str], ok: str, what: str) -> None:
    """Run ``test`` until its output contains ``ok`` (or the daemons died)."""
    deadline = time.monotonic() + STEP_TIMEOUT
    while True:
        proc = subprocess.run(cluster.command(*test), capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=STEP_TIMEOUT)
        if proc.returncode == 0 and ok in proc.stdout:
            return
        dead = [name for name, pid in cluster.pids.items() if not _alive(pid)]
        if dead or time.monotonic() > deadline:
            why = f"{', '.join(dead)} exited" if dead else f"not within {STEP_TIMEOUT:g} s"
            raise RuntimeError(f"Ceph set-up: {what} ({why}); see {cluster.dir}/log")
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        waited, _status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        waited = 0  # not our child (another process started it): ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return waited == 0


def start(directory: Path, *, pool: str = "rbd", name: str | None = None) -> CephCluster:
    """Start a single-node Ceph in ``directory`` (created; must not hold one already)
    with an rbd pool ``pool``; stop it with :func:`stop` even when this fails."""
    missing = missing_binaries()
    if missing:
        raise RuntimeError(f"Ceph is not installed here: missing {', '.join(missing)} "
                           "(Debian: ceph-mon ceph-osd ceph-mgr ceph-common)")
    base = directory.resolve()
    base.mkdir(parents=True, exist_ok=True)
    if (base / STATE_FILE).exists():
        raise RuntimeError(f"{base} holds a Ceph already ({STATE_FILE}); stop it first")
    for sub in ("log", "mon/a", "osd/0", "mgr/x", "mgr-modules"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    run_dir = tempfile.mkdtemp(prefix=f"corral-ceph-{os.getpid()}-")
    cluster = CephCluster(
        dir=str(base), name=name or f"corral{os.getpid()}", fsid=str(uuid.uuid4()),
        conf=str(base / "ceph.conf"), mon_addr=f"v2:127.0.0.1:{_free_port()}", pool=pool,
        run_dir=run_dir)
    _save(cluster)
    Path(cluster.conf).write_text(_conf_text(cluster, base))
    monmap = base / "monmap"
    _check(["monmaptool", "--create", "--addv", "a", f"[{cluster.mon_addr}]", "--fsid",
            cluster.fsid, str(monmap)], "monmaptool")
    _check(["ceph-mon", "--cluster", cluster.name, "-c", cluster.conf, "--mkfs", "-i", "a",
            "--monmap", str(monmap)], "ceph-mon --mkfs")
    _spawn(cluster, base, "mon", ["ceph-mon", "-i", "a"])
    _spawn(cluster, base, "mgr", ["ceph-mgr", "-i", "x"])
    osd_uuid = str(uuid.uuid4())
    osd_id = _check(cluster.command("ceph", "osd", "new", osd_uuid), "ceph osd new").strip()
    if osd_id != "0":
        raise RuntimeError(f"Ceph set-up: the OSD got id {osd_id!r}, expected 0")
    # The pool is made while the OSD's store is: the monitor needs no OSD for that.
    pool_create = subprocess.Popen(
        cluster.command("ceph", "osd", "pool", "create", pool, "8"),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    try:
        _check(["ceph-osd", "--cluster", cluster.name, "-c", cluster.conf, "-i", "0",
                "--mkfs", "--osd-uuid", osd_uuid], "ceph-osd --mkfs")
    finally:
        out, _ = pool_create.communicate(timeout=STEP_TIMEOUT)
    if pool_create.returncode != 0:
        raise RuntimeError(f"Ceph set-up: creating pool {pool} failed: {out.strip()}")
    _spawn(cluster, base, "osd", ["ceph-osd", "-i", "0"])
    _wait(cluster, ["ceph", "osd", "stat"], "1 up", "waiting for the OSD")
    _check(cluster.command("rbd", "pool", "init", pool), f"rbd pool init {pool}")
    return cluster


def load(directory: Path) -> CephCluster | None:
    """The Ceph recorded in ``directory``, if any."""
    try:
        data = json.loads((directory / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return CephCluster(**data)


def stop(directory: Path) -> list[str]:
    """Kill the daemons recorded in ``directory`` (by pid) and remove it and the socket
    directory; what was stopped. Nothing recorded: nothing to do."""
    cluster = load(directory)
    stopped: list[str] = []
    if cluster is not None:
        for daemon, pid in cluster.pids.items():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
                stopped.append(f"ceph-{daemon} (pid {pid})")
        for pid in cluster.pids.values():
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        shutil.rmtree(cluster.run_dir, ignore_errors=True)
    shutil.rmtree(directory, ignore_errors=True)
    return stopped


def install_conf(cluster: CephCluster, node_root: Path) -> Path:
    """Make the node below ``node_root`` use ``cluster``: its ``/etc/ceph/ceph.conf``
    (corral's rbd driver reads a node's own)."""
    target = node_root / "etc" / "ceph" / "ceph.conf"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cluster.conf, target)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m corral.testbed.ceph up|down --dir DIR``."""
    parser = argparse.ArgumentParser(prog="python -m corral.testbed.ceph",
                                     description="A single-node Ceph for tests.")
    parser.add_argument("action", choices=("up", "down"))
    parser.add_argument("--dir", required=True, type=Path)
    parser.add_argument("--pool", default="rbd")
    parser.add_argument("--testbed", type=Path, metavar="DIR",
                        help="with up: make every node of the testbed in DIR use this Ceph "
                             "(its /etc/ceph/ceph.conf)")
    args = parser.parse_args(argv)
    if args.action == "up":
        started = time.monotonic()
        try:
            cluster = start(args.dir, pool=args.pool)
            roots = []
            if args.testbed is not None:
                state = json.loads((args.testbed / "testbed.json").read_text())
                roots = [Path(node["root"]) for node in state["nodes"]]
            for root in roots:
                install_conf(cluster, root)
        except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as err:
            stop(args.dir)
            print(f"ceph up failed: {err}", file=sys.stderr)
            return 1
        print(f"ceph up in {time.monotonic() - started:.1f} s: conf {cluster.conf}, "
              f"monitor {cluster.mon_addr}, pool {cluster.pool}"
              + (f"; used by the {len(roots)} nodes of {args.testbed}" if roots else ""))
        return 0
    for line in stop(args.dir):
        print(f"stopped {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
