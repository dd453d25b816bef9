"""The node side of disks on external and shared storage: metadata, open and close, and
the ExtStorage providers this node has.

- ``blockdev_setinfo``: give a disk new metadata (an ExtStorage ``setinfo``; nothing
  for drivers without a place for it);
- ``blockdev_open`` / ``blockdev_close``: before and after I/O moves between nodes
  (a migration opens an ExtStorage volume on both nodes, not exclusively, and closes
  it on the source once the target runs the instance);
- ``extstorage_diagnose``: every provider along the cluster's ExtStorage search path,
  valid or not, with why not.
"""

from __future__ import annotations

import asyncio
from typing import Any

from corral import storage
from corral.paths import Paths
from corral.rpc.args import (
    BlockdevOpenArgs,
    BlockdevSetInfoArgs,
    DisksArgs,
    ExtStorageDiagnoseArgs,
)
from corral.storage import extstorage

__all__ = ["blockdev_close", "blockdev_open", "blockdev_setinfo", "extstorage_diagnose"]


async def blockdev_setinfo(paths: Paths, args: BlockdevSetInfoArgs) -> Any:
    """Set a disk's metadata (``info``)."""
    disk = args.disk
    await storage.get_block_device(disk.dev_type, paths).set_info(disk, args.info)
    return None


async def blockdev_open(paths: Paths, args: BlockdevOpenArgs) -> Any:
    """Open assembled disks for I/O here, in order (``exclusive`` unless shared with
    the other node of a migration)."""
    for disk in args.disks:
        await storage.get_block_device(disk.dev_type, paths).open(
            disk, exclusive=args.exclusive)
    return None


async def blockdev_close(paths: Paths, args: DisksArgs) -> Any:
    """Close disks here: the instance does no more I/O on them on this node."""
    for disk in args.disks:
        await storage.get_block_device(disk.dev_type, paths).close(disk)
    return None


async def extstorage_diagnose(paths: Paths, args: ExtStorageDiagnoseArgs) -> Any:
    """Every ExtStorage provider along the search path (``[{"name", "path", "valid",
    "message", "parameters": [[name, description]]}]``, by name)."""
    search_path = extstorage.node_search_path(paths, args.search_path)
    found = await asyncio.to_thread(extstorage.discover, search_path)
    return [provider.to_dict() for provider in found]
