"""``gnt-instance modify --hotplug`` on a real kvm guest (qemu under TCG) of a testbed.

One one-node testbed with the kvm hypervisor enabled and the tiny guest as its kernel
and initrd; one guest. A disk and a NIC are hot-added and seen inside the guest (it
prints its block devices and interfaces on the serial console whenever they change),
then hot-removed and seen gone, and ``gnt-instance info`` agrees each time. The
refusals: ``--hotplug`` on a stopped instance and on a fake instance change nothing.

Cleanup, also on failure: the guests' qemus by the pids in their runtime records
(:meth:`KvmHypervisor.stop_all`), the testbed, and the bridge the test made.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.errors import HypervisorError
from corral.hypervisor.kvm import KvmHypervisor, hotplug
from corral.hypervisor.kvm.runtime import InstanceRuntime
from corral.objects.params import HV_PARAMS
from corral.objects.specs import DiskSpec, InstanceSpec
from corral.paths import Paths
from corral.testbed import guest as tiny_guest
from corral.testbed.guest import MARKER, TinyGuest
from tests.conftest import TestbedHandle, assert_no_daemons, run_testbed

pytestmark = pytest.mark.system

#: Boot to the marker takes seconds under TCG; a busy machine may take much longer.
BOOT = 120.0
#: How long the guest may take to show a device change on its console.
SEEN = 60.0
NAME = "hot1.testbed"


class Bed:
    """The testbed, its node's paths and a bridge on this machine."""

    def __init__(self, handle: TestbedHandle, bridge: str) -> None:
        self.handle = handle
        self.bridge = bridge
        self.node = Paths(Path(handle.state["nodes"][0]["root"]))

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.handle.run(*args, check=check)

    def runtime(self, name: str) -> InstanceRuntime:
        return InstanceRuntime(self.node, name)

    def console(self, name: str) -> str:
        try:
            return self.runtime(name).serial_log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_console(self, name: str, pattern: str, timeout: float, since: int = 0) -> int:
        """Wait for ``pattern`` in the serial log after offset ``since``; where it ends."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.console(name)
            found = re.search(pattern, text[since:])
            if found:
                return since + found.end()
            if time.monotonic() > deadline:
                raise AssertionError(f"{pattern!r} not on the console of {name} within "
                                     f"{timeout:.0f} s; its end:\n{text[-1500:]}")
            time.sleep(0.3)

    def info(self, name: str) -> dict[str, Any]:
        """The instance as ``gnt-instance info`` shows it (the configuration)."""
        out = self.run("gnt-instance", "list", "--no-headers", "--separator=|", "-o",
                       "disk.count,nic.count,nic.macs,disk.sizes,status", name).stdout
        disks, nics, macs, sizes, status = out.strip().split("|")
        return {"disks": int(disks), "nics": int(nics), "macs": macs, "sizes": sizes,
                "status": status}


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


@pytest.fixture(scope="module")
def bed(guest: TinyGuest) -> Iterator[Bed]:
    """A one-node testbed running kvm guests of the tiny guest, with a bridge."""
    if os.geteuid() != 0:
        pytest.skip("kvm guests with tap devices need root")
    if not os.path.exists("/dev/net/tun"):
        pytest.skip("the host has no /dev/net/tun, so no tap devices")
    qemu = shutil.which("qemu-system-x86_64")
    assert qemu, "qemu-system-x86_64 is missing: run 'make sysdeps'"
    # A short directory: the testbed's node roots go into qemu's file names.
    directory = Path(tempfile.mkdtemp(prefix="corral-hp-", dir="/tmp")) / "tb"
    bridge = f"hpbr{uuid.uuid4().hex[:6]}"
    proc = run_testbed("up", "--nodes", "1", "--dir", str(directory))
    handle = None
    try:
        assert proc.returncode == 0, proc.stderr
        handle = TestbedHandle(directory,
                               json.loads((directory / "testbed.json").read_text()))
        _ip("link", "add", bridge, "type", "bridge")
        _ip("link", "set", bridge, "up")
        handle.run("gnt-cluster", "modify", "--enabled-hypervisors", "fake,kvm",
                   "-H", f"kvm:kernel_path={guest.kernel},initrd_path={guest.initrd},"
                   f"kvm_path={qemu},kvm_flag=disabled,"
                   f"kernel_args={tiny_guest.kernel_args()}")
        yield Bed(handle, bridge)
    finally:
        if handle is not None:
            for node in handle.state["nodes"]:
                asyncio.run(KvmHypervisor(Paths(Path(node["root"]))).stop_all())
        run_testbed("down", "--dir", str(directory))
        assert_no_daemons(directory)
        _ip("link", "del", bridge, check=False)
        shutil.rmtree(directory.parent, ignore_errors=True)


def test_hotplug_a_disk_and_a_nic_into_a_running_guest(bed: Bed) -> None:
    bed.run("gnt-instance", "add", "-t", "file", "-o", "corral-ext4+default", "--no-install",
            "-n", "node1.testbed", "--hypervisor", "kvm", "--disk", "0:size=16M",
            "--no-nics", "-B",
            "maxmem=128,minmem=128", NAME)
    # Stopped: --hotplug is refused (Ganeti 3.0: the hypervisor cannot hot-plug a
    # guest that does not run) and nothing changes.
    refused = bed.run("gnt-instance", "modify", "--hotplug", "--disk", "add:size=8M", NAME,
                      check=False)
    assert refused.returncode != 0
    assert "Hotplug is not possible" in refused.stderr
    assert "not running" in refused.stderr
    assert bed.info(NAME)["disks"] == 1

    bed.run("gnt-instance", "startup", NAME)
    seen = bed.wait_console(NAME, re.escape(MARKER), BOOT)
    seen = bed.wait_console(NAME, r"corral-tiny-guest: disks vda nics lo\b", SEEN, seen)

    added = bed.run("gnt-instance", "modify", "--hotplug", "--disk", "add:size=8M",
                    "--net", f"add:mode=bridged,link={bed.bridge},mac=aa:00:00:4b:00:01",
                    NAME)
    assert "disk/1 -> hotplug:done" in added.stdout
    assert "nic.0 -> hotplug:done" in added.stdout
    seen = bed.wait_console(NAME, r"corral-tiny-guest: disks vda vdb nics eth0 lo\b", SEEN,
                            seen)
    info = bed.info(NAME)
    assert (info["disks"], info["nics"], info["macs"]) == (2, 1, "aa:00:00:4b:00:01")
    # The node's runtime record follows (a noded restart or a migration reads it).
    record = bed.runtime(NAME).read()
    assert record is not None
    assert [len(record.spec.disks), len(record.disk_paths), len(record.taps)] == [2, 2, 1]
    assert record.spec.nics[0].mac == "aa:00:00:4b:00:01"
    # The guest's new interface is on the bridge through its tap.
    ports = subprocess.run(["ip", "-br", "link", "show", "master", bed.bridge],
                           capture_output=True, text=True, check=True).stdout
    assert ports.startswith("tap"), ports

    removed = bed.run("gnt-instance", "modify", "--hotplug", "--disk", "1:remove",
                      "--net", "0:remove", NAME)
    assert "disk/1 -> hotplug:done" in removed.stdout
    assert "NIC/0 -> hotplug:done" in removed.stdout
    bed.wait_console(NAME, r"corral-tiny-guest: disks vda nics lo\b", SEEN, seen)
    info = bed.info(NAME)
    assert (info["disks"], info["nics"], info["status"]) == (1, 0, "running")
    ports = subprocess.run(["ip", "-br", "link", "show", "master", bed.bridge],
                           capture_output=True, text=True, check=True).stdout
    assert ports.strip() == ""
    record = bed.runtime(NAME).read()
    assert record is not None
    assert [len(record.spec.disks), len(record.disk_paths), record.taps] == [1, 1, []]


def test_hotplug_on_the_fake_hypervisor_is_refused(bed: Bed) -> None:
    bed.run("gnt-instance", "add", "-t", "diskless", "-o", "corral-ext4+default",
            "--no-install", "-n", "node1.testbed", "--hypervisor", "fake", "--no-nics",
            "fake1.testbed")
    refused = bed.run("gnt-instance", "modify", "--hotplug", "--net", "add", "fake1.testbed",
                      check=False)
    assert refused.returncode != 0
    assert "Hotplug is not possible: Hotplug is not supported: Hotplug is not supported " \
        "by this hypervisor" in refused.stderr
    assert bed.info("fake1.testbed")["nics"] == 0
    fallback = bed.run("gnt-instance", "modify", "--hotplug-if-possible", "--net", "add",
                       "fake1.testbed")
    assert "Modification will take place without hotplugging" in fallback.stdout + \
        fallback.stderr
    assert bed.info("fake1.testbed")["nics"] == 1


async def test_a_guest_that_does_not_release_a_device_fails_the_removal(
        guest: TinyGuest, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the node: a guest whose CPUs do not run (started paused) never answers the
    unplug request, so the removal fails after the release timeout naming the device,
    and the runtime record still holds it (the master then keeps its configuration)."""
    if os.geteuid() != 0:
        pytest.skip("qemu's runtime directory under /run needs root")
    qemu = shutil.which("qemu-system-x86_64")
    assert qemu, "qemu-system-x86_64 is missing: run 'make sysdeps'"
    monkeypatch.setattr(hotplug, "RELEASE_TIMEOUT", 3.0)
    root = Path(tempfile.mkdtemp(prefix="corral-hp-", dir="/tmp"))
    hvparams = {name: spec.default for name, spec in HV_PARAMS["kvm"].items()}
    hvparams.update(kernel_path=str(guest.kernel), initrd_path=str(guest.initrd),
                    kvm_path=qemu, kvm_flag="disabled")
    spec = InstanceSpec(name="stuck", uuid=str(uuid.uuid4()), hypervisor="kvm",
                        hvparams=hvparams, beparams={"maxmem": 64, "minmem": 64, "vcpus": 1})
    kvm = KvmHypervisor(Paths(root))
    image = root / "disk1"
    image.write_bytes(b"")
    os.truncate(image, 8 << 20)
    disk = DiskSpec(uuid=str(uuid.uuid4()), index=0, dev_type="file", size=8,
                    logical_id=["loop", str(image)])
    try:
        await kvm.start(spec, [], paused=True)
        await kvm.hotplug_device(spec, "hotadd", "disk", disk, str(image))
        with pytest.raises(HypervisorError, match="did not release disk/0 within 3 s"):
            await kvm.hotplug_device(spec, "hotremove", "disk", disk)
        record = kvm.runtime("stuck").read()
        assert record is not None and [d.uuid for d in record.spec.disks] == [disk.uuid]
    finally:
        await kvm.stop_all()
        shutil.rmtree(root, ignore_errors=True)
