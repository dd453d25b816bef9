"""``blockdev`` disks: block devices the administrator made, adopted as they are.

A disk's logical id is Ganeti's ``["manual", path]``. The device is not corral's:
creating one only checks that it is there, removing one leaves it alone, and it
cannot grow or be renamed. The path must lead (after symbolic links) to a block
device below ``/dev/``; the master accepts only paths below ``/dev/disk/`` when a
disk is adopted, the persistent names udev makes, so that the same path names the
same device on every node (the template is shared: an instance migrates without
copying). Device nodes are the machine's: a testbed node's root does not move them.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import AsyncGenerator, AsyncIterator
from typing import ClassVar, Final

from corral.errors import BlockDeviceError
from corral.objects.disk_templates import BLOCKDEV_DRIVER
from corral.objects.specs import DiskSpec
from corral.paths import Paths
from corral.storage.base import DEFAULT_CHUNK, BlockDevice, DiskInfo, DiskMissingError, DiskStatus
from corral.storage.blockio import device_numbers, device_size, read_device, write_device

__all__ = ["BLOCKDEV_DEV_TYPES", "AdoptedDevices", "device_path", "device_sizes"]

#: The device type of adopted block devices.
BLOCKDEV_DEV_TYPES: Final[tuple[str, ...]] = ("blockdev",)

_MIB: Final = 1024 * 1024


def _label(disk: DiskSpec) -> str:
    return f"disk/{disk.index}"


def device_path(disk: DiskSpec) -> str:
    """The path of an adopted disk, checked: ``["manual", absolute path]``."""
    label = _label(disk)
    if disk.dev_type not in BLOCKDEV_DEV_TYPES:
        raise BlockDeviceError(f"{label} has device type {disk.dev_type!r}: adopted block "
                               "devices are of type blockdev")
    logical_id = disk.logical_id
    if len(logical_id) != 2 or logical_id[0] != BLOCKDEV_DRIVER:
        raise BlockDeviceError(f"{label} has logical id {logical_id!r}: an adopted device's "
                               f"logical id is [{BLOCKDEV_DRIVER!r}, path]")
    path = logical_id[1]
    if not path.startswith("/") or "\0" in path:
        raise BlockDeviceError(f"{label} has device path {path!r}: expected an absolute "
                               "path below /dev/")
    return path


def _resolve(path: str, label: str) -> tuple[str, os.stat_result]:
    """The device the path leads to and its stat; missing: :class:`DiskMissingError`."""
    real = os.path.realpath(path)
    if not real.startswith("/dev/"):
        raise BlockDeviceError(f"{label}: {path} leads to {real}, which lies outside /dev")
    try:
        st = os.stat(real)
    except FileNotFoundError:
        raise DiskMissingError(f"{label} is missing on this node: {path} does not "
                               "exist") from None
    except OSError as err:
        raise BlockDeviceError(f"{label}: cannot look at {path}: {err.strerror}") from err
    if not stat.S_ISBLK(st.st_mode):
        raise BlockDeviceError(f"{label}: {path} is not a block device")
    return real, st


def device_sizes(paths: list[str]) -> dict[str, int]:
    """The size in MiB of each of ``paths`` that is a block device below ``/dev/``
    (Ganeti's ``bdev_sizes``); others are left out. Blocking."""
    sizes: dict[str, int] = {}
    for path in paths:
        real = os.path.realpath(path)
        if not real.startswith("/dev/") or device_numbers(real) is None:
            continue
        try:
            sizes[path] = device_size(real) // _MIB
        except BlockDeviceError:
            continue
    return sizes


class AdoptedDevices(BlockDevice):
    """``blockdev`` disks: existing block devices, used where they are."""

    dev_types: ClassVar[tuple[str, ...]] = BLOCKDEV_DEV_TYPES

    def __init__(self, paths: Paths) -> None:
        self.paths = paths

    async def _device(self, disk: DiskSpec) -> str:
        path = device_path(disk)
        await asyncio.to_thread(_resolve, path, _label(disk))
        return path

    async def create(self, disk: DiskSpec) -> str:
        """Nothing is made: the device must exist."""
        return await self._device(disk)

    async def remove(self, disk: DiskSpec) -> None:
        """Nothing is removed: the device is not corral's."""
        device_path(disk)

    async def grow(self, disk: DiskSpec, amount: int, *, dryrun: bool = False) -> None:
        """Refused: an adopted device has the size it has."""
        raise BlockDeviceError(f"cannot grow {_label(disk)}: adopted block devices "
                               "(template blockdev) cannot grow")

    async def assemble(self, disk: DiskSpec) -> str:
        """The device's path (it must exist)."""
        return await self._device(disk)

    async def shutdown(self, disk: DiskSpec) -> None:
        """Nothing to do."""
        device_path(disk)

    async def info(self, disk: DiskSpec) -> DiskInfo:
        """The device's path and size."""
        path = await self._device(disk)
        size = await asyncio.to_thread(device_size, path) // _MIB
        return {"path": path, "size": size, "allocated": size}

    async def find(self, disk: DiskSpec) -> DiskStatus | None:
        """The device's path and numbers; None when it is not there."""
        path = device_path(disk)
        try:
            _real, st = await asyncio.to_thread(_resolve, path, _label(disk))
        except DiskMissingError:
            return None
        return {"dev_path": path, "major": os.major(st.st_rdev), "minor": os.minor(st.st_rdev),
                "sync_percent": None, "estimated_time": None, "is_degraded": False,
                "ldisk_status": "ok", "active": True}

    async def read(self, disk: DiskSpec, *,
                   chunk: int = DEFAULT_CHUNK) -> AsyncGenerator[bytes, None]:
        """The device's contents."""
        if chunk <= 0:
            raise BlockDeviceError(
                f"invalid chunk size {chunk}: expected a positive number of bytes")
        return read_device(await self._device(disk), _label(disk), chunk)

    async def write(self, disk: DiskSpec, chunks: AsyncIterator[bytes]) -> int:
        """Write the device from ``chunks`` (it must exist and be large enough)."""
        return await write_device(await self._device(disk), _label(disk), chunks)
