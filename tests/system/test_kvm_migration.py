"""Live migration of real kvm guests (qemu under TCG) between two testbed nodes, through
``gnt-instance migrate`` as an administrator runs it.

The module shares one 2-node kvm testbed (``kvm_testbed`` of the system conftest, which
kills every guest by pid at the end whatever happened); each test boots its own small
guest (128 MiB, no NICs) and removes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral import daemons
from corral.hypervisor.kvm.migration import MigrationFiles
from corral.hypervisor.kvm.monitor import monitor
from corral.hypervisor.kvm.runtime import InstanceRuntime, open_unix_connection
from corral.paths import Paths
from corral.testbed import guest as tiny_guest
from corral.utils.process import running_pid
from tests.conftest import BIN
from tests.system.conftest import KvmTestbed

pytestmark = pytest.mark.system

#: How long a guest may take to boot or to print its next lines under TCG (s).
BOOT = 120.0
TICK = re.compile(r"corral-tiny-guest: tick (\d+)")


@pytest.fixture(scope="module", autouse=True)
def _fast_migrations(kvm_testbed: KvmTestbed) -> None:
    """Migrations at loopback speed (the default 32 MiB/s would only make them slow)."""
    kvm_testbed.run("gnt-cluster", "modify", "-H",
                    "kvm:migration_bandwidth=1000,migration_downtime=30")


def _paths(testbed: KvmTestbed, node: int) -> Paths:
    return Paths(Path(testbed.state["nodes"][node - 1]["root"]))


def _runtime(testbed: KvmTestbed, node: int, name: str) -> InstanceRuntime:
    return InstanceRuntime(_paths(testbed, node), name)


def _console(testbed: KvmTestbed, node: int, name: str) -> str:
    try:
        return _runtime(testbed, node, name).serial_log.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _wait_console(testbed: KvmTestbed, node: int, name: str, pattern: str,
                  since: int = 0) -> re.Match[str]:
    regex = re.compile(pattern)
    deadline = time.monotonic() + BOOT
    while True:
        match = regex.search(_console(testbed, node, name), since)
        if match is not None:
            return match
        if time.monotonic() > deadline:
            tail = "\n".join(_console(testbed, node, name).splitlines()[-10:])
            raise AssertionError(f"no {pattern!r} from {name} on node{node} within {BOOT} s;"
                                 f" console ends:\n{tail}")
        time.sleep(0.1)


def _type(testbed: KvmTestbed, node: int, name: str, text: str) -> None:
    """Type ``text`` on the guest's serial console."""
    async def run() -> None:
        _, writer = await open_unix_connection(_runtime(testbed, node, name).serial_socket)
        writer.write(text.encode())
        await writer.drain()
        await asyncio.sleep(0.5)
        writer.close()
    asyncio.run(run())


def _ticks(text: str) -> list[int]:
    return [int(n) for n in TICK.findall(text)]


def _rows(testbed: KvmTestbed) -> dict[str, list[str]]:
    out = testbed.run("gnt-instance", "list", "--no-headers", "--separator", "|", "-o",
                      "name,pnode,status").stdout
    return {line.split("|")[0]: line.split("|")[1:] for line in out.splitlines() if line}


def _add(testbed: KvmTestbed, name: str, template: str, disk: str = "16M") -> None:
    testbed.run("gnt-instance", "add", "-t", template, "--no-install", "-o", "corral-ext4",
                "-H", "kvm", "-B", "memory=128M", "--disk", f"0:size={disk}", "--no-nics",
                "--no-name-check", "--no-ip-check", "-n", "node1.testbed", name)
    testbed.run("gnt-instance", "startup", name)


def _migrate(testbed: KvmTestbed, name: str, node: str) -> str:
    proc = testbed.run("gnt-instance", "migrate", "-f", "-n", node, name)
    return proc.stdout + proc.stderr


def test_live_migration_of_a_shared_disk_guest_keeps_it_counting(
        kvm_testbed: KvmTestbed) -> None:
    tb, name = kvm_testbed, "mig-shared"
    _add(tb, name, "sharedfile")
    _wait_console(tb, 1, name, r"tick 2\b")
    before = _ticks(_console(tb, 1, name))
    out = _migrate(tb, name, "node2.testbed")
    assert f"instance {name} migrated to node node2.testbed" in out
    assert _rows(tb)[name] == ["node2.testbed", "running"]
    _wait_console(tb, 2, name, TICK.pattern)
    arrived = _console(tb, 2, name)
    # The guest went on where it was: no boot on node2, the counter continues.
    assert tiny_guest.MARKER not in arrived
    assert _ticks(arrived)[0] >= before[-1] >= 2
    assert not _runtime(tb, 1, name).dir.exists(), "the source's qemu and files are gone"
    tb.run("gnt-instance", "remove", "-f", name)


def test_live_migration_copies_a_local_disk(kvm_testbed: KvmTestbed) -> None:
    tb, name = kvm_testbed, "mig-local"
    _add(tb, name, "file", disk="64M")
    _wait_console(tb, 1, name, r"tick 2\b")
    _type(tb, 1, name, "echo corral-mig-data | dd of=/dev/vda bs=512 seek=2048 conv=fsync"
                       " && echo wrote-$((6*7))\n")
    _wait_console(tb, 1, name, r"wrote-42")
    [disk] = list(_paths(tb, 1).node_path("/srv/corral/file-storage").rglob("*.disk0"))
    digest = hashlib.sha256(disk.read_bytes()).hexdigest()

    out = _migrate(tb, name, "node2.testbed")
    assert "copying its local disks" in out and "disk 0" in out
    assert _rows(tb)[name] == ["node2.testbed", "running"]
    assert not disk.exists(), "the source's disk file is removed"
    [copy] = list(_paths(tb, 2).node_path("/srv/corral/file-storage").rglob("*.disk0"))
    assert copy.name == disk.name
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == digest
    # And the guest, now on node2, reads what it wrote on node1.
    _wait_console(tb, 2, name, TICK.pattern)
    _type(tb, 2, name, "dd if=/dev/vda bs=512 skip=2048 count=1 2>/dev/null | head -c 15;"
                       " echo -read\n")
    _wait_console(tb, 2, name, r"corral-mig-data-read")
    tb.run("gnt-instance", "remove", "-f", name)


@contextlib.contextmanager
def _slow_migration(testbed: KvmTestbed, name: str) -> Iterator[subprocess.Popen[str]]:
    """``gnt-instance migrate`` of ``name`` to node2 at 1 MiB/s, in the background:
    yields its process once the memory is being sent (minutes of it, time enough to
    break something), kills it if the test did not wait for it, and puts the
    module's fast bandwidth back."""
    testbed.run("gnt-cluster", "modify", "-H", "kvm:migration_bandwidth=1")
    try:
        job = subprocess.Popen(
            [str(BIN / "gnt-instance"), "migrate", "-f", "-n", "node2.testbed", name],
            env=testbed.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            progress = MigrationFiles.of(_paths(testbed, 1), name).progress
            deadline = time.monotonic() + 60
            while '"status": "active"' not in (progress.read_text() if progress.exists()
                                               else ""):
                assert time.monotonic() < deadline, "the migration did not start"
                assert job.poll() is None, job.communicate()[0]
                time.sleep(0.1)
            yield job
        finally:
            if job.poll() is None:
                job.kill()
                job.wait()
    finally:
        testbed.run("gnt-cluster", "modify", "-H", "kvm:migration_bandwidth=1000")


def test_failed_migration_leaves_the_guest_on_the_source(kvm_testbed: KvmTestbed) -> None:
    tb, name = kvm_testbed, "mig-fail"
    _add(tb, name, "sharedfile")
    _wait_console(tb, 1, name, r"tick 2\b")
    target = _runtime(tb, 2, name)
    with _slow_migration(tb, name) as job:
        # The stream is encrypted: the source sends with the cluster's TLS
        # credentials, checking the target's certificate against its name.
        params = asyncio.run(_query(_runtime(tb, 1, name), "query-migrate-parameters"))
        assert params["tls-creds"] and params["tls-hostname"] == "node2.testbed"
        time.sleep(1.5)  # a progress line or two in the job log
        pid = target.live_pid()
        assert pid, "the target's qemu waits for the guest"
        subprocess.run(["kill", "-9", str(pid)], check=True)
        out, _ = job.communicate(timeout=120)
    assert job.returncode != 0
    assert re.search(r"memory: [\d.]+ MiB sent \([\d.]+%\), [\d.]+ MiB remaining", out), out
    assert f"instance {name} stays on node node1.testbed" in out, out
    assert _rows(tb)[name] == ["node1.testbed", "running"]
    assert not target.dir.exists(), "nothing of the instance is left on the target"
    count = len(_console(tb, 1, name))
    _wait_console(tb, 1, name, TICK.pattern, since=count)  # still counting on node1
    tb.run("gnt-instance", "remove", "-f", name)


def test_source_noded_killed_mid_migration_loses_no_guest(kvm_testbed: KvmTestbed) -> None:
    """The source's node daemon killed with SIGKILL while the memory is being sent: the
    job fails, the target's qemu is dropped, and the guest keeps running on the source
    (qemu is not noded's child). Once noded is back the instance is listed running on
    the source, ``migrate --cleanup`` finds nothing to undo there, and exactly one qemu
    runs the guest."""
    tb, name = kvm_testbed, "mig-noded"
    _add(tb, name, "sharedfile")
    _wait_console(tb, 1, name, r"tick 2\b")
    source, paths = _runtime(tb, 1, name), _paths(tb, 1)
    pid = source.live_pid()
    noded_pid = running_pid(paths.pid_file("noded"))
    assert noded_pid is not None
    with _slow_migration(tb, name) as job:
        try:
            os.kill(noded_pid, signal.SIGKILL)
            out, _ = job.communicate(timeout=180)
        finally:  # back before the bandwidth is put back, which asks every node
            if running_pid(paths.pid_file("noded")) is None:
                daemons.start(paths)
    assert job.returncode != 0, out
    assert "migrate --cleanup" in out, out
    assert source.live_pid() == pid, "the source's qemu is the same process"
    assert not _runtime(tb, 2, name).live_pid(), "the target's qemu was dropped"
    deadline = time.monotonic() + 60
    while _rows(tb)[name] != ["node1.testbed", "running"]:
        assert time.monotonic() < deadline, _rows(tb)[name]
        time.sleep(0.5)
    cleanup = tb.run("gnt-instance", "migrate", "--cleanup", "-f", "-n", "node2.testbed",
                     name, check=False)
    assert cleanup.returncode == 0, cleanup.stdout + cleanup.stderr
    assert _rows(tb)[name] == ["node1.testbed", "running"]
    assert source.live_pid() == pid and not _runtime(tb, 2, name).live_pid()
    count = len(_console(tb, 1, name))
    _wait_console(tb, 1, name, TICK.pattern, since=count)  # still counting on node1
    tb.run("gnt-instance", "remove", "-f", name)


async def _query(runtime: InstanceRuntime, command: str) -> dict[str, object]:
    async with monitor(runtime.qmp_socket) as qmp:
        answer = await qmp.execute(command)
    assert isinstance(answer, dict)
    return answer
