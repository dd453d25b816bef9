"""The tiny guest (corral.testbed.guest) under a bare qemu with TCG: it boots to its
marker, counts, powers off on the ACPI button, reboots on Ctrl-Alt-Del, and answers
ping at the address its kernel command line gives it."""

from __future__ import annotations

import asyncio
import gzip
import re
import subprocess
import time
from pathlib import Path

import pytest

from corral.testbed import guest as tiny_guest
from corral.testbed.bareqemu import BareQemu, Nic
from corral.testbed.guest import MARKER, TICK, TinyGuest, kernel_args
from tests.system.conftest import BOOT_TIMEOUT, Netns

pytestmark = pytest.mark.system

#: Boot to the marker takes about 5 s under TCG here; a busy machine may take longer.
BOOT = BOOT_TIMEOUT  # TCG on a busy 2-core machine can take over a minute


def _ticks(console: str) -> list[int]:
    return [int(n) for n in re.findall(re.escape(TICK) + r"(\d+)", console)]


def test_build_is_cached_and_holds_the_guest(tmp_path: Path) -> None:
    """A second build with unchanged inputs leaves the files alone; the initramfs has
    busybox's init as /init and the virtio and power button modules."""
    first = tiny_guest.build(tmp_path)
    stamp = first.initrd.stat().st_mtime_ns
    second = tiny_guest.build(tmp_path)
    assert second == first
    assert second.initrd.stat().st_mtime_ns == stamp
    assert first.kernel.read_bytes()[0x202:0x206] == b"HdrS"  # a bzImage boot header
    archive = gzip.decompress(first.initrd.read_bytes())
    listing = subprocess.run([str(tiny_guest.find_busybox()), "cpio", "-t"], input=archive,
                             capture_output=True, check=True).stdout.decode().split()
    for name in ("init", "bin/busybox", "etc/inittab", "lib/modules/virtio_net.ko",
                 "lib/modules/virtio_pci.ko", "lib/modules/button.ko"):
        assert name in listing
    # A changed input (here: the recorded fingerprint) means a rebuild.
    (tmp_path / "guest.json").write_text("{}")
    tiny_guest.build(tmp_path)
    assert first.initrd.stat().st_mtime_ns != stamp


async def test_boots_counts_and_powers_off_on_the_acpi_button(
        guest: TinyGuest, workdir: Path) -> None:
    """Boot to the marker, then a counter that goes up once a second; a disk and a NIC
    plugged in through QMP appear in the guest, the disk goes again on ``device_del``;
    QMP ``system_powerdown`` makes the guest shut down and qemu exit by itself."""
    async with BareQemu(guest, workdir, kernel_args()) as vm:
        up = await vm.wait_for(re.escape(MARKER), BOOT)
        await vm.wait_for(re.escape(TICK) + r"3\b", 10, since=up.end())
        console = vm.console()
        assert _ticks(console)[:3] == [1, 2, 3]
        # No NIC was given, so the guest has only its loopback interface.
        assert re.search(r"corral-tiny-guest: disks nics lo\b", console)
        status = await vm.execute("query-status")
        assert isinstance(status, dict) and status["status"] == "running"
        # Hotplugged virtio devices show in the guest (its device line changes), and it
        # lets a disk go when asked.
        await vm.execute("blockdev-add", {"driver": "null-co", "node-name": "disk1",
                                          "size": 1 << 20})
        await vm.execute("device_add", {"driver": "virtio-blk-pci", "drive": "disk1",
                                        "id": "hd1"})
        await vm.execute("netdev_add", {"type": "user", "id": "net1"})
        await vm.execute("device_add", {"driver": "virtio-net-pci", "netdev": "net1",
                                        "id": "nic1"})
        plugged = await vm.wait_for(r"corral-tiny-guest: disks vda nics eth0 lo\b", 20)
        await vm.execute("device_del", {"id": "hd1"})
        await vm.wait_for(r"corral-tiny-guest: disks nics eth0 lo\b", 20, since=plugged.end())
        started = time.monotonic()
        await vm.powerdown()
        async with asyncio.timeout(15):
            code = await vm.wait_exit()
        elapsed = time.monotonic() - started
        assert code == 0
        assert "corral-tiny-guest: power button" in vm.console()
        assert "corral-tiny-guest: down" in vm.console()
        assert elapsed < 10, f"qemu took {elapsed:.1f} s to exit after the power button"


async def _ping(ns: Netns, address: str, attempts: int = 10) -> bool:
    """Whether ``address`` answers a ping from inside ``ns`` (busybox's ping: the
    host may have no other)."""
    for _ in range(attempts):
        proc = await asyncio.create_subprocess_exec(
            *ns.exec, "busybox", "ping", "-c", "1", "-W", "1", address,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        if await proc.wait() == 0:
            return True
    return False


async def test_takes_its_address_from_the_kernel_command_line_and_answers_ping(
        guest: TinyGuest, workdir: Path, netns: Netns) -> None:
    """A guest with a virtio NIC on a tap in a bridge answers ping from the namespace at
    ``corral.ip`` and routes through ``corral.gw``; after Ctrl-Alt-Del it boots again and
    answers again, and powers off on the first press of the power button after its
    marker; an address nobody has does not answer (the ping is real)."""
    nic = Nic(tap=netns.tap, mac="52:54:00:12:34:56")
    append = kernel_args(ip="192.0.2.10/24", gateway=netns.address, hostname="tiny1")
    async with BareQemu(guest, workdir, append, nics=[nic], prefix=netns.exec) as vm:
        up = await vm.wait_for(re.escape(MARKER), BOOT)
        assert "corral-tiny-guest: eth0 192.0.2.10/24" in vm.console()
        assert await _ping(netns, "192.0.2.10")
        assert not await _ping(netns, "192.0.2.99", attempts=1)
        # The shell on the console: the route through the gateway, the host name, the MAC.
        await vm.send_console("ip route; hostname; cat /sys/class/net/eth0/address\n")
        await vm.wait_for(r"default via 192\.0\.2\.1 dev eth0", 10, since=up.end())
        await vm.wait_for(r"\btiny1\b", 10, since=up.end())
        await vm.wait_for(r"52:54:00:12:34:56", 10, since=up.end())
        # Ctrl-Alt-Del reboots the guest (qemu resets it and runs on).
        await vm.execute("send-key", {"keys": [{"type": "qcode", "data": key}
                                               for key in ("ctrl", "alt", "delete")]})
        down = await vm.wait_for("corral-tiny-guest: down", 20, since=up.end())
        again = await vm.wait_for(re.escape(MARKER), BOOT, since=down.end())
        assert vm.pid is not None
        assert await _ping(netns, "192.0.2.10")
        # The power button is watched by the time the marker is out: one press suffices.
        assert "power button" not in vm.console()[again.end():]
        await vm.powerdown()
        async with asyncio.timeout(15):
            assert await vm.wait_exit() == 0
