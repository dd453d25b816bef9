"""Where a kvm instance's runtime state lives on a node, and how to read it back.

Everything the kvm hypervisor knows about a running guest is on disk or in the
running qemu, never only in noded's memory, so a restarted noded finds its guests
again. Per instance, under ``paths.hypervisor_state_dir / "kvm" / NAME``:

``runtime.json``
    The :class:`RuntimeRecord`: the spec qemu was started from, the disk paths,
    the command line, the taps, the uid, the VNC port, when it started. Written
    before qemu starts (``pid`` 0) and again once qemu runs.
``qemu.pid``
    Written by qemu itself (``-pidfile``).

Logs outlive the instance's runs and are appended to, in ``paths.log_dir / "kvm"``:
``NAME.serial.log``, everything the guest wrote on its serial console (the chardev's
``logfile``), and ``NAME.qemu.log``, qemu's own log (``-D``).

The unix sockets (QMP and the serial console) cannot live there: a unix socket's
path has at most 107 bytes and testbed roots are deep. They live in a short
per-instance directory instead, ``/run/corral-kvm/<16 hex digits>/`` (``/tmp`` when
``/run`` is not writable), named after a hash of the instance's state directory, so
two nodes of a testbed on one machine never share one; ``sockets`` in the
instance's directory is a link to it, for people looking around. qemu is given
these short paths. :func:`open_unix_connection` connects to any unix socket, also one
whose path is longer than the limit (through ``/proc/self/fd/<dirfd>/<name>``).

Changes to one instance (start, stop, reboot, cleaning up after a dead qemu) hold
its lock file, ``kvm/.locks/NAME`` (an ``flock``, released when the holder dies).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import hashlib
import os
import shutil
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec

from corral.errors import HypervisorError
from corral.objects.specs import InstanceSpec
from corral.paths import Paths
from corral.utils.files import write_public

__all__ = [
    "SOCKET_PATH_MAX",
    "InstanceRuntime",
    "RuntimeRecord",
    "instance_names",
    "kvm_dir",
    "open_unix_connection",
    "pid_cmdline",
    "wait_exit",
]

#: The longest unix socket path the kernel accepts (``sun_path`` less its NUL).
SOCKET_PATH_MAX = 107

_SHORT_ROOTS = (Path("/run/corral-kvm"), Path("/tmp") / f"corral-kvm-{os.getuid()}")


class RuntimeRecord(msgspec.Struct, kw_only=True):
    """What ``runtime.json`` holds about one instance's qemu."""

    name: str
    spec: InstanceSpec
    disk_paths: list[str] = msgspec.field(default_factory=list)
    command: list[str] = msgspec.field(default_factory=list)
    """The qemu command line it was started with (a soft reboot runs it again)."""
    pid: int = 0
    """qemu's pid once it runs; 0 while it is being started."""
    started: float = 0.0
    """When qemu started (``time.time()``)."""
    memory: int = 0
    """MiB the instance was started with (``maxmem``, or less through the balloon when
    the node had less free) and that the node reserves for it."""
    incoming: str | None = None
    """The ``-incoming`` URI when started to receive a migration."""
    taps: list[str] = msgspec.field(default_factory=list)
    """Tap devices made for the NICs (see :mod:`.netdev`)."""
    uid: int | None = None
    """The uid qemu runs as, when not root (see :mod:`.security`)."""
    vnc_port: int | None = None
    pci_slots: dict[str, int] = msgspec.field(default_factory=dict)
    """The PCI slot of every device on the PCI bus, by qemu device id: fixed at start,
    chosen at hot-plug, and given to a migration's target so that both qemus lay out
    the same machine (qemu refuses a migration stream from another layout)."""
    romless: list[str] = msgspec.field(default_factory=list)
    """Ids of the NICs plugged without an option ROM (the hot-added ones), which a
    migration's target must plug the same way."""
    extra: dict[str, Any] = msgspec.field(default_factory=dict)
    """Room for the other parts (netdev, security, migration, hotplug) to keep what they
    need at stop; each uses keys named after itself."""


def kvm_dir(paths: Paths) -> Path:
    """The kvm hypervisor's state directory on the node of ``paths``."""
    return paths.hypervisor_state_dir / "kvm"


def instance_names(paths: Paths) -> list[str]:
    """Names of the instances that have a runtime directory here, sorted."""
    try:
        entries = os.listdir(kvm_dir(paths))
    except FileNotFoundError:
        return []
    except OSError as err:
        raise HypervisorError(f"cannot list the kvm hypervisor's instances: {err}") from err
    return sorted(entry for entry in entries if not entry.startswith("."))


def _check_name(name: str) -> None:
    if not name or "/" in name or "\0" in name or name.startswith("."):
        raise HypervisorError(
            f"invalid instance name {name!r}: a name must be non-empty, must not start"
            " with '.' and must not contain '/'"
        )


@functools.cache
def _short_root() -> Path:
    """The first of :data:`_SHORT_ROOTS` this process can write to (created if need be)."""
    for root in _SHORT_ROOTS:
        try:
            root.mkdir(mode=0o755, parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(root, os.W_OK | os.X_OK):
            return root
    raise HypervisorError(
        f"no directory for qemu's sockets: neither of {', '.join(map(str, _SHORT_ROOTS))}"
        " is writable"
    )


class InstanceRuntime:
    """The runtime files of one instance on one node (see the module's docstring).

    Making one touches nothing; :meth:`prepare` creates the directories.
    """

    def __init__(self, paths: Paths, name: str) -> None:
        _check_name(name)
        self.paths = paths
        self.name = name
        self.dir = kvm_dir(paths) / name
        digest = hashlib.sha256(str(self.dir.absolute()).encode()).hexdigest()[:16]
        self._socket_key = digest

    # -- file names ------------------------------------------------------------------
    @property
    def socket_dir(self) -> Path:
        """The short directory holding the instance's unix sockets."""
        return _short_root() / self._socket_key

    @property
    def qmp_socket(self) -> Path:
        """The QMP monitor's unix socket."""
        return self.socket_dir / "qmp.sock"

    @property
    def status_socket(self) -> Path:
        """A second QMP monitor, only for status queries: qemu serves one client per
        monitor, so a long operation on :attr:`qmp_socket` (a migration, a hotplug)
        does not hold up ``gnt-instance list``."""
        return self.socket_dir / "status.sock"

    @property
    def serial_socket(self) -> Path:
        """The serial console's unix socket (qemu listens; one client at a time)."""
        return self.socket_dir / "serial.sock"

    @property
    def vnc_socket(self) -> Path:
        """A unix socket for VNC, for parts that want one."""
        return self.socket_dir / "vnc.sock"

    @property
    def serial_log(self) -> Path:
        """Everything the guest wrote on its serial console, over all its runs here."""
        return self.paths.log_dir / "kvm" / f"{self.name}.serial.log"

    @property
    def qemu_log(self) -> Path:
        """qemu's own log (``-D``), over all its runs here."""
        return self.paths.log_dir / "kvm" / f"{self.name}.qemu.log"

    @property
    def pid_file(self) -> Path:
        """qemu's pid file (``-pidfile``)."""
        return self.dir / "qemu.pid"

    @property
    def record_file(self) -> Path:
        """The JSON :class:`RuntimeRecord`."""
        return self.dir / "runtime.json"

    @property
    def lock_file(self) -> Path:
        """The instance's lock file (kept when the runtime directory goes)."""
        return kvm_dir(self.paths) / ".locks" / self.name

    # -- life cycle of the files ---------------------------------------------------------
    def prepare(self) -> None:
        """Create the instance's directories (fresh: stale sockets and logs go)."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o750)
            self.serial_log.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
            sockets = self.socket_dir
            sockets.mkdir(mode=0o750, exist_ok=True)
            for stale in (sockets / "qmp.sock", sockets / "status.sock",
                          sockets / "serial.sock", sockets / "vnc.sock", self.pid_file):
                stale.unlink(missing_ok=True)
            link = self.dir / "sockets"
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(sockets, target_is_directory=True)
        except OSError as err:
            raise HypervisorError(
                f"cannot create the runtime directory of instance {self.name}: {err}"
            ) from err

    def remove(self) -> None:
        """Remove every runtime file of the instance (the lock file stays)."""
        with contextlib.suppress(OSError):
            shutil.rmtree(self.socket_dir, ignore_errors=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    def write(self, record: RuntimeRecord) -> None:
        """Write ``record`` atomically."""
        try:
            write_public(self.record_file, msgspec.json.format(msgspec.json.encode(record))
                         + b"\n")
        except OSError as err:
            raise HypervisorError(
                f"cannot record the runtime state of instance {self.name}: {err}"
            ) from err

    def read(self) -> RuntimeRecord | None:
        """The record, or ``None`` when there is none (or it is unreadable: a start that
        died half-way)."""
        try:
            data = self.record_file.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as err:
            raise HypervisorError(
                f"cannot read the runtime state of instance {self.name}: {err}") from err
        try:
            return msgspec.json.decode(data, type=RuntimeRecord)
        except msgspec.DecodeError:
            return None

    def read_pid(self) -> int:
        """The pid qemu wrote, or 0."""
        try:
            text = self.pid_file.read_text().strip()
        except OSError:
            return 0
        return int(text) if text.isdigit() else 0

    # -- the process -----------------------------------------------------------------------
    def live_pid(self, record: RuntimeRecord | None = None) -> int:
        """qemu's pid if it runs and really is this instance's qemu (its command line
        names this instance's QMP socket), else 0."""
        pid = record.pid if record is not None and record.pid else self.read_pid()
        if pid <= 0:
            return 0
        cmdline = pid_cmdline(pid)
        if cmdline is None or str(self.qmp_socket) not in cmdline:
            return 0
        return pid

    # -- locking ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self, *, blocking: bool = True) -> Iterator[bool]:
        """Hold the instance's lock (blocking: in a worker thread). Yields whether it
        was taken (always when ``blocking``)."""
        try:
            self.lock_file.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
            fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
        except OSError as err:
            raise HypervisorError(
                f"cannot open the lock file of instance {self.name}: {err}") from err
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    @contextlib.asynccontextmanager
    async def alock(self, timeout: float = 600.0) -> AsyncIterator[None]:  # noqa: ASYNC109
        """Hold the instance's lock from a coroutine, waiting at most ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            with self.locked(blocking=False) as taken:
                if taken:
                    yield
                    return
            if time.monotonic() > deadline:
                raise HypervisorError(
                    f"instance {self.name} is busy: another operation on it did not end"
                    f" within {timeout:.0f} s")
            await asyncio.sleep(0.05)


async def wait_exit(pid: int, timeout: float) -> bool:  # noqa: ASYNC109
    """Wait until process ``pid`` exits (woken by its pidfd, no polling); whether it
    did within ``timeout`` seconds."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[None] = loop.create_future()

    def _readable() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(pidfd, _readable)
    try:
        async with asyncio.timeout(timeout):
            await exited
        return True
    except TimeoutError:
        return False
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)


def pid_cmdline(pid: int) -> str | None:
    """The command line of process ``pid`` (arguments joined by spaces), or ``None``."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    if not raw:
        return None  # a zombie
    return raw.replace(b"\0", b" ").decode(errors="replace")


async def open_unix_connection(
    path: Path | str, *, limit: int = 2**16,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to the unix socket at ``path``, also when ``path`` is longer than
    :data:`SOCKET_PATH_MAX` (through ``/proc/self/fd`` of its directory)."""
    path = Path(path)
    if len(os.fsencode(path)) <= SOCKET_PATH_MAX:
        return await asyncio.open_unix_connection(str(path), limit=limit)
    dirfd = os.open(path.parent, os.O_PATH | os.O_CLOEXEC)
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(
                sock, f"/proc/self/fd/{dirfd}/{path.name}")
        except BaseException:
            sock.close()
            raise
    finally:
        os.close(dirfd)
    return await asyncio.open_unix_connection(sock=sock, limit=limit)
