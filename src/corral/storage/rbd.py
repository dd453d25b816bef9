"""Disks of template ``rbd``: RADOS block device images in a Ceph cluster.

A disk's logical id is ``["rbd", image]`` (Ganeti's; the image is named
``<unique id>.rbd.disk<index>``); the pool is the disk parameter ``pool``. Every
operation runs Ceph's ``rbd`` command (package ``ceph-common``) as a subprocess, so
the node daemon's event loop never waits on Ceph, with the node daemon's environment
(``CEPH_ARGS`` works as for Ganeti) and, when this node has one, the configuration
file ``/etc/ceph/ceph.conf`` below its root (a testbed node's own; on a real host it
is Ceph's default place anyway).

How a guest reaches the image is the disk parameter ``access``:

- ``userspace``: qemu opens it itself through librbd, with no kernel module; the
  node answers the URI ``rbd:<pool>/<image>`` (with ``:conf=<file>`` when the node
  has its own configuration file), qemu's notation, which corral's kvm turns into a
  ``-blockdev driver=rbd`` node;
- ``kernelspace`` (Ganeti's default): the kernel's rbd module maps the image to
  ``/dev/rbd<N>`` (``rbd map``), and the guest uses that block device. A host
  without the module says so when the disk is assembled.

A Ceph cluster that does not answer is reported naming its monitors (from the
configuration) after :attr:`RbdStorage.mount_timeout` seconds, instead of
``rbd``'s own five minutes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, Final

from corral.errors import BlockDeviceError
from corral.objects.specs import DiskSpec
from corral.paths import Paths
from corral.storage.base import DEFAULT_CHUNK, BlockDevice, DiskInfo, DiskMissingError

__all__ = ["CEPH_CONF", "RBD_DRIVER", "RbdStorage", "conf_path", "rbd_uri"]

#: The driver in an rbd disk's logical id (Ganeti's).
RBD_DRIVER: Final = "rbd"
#: Ceph's configuration file, below a node's root.
CEPH_CONF: Final = "/etc/ceph/ceph.conf"
#: Where the kernel's rbd module lists the images it mapped (``rbd showmapped`` reads it).
RBD_SYSFS: Final = Path("/sys/bus/rbd/devices")
#: How ``rbd`` says that what it was asked about does not exist.
_ENOENT: Final = "(2) No such file or directory"
#: How ``rbd rm`` refuses an image that has snapshots.
_HAS_SNAPSHOTS: Final = "image has snapshots"
#: How ``rbd`` says that it could not reach the cluster.
_UNREACHABLE: Final = ("couldn't connect to the cluster", "(110) Connection timed out")
_MIB: Final = 1024 * 1024


def rbd_uri(pool: str, image: str, conf: str | None = None) -> str:
    """qemu's notation for an rbd image: ``rbd:<pool>/<image>[:conf=<file>]``
    (``:`` and ``\\`` in the file name escaped with ``\\``)."""
    uri = f"rbd:{pool}/{image}"
    if conf:
        escaped = conf.replace("\\", "\\\\").replace(":", "\\:")
        uri += f":conf={escaped}"
    return uri


def _label(disk: DiskSpec) -> str:
    return f"disk/{disk.index}"


class RbdStorage(BlockDevice):
    """Disks of template ``rbd`` on the node of ``paths``."""

    dev_types: ClassVar[tuple[str, ...]] = ("rbd",)

    #: Seconds ``rbd`` waits for a monitor before giving up (``client_mount_timeout``).
    mount_timeout: float = 15.0

    def __init__(self, paths: Paths) -> None:
        self.paths = paths

    # -- helpers ---------------------------------------------------------------------------
    def _conf(self) -> str | None:
        """This node's Ceph configuration file, when it has one of its own."""
        conf = self.paths.node_path(CEPH_CONF)
        return str(conf) if conf.is_file() else None

    def _image(self, disk: DiskSpec) -> tuple[str, str]:
        """``(pool, image)`` of ``disk``."""
        logical_id = disk.logical_id
        if (len(logical_id) != 2 or logical_id[0] != RBD_DRIVER
                or not isinstance(logical_id[1], str) or not logical_id[1]
                or "/" in logical_id[1]):
            raise BlockDeviceError(f"{_label(disk)} has logical id {logical_id!r}: an rbd "
                                   "disk's logical id is ['rbd', image name]")
        pool = str(disk.params.get("pool") or "rbd")
        return pool, logical_id[1]

    def _command(self, args: Sequence[str]) -> list[str]:
        binary = shutil.which("rbd")
        if binary is None:
            raise BlockDeviceError("the rbd command is not installed on this node (Debian: "
                                   "package ceph-common); it manages the disks of template "
                                   "rbd")
        command = [binary]
        conf = self._conf()
        if conf is not None:
            command += ["-c", conf]
        return [*command, "--client-mount-timeout", f"{self.mount_timeout:g}", *args]

    async def _monitors(self) -> str:
        """The monitors the configuration names, for an error message."""
        command = ["ceph-conf", "--lookup", "mon_host"]
        conf = self._conf()
        if conf is not None:
            command[1:1] = ["-c", conf]
        try:
            proc = await asyncio.create_subprocess_exec(
                *command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL)
            out, _ = await proc.communicate()
        except OSError:
            return "(unknown: ceph-conf is not installed)"
        text = out.decode(errors="replace").strip()
        return text or "(none configured)"

    async def _rbd(self, disk: DiskSpec | None, args: Sequence[str], what: str, *,
                   missing_ok: bool = False) -> str | None:
        """Run ``rbd args``; its standard output. ``None`` when ``missing_ok`` and the
        image does not exist; every other failure is a :class:`BlockDeviceError`
        quoting ``rbd``, or naming the monitors when the cluster did not answer."""
        command = self._command(args)
        proc = await asyncio.create_subprocess_exec(
            *command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=dict(os.environ))
        try:
            out, err = await proc.communicate()
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if proc.returncode == 0:
            return out.decode(errors="replace")
        text = err.decode(errors="replace").strip()
        if missing_ok and _ENOENT in text:
            return None
        subject = f"{_label(disk)}: " if disk is not None else ""
        if any(marker in text for marker in _UNREACHABLE):
            conf = self._conf() or "Ceph's default configuration"
            raise BlockDeviceError(
                f"{subject}cannot {what}: the Ceph cluster did not answer: no monitor at "
                f"{await self._monitors()} (from {conf}) responded within "
                f"{self.mount_timeout:g} s")
        lines = [line for line in text.splitlines() if line.strip()][-5:]
        raise BlockDeviceError(f"{subject}cannot {what}: rbd {args[0]} failed (exit "
                               f"{proc.returncode}): " + " | ".join(lines))

    async def _mapped_device(self, pool: str, image: str) -> str | None:
        """The ``/dev/rbd<N>`` the kernel mapped the image to, if any (none at all when
        the kernel's rbd module is not loaded: no need to ask ``rbd`` then)."""
        if not await asyncio.to_thread(RBD_SYSFS.is_dir):
            return None
        out = await self._rbd(None, ["showmapped", "--format", "json"],
                              "list the mapped rbd images")
        try:
            devices: Any = json.loads(out or "[]")
        except ValueError:
            raise BlockDeviceError(f"rbd showmapped answered {out!r}, not JSON") from None
        if isinstance(devices, dict):  # before Ceph 13 (mimic): keyed by id
            devices = list(devices.values())
        for entry in devices:
            if isinstance(entry, dict) and entry.get("name") == image \
                    and entry.get("pool") == pool and entry.get("snap", "-") in ("-", None):
                return str(entry.get("device"))
        return None

    # -- the interface -------------------------------------------------------------------
    async def create(self, disk: DiskSpec) -> str:
        """``rbd create`` the image with ``disk.size`` MiB; answer ``pool/image``."""
        pool, image = self._image(disk)
        if disk.size <= 0:
            raise BlockDeviceError(f"{_label(disk)} has size {disk.size} MiB: expected a "
                                   "positive size")
        await self._rbd(disk, ["create", "-p", pool, image, "--size", f"{disk.size}M"],
                        f"create rbd image {image} in pool {pool}")
        return f"{pool}/{image}"

    async def remove(self, disk: DiskSpec) -> None:
        """Unmap the image if the kernel mapped it and ``rbd rm`` it (its snapshots
        first, when it has some); an image already gone is fine."""
        pool, image = self._image(disk)
        if disk.params.get("access") != "userspace":
            await self.shutdown(disk)
        what = f"remove rbd image {image} from pool {pool}"
        try:
            await self._rbd(disk, ["rm", "--no-progress", "-p", pool, image], what,
                            missing_ok=True)
        except BlockDeviceError as err:
            if _HAS_SNAPSHOTS not in err.message:
                raise
            await self._rbd(disk, ["snap", "purge", "--no-progress", "-p", pool, image],
                            f"remove the snapshots of rbd image {image}", missing_ok=True)
            await self._rbd(disk, ["rm", "--no-progress", "-p", pool, image], what,
                            missing_ok=True)

    async def grow(self, disk: DiskSpec, amount: int, *, dryrun: bool = False) -> None:
        """``rbd resize`` to ``disk.size + amount`` MiB; a dry run checks that the image
        exists (images are thin: the pool's space is not checked, as in Ganeti)."""
        pool, image = self._image(disk)
        if amount < 0:
            raise BlockDeviceError(f"cannot grow {_label(disk)} by {amount} MiB: the amount "
                                   "must not be negative")
        if dryrun:
            await self.info(disk)
            return
        await self._rbd(disk, ["resize", "--no-progress", "-p", pool, image, "--size",
                               f"{disk.size + amount}M"],
                        f"resize rbd image {image} to {disk.size + amount} MiB")

    async def assemble(self, disk: DiskSpec) -> str:
        """The URI for qemu (``access=userspace``), else the mapped ``/dev/rbd<N>``
        (mapped now if it was not)."""
        pool, image = self._image(disk)
        if disk.params.get("access") == "userspace":
            await self.info(disk)  # a missing image fails here, not in qemu
            return rbd_uri(pool, image, self._conf())
        device = await self._mapped_device(pool, image)
        if device is None:
            await self._rbd(disk, ["map", "-p", pool, image],
                            f"map rbd image {image} to a block device with the kernel's "
                            "rbd module (or use the disk parameter access=userspace)")
            device = await self._mapped_device(pool, image)
            if device is None:
                raise BlockDeviceError(f"{_label(disk)}: rbd map succeeded but rbd showmapped "
                                       f"does not list image {image} of pool {pool}")
        return device

    async def shutdown(self, disk: DiskSpec) -> None:
        """Unmap the image if the kernel mapped it (nothing to do for userspace)."""
        pool, image = self._image(disk)
        if disk.params.get("access") == "userspace":
            return
        if shutil.which("rbd") is None:
            return
        device = await self._mapped_device(pool, image)
        if device is not None:
            await self._rbd(disk, ["unmap", device], f"unmap {device}")

    async def info(self, disk: DiskSpec) -> DiskInfo:
        """Size and space used of the image (``rbd du``); where the guest uses it."""
        pool, image = self._image(disk)
        out = await self._rbd(disk, ["du", "--format", "json", "-p", pool, image],
                              f"look at rbd image {image}", missing_ok=True)
        if out is None:
            raise DiskMissingError(f"{_label(disk)} is missing: pool {pool} has no rbd "
                                   f"image {image}")
        try:
            entry = next(i for i in json.loads(out).get("images", [])
                         if i.get("name") == image and not i.get("snapshot"))
        except (ValueError, StopIteration, AttributeError):
            raise BlockDeviceError(f"{_label(disk)}: rbd du answered {out!r}") from None
        where = rbd_uri(pool, image, self._conf())
        if disk.params.get("access") != "userspace":
            where = await self._mapped_device(pool, image) or where
        return {"path": where, "size": int(entry.get("provisioned_size", 0)) // _MIB,
                "allocated": int(entry.get("used_size", 0)) // _MIB}

    async def snapshot(self, disk: DiskSpec, name: str, size: int) -> list[str]:
        """``rbd snap create <pool>/<image>@<name>``; its logical id is
        ``["rbd", "<image>@<name>"]`` (``size`` does not matter: snapshots are thin)."""
        pool, image = self._image(disk)
        if not name or any(c in name for c in "/@ "):
            raise BlockDeviceError(f"invalid snapshot name {name!r}: no '/', '@' or blanks")
        await self._rbd(disk, ["snap", "create", "--no-progress", f"{pool}/{image}@{name}"],
                        f"snapshot rbd image {image} as {name}")
        return [RBD_DRIVER, f"{image}@{name}"]

    async def read(self, disk: DiskSpec, *,
                   chunk: int = DEFAULT_CHUNK) -> AsyncGenerator[bytes, None]:
        """The image's contents, streamed by ``rbd export``."""
        if chunk <= 0:
            raise BlockDeviceError(
                f"invalid chunk size {chunk}: expected a positive number of bytes")
        await self.info(disk)
        pool, image = self._image(disk)
        return self._export(disk, pool, image, chunk)

    async def _export(self, disk: DiskSpec, pool: str, image: str,
                      chunk: int) -> AsyncGenerator[bytes, None]:
        command = self._command(["export", "--no-progress", "-p", pool, image, "-"])
        proc = await asyncio.create_subprocess_exec(
            *command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=dict(os.environ))
        assert proc.stdout is not None and proc.stderr is not None
        try:
            while data := await proc.stdout.read(chunk):
                yield data
            err = await proc.stderr.read()
            if await proc.wait() != 0:
                raise BlockDeviceError(f"{_label(disk)}: rbd export of {image} failed: "
                                       f"{err.decode(errors='replace').strip()}")
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()

    async def write(self, disk: DiskSpec, chunks: AsyncIterator[bytes]) -> int:
        """Replace the image with ``chunks`` (``rbd import`` of a new image, the old
        one removed first: ``rbd import`` does not write into an existing image)."""
        pool, image = self._image(disk)
        await self.remove(disk)
        command = self._command(["import", "--no-progress", "-p", pool, "-", image])
        proc = await asyncio.create_subprocess_exec(
            *command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, env=dict(os.environ))
        assert proc.stdin is not None and proc.stderr is not None
        written = 0
        try:
            async for data in chunks:
                proc.stdin.write(data)
                await proc.stdin.drain()
                written += len(data)
            proc.stdin.close()
            err = await proc.stderr.read()
            if await proc.wait() != 0:
                raise BlockDeviceError(f"{_label(disk)}: rbd import into {image} failed: "
                                       f"{err.decode(errors='replace').strip()}")
        except (BrokenPipeError, ConnectionResetError):
            err = await proc.stderr.read()
            raise BlockDeviceError(f"{_label(disk)}: rbd import into {image} failed: "
                                   f"{err.decode(errors='replace').strip()}") from None
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        return written


def conf_path(paths: Paths) -> Path:
    """Where a node keeps its Ceph configuration (below its root)."""
    return paths.node_path(CEPH_CONF)
