"""The node procedures of the storage units and LVM volumes (design 2.1).

``storage_list``, ``storage_modify`` and ``storage_execute`` are Ganeti's procedures
of the storage units framework (:mod:`corral.storage.units`); ``node_volumes``,
``lv_list`` and ``bdev_sizes`` are Ganeti's listings of logical volumes and block
devices (``gnt-node volumes``, the checks of adopted disks).
:mod:`corral.noded.procedures` registers them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from corral import storage
from corral.paths import Paths
from corral.rpc.args import (
    DevicesArgs,
    NoArgs,
    StorageExecuteArgs,
    StorageListArgs,
    StorageModifyArgs,
    VolumeGroupsArgs,
)

__all__ = ["bdev_sizes", "lv_list", "node_volumes", "storage_execute", "storage_list",
           "storage_modify"]


async def storage_list(paths: Paths, args: StorageListArgs) -> Any:
    """Rows of the storage units of a type (all, or the one named): the values of
    the fields asked for, in order."""
    units = storage.get_units(args.su_type, paths, args.su_args)
    return await units.list(args.name, args.fields)


async def storage_modify(paths: Paths, args: StorageModifyArgs) -> Any:
    """Change fields of a storage unit (a physical volume's ``allocatable``)."""
    units = storage.get_units(args.su_type, paths, args.su_args)
    await units.modify(args.name, args.changes)
    return None


async def storage_execute(paths: Paths, args: StorageExecuteArgs) -> Any:
    """Run an operation on a storage unit (``fix-consistency`` of a volume group,
    ``create-dir``/``remove-dir`` of a storage directory)."""
    units = storage.get_units(args.su_type, paths, args.su_args)
    await units.execute(args.name, args.operation)
    return None


async def node_volumes(paths: Paths, args: NoArgs) -> Any:
    """Every logical volume here, once per physical volume it lives on (Ganeti's
    ``node_volumes``): ``{"name", "size", "dev", "vg"}``."""
    volumes = await storage.LvmTools(paths).logical_volumes()
    return [{"name": lv.name, "size": lv.size, "dev": dev, "vg": lv.vg}
            for lv in volumes for dev in (lv.devices or ("",))]


async def lv_list(paths: Paths, args: VolumeGroupsArgs) -> Any:
    """The logical volumes of the groups named (all when none) as Ganeti's
    ``lv_list``: ``{"vg/lv": [size MiB, inactive, online]}``; volumes without
    backing storage are left out."""
    volumes = await storage.LvmTools(paths).logical_volumes(args.volume_groups)
    return {f"{lv.vg}/{lv.name}": [lv.size, not lv.active, lv.open]
            for lv in volumes if not lv.attr.startswith("v")}


async def bdev_sizes(paths: Paths, args: DevicesArgs) -> Any:
    """The size in MiB of each named block device below ``/dev/`` that exists."""
    return await asyncio.to_thread(storage.device_sizes, list(args.devices))
