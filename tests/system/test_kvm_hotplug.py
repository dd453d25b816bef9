"""``gnt-instance modify --hotplug`` on a real kvm guest (qemu under TCG).

On the module's kvm testbed (:func:`tests.system.conftest.kvm_testbed`), one guest: a
disk and a NIC are hot-added and seen inside the guest (it prints its block devices and
interfaces on the serial console whenever they change), then hot-removed and seen gone,
and ``gnt-instance list`` and the node's runtime record agree each time. Refusals:
``--hotplug`` on a stopped instance and on a fake one change nothing. On a node alone: a
guest that never releases a device fails its removal.

Cleanup, also on failure: the testbed's guests by ``testbed down`` (by pid), the lone
qemu by :meth:`KvmHypervisor.stop_all` (by pid), and the bridge the test made.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral import daemons
from corral.errors import HypervisorError
from corral.hypervisor.kvm import KvmHypervisor, hotplug
from corral.hypervisor.kvm.monitor import qmp_command
from corral.objects.params import HV_PARAMS
from corral.objects.specs import DiskSpec, InstanceSpec
from corral.paths import Paths
from corral.testbed.guest import MARKER, TICK, TinyGuest
from corral.utils.process import running_pid
from tests.system.conftest import KvmTestbed

pytestmark = pytest.mark.system

#: How long the guest may take to show a device change on its console.
SEEN = 60.0
NAME = "hot1.testbed"


def _ip(*args: str, check: bool = True) -> str:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def bridge() -> Iterator[str]:
    """A bridge on this machine (where the testbed's nodes run) for hot-added NICs."""
    if os.geteuid() != 0:
        pytest.skip("bridges and tap devices need root")
    if not os.path.exists("/dev/net/tun"):
        pytest.skip("the host has no /dev/net/tun, so no tap devices")
    name = f"hpbr{uuid.uuid4().hex[:6]}"
    _ip("link", "add", name, "type", "bridge")
    try:
        _ip("link", "set", name, "up")
        yield name
    finally:
        _ip("link", "del", name, check=False)


def _config(tb: KvmTestbed, name: str) -> dict[str, Any]:
    """The instance's disks and NICs as ``gnt-instance list`` shows them."""
    out = tb.run("gnt-instance", "list", "--no-headers", "--separator=|", "-o",
                 "disk.count,nic.count,nic.macs,status", name).stdout
    disks, nics, macs, status = out.strip().split("|")
    return {"disks": int(disks), "nics": int(nics), "macs": macs, "status": status}


def _ports(bridge: str) -> str:
    return _ip("-br", "link", "show", "master", bridge).strip()


def test_hotplug_a_disk_and_a_nic_into_a_running_guest(kvm_testbed: KvmTestbed,
                                                       bridge: str) -> None:
    tb = kvm_testbed
    tb.add(NAME, "--no-start", node="node1.testbed")
    # Stopped: --hotplug is refused (Ganeti 3.0: the hypervisor cannot hot-plug a
    # guest that does not run) and nothing changes.
    refused = tb.run("gnt-instance", "modify", "--hotplug", "--disk",
                     "add:size=8M,dev_type=file", NAME, check=False)
    assert refused.returncode != 0
    assert "Hotplug is not possible" in refused.stderr
    assert "not running" in refused.stderr
    assert _config(tb, NAME)["disks"] == 0

    tb.run("gnt-instance", "startup", NAME)
    seen = tb.wait_console(NAME, re.escape(MARKER)).end()
    seen = tb.wait_console(NAME, r"corral-tiny-guest: disks nics lo\b", since=seen,
                           timeout=SEEN).end()

    added = tb.run("gnt-instance", "modify", "--hotplug", "--disk",
                   "add:size=8M,dev_type=file", "--net",
                   f"add:mode=bridged,link={bridge},mac=aa:00:00:4b:00:01", NAME)
    assert "disk/0 -> hotplug:done" in added.stdout
    assert "nic.0 -> hotplug:done" in added.stdout
    seen = tb.wait_console(NAME, r"corral-tiny-guest: disks vda nics eth0 lo\b",
                           since=seen, timeout=SEEN).end()
    info = _config(tb, NAME)
    assert (info["disks"], info["nics"], info["macs"]) == (1, 1, "aa:00:00:4b:00:01")
    # The node's runtime record follows (a noded restart or a migration reads it).
    runtime = tb.runtime(NAME)
    record = runtime.read() if runtime is not None else None
    assert record is not None
    assert [len(record.spec.disks), len(record.disk_paths), len(record.taps)] == [1, 1, 1]
    assert record.spec.nics[0].mac == "aa:00:00:4b:00:01"
    # The guest's new interface is on the bridge through its tap.
    assert _ports(bridge).startswith(record.taps[0]), _ports(bridge)

    # A changed NIC is replaced: qemu's device gets the new MAC, under the same id.
    changed = tb.run("gnt-instance", "modify", "--hotplug", "-f", "--net",
                     "0:mac=aa:00:00:4b:00:02", NAME)
    assert "nic/0 -> hotplug:done" in changed.stdout
    assert runtime is not None
    device = f"/machine/peripheral/nic-{record.spec.nics[0].uuid[:8]}"
    mac = asyncio.run(qmp_command(runtime.qmp_socket, "qom-get",
                                  {"path": device, "property": "mac"}))
    assert mac == "aa:00:00:4b:00:02"
    assert _config(tb, NAME)["macs"] == "aa:00:00:4b:00:02"

    removed = tb.run("gnt-instance", "modify", "--hotplug", "--allow-diskless", "--disk",
                     "0:remove", "--net", "0:remove", NAME)
    assert "disk/0 -> hotplug:done" in removed.stdout
    assert "NIC/0 -> hotplug:done" in removed.stdout
    tb.wait_console(NAME, r"corral-tiny-guest: disks nics lo\b", since=seen, timeout=SEEN)
    info = _config(tb, NAME)
    assert (info["disks"], info["nics"], info["status"]) == (0, 0, "running")
    assert _ports(bridge) == ""
    record = runtime.read() if runtime is not None else None
    assert record is not None
    assert [record.spec.disks, record.disk_paths, record.taps] == [[], [], []]


def test_a_guest_with_hot_plugged_devices_migrates_live(kvm_testbed: KvmTestbed,
                                                        bridge: str) -> None:
    """qemu takes a migrating guest only into a machine laid out like the source's: the
    target starts with the hot-added disk and NIC in the PCI slots they have on the
    source (the NIC without an option ROM, as plugged), and the guest runs on there
    with both devices."""
    tb, name = kvm_testbed, "hotmig.testbed"
    tb.add(name, node="node1.testbed")
    seen = tb.wait_console(name, r"corral-tiny-guest: disks nics lo\b").end()
    tb.run("gnt-instance", "modify", "--hotplug", "--disk", "add:size=8M,dev_type=file",
           "--net", f"add:mode=bridged,link={bridge},mac=aa:00:00:4b:00:09", name)
    seen = tb.wait_console(name, r"corral-tiny-guest: disks vda nics eth0 lo\b",
                           since=seen, timeout=SEEN).end()
    source = tb.runtime(name)
    before = source.read() if source is not None else None
    assert before is not None and len(before.pci_slots) == 2 and len(before.romless) == 1
    tb.run("gnt-cluster", "modify", "-H", "kvm:migration_bandwidth=1000")
    try:
        moved = tb.run("gnt-instance", "migrate", "-f", "-n", "node2.testbed", name,
                       check=False)
    finally:
        tb.run("gnt-cluster", "modify", "-H", "kvm:migration_bandwidth=32")
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert tb.instances()[name]["pnode"] == "node2.testbed"
    target = tb.runtime(name)
    after = target.read() if target is not None else None
    assert after is not None and target is not None
    assert target.paths.root != source.paths.root  # type: ignore[union-attr]
    assert (after.pci_slots, after.romless) == (before.pci_slots, before.romless)
    tb.wait_console(name, re.escape(TICK) + r"\d+", since=len(tb.console(name)),
                    timeout=SEEN)
    tb.run("gnt-instance", "remove", "-f", name)


def test_hotplug_on_the_fake_hypervisor_is_refused(kvm_testbed: KvmTestbed) -> None:
    tb = kvm_testbed
    tb.run("gnt-instance", "add", "-t", "diskless", "-o", "corral-ext4+default",
           "--no-install", "-n", "node1.testbed", "--hypervisor", "fake", "--no-nics",
           "fake1.testbed")
    refused = tb.run("gnt-instance", "modify", "--hotplug", "--net", "add", "fake1.testbed",
                     check=False)
    assert refused.returncode != 0
    assert "Hotplug is not possible: Hotplug is not supported: Hotplug is not supported " \
        "by this hypervisor" in refused.stderr
    assert _config(tb, "fake1.testbed")["nics"] == 0
    fallback = tb.run("gnt-instance", "modify", "--hotplug-if-possible", "--net", "add",
                      "fake1.testbed")
    assert "Modification will take place without hotplugging" in fallback.stdout + \
        fallback.stderr
    assert _config(tb, "fake1.testbed")["nics"] == 1


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


def test_noded_killed_during_a_removal_keeps_the_configuration_true(
        kvm_testbed: KvmTestbed) -> None:
    """noded killed (SIGKILL) while it waits for a guest to release a disk: the job
    fails, the guest keeps running (the same qemu) with the disk it has not released,
    and the configuration still lists the disk; the restarted noded finds it all."""
    tb, name = kvm_testbed, "hotkill.testbed"
    tb.add(name, "--no-start", node="node1.testbed")
    # Paused CPUs: the guest cannot answer the unplug request, so the removal waits.
    tb.run("gnt-instance", "startup", "--paused", name)
    tb.run("gnt-instance", "modify", "--hotplug", "--disk", "add:size=8M,dev_type=file",
           name)
    pid = tb.qemu_pid(name)
    assert pid
    submitted = tb.run("gnt-instance", "modify", "--submit", "--print-jobid", "--hotplug",
                       "--allow-diskless", "--disk", "0:remove", name)
    job = submitted.stdout.split()[0]
    deadline = time.monotonic() + SEEN
    while "Hotplug: removing disk/0" not in tb.run("gnt-job", "info", job).stdout:
        assert time.monotonic() < deadline, "the removal never started"
        time.sleep(0.2)
    time.sleep(1)  # noded has sent device_del and waits for the guest
    paths = Paths(Path(tb.state["nodes"][0]["root"]))
    noded = running_pid(paths.pid_file("noded"))
    assert noded is not None
    os.kill(noded, signal.SIGKILL)
    deadline = time.monotonic() + SEEN
    while tb.run("gnt-job", "list", "--no-headers", "-o", "status", job).stdout.strip() \
            in ("queued", "waiting", "running"):
        assert time.monotonic() < deadline, "the job did not end"
        time.sleep(0.2)
    assert tb.run("gnt-job", "list", "--no-headers", "-o", "status", job).stdout.strip() \
        == "error"
    assert _config(tb, name)["disks"] == 1
    daemons.start(paths)
    assert tb.qemu_pid(name) == pid
    runtime = tb.runtime(name)
    record = runtime.read() if runtime is not None else None
    assert record is not None and len(record.spec.disks) == 1
    tb.wait_status(name, "running")
    tb.run("gnt-instance", "remove", "-f", "--shutdown-timeout", "0", name)
    assert tb.qemu_pid(name) == 0
