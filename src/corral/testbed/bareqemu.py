"""The tiny guest under a bare ``qemu-system-x86_64``, without corral: for the system tests
of the guest itself and as the baseline the kvm hypervisor's benchmark compares against.

:class:`BareQemu` starts qemu (not daemonized: it is the caller's child, so it is stopped
by its pid and reaped) with its serial console on a unix socket that also logs to a file,
and a QMP socket driven with ``qemu.qmp``. Used as an async context manager it kills the
qemu it started when the block ends, however it ends::

    async with BareQemu(guest, workdir, kernel_args(ip="192.0.2.10/24")) as vm:
        await vm.wait_for(MARKER, timeout=60)
        await vm.powerdown()
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from qemu.qmp import QMPClient

from corral.errors import CorralError, NotFoundError
from corral.testbed.guest import TinyGuest

__all__ = ["QEMU", "BareQemu", "Nic", "qemu_command"]

#: The emulator; the Makefile's ``sysdeps`` installs it (``qemu-system-x86``).
QEMU = "qemu-system-x86_64"


@dataclass(frozen=True)
class Nic:
    """A virtio NIC on an existing tap device."""

    tap: str
    mac: str


def qemu_command(guest: TinyGuest, workdir: Path, append: str, *, memory: int = 128,
                 nics: Sequence[Nic] = (), accel: str = "tcg",
                 extra: Sequence[str] = ()) -> list[str]:
    """The qemu command line that boots ``guest`` with kernel command line ``append``.

    The sockets and the console log are ``workdir``'s ``qmp.sock``, ``serial.sock`` and
    ``serial.log``. ``-machine pc``: ``microvm`` hangs under TCG. No default devices, no
    display, no network unless ``nics`` asks for it.
    """
    binary = shutil.which(QEMU)
    if binary is None:
        raise NotFoundError(f"{QEMU} is not installed: 'make sysdeps' installs qemu-system-x86")
    command = [
        binary, "-name", "corral-tiny-guest", "-accel", accel, "-machine", "pc",
        "-m", str(memory), "-nodefaults", "-no-user-config", "-display", "none",
        "-kernel", str(guest.kernel), "-initrd", str(guest.initrd), "-append", append,
        "-chardev", f"socket,id=serial0,path={workdir / 'serial.sock'},server=on,wait=off,"
                    f"logfile={workdir / 'serial.log'}",
        "-serial", "chardev:serial0",
        "-qmp", f"unix:{workdir / 'qmp.sock'},server=on,wait=off",
    ]
    for index, nic in enumerate(nics):
        command += ["-netdev", f"tap,id=net{index},ifname={nic.tap},script=no,downscript=no",
                    "-device", f"virtio-net-pci,netdev=net{index},mac={nic.mac}"]
    return command + list(extra)


class BareQemu:
    """One qemu running the tiny guest; see the module's docstring.

    ``prefix`` runs qemu through another command first, such as
    ``["ip", "netns", "exec", NAME]`` (which execs, so the pid stays qemu's).
    """

    def __init__(self, guest: TinyGuest, workdir: Path, append: str, *,
                 memory: int = 128, nics: Sequence[Nic] = (), accel: str = "tcg",
                 extra: Sequence[str] = (), prefix: Sequence[str] = ()) -> None:
        self.workdir = workdir
        self.command = [*prefix, *qemu_command(guest, workdir, append, memory=memory,
                                               nics=nics, accel=accel, extra=extra)]
        self.log = workdir / "serial.log"
        self.output = workdir / "qemu.out"
        self.started = 0.0
        self._process: asyncio.subprocess.Process | None = None
        self._qmp: QMPClient | None = None

    @property
    def pid(self) -> int | None:
        """qemu's pid, while it has not been reaped."""
        return None if self._process is None else self._process.pid

    async def start(self) -> None:
        """Start qemu; its standard output and error go to ``qemu.out``."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        for name in ("serial.log", "serial.sock", "qmp.sock"):
            (self.workdir / name).unlink(missing_ok=True)
        with self.output.open("wb") as out:
            self.started = time.monotonic()
            self._process = await asyncio.create_subprocess_exec(
                *self.command, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out)

    def console(self) -> str:
        """Everything the guest wrote to its serial console so far."""
        try:
            return self.log.read_bytes().decode(errors="replace")
        except FileNotFoundError:
            return ""

    async def wait_for(self, pattern: str, timeout: float, *, since: int = 0) -> re.Match[str]:
        """Wait until the console (from offset ``since``) matches ``pattern``, a regular
        expression; fail with the console's end and qemu's output if it does not in time
        or qemu exits first."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            match = regex.search(self.console(), since)
            if match is not None:
                return match
            if self._process is not None and self._process.returncode is not None:
                raise CorralError(f"qemu exited ({self._process.returncode}) before "
                                  f"{pattern!r} appeared{self._evidence()}")
            if time.monotonic() > deadline:
                raise CorralError(f"no {pattern!r} on the console within {timeout} s"
                                  f"{self._evidence()}")
            await asyncio.sleep(0.02)

    def _evidence(self) -> str:
        """The console's last lines and qemu's own output, for error messages."""
        tail = "\n".join(self.console().splitlines()[-15:])
        try:
            qemu = self.output.read_text(errors="replace").strip()
        except FileNotFoundError:
            qemu = ""
        return f"\n--- console ---\n{tail}\n--- qemu ---\n{qemu}"

    async def qmp(self) -> QMPClient:
        """A QMP connection (made once, on first use; qemu creates the socket at start,
        so it is there within seconds or never)."""
        if self._qmp is None:
            client = QMPClient("corral-tiny-guest")
            async with asyncio.timeout(10):
                while True:
                    try:
                        await client.connect(str(self.workdir / "qmp.sock"))
                        break
                    except Exception:
                        if self._process is None or self._process.returncode is not None:
                            raise
                        await asyncio.sleep(0.05)
            self._qmp = client
        return self._qmp

    async def execute(self, command: str, arguments: dict[str, Any] | None = None) -> object:
        """Run one QMP command; its result."""
        client = await self.qmp()
        return await client.execute(command, arguments)

    async def send_console(self, text: str) -> None:
        """Type ``text`` on the serial console (through the console's socket)."""
        _, writer = await asyncio.open_unix_connection(str(self.workdir / "serial.sock"))
        try:
            writer.write(text.encode())
            await writer.drain()
            await asyncio.sleep(0.2)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def powerdown(self) -> None:
        """Press the guest's ACPI power button."""
        await self.execute("system_powerdown")

    async def wait_exit(self) -> int:
        """Wait for qemu to exit (bound it with ``asyncio.timeout``); its exit status."""
        if self._process is None:
            raise CorralError("qemu was not started")
        return await self._process.wait()

    async def close(self) -> None:
        """Disconnect QMP and kill qemu (by its pid) if it still runs; reap it."""
        if self._qmp is not None:
            client, self._qmp = self._qmp, None
            with contextlib.suppress(Exception):
                await client.disconnect()
        process = self._process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            await process.wait()

    async def __aenter__(self) -> BareQemu:
        await self.start()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.close()
