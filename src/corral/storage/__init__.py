"""Block devices on a node (node-side layer).

Today the file-based disks of templates ``file`` and ``sharedfile``
(:mod:`corral.storage.filestore`): sparse raw files below a storage directory.
Every function takes the node's :class:`~corral.paths.Paths` and a
:class:`~corral.objects.specs.DiskSpec` as the master sent it, and raises
:class:`~corral.errors.BlockDeviceError` with a message saying what was wrong.
"""

from __future__ import annotations

from corral.storage.filestore import (
    FILE_DEV_TYPES,
    FILE_DRIVER,
    FILE_DRIVERS,
    assemble,
    create,
    dir_info,
    disk_path,
    file_logical_id,
    grow,
    read_chunks,
    remove,
    shutdown,
    write_from,
)

__all__ = [
    "FILE_DEV_TYPES",
    "FILE_DRIVER",
    "FILE_DRIVERS",
    "assemble",
    "create",
    "dir_info",
    "disk_path",
    "file_logical_id",
    "grow",
    "read_chunks",
    "remove",
    "shutdown",
    "write_from",
]
