"""System tests: real qemu guests under TCG (HOST-FACTS.md: KVM does not boot guests here).

The tiny guest is built once per session from the Debian packages ``make sysdeps``
installs; a missing package fails the tests (with the command that installs it) rather
than skipping them. Networking tests need root, ``/dev/net/tun`` and network namespaces
and skip, saying which, when the host has none.

Everything a test creates is removed by its fixtures whether it passes or fails: qemu by
its pid (:class:`corral.testbed.bareqemu.BareQemu`), the network namespace with its bridge
and tap devices by name (deleting the namespace deletes the devices in it), the kvm
testbed's guests by ``testbed down`` (which kills them by the pids in their runtime
records).

:func:`kvm_testbed` is a module's 2-node testbed with the kvm hypervisor enabled next to
fake and the tiny guest as the cluster's kvm kernel and initrd::

    def test_boot(kvm_testbed: KvmTestbed) -> None:
        kvm_testbed.add("vm1.testbed")            # -t diskless --no-install -H kvm
        kvm_testbed.wait_console("vm1.testbed", tiny_guest.MARKER)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from corral.hypervisor.kvm.runtime import InstanceRuntime
from corral.paths import Paths
from corral.testbed import core as testbed_core
from corral.testbed import guest as tiny_guest
from tests.conftest import TestbedHandle, assert_no_daemons


@pytest.fixture(scope="session")
def guest(tmp_path_factory: pytest.TempPathFactory) -> tiny_guest.TinyGuest:
    """The tiny guest, built for this session."""
    return tiny_guest.build(tmp_path_factory.mktemp("tiny-guest"))


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A directory with a short path, for qemu's unix sockets (at most 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="corral-vm-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@dataclass(frozen=True)
class Netns:
    """A network namespace holding a bridge with ``address`` and a tap device on it."""

    name: str
    bridge: str
    tap: str
    address: str

    @property
    def exec(self) -> list[str]:
        """The command prefix that runs a command inside the namespace."""
        return ["ip", "netns", "exec", self.name]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def require_taps() -> None:
    """Skip, saying why, unless this host can make network namespaces and tap devices:
    root, ``/dev/net/tun`` and the ``ip`` command."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces and tap devices need root")
    if not os.path.exists("/dev/net/tun"):
        pytest.skip("the host has no /dev/net/tun, so no tap devices")
    if shutil.which("ip") is None:
        pytest.skip("no ip command (iproute2)")


@pytest.fixture
def netns() -> Iterator[Netns]:
    """A fresh namespace ``corral-test-<id>`` with bridge ``ctbr<id>`` at 192.0.2.1/24 and
    tap ``cttap<id>`` on it, names unique to the test; removed afterwards."""
    require_taps()
    token = uuid.uuid4().hex[:6]
    ns = Netns(name=f"corral-test-{token}", bridge=f"ctbr{token}", tap=f"cttap{token}",
               address="192.0.2.1")
    try:
        _ip("netns", "add", ns.name)
    except subprocess.CalledProcessError as error:
        pytest.skip(f"cannot create a network namespace: {error.stderr.strip()}")
    try:
        _ip("-n", ns.name, "link", "set", "lo", "up")
        _ip("-n", ns.name, "link", "add", ns.bridge, "type", "bridge")
        _ip("-n", ns.name, "addr", "add", f"{ns.address}/24", "dev", ns.bridge)
        _ip("-n", ns.name, "link", "set", ns.bridge, "up")
        _ip("-n", ns.name, "tuntap", "add", "dev", ns.tap, "mode", "tap")
        _ip("-n", ns.name, "link", "set", ns.tap, "master", ns.bridge, "up")
        yield ns
    finally:
        subprocess.run(["ip", "netns", "del", ns.name], check=False, capture_output=True)


#: How long the tiny guest may take to reach a console line under TCG on a busy machine.
BOOT_TIMEOUT = 120.0


@dataclass
class KvmTestbed(TestbedHandle):
    """A testbed with kvm enabled (see :func:`kvm_testbed`) and helpers for its guests."""

    __test__ = False

    guest: tiny_guest.TinyGuest | None = None

    def node_paths(self) -> list[Paths]:
        """Every node's :class:`~corral.paths.Paths`, in node order."""
        return [Paths(Path(node["root"])) for node in self.state["nodes"]]

    def add(self, name: str, *options: str, node: str | None = None, hvparams: str = "",
            check: bool = True) -> subprocess.CompletedProcess[str]:
        """``gnt-instance add`` of the tiny guest (diskless, kvm, no OS install, 128 MiB,
        on ``node`` or where the cluster chooses, with extra ``options``; no NICs unless
        they include ``--net``; ``hvparams`` such as ``user_shutdown=true`` go to
        ``-H kvm:...``), then ``gnt-instance startup`` unless ``--no-start`` (as in
        Ganeti, ``--no-install`` implies no start)."""
        where = ["-n", node] if node else []
        if not any(option.startswith("--net") for option in options):
            where.append("--no-nics")
        added = self.run("gnt-instance", "add", "-t", "diskless", "--no-install",
                         "--no-ip-check", "--no-name-check", "-o", "corral-ext4+default",
                         "-H", f"kvm:{hvparams}" if hvparams else "kvm",
                         "-B", "maxmem=128,minmem=128", *where, *options, name,
                         check=check)
        if added.returncode != 0 or "--no-start" in options:
            return added
        return self.run("gnt-instance", "startup", name, check=check)

    def runtime(self, name: str) -> InstanceRuntime | None:
        """The runtime files of instance ``name`` on the node that has them, if any."""
        for paths in self.node_paths():
            runtime = InstanceRuntime(paths, name)
            if runtime.dir.is_dir():
                return runtime
        return None

    def qemu_pid(self, name: str) -> int:
        """The pid of instance ``name``'s live qemu, or 0."""
        runtime = self.runtime(name)
        return 0 if runtime is None else runtime.live_pid(runtime.read())

    def serial_log(self, name: str) -> Path | None:
        """Instance ``name``'s serial console log on the node that wrote it last."""
        logs = [InstanceRuntime(paths, name).serial_log for paths in self.node_paths()]
        existing = [log for log in logs if log.exists()]
        return max(existing, key=lambda log: log.stat().st_mtime) if existing else None

    def console(self, name: str) -> str:
        """What instance ``name`` wrote on its serial console so far, over all its runs
        on its latest node ("" if nothing)."""
        log = self.serial_log(name)
        if log is None:
            return ""
        try:
            return log.read_bytes().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_console(self, name: str, pattern: str, *, since: int = 0,
                     timeout: float = BOOT_TIMEOUT) -> re.Match[str]:
        """Wait until instance ``name``'s console (from offset ``since``) matches the
        regular expression ``pattern``; fail with the console's end if it does not."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            text = self.console(name)
            match = regex.search(text, since)
            if match is not None:
                return match
            if time.monotonic() > deadline:
                tail = "\n".join(text.splitlines()[-15:])
                raise AssertionError(f"no {pattern!r} on the console of {name} within"
                                     f" {timeout:.0f} s; its end:\n{tail}")
            time.sleep(0.1)

    def instances(self) -> dict[str, dict[str, str]]:
        """``gnt-instance list`` as {name: {status, oper_state, pnode}}."""
        out = self.run("gnt-instance", "list", "--no-headers", "--separator=|",
                       "-o", "name,status,oper_state,pnode").stdout
        result: dict[str, dict[str, str]] = {}
        for line in out.splitlines():
            name, status, oper, pnode = line.split("|")
            result[name] = {"status": status, "oper_state": oper, "pnode": pnode}
        return result

    def wait_status(self, name: str, status: str, *, timeout: float = 60.0) -> None:
        """Wait until ``gnt-instance list`` shows ``status`` for instance ``name``."""
        deadline = time.monotonic() + timeout
        seen: Any = None
        while time.monotonic() < deadline:
            seen = self.instances().get(name, {}).get("status")
            if seen == status:
                return
            time.sleep(0.5)
        raise AssertionError(f"{name} is {seen}, not {status}, after {timeout:.0f} s")


@pytest.fixture(scope="module")
def kvm_testbed(tmp_path_factory: pytest.TempPathFactory,
                guest: tiny_guest.TinyGuest) -> Iterator[KvmTestbed]:
    """A 2-node testbed for the module, hypervisors fake and kvm (kvm the default), the
    tiny guest as kvm ``kernel_path``/``initrd_path``, TCG. ``down`` afterwards kills
    every guest, whatever happened."""
    if shutil.which("qemu-system-x86_64") is None:
        pytest.fail("qemu-system-x86_64 is missing: run 'make sysdeps'")
    directory = tmp_path_factory.mktemp("kvm") / "tb"
    guest_dir = guest.kernel.parent
    # What 'python -m corral.testbed up/down' call, in this process (as
    # tests.conftest.running_testbed does); the commands are tested on their own.
    try:
        testbed_core.up(directory, 2, hypervisors=["kvm", "fake"], tiny_guest=guest_dir)
        state = json.loads((directory / "testbed.json").read_text())
        yield KvmTestbed(directory, state, guest)
    finally:
        try:
            testbed_core.down(directory)
        finally:
            assert_no_daemons(directory)
        leftovers = [
            path for node in directory.glob("node*")
            for path in (Paths(node).hypervisor_state_dir / "kvm").glob("[!.]*")
        ]
        assert not leftovers, f"kvm runtime files left after 'down': {leftovers}"
