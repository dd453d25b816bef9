"""Networking of kvm guests: taps on a bridge, routed NICs, the NIC hook, refusals.

The whole testbed (its daemons and so its qemu processes and taps) runs inside a network
namespace the module creates, so bridges, taps, routes and rules are private to it and
vanish with it. A second namespace plays a machine on the network that reaches a routed
guest through the testbed's namespace.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from corral.testbed import guest as tiny_guest
from tests.conftest import assert_no_daemons
from tests.system.conftest import KvmTestbed, require_taps

pytestmark = pytest.mark.system

#: The routing table routed NICs use (their ``link``).
TABLE = "100"
#: The routed guest's address; the other namespace reaches it through the testbed's.
ROUTED_IP = "10.99.5.10"


@dataclass
class NetTestbed(KvmTestbed):
    """A one-node kvm testbed whose daemons run in namespace ``ns``, with bridge
    ``bridge`` there, and namespace ``client`` linked to it by a veth pair."""

    ns: str = ""
    client: str = ""
    bridge: str = ""
    veth: str = ""

    def ip(self, *args: str, ns: str | None = None) -> str:
        """``ip -n NS ARGS`` (the testbed's namespace by default); its output."""
        return subprocess.run(["ip", "-n", ns or self.ns, *args], check=True,
                              capture_output=True, text=True).stdout

    def taps(self) -> list[str]:
        """The tap devices in the testbed's namespace."""
        return re.findall(r"^\d+: (tap[0-9a-f]+)", self.ip("-o", "link", "show", "type", "tun"),
                          re.M)

    def type_on_console(self, name: str, line: str) -> int:
        """Type ``line`` on instance ``name``'s serial console; the console's length
        before it (to wait for the answer from there)."""
        runtime = self.runtime(name)
        assert runtime is not None, f"{name} has no runtime files"
        since = len(self.console(name))
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(runtime.serial_socket))
            sock.sendall(f"\n{line}\n".encode())
            time.sleep(0.2)
        return since


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), check=True, capture_output=True, text=True, timeout=60)


def _in_ns(ns: str, *argv: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory,
        guest: tiny_guest.TinyGuest) -> Iterator[NetTestbed]:
    """The module's testbed in its own namespace (see :class:`NetTestbed`)."""
    require_taps()
    if shutil.which("qemu-system-x86_64") is None:
        pytest.fail("qemu-system-x86_64 is missing: run 'make sysdeps'")
    token = uuid.uuid4().hex[:6]
    ns, client = f"corral-net-{token}", f"corral-netc-{token}"
    bridge, veth = f"cnbr{token}", f"cnvh{token}"
    directory = tmp_path_factory.mktemp("kvm-net") / "tb"
    made: list[str] = []
    try:
        for name in (ns, client):
            _run("ip", "netns", "add", name)
            made.append(name)
            _run("ip", "-n", name, "link", "set", "lo", "up")
        # the bridge the bridged guests share
        _run("ip", "-n", ns, "link", "add", bridge, "type", "bridge")
        _run("ip", "-n", ns, "link", "set", bridge, "up")
        # the outside: 10.99.0.2 in the client namespace, 10.99.0.1 in the testbed's,
        # which forwards to the routed guests (table TABLE for what comes from outside)
        _run("ip", "-n", ns, "link", "add", veth, "type", "veth", "peer", "name", "eth0",
             "netns", client)
        _run("ip", "-n", ns, "addr", "add", "10.99.0.1/24", "dev", veth)
        _run("ip", "-n", ns, "link", "set", veth, "up")
        _run("ip", "-n", client, "addr", "add", "10.99.0.2/24", "dev", "eth0")
        _run("ip", "-n", client, "link", "set", "eth0", "up")
        _run("ip", "-n", client, "route", "add", "10.99.5.0/24", "via", "10.99.0.1")
        _run("ip", "-n", ns, "rule", "add", "iif", veth, "lookup", TABLE)
        _run("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    except subprocess.CalledProcessError as error:
        for name in made:
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
        pytest.skip(f"cannot set up the test's network namespaces: {error.stderr.strip()}")
    try:
        proc = _in_ns(ns, sys.executable, "-m", "corral.testbed", "up", "--nodes", "1",
                      "--dir", str(directory), "--hypervisors", "kvm,fake",
                      "--tiny-guest", str(guest.kernel.parent))
        assert proc.returncode == 0, proc.stderr
        state = json.loads((directory / "testbed.json").read_text())
        yield NetTestbed(directory, state, guest, ns=ns, client=client, bridge=bridge,
                         veth=veth)
    finally:
        _in_ns(ns, sys.executable, "-m", "corral.testbed", "down", "--dir", str(directory))
        for name in made:
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
        assert_no_daemons(directory)


def _add(net: NetTestbed, name: str, ip: str | None, nic: str, *, start: bool = True,
         check: bool = True) -> subprocess.CompletedProcess[str]:
    """Add the tiny guest ``name`` with one NIC (``--net 0:NIC``) and the guest address
    ``ip`` (``a.b.c.d/len``) on its kernel command line, and start it unless not
    ``start``; the start's result."""
    hv = "kvm"
    if ip:
        hv += f":kernel_args={tiny_guest.kernel_args(ip=ip, hostname=name.split('.')[0])}"
    added = net.run("gnt-instance", "add", "-t", "diskless", "--no-install",
                    "--no-ip-check", "--no-name-check", "-o", "corral-ext4+default",
                    "-H", hv, "-B", "maxmem=128,minmem=128",
                    "-n", net.state["nodes"][0]["name"], "--net", f"0:{nic}", name)
    return net.run("gnt-instance", "start", name, check=check) if start else added


def _remove(net: NetTestbed, *names: str) -> None:
    for name in names:
        net.run("gnt-instance", "remove", "-f", name, check=False)


def test_two_guests_on_a_bridge_ping_each_other(net: NetTestbed) -> None:
    """Each guest's NIC is a tap on the bridge its ``link`` names; one guest pings the
    other over it; removing the guests removes their taps."""
    try:
        _add(net, "vm1.testbed", "10.99.1.11/24", f"link={net.bridge}")
        _add(net, "vm2.testbed", "10.99.1.12/24", f"link={net.bridge}")
        ports = re.findall(r"^\d+: (tap[0-9a-f]+)[@:]",
                           net.ip("-o", "link", "show", "master", net.bridge), re.M)
        assert sorted(ports) == sorted(net.taps()) and len(ports) == 2
        for name in ("vm1.testbed", "vm2.testbed"):
            net.wait_console(name, re.escape(tiny_guest.MARKER))
        since = net.type_on_console("vm1.testbed", "ping -c 3 10.99.1.12")
        net.wait_console("vm1.testbed", r"64 bytes from 10\.99\.1\.12", since=since)
        summary = net.wait_console("vm1.testbed", r"(\d+) packets received", since=since)
        assert int(summary.group(1)) >= 1
    finally:
        _remove(net, "vm1.testbed", "vm2.testbed")
    assert net.taps() == []


def test_routed_nic_is_reachable_through_its_host_route(net: NetTestbed) -> None:
    """A routed NIC's IP is routed through its tap in the table its ``link`` names;
    another namespace pings the guest through the testbed's (forwarding, proxy ARP on
    the tap); at shutdown route, rule and tap go."""
    name = "vm3.testbed"
    try:
        # /8: the guest reaches 10.99.0.2 "directly", the tap answering by proxy ARP
        _add(net, name, f"{ROUTED_IP}/8", f"mode=routed,link={TABLE},ip={ROUTED_IP}")
        (tap,) = net.taps()
        assert re.search(rf"^{re.escape(ROUTED_IP)} dev {tap} ",
                         net.ip("route", "show", "table", TABLE), re.M)
        assert f"iif {tap} lookup {TABLE}" in net.ip("rule", "show")
        net.wait_console(name, re.escape(tiny_guest.MARKER))
        for _ in range(5):
            ping = _in_ns(net.client, "busybox", "ping", "-c", "2", "-W", "3", ROUTED_IP,
                          timeout=30)
            if ping.returncode == 0:
                break
        assert ping.returncode == 0, ping.stdout + ping.stderr
        assert f"bytes from {ROUTED_IP}" in ping.stdout
        net.run("gnt-instance", "shutdown", "--timeout=0", name)
        assert net.taps() == []
        assert ROUTED_IP not in net.ip("route", "show", "table", TABLE)
        assert "iif tap" not in net.ip("rule", "show")
    finally:
        _remove(net, name)


def test_nic_hook_gets_ganetis_environment_and_its_failure_fails_the_start(
        net: NetTestbed) -> None:
    """The administrator's kvm-ifup-custom sets up the tap in corral's stead with
    Ganeti's variables; when it fails the start fails quoting it, leaving no tap and no
    qemu."""
    (paths,) = net.node_paths()
    hook = paths.kvm_ifup_custom
    seen = net.dir / "hook-env"
    hook.write_text(f"#!/bin/sh\nenv > {seen}\n"
                    f"[ \"$TAGS\" = fail ] && echo 'no VLAN 42 on this switch' && exit 3\n"
                    f"exit 0\n")
    hook.chmod(0o755)
    try:
        _add(net, "vm4.testbed", None, f"link={net.bridge},ip=10.99.1.14,name=front",
             start=False)
        net.run("gnt-instance", "add-tags", "vm4.testbed", "web")
        net.run("gnt-instance", "start", "vm4.testbed")
        env = dict(line.split("=", 1) for line in seen.read_text().splitlines()
                   if "=" in line)
        (tap,) = net.taps()
        assert env["INTERFACE"] == tap
        assert env["INSTANCE"] == "vm4.testbed"
        assert env["MODE"] == "bridged"
        assert env["LINK"] == env["BRIDGE"] == net.bridge
        assert env["IP"] == "10.99.1.14"
        assert env["INTERFACE_INDEX"] == "0"
        assert env["INTERFACE_NAME"] == "front"
        assert env["TAGS"] == "web"
        assert re.fullmatch(r"([0-9a-f]{2}:){5}[0-9a-f]{2}", env["MAC"])
        # the hook replaces corral's set-up: this one did not enslave the tap
        assert net.ip("-o", "link", "show", "master", net.bridge).strip() == ""
        net.run("gnt-instance", "shutdown", "--timeout=0", "vm4.testbed")

        net.run("gnt-instance", "add-tags", "vm4.testbed", "fail")
        net.run("gnt-instance", "remove-tags", "vm4.testbed", "web")
        failed = net.run("gnt-instance", "start", "vm4.testbed", check=False)
        assert failed.returncode != 0
        assert "no VLAN 42 on this switch" in failed.stderr + failed.stdout
        assert "kvm-ifup-custom" in failed.stderr + failed.stdout
        assert net.taps() == []
        assert net.qemu_pid("vm4.testbed") == 0
    finally:
        hook.unlink(missing_ok=True)
        _remove(net, "vm4.testbed")


def test_missing_bridge_is_refused_before_start(net: NetTestbed) -> None:
    """A NIC on a bridge this node does not have: the start fails naming the bridge,
    and nothing runs."""
    name = "vm5.testbed"
    try:
        _add(net, name, None, "link=cnnosuchbr", start=False)
        failed = net.run("gnt-instance", "start", name, check=False)
        assert failed.returncode != 0
        assert "cnnosuchbr" in failed.stderr + failed.stdout
        assert net.taps() == []
        assert net.qemu_pid(name) == 0
    finally:
        _remove(net, name)


def test_taps_of_a_qemu_killed_behind_corrals_back_are_removed(net: NetTestbed) -> None:
    """A qemu that dies without corral: the next look at the instance removes its tap."""
    name = "vm6.testbed"
    try:
        _add(net, name, None, f"link={net.bridge}")
        assert len(net.taps()) == 1
        pid = net.qemu_pid(name)
        assert pid
        os.kill(pid, signal.SIGKILL)
        net.wait_status(name, "ERROR_down")
        assert net.taps() == []
    finally:
        _remove(net, name)
