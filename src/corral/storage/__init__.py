"""Block devices on a node (node-side layer).

:class:`BlockDevice` is the asynchronous interface every disk driver implements;
:func:`get_block_device` gives the driver of a disk's device type, from the drivers
listed in :data:`DRIVERS` (one entry per driver class, each naming its device types).
The file-based disks of templates ``file`` and ``sharedfile``
(:class:`~corral.storage.filestore.FileStorage`) are sparse raw files below the
storage directories this node allows (:mod:`corral.storage.confine`); ``plain``
disks are LVM logical volumes (:mod:`corral.storage.plain`, with the lvm2 tools in
:mod:`corral.storage.lvm`); ``blockdev`` disks are adopted block devices
(:mod:`corral.storage.blockdev`). The storage units disks take their space from
(physical volumes, volume groups, storage directories) are :mod:`corral.storage.units`.
Errors are
:class:`~corral.errors.BlockDeviceError` with a message saying what was wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from corral.errors import BlockDeviceError
from corral.paths import Paths
from corral.storage.base import (
    DEFAULT_CHUNK,
    LDISK_CODES,
    BlockDevice,
    DiskInfo,
    DiskMissingError,
    DiskStatus,
    LdiskStatus,
)
from corral.storage.blockdev import AdoptedDevices, device_sizes
from corral.storage.confine import allowed_dirs, confine
from corral.storage.ext import ExtStorage
from corral.storage.filestore import (
    FILE_DEV_TYPES,
    FILE_DRIVER,
    FILE_DRIVERS,
    FileStorage,
    dir_info,
    disk_path,
    file_logical_id,
)
from corral.storage.lvm import LvmTools
from corral.storage.plain import PlainStorage, lv_path
from corral.storage.rbd import RbdStorage
from corral.storage.units import UNIT_TYPES, StorageUnits, get_units

__all__ = [
    "DEFAULT_CHUNK",
    "DEV_TYPES",
    "DRIVERS",
    "FILE_DEV_TYPES",
    "FILE_DRIVER",
    "FILE_DRIVERS",
    "LDISK_CODES",
    "UNIT_TYPES",
    "AdoptedDevices",
    "BlockDevice",
    "DiskInfo",
    "DiskMissingError",
    "DiskStatus",
    "ExtStorage",
    "FileStorage",
    "LdiskStatus",
    "LvmTools",
    "PlainStorage",
    "RbdStorage",
    "StorageUnits",
    "allowed_dirs",
    "confine",
    "device_sizes",
    "dir_info",
    "disk_path",
    "file_logical_id",
    "get_block_device",
    "get_units",
    "lv_path",
]

#: Every driver this node has; each handles the device types it names.
DRIVERS: Final[tuple[type[BlockDevice], ...]] = (
    FileStorage,
    PlainStorage,
    AdoptedDevices,
    RbdStorage,
    ExtStorage,
)

_DRIVERS: Final[dict[str, Callable[[Paths], BlockDevice]]] = {
    dev_type: driver for driver in DRIVERS for dev_type in driver.dev_types
}

#: The disk device types this node has a driver for.
DEV_TYPES: Final[tuple[str, ...]] = tuple(_DRIVERS)


def get_block_device(dev_type: str, paths: Paths) -> BlockDevice:
    """The driver for disks of ``dev_type`` on the node of ``paths``."""
    try:
        driver = _DRIVERS[dev_type]
    except KeyError:
        raise BlockDeviceError(
            f"disk device type {dev_type!r} is not supported on this node: it handles "
            f"{', '.join(DEV_TYPES)}") from None
    return driver(paths)
