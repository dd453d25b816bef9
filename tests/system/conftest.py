"""System tests: real qemu guests under TCG (HOST-FACTS.md: KVM does not boot guests here).

The tiny guest is built once per session from the Debian packages ``make sysdeps``
installs; a missing package fails the tests (with the command that installs it) rather
than skipping them. Networking tests need root, ``/dev/net/tun`` and network namespaces
and skip, saying which, when the host has none.

Everything a test creates is removed by its fixtures whether it passes or fails: qemu by
its pid (:class:`corral.testbed.bareqemu.BareQemu`), the network namespace with its bridge
and tap devices by name (deleting the namespace deletes the devices in it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from corral.testbed import guest as tiny_guest


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


@pytest.fixture
def netns() -> Iterator[Netns]:
    """A fresh namespace ``corral-test-<id>`` with bridge ``ctbr<id>`` at 192.0.2.1/24 and
    tap ``cttap<id>`` on it, names unique to the test; removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces and tap devices need root")
    if not os.path.exists("/dev/net/tun"):
        pytest.skip("the host has no /dev/net/tun, so no tap devices")
    if shutil.which("ip") is None:
        pytest.skip("no ip command (iproute2)")
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
