"""KVM security on real guests (design 2.2): a qemu confined to a pool uid and a chroot,
the uid given back when the guest stops or its qemu dies, and a missing run-as user
(checked by the node, as Ganeti) or an empty pool refused before anything runs.

One module testbed (see ``kvm_testbed``); the guests boot the tiny guest under TCG.
"""

from __future__ import annotations

import os
import pwd
import re
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.hypervisor.kvm.runtime import InstanceRuntime
from corral.hypervisor.kvm.security import chroot_dir
from corral.paths import Paths
from corral.testbed import guest as tiny_guest
from tests.system.conftest import KvmTestbed

POOL = range(40000, 40010)
NODE = "node1.testbed"


def _add(tb: KvmTestbed, name: str, hv: str, *extra: str,
         check: bool = True) -> subprocess.CompletedProcess[str]:
    """``gnt-instance add`` of the tiny guest on node1 with kvm parameters ``hv``
    (diskless unless ``extra`` gives ``-t``), then ``gnt-instance startup``."""
    template = [] if "-t" in extra else ["-t", "diskless"]
    added = tb.run("gnt-instance", "add", *template, "--no-install", "--no-ip-check",
                   "--no-name-check", "--no-nics", "-o", "corral-ext4+default",
                   "-H", f"kvm:{hv}", "-B", "maxmem=128,minmem=128", "-n", NODE, *extra,
                   name)
    assert "Added instance" in added.stdout + added.stderr
    return tb.run("gnt-instance", "startup", name, check=check)


def _remove(tb: KvmTestbed, name: str) -> None:
    tb.run("gnt-instance", "remove", "-f", name, check=False)


def _node_paths(tb: KvmTestbed) -> Paths:
    return next(p for p, node in zip(tb.node_paths(), tb.state["nodes"], strict=True)
                if node["name"] == NODE)


def _status_ids(pid: int, key: str) -> list[int]:
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(rf"^{key}:\s+(.*)$", text, re.MULTILINE)
    assert match is not None, f"no {key} line in /proc/{pid}/status"
    return [int(value) for value in match.group(1).split()]


def _gone(pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def pool_testbed(kvm_testbed: KvmTestbed) -> Iterator[KvmTestbed]:
    """The module's testbed with the user-id pool 40000-40009 (distributed to the nodes)
    for one test; the pool is emptied again afterwards."""
    kvm_testbed.run("gnt-cluster", "modify", "--uid-pool", f"{POOL[0]}-{POOL[-1]}")
    try:
        yield kvm_testbed
    finally:
        kvm_testbed.run("gnt-cluster", "modify", "--uid-pool", "", check=False)


def test_pool_and_chroot_confine_qemu_and_the_uid_is_given_back(
        pool_testbed: KvmTestbed) -> None:
    tb, name = pool_testbed, "sec-pool.testbed"
    paths = _node_paths(tb)
    try:
        _add(tb, name, "security_model=pool,use_chroot=true", "-t", "file",
             "--disk", "0:size=8M")
        tb.wait_console(name, re.escape(tiny_guest.MARKER))
        # the disk qemu opened before it dropped to the pool uid works in the guest
        tb.wait_console(name, r"disks vda\b")
        runtime = tb.runtime(name)
        assert runtime is not None
        pid = runtime.live_pid(runtime.read())
        assert pid

        # qemu runs as a pool uid (real, effective, saved and fs), the one recorded
        uids = _status_ids(pid, "Uid")
        assert len(set(uids)) == 1 and uids[0] in POOL, uids
        uid = uids[0]
        record = runtime.read()
        assert record is not None and record.uid == uid
        assert (paths.uid_pool_lock_dir / str(uid)).exists()

        # ... confined to its own empty chroot directory
        root = chroot_dir(paths, name)
        assert os.readlink(f"/proc/{pid}/root") == str(root)
        assert list(root.iterdir()) == []

        # ... and cannot reach its own monitor: the sockets are root's, in a 0700 dir
        assert runtime.qmp_socket.stat().st_uid == 0
        assert stat.S_IMODE(runtime.socket_dir.stat().st_mode) == 0o700

        # corral still drives it over QMP: a clean shutdown, and the uid is free again
        tb.run("gnt-instance", "shutdown", "--timeout=60", name)
        assert _gone(pid)
        assert not (paths.uid_pool_lock_dir / str(uid)).exists()
        assert not root.exists()
    finally:
        _remove(tb, name)


def test_a_pool_uid_is_given_back_when_qemu_dies_behind_corrals_back(
        pool_testbed: KvmTestbed) -> None:
    tb, name = pool_testbed, "sec-killed.testbed"
    paths = _node_paths(tb)
    try:
        _add(tb, name, "security_model=pool")
        runtime = tb.runtime(name)
        assert runtime is not None
        pid = runtime.live_pid(runtime.read())
        assert pid
        uid = _status_ids(pid, "Uid")[0]
        assert uid in POOL
        lock = paths.uid_pool_lock_dir / str(uid)
        assert lock.exists()
        os.kill(pid, signal.SIGKILL)
        assert _gone(pid)
        tb.wait_status(name, "ERROR_down")  # noticing the death gives the uid back
        assert not lock.exists()
    finally:
        _remove(tb, name)


def test_security_model_user_runs_qemu_as_the_domain_user(kvm_testbed: KvmTestbed) -> None:
    try:
        user = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("this host has no user 'nobody' to run qemu as")
    tb, name = kvm_testbed, "sec-user.testbed"
    try:
        _add(tb, name, "security_model=user,security_domain=nobody")
        pid = tb.qemu_pid(name)
        assert pid
        assert _status_ids(pid, "Uid") == [user.pw_uid] * 4
        tb.run("gnt-instance", "shutdown", "--timeout=0", name)
        assert _gone(pid)
    finally:
        _remove(tb, name)


def test_a_missing_run_as_user_is_refused_naming_it_and_nothing_runs(
        kvm_testbed: KvmTestbed) -> None:
    tb, name = kvm_testbed, "sec-nouser.testbed"
    user = "corral-no-such-user"
    try:
        proc = tb.run("gnt-instance", "add", "-t", "diskless", "--no-install", "--no-nics",
                      "--no-ip-check", "--no-name-check", "-o", "corral-ext4+default",
                      "-H", f"kvm:security_model=user,security_domain={user}",
                      "-B", "maxmem=128,minmem=128", "-n", NODE, name, check=False)
        assert proc.returncode != 0
        assert (f"failed on node {NODE}: security domain user '{user}' does not exist"
                in proc.stderr + proc.stdout)
        assert name not in tb.instances()
        assert tb.qemu_pid(name) == 0
        assert not InstanceRuntime(_node_paths(tb), name).dir.exists()
    finally:
        _remove(tb, name)


def test_the_pool_empty_is_refused_saying_how_to_set_one(kvm_testbed: KvmTestbed) -> None:
    tb, name = kvm_testbed, "sec-nopool.testbed"
    try:
        proc = _add(tb, name, "security_model=pool", check=False)
        assert proc.returncode != 0
        output = proc.stderr + proc.stdout
        assert "user-id pool is empty" in output and "gnt-cluster modify --uid-pool" in output
        assert tb.qemu_pid(name) == 0
    finally:
        _remove(tb, name)
