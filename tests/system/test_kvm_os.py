"""The bundled ``corral-tiny`` OS definition on a kvm testbed: ``gnt-instance add`` with
the OS install writes the host name and address on the instance's disk, and the tiny
guest booted by qemu shows them on its serial console; a rename rewrites them; an
instance without a disk is refused by the OS with a message saying why."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.hypervisor.kvm.runtime import InstanceRuntime, pid_cmdline
from corral.paths import Paths
from corral.testbed import guest as tiny_guest

pytestmark = pytest.mark.system

#: Boot to the marker takes seconds under TCG; a busy machine may take much longer.
BOOT = 120.0
NODE = "node1.testbed"


class KvmBed:
    """A one-node testbed whose cluster boots the tiny guest under kvm (TCG)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        state = json.loads((directory / "testbed.json").read_text())
        self.env = {**os.environ, **state["env"]}
        self.root = Path(state["nodes"][0]["root"])

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=300)
        if check:
            assert proc.returncode == 0, f"{args}: {proc.stdout}\n{proc.stderr}"
        return proc

    def runtime(self, instance: str) -> InstanceRuntime:
        return InstanceRuntime(Paths(self.root), instance)

    def wait_console(self, instance: str, pattern: str, within: float = BOOT) -> str:
        """The serial log once it matches ``pattern`` (a regular expression)."""
        log = self.runtime(instance).serial_log
        deadline = time.monotonic() + within
        text = ""
        while time.monotonic() < deadline:
            try:
                text = log.read_bytes().decode(errors="replace")
            except FileNotFoundError:
                text = ""
            if re.search(pattern, text):
                return text
            time.sleep(0.1)
        raise AssertionError(f"no {pattern!r} in {log} within {within} s:\n{text[-2000:]}")

    def kill_guests(self) -> None:
        """SIGKILL every qemu this testbed's node started (by the pids in its runtime
        directories, checked against their command lines)."""
        kvm = Paths(self.root).hypervisor_state_dir / "kvm"
        for pid_file in kvm.glob("*/qemu.pid"):
            try:
                pid = int(pid_file.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            cmdline = pid_cmdline(pid)
            if cmdline is not None and str(pid_file.parent) in cmdline:
                os.kill(pid, signal.SIGKILL)


def _testbed(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "corral.testbed", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def kvm_bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KvmBed]:
    guest = tiny_guest.build(tmp_path_factory.mktemp("guest"))
    directory = tmp_path_factory.mktemp("kvmos") / "tb"
    up = _testbed("up", "--nodes", "1", "--dir", str(directory))
    bed: KvmBed | None = None
    try:
        assert up.returncode == 0, up.stderr
        bed = KvmBed(directory)
        bed.run("gnt-cluster", "modify", "--enabled-hypervisors", "fake,kvm", "-H",
                f"kvm:kernel_path={guest.kernel},initrd_path={guest.initrd},"
                f"kvm_flag=disabled,kernel_args=quiet")
        yield bed
    finally:
        if bed is not None:
            bed.kill_guests()
        _testbed("down", "--dir", str(directory))


def test_the_os_install_configures_the_guest(kvm_bed: KvmBed) -> None:
    """The add installs corral-tiny on the disk; the guest reads it at boot: its host
    name is the instance's, its address the NIC's, its gateway the OS parameter's. A
    rename (instance stopped) runs the OS's rename, and the next boot shows the new name.
    """
    name = "tinyos1.testbed"
    kvm_bed.run("gnt-instance", "add", "-t", "file", "-o", "corral-tiny", "-H", "kvm",
                "-n", NODE, "--disk", "0:size=16M", "-B", "maxmem=128M,minmem=128M",
                "--net", "0:mode=routed,link=100,ip=192.0.2.77", "-O",
                "gateway=192.0.2.1,prefix=25", "--no-name-check", "--no-ip-check", name)
    console = kvm_bed.wait_console(name, re.escape(tiny_guest.MARKER))
    assert (f"corral-tiny-guest: config from vda: hostname={name} ip=192.0.2.77/25 "
            "gw=192.0.2.1\r\n") in console
    assert f"corral-tiny-guest: hostname {name}\r\n" in console

    kvm_bed.run("gnt-instance", "shutdown", "--timeout", "0", name)
    kvm_bed.run("gnt-instance", "rename", name, "tinyos2.testbed")
    kvm_bed.run("gnt-instance", "startup", "tinyos2.testbed")
    console = kvm_bed.wait_console("tinyos2.testbed", re.escape(tiny_guest.MARKER))
    assert "corral-tiny-guest: hostname tinyos2.testbed\r\n" in console
    kvm_bed.run("gnt-instance", "remove", "-f", "--shutdown-timeout", "0", "tinyos2.testbed")


def test_an_instance_without_a_disk_is_refused_by_the_os(kvm_bed: KvmBed) -> None:
    """corral-tiny needs a disk for the configuration: the add fails saying so, and
    neither the instance nor a qemu is left."""
    proc = kvm_bed.run("gnt-instance", "add", "-t", "diskless", "-o", "corral-tiny",
                       "-H", "kvm", "-n", NODE, "--no-nics", "-B", "maxmem=64M,minmem=64M",
                       "--no-name-check", "--no-ip-check", "nodisk.testbed", check=False)
    assert proc.returncode != 0
    assert "instance nodisk.testbed has no disk" in proc.stderr, proc.stderr
    listed = kvm_bed.run("gnt-instance", "list", "--no-headers", "-o", "name").stdout
    assert "nodisk.testbed" not in listed
    assert not kvm_bed.runtime("nodisk.testbed").pid_file.exists()
