"""The tiny guest: a kernel and an initramfs that boot in seconds, for tests and the demo.

Everything comes from Debian packages on the host: the kernel of ``linux-image-cloud-amd64``
(with the few modules the guest needs from the same package) and the static busybox of
``busybox-static``. :func:`build` writes them to a directory, with a cache so that a second
build with the same inputs only checks them::

    python -m corral.testbed guest build --dir DIR

The initramfs runs busybox ``init``. On the serial console (``console=ttyS0``) the guest
prints, in this order:

- ``corral-tiny-guest: eth0 192.0.2.10/24`` when it configured an address (see below);
- ``corral-tiny-guest: up`` (:data:`MARKER`) once it is ready: modules loaded, network set,
  the power button watched;
- ``corral-tiny-guest: tick 1``, ``tick 2``, ... (:data:`TICK`), one a second, for as long
  as it runs, and ``corral-tiny-guest: disks vda nics eth0 lo`` whenever its block devices
  or network interfaces change (at the first tick and after a hotplug);
- ``corral-tiny-guest: power button`` and ``corral-tiny-guest: down`` when it shuts down.

A shell runs on the console too, for tests that look inside the guest.

The kernel command line configures it (:func:`kernel_args` writes it):

``corral.ip=ADDRESS[/PREFIX]``
    the IPv4 address of ``eth0`` (prefix 24 when omitted); without it, no address.
``corral.gw=ADDRESS``
    the default gateway.
``corral.hostname=NAME``
    the host name.

(Not the kernel's own ``ip=``, which the kernel itself would try to act on.)

The same settings can come from the guest's disks, which is how the ``corral-tiny`` OS
definition (``share/os/corral-tiny``) configures an instance: a virtio disk whose first
4 KiB hold the text :data:`DISK_CONFIG_MAGIC` on the first line, then ``hostname=``,
``ip=`` and ``gw=`` lines and ``end`` (NUL padding after it). The first disk with that
header is read at boot; a setting on the kernel command line wins over the disk's. The
guest then prints ``corral-tiny-guest: config from vda: hostname=NAME ip=...`` and, when
it set a host name, ``corral-tiny-guest: hostname NAME``; an address without a NIC to put
it on gives ``corral-tiny-guest: no eth0 for ADDRESS``.

The ACPI power button (QMP ``system_powerdown``) powers the guest off through init, so qemu
exits about 2 s later. A press before the marker is lost, as it is for a real guest whose
init does not listen yet: repeat it until qemu exits, as Ganeti's shutdown does.
Ctrl-Alt-Del (QMP ``send-key``) and ``reboot`` on its console reboot it, which qemu turns
into a reset, or into an exit with ``-no-reboot``. NICs must be
virtio (``virtio-net-pci``): the cloud kernel has no e1000 driver. Disks are virtio-blk.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import lzma
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from corral.errors import CorralError, NotFoundError

__all__ = [
    "DISK_CONFIG_MAGIC", "KERNEL_PACKAGE", "MARKER", "MODULES", "TICK", "TinyGuest", "build",
    "find_busybox", "find_kernel", "kernel_args",
]

#: The line the guest prints on its serial console once it is up.
MARKER = "corral-tiny-guest: up"
#: The start of the counter lines (``corral-tiny-guest: tick N``), one a second.
TICK = "corral-tiny-guest: tick "
#: The Debian meta package whose kernel the guest boots.
KERNEL_PACKAGE = "linux-image-cloud-amd64"
#: Modules the guest loads at boot, with what they need: virtio PCI devices (network,
#: disks, balloon) and the ACPI power button with the event device that reports it.
MODULES = ("virtio_pci", "virtio_net", "virtio_blk", "virtio_balloon", "button", "evdev")

_PREFIX = "corral-tiny-guest:"

#: The first line of the configuration block the ``corral-tiny`` OS definition writes at
#: the start of an instance's disk (format version 1).
DISK_CONFIG_MAGIC = "corral-tiny-config 1"

# Prints the key=value lines of the configuration block on the first of the given disks
# (default: every virtio disk) that has one; nothing when none has. Lines after "end" and
# lines that are not key=value with a lower-case key are ignored.
_DISKCONFIG = f"""\
#!/bin/sh
[ $# -gt 0 ] || set -- /dev/vd?
for disk in "$@"; do
    [ -r "$disk" ] || continue
    text=$(head -c 4096 "$disk" 2>/dev/null | tr -d '\\000')
    [ "$(printf '%s\\n' "$text" | head -n 1)" = "{DISK_CONFIG_MAGIC}" ] || continue
    echo "disk=${{disk##*/}}"
    printf '%s\\n' "$text" | sed -n '2,/^end$/{{/^[a-z][a-z0-9_]*=/p}}'
    exit 0
done
"""

_INITTAB = """\
# busybox init of the corral tiny guest
::sysinit:/etc/rc
::respawn:/bin/ticker
::respawn:/bin/cttyhack /bin/sh -l
::ctrlaltdel:/bin/reboot
::shutdown:/etc/rc.shutdown
"""

_RC = f"""\
#!/bin/sh
# Mounts, modules, network from the kernel command line, then the marker.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts && mount -t devpts devpts /dev/pts
while read -r module; do insmod "/lib/modules/$module"; done < /etc/modules
arg() {{
    for word in $(cat /proc/cmdline); do
        case "$word" in "$1"=*) echo "${{word#*=}}";; esac
    done
}}
/bin/diskconfig > /tmp/diskconfig
disk() {{
    sed -n "s/^$1=//p" /tmp/diskconfig | head -n 1
}}
setting() {{
    value=$(arg "corral.$1"); [ -n "$value" ] || value=$(disk "$1"); echo "$value"
}}
from=$(disk disk)
[ -n "$from" ] && echo "{_PREFIX} config from $from:" $(grep -v '^disk=' /tmp/diskconfig)
name=$(setting hostname)
[ -n "$name" ] && hostname "$name" && echo "{_PREFIX} hostname $name"
ip link set lo up
address=$(setting ip); gateway=$(setting gw)
if [ -n "$address" ]; then
    case "$address" in */*) ;; *) address="$address/24";; esac
    if [ -e /sys/class/net/eth0 ]; then
        ip link set eth0 up && ip addr add "$address" dev eth0 \\
            && echo "{_PREFIX} eth0 $address"
        [ -n "$gateway" ] && ip route add default via "$gateway"
    else
        echo "{_PREFIX} no eth0 for $address"
    fi
fi
/bin/powerbutton
echo "{MARKER}"
"""

_RC_SHUTDOWN = f"""\
#!/bin/sh
echo "{_PREFIX} down"
sync
"""

_TICKER = f"""\
#!/bin/sh
# A counter line every second, and the block devices and interfaces when they change.
n=0
last=
while :; do
    n=$((n + 1))
    echo "{TICK}$n"
    now="disks"
    for d in /sys/block/*; do
        d=${{d##*/}}
        case "$d" in loop*|ram*|"*") ;; *) now="$now $d";; esac
    done
    now="$now nics"
    for d in /sys/class/net/*; do now="$now ${{d##*/}}"; done
    [ "$now" != "$last" ] && echo "{_PREFIX} $now" && last="$now"
    sleep 1
done
"""

# An input event is 24 bytes on x86_64; the power button device sends nothing but its
# key, so any event read from it is a press. A press nobody listens to is lost, so each
# watcher opens its device before it says it is ready, and the marker waits for that.
_POWERBUTTON = f"""\
#!/bin/sh
# Arms one watcher per ACPI power button, which powers off (through init) on a press;
# returns once all of them listen.
for event in /sys/class/input/event*; do
    [ "$(cat "$event/device/name" 2>/dev/null)" = "Power Button" ] || continue
    ready="/tmp/power-button.${{event##*/}}"
    (exec 3<"/dev/input/${{event##*/}}" && : > "$ready" \\
        && dd bs=24 count=1 <&3 >/dev/null 2>&1 \\
        && echo "{_PREFIX} power button" && poweroff) &
    tries=0
    while [ ! -e "$ready" ] && [ "$tries" -lt 250 ]; do usleep 20000; tries=$((tries + 1)); done
done
"""

_PROFILE = """\
export PATH=/bin
export PS1='tiny# '
"""


@dataclass(frozen=True)
class TinyGuest:
    """A built tiny guest: boot it with ``-kernel kernel -initrd initrd``."""

    kernel: Path
    initrd: Path
    kernel_version: str


def kernel_args(ip: str | None = None, gateway: str | None = None,
                hostname: str | None = None, console: str = "ttyS0") -> str:
    """The kernel command line for the tiny guest, with the serial console on ``console``.

    ``quiet`` keeps the kernel's own messages off the (emulated, slow) serial console.
    """
    args = [f"console={console}", "quiet"]
    if ip:
        args.append(f"corral.ip={ip}")
    if gateway:
        args.append(f"corral.gw={gateway}")
    if hostname:
        args.append(f"corral.hostname={hostname}")
    return " ".join(args)


def find_kernel() -> tuple[Path, Path]:
    """The kernel image of :data:`KERNEL_PACKAGE` and its module directory.

    The meta package names the kernel package it installs; the host's running kernel
    plays no part. Raises :class:`NotFoundError` when the package is not installed.
    """
    version = _kernel_version()
    kernel = Path("/boot") / f"vmlinuz-{version}"
    modules = Path("/lib/modules") / version
    for path in (kernel, modules / "modules.dep"):
        if not path.exists():
            raise NotFoundError(f"{path} is missing: reinstall {KERNEL_PACKAGE}")
    return kernel, modules


def _kernel_version() -> str:
    """The release (``6.1.0-56-cloud-amd64``) of the kernel the meta package depends on."""
    try:
        proc = subprocess.run(["dpkg-query", "-W", "-f", "${Depends}", KERNEL_PACKAGE],
                              capture_output=True, text=True, check=False)
    except FileNotFoundError:
        proc = None
    if proc is None or proc.returncode != 0:
        raise NotFoundError(f"{KERNEL_PACKAGE} is not installed: 'make sysdeps' installs it "
                            f"(apt-get install {KERNEL_PACKAGE})")
    for alternative in proc.stdout.replace("|", ",").split(","):
        name = alternative.split("(")[0].strip()
        if name.startswith("linux-image-") and name != KERNEL_PACKAGE:
            return name.removeprefix("linux-image-")
    raise NotFoundError(f"{KERNEL_PACKAGE} depends on no kernel package: {proc.stdout!r}")


def find_busybox() -> Path:
    """The static busybox of ``busybox-static``; :class:`NotFoundError` if there is none.

    A dynamically linked busybox would not run in the initramfs, which has no libc.
    """
    for path in (Path("/bin/busybox"), Path("/usr/bin/busybox")):
        if path.exists():
            if _is_dynamic(path):
                raise NotFoundError(f"{path} is dynamically linked: install busybox-static")
            return path
    raise NotFoundError("no busybox: 'make sysdeps' installs it (apt-get install busybox-static)")


def _is_dynamic(path: Path) -> bool:
    """Whether the 64-bit ELF file at ``path`` asks for a program interpreter (ld.so)."""
    with path.open("rb") as f:
        header = f.read(64)
        if header[:4] != b"\x7fELF" or header[4] != 2:
            raise CorralError(f"{path} is not a 64-bit ELF executable")
        order: Literal["little", "big"] = "little" if header[5] == 1 else "big"
        phoff = int.from_bytes(header[32:40], order)
        phentsize = int.from_bytes(header[54:56], order)
        phnum = int.from_bytes(header[56:58], order)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    pt_interp = 3
    return any(int.from_bytes(table[i:i + 4], order) == pt_interp
               for i in range(0, len(table), phentsize))


def _module_order(modules_dir: Path, wanted: Iterable[str]) -> list[str]:
    """The module files (relative to ``modules_dir``) to load for ``wanted``, each after
    the modules it depends on, by ``modules.dep``. Built-in modules are skipped."""
    depends: dict[str, list[str]] = {}
    by_name: dict[str, str] = {}
    for line in (modules_dir / "modules.dep").read_text().splitlines():
        module, _, deps = line.partition(":")
        depends[module] = deps.split()
        by_name[_module_name(module)] = module
    builtin_file = modules_dir / "modules.builtin"
    builtin = {_module_name(line) for line in builtin_file.read_text().split()
               } if builtin_file.exists() else set()
    order: list[str] = []

    def visit(module: str) -> None:
        if module in order:
            return
        for dep in depends.get(module, []):
            visit(dep)
        order.append(module)

    for name in wanted:
        if name in builtin:
            continue
        if name not in by_name:
            raise NotFoundError(f"kernel module {name} is not in {modules_dir}")
        visit(by_name[name])
    return order


def _module_name(path: str) -> str:
    """``kernel/drivers/net/virtio_net.ko(.xz)`` -> ``virtio_net`` (dashes as underscores)."""
    return Path(path).name.split(".ko")[0].replace("-", "_")


def _module_bytes(path: Path) -> bytes:
    """The module at ``path``, decompressed: busybox insmod reads plain ``.ko`` files."""
    data = path.read_bytes()
    if path.name.endswith(".ko.xz"):
        return lzma.decompress(data)
    if not path.name.endswith(".ko"):
        raise CorralError(f"cannot load the compressed kernel module {path}")
    return data


class _Cpio:
    """An initramfs archive in the ``newc`` format, written without root or mknod: the
    owners, modes and device numbers are whatever the entries say, all files are owned by
    root and have time 0, so the same inputs give the same bytes."""

    def __init__(self) -> None:
        self._out = io.BytesIO()
        self._ino = 1

    def _entry(self, name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0)
               ) -> None:
        encoded = name.encode() + b"\0"
        fields = (self._ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1],
                  len(encoded), 0)
        self._ino += 1
        self._out.write(b"070701" + b"".join(b"%08X" % value for value in fields) + encoded)
        self._pad()
        self._out.write(data)
        self._pad()

    def _pad(self) -> None:
        self._out.write(b"\0" * (-self._out.tell() % 4))

    def directory(self, name: str) -> None:
        self._entry(name, stat.S_IFDIR | 0o755)

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        self._entry(name, stat.S_IFREG | mode, data)

    def symlink(self, name: str, target: str) -> None:
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def char_device(self, name: str, major: int, minor: int) -> None:
        self._entry(name, stat.S_IFCHR | 0o600, rdev=(major, minor))

    def finish(self) -> bytes:
        self._entry("TRAILER!!!", 0)
        return self._out.getvalue()


def _applets(busybox: Path) -> list[str]:
    """The applets ``busybox`` provides (``busybox --list``)."""
    proc = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True)
    return sorted(name for name in proc.stdout.split() if name and "/" not in name)


def _initramfs(busybox: Path, modules_dir: Path, modules: list[str]) -> bytes:
    """The gzipped initramfs: busybox with a link per applet, the init scripts, modules."""
    archive = _Cpio()
    for name in ("bin", "dev", "etc", "lib", "lib/modules", "proc", "root", "sys", "tmp"):
        archive.directory(name)
    archive.char_device("dev/console", 5, 1)
    archive.char_device("dev/null", 1, 3)
    archive.file("bin/busybox", busybox.read_bytes(), 0o755)
    for applet in _applets(busybox):
        if applet != "busybox":
            archive.symlink(f"bin/{applet}", "busybox")
    archive.symlink("sbin", "bin")
    archive.symlink("usr", ".")
    archive.symlink("init", "bin/busybox")
    archive.file("etc/inittab", _INITTAB.encode())
    archive.file("etc/profile", _PROFILE.encode())
    archive.file("etc/rc", _RC.encode(), 0o755)
    archive.file("etc/rc.shutdown", _RC_SHUTDOWN.encode(), 0o755)
    archive.file("bin/ticker", _TICKER.encode(), 0o755)
    archive.file("bin/powerbutton", _POWERBUTTON.encode(), 0o755)
    archive.file("bin/diskconfig", _DISKCONFIG.encode(), 0o755)
    names = []
    for module in modules:
        name = Path(module).name.removesuffix(".xz")
        archive.file(f"lib/modules/{name}", _module_bytes(modules_dir / module))
        names.append(name)
    archive.file("etc/modules", "".join(f"{name}\n" for name in names).encode())
    return gzip.compress(archive.finish(), compresslevel=6, mtime=0)


def _fingerprint(files: Iterable[Path]) -> str:
    """A digest of this module's recipe and of the inputs' names, sizes and times."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for path in files:
        info = path.stat()
        digest.update(f"{path}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _write_atomically(path: Path, data: bytes) -> None:
    """Write ``path`` through a temporary file, so a reader never sees half of it."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build(directory: Path) -> TinyGuest:
    """Build the tiny guest into ``directory`` (``vmlinuz``, ``initramfs.gz``) and return it.

    The directory keeps a fingerprint of the inputs (the kernel and modules of
    :data:`KERNEL_PACKAGE`, busybox, this module); while they stay the same, the files
    already there are returned as they are. Both files are readable by everyone, so a
    qemu that runs as another user can read them.
    """
    kernel, modules_dir = find_kernel()
    busybox = find_busybox()
    modules = _module_order(modules_dir, MODULES)
    fingerprint = _fingerprint([kernel, busybox] + [modules_dir / m for m in modules])
    directory.mkdir(parents=True, exist_ok=True)
    guest = TinyGuest(kernel=(directory / "vmlinuz").resolve(),
                      initrd=(directory / "initramfs.gz").resolve(),
                      kernel_version=modules_dir.name)
    stamp = directory / "guest.json"
    try:
        cached = json.loads(stamp.read_text()).get("fingerprint")
    except (OSError, ValueError, AttributeError):
        cached = None
    if cached == fingerprint and guest.kernel.exists() and guest.initrd.exists():
        return guest
    stamp.unlink(missing_ok=True)
    tmp = directory / f".vmlinuz.{os.getpid()}"
    shutil.copyfile(kernel, tmp)
    os.chmod(tmp, 0o644)
    os.replace(tmp, guest.kernel)
    _write_atomically(guest.initrd, _initramfs(busybox, modules_dir, modules))
    record = {"fingerprint": fingerprint, "kernel": str(guest.kernel),
              "initrd": str(guest.initrd), "kernel_version": guest.kernel_version,
              "kernel_source": str(kernel), "busybox": str(busybox), "modules": modules}
    _write_atomically(stamp, (json.dumps(record, indent=2) + "\n").encode())
    return guest
