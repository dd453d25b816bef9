"""Consoles of real kvm guests on a 2-node testbed: ``gnt-instance console`` streamed
through the primary node's daemon (no ssh), RAPI's console description, and VNC with
its port and password.

The console command is driven as a script would: standard input a pipe, standard
output read back. One serial guest and one VNC guest, both on node2 (so the console
crosses from the master's CLI to another node's daemon).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import pty
import re
import select
import socket
import ssl
import subprocess
import termios
import threading
import time
import urllib.request
from typing import Any

import aiohttp
import pytest

from corral.cli.console_attach import ConsoleEndpoint, connect
from corral.errors import AccessDeniedError
from corral.rpc.client import node_client_context
from corral.testbed import guest as tiny_guest
from tests.conftest import BIN
from tests.system.conftest import KvmTestbed

#: How long the tiny guest may take to print something under TCG on a busy machine.
BOOT_TIMEOUT = 120.0
NODE = "node2.testbed"
SERIAL_VM = "con1.testbed"
VNC_VM = "vnc1.testbed"
#: The cluster-wide path of the VNC password file (below each node's root).
PASSWORD_FILE = "/etc/corral-test/vnc-cluster-password"


def _add(testbed: KvmTestbed, name: str, *hv: str,
         check: bool = True) -> subprocess.CompletedProcess[str]:
    """The tiny guest on node2 with extra kvm parameters ``hv``, then started; the
    start's result."""
    testbed.run("gnt-instance", "add", "-t", "diskless", "--no-install", "--no-ip-check",
                "--no-name-check", "-o", "corral-ext4+default", "--no-nics",
                "-H", "kvm:" + ",".join(hv), "-B", "maxmem=128,minmem=128", "-n", NODE, name)
    return testbed.run("gnt-instance", "startup", name, check=check)


def _rapi(testbed: KvmTestbed, path: str) -> Any:
    """GET ``path`` from the testbed's RAPI as its administrator."""
    rapi = testbed.state["rapi"]
    request = urllib.request.Request(rapi["url"] + path)
    token = base64.b64encode(f"{rapi['user']}:{rapi['password']}".encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    context = ssl.create_default_context(cafile=rapi["ca"])
    context.check_hostname = False
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                         urllib.request.HTTPSHandler(context=context))
    with opener.open(request, timeout=60) as response:
        return json.loads(response.read())


class Console:
    """``gnt-instance console NAME`` with a pipe for standard input; its output is
    collected by a thread."""

    def __init__(self, testbed: KvmTestbed, name: str) -> None:
        self.proc = subprocess.Popen([str(BIN / "gnt-instance"), "console", name],
                                     env=testbed.env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.output = bytearray()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        while chunk := os.read(self.proc.stdout.fileno(), 4096):
            self.output += chunk

    def send(self, data: bytes) -> None:
        """Type ``data``."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def wait_for(self, pattern: bytes, since: int = 0) -> int:
        """Wait for ``pattern`` in the output after ``since``; the offset after it."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + BOOT_TIMEOUT
        while time.monotonic() < deadline:
            match = regex.search(bytes(self.output), since)
            if match:
                return match.end()
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"no {pattern!r} from the console (exit "
                             f"{self.proc.poll()}); output:\n{bytes(self.output)[-800:]!r}")

    def close(self) -> None:
        """End the command if it still runs (it is this test's child)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def test_console_streams_the_guest_detaches_and_refuses(kvm_testbed: KvmTestbed) -> None:
    tb = kvm_testbed
    tb.add(SERIAL_VM, node=NODE)
    tb.wait_console(SERIAL_VM, re.escape(tiny_guest.MARKER))
    console = Console(tb, SERIAL_VM)
    try:
        # The counter arrives through the node daemon's stream.
        seen = console.wait_for(rb"corral-tiny-guest: tick \d+")
        # A command to the guest's shell, and its answer (the shell computes it, so the
        # echo of the typed line alone cannot match).
        console.send(b"\recho hello-$((6*7))\r")
        console.wait_for(rb"hello-42\r\n", seen)
        console.send(b"\x1d")
        assert console.proc.wait(60) == 0
        assert console.proc.stderr is not None
        stderr = console.proc.stderr.read().decode()
        assert "Escape character is '^]'" in stderr
        assert "Detached" in stderr
    finally:
        console.close()
    # The guest keeps running after the detach: the counter goes on.
    tb.wait_console(SERIAL_VM, re.escape(tiny_guest.TICK), since=len(tb.console(SERIAL_VM)))
    assert tb.instances()[SERIAL_VM]["status"] == "running"

    # --show-cmd: the ssh line Ganeti's client would run, with socat on the node.
    shown = tb.run("gnt-instance", "console", "--show-cmd", SERIAL_VM).stdout
    assert shown.startswith("ssh ")
    assert f"root@{NODE}" in shown
    assert "socat STDIO,raw,echo=0,escape=0x1d UNIX-CONNECT:" in shown
    # RAPI: Ganeti's keys for an ssh console, nothing else (Ganeti's client builds its
    # InstanceConsole object from exactly these).
    answer = _rapi(tb, f"/2/instances/{SERIAL_VM}/console")
    assert set(answer) == {"instance", "kind", "host", "port", "user", "command"}
    assert (answer["instance"], answer["kind"], answer["host"], answer["user"],
            answer["port"]) == (SERIAL_VM, "ssh", NODE, "root", 22)
    assert answer["command"][0] == "socat"
    # A cluster member without the master's certificate may not attach (it would write
    # to the guest): node1's node certificate is refused by node2's daemon.
    with pytest.raises(AccessDeniedError, match="only the master"):
        asyncio.run(_attach_as_node(tb))
    # On a terminal: raw mode while attached, the terminal's settings back after Ctrl-].
    _attach_on_a_terminal(tb)
    # Refusals: an unknown instance, a stopped one.
    unknown = tb.run("gnt-instance", "console", "nosuch.testbed", check=False)
    assert unknown.returncode != 0
    assert "nosuch.testbed" in unknown.stderr
    tb.run("gnt-instance", "shutdown", "--timeout=0", SERIAL_VM)
    down = tb.run("gnt-instance", "console", SERIAL_VM, check=False)
    assert down.returncode != 0
    assert f"{SERIAL_VM} is not running" in down.stderr


async def _attach_as_node(tb: KvmTestbed) -> None:
    endpoint = ConsoleEndpoint(SERIAL_VM, NODE, "127.0.1.2", tb.state["ports"]["noded"])
    ctx = node_client_context(tb.node_paths()[0], as_master=False)
    async with aiohttp.ClientSession() as session:
        ws = await connect(session, endpoint, ctx)
        await ws.close()


def _attach_on_a_terminal(tb: KvmTestbed) -> None:
    """``gnt-instance console`` on a pseudo-terminal: echo, line mode and signals are
    off while attached, and the terminal is as before once Ctrl-] detached, or once the
    command was terminated (SIGTERM)."""
    for ending in ("detach", "terminate"):
        controller, terminal = pty.openpty()
        before = termios.tcgetattr(terminal)
        proc = subprocess.Popen([str(BIN / "gnt-instance"), "console", SERIAL_VM],
                                env=tb.env, stdin=terminal, stdout=terminal, stderr=terminal)
        try:
            seen = b""
            deadline = time.monotonic() + BOOT_TIMEOUT
            while b"tick" not in seen and time.monotonic() < deadline:
                if select.select([controller], [], [], 1)[0]:
                    seen += os.read(controller, 4096)
            assert b"tick" in seen, seen[-500:]
            raw = termios.tcgetattr(terminal)
            assert not raw[3] & (termios.ECHO | termios.ICANON | termios.ISIG)
            if ending == "detach":
                os.write(controller, b"\x1d")
                assert proc.wait(60) == 0
            else:
                proc.terminate()
                assert proc.wait(60) != 0
            assert termios.tcgetattr(terminal) == before, ending
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            os.close(controller)
            os.close(terminal)


def _rfb_security_types(host: str, port: int) -> tuple[bytes, list[int]]:
    """The banner of the VNC server at ``host:port`` and the security types it offers
    for RFB 3.8."""
    with socket.create_connection((host, port), timeout=30) as sock:
        banner = sock.recv(12)
        sock.sendall(b"RFB 003.008\n")
        count = sock.recv(1)[0]
        types = b""
        while len(types) < count:
            types += sock.recv(count - len(types))
    return banner, list(types)


def test_vnc_port_info_password_and_missing_password_file(kvm_testbed: KvmTestbed) -> None:
    tb = kvm_testbed
    master, node2 = tb.node_paths()
    secret = master.node_path(PASSWORD_FILE)
    secret.parent.mkdir(parents=True, exist_ok=True)
    secret.write_text("corral1\n")
    tb.run("gnt-cluster", "modify", "-H", f"kvm:vnc_password_file={PASSWORD_FILE}")
    try:
        tb.run("gnt-cluster", "redistribute-conf")
        assert node2.node_path(PASSWORD_FILE).read_text() == "corral1\n"

        _add(tb, VNC_VM, "vnc_bind_address=127.0.1.2", "serial_console=false")
        info = tb.run("gnt-instance", "info", VNC_VM).stdout
        found = re.search(r"Allocated network port: (\d+)", info)
        assert found is not None, info
        port = int(found.group(1))
        assert port > 5900
        assert (f"console connection: vnc to 127.0.1.2:{port} (node {NODE}) "
                f"(display {port - 5900})") in info
        banner, types = _rfb_security_types("127.0.1.2", port)
        assert banner == b"RFB 003.008\n"
        assert 2 in types and 1 not in types  # VNC authentication, never "None"
        assert _rapi(tb, f"/2/instances/{VNC_VM}/console") == {
            "instance": VNC_VM, "kind": "vnc", "host": "127.0.1.2", "port": port,
            "display": port - 5900}

        # A password file that is not there fails the start, naming the file, and
        # leaves no qemu behind.
        failed = _add(tb, "vnc2.testbed", "vnc_bind_address=127.0.1.2",
                      "serial_console=false", "vnc_password_file=/etc/corral-test/missing",
                      check=False)
        assert failed.returncode != 0
        assert "/etc/corral-test/missing" in failed.stderr
        assert tb.qemu_pid("vnc2.testbed") == 0
        assert tb.runtime("vnc2.testbed") is None
    finally:
        tb.run("gnt-cluster", "modify", "-H", "kvm:vnc_password_file=", check=False)
