"""Block devices on a node (node-side layer).

:class:`BlockDevice` is the asynchronous interface every disk driver implements;
:func:`get_block_device` gives the driver of a disk's device type. Today the
file-based disks of templates ``file`` and ``sharedfile``
(:class:`~corral.storage.filestore.FileStorage`): sparse raw files below the
storage directories this node allows (:mod:`corral.storage.confine`). Errors are
:class:`~corral.errors.BlockDeviceError` with a message saying what was wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from corral.errors import BlockDeviceError
from corral.paths import Paths
from corral.storage.base import DEFAULT_CHUNK, BlockDevice, DiskInfo
from corral.storage.confine import allowed_dirs, confine
from corral.storage.filestore import (
    FILE_DEV_TYPES,
    FILE_DRIVER,
    FILE_DRIVERS,
    FileStorage,
    dir_info,
    disk_path,
    file_logical_id,
)

__all__ = [
    "DEFAULT_CHUNK",
    "DEV_TYPES",
    "FILE_DEV_TYPES",
    "FILE_DRIVER",
    "FILE_DRIVERS",
    "BlockDevice",
    "DiskInfo",
    "FileStorage",
    "allowed_dirs",
    "confine",
    "dir_info",
    "disk_path",
    "file_logical_id",
    "get_block_device",
]

_DRIVERS: Final[dict[str, Callable[[Paths], BlockDevice]]] = {
    dev_type: FileStorage for dev_type in FileStorage.dev_types
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
