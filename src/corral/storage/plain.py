"""``plain`` disks: one LVM logical volume per disk, in a volume group of the node.

A disk's logical id is Ganeti's ``[vg, lv]``. Creating one spreads it over up to
``stripes`` (a disk parameter) of the group's allocatable physical volumes, fewer
when the group has fewer or the free space does not allow as many, as Ganeti does;
it is refused before anything is made when the allocatable free space is too small.
Assembling activates the volume (``lvchange -ay``) and answers ``/dev/VG/LV``; a node
whose LVM cannot activate volumes (no device-mapper in its kernel) says so then.
Shutting down leaves the volume active, as Ganeti does. A volume whose physical
volume vanished is reported faulty (:meth:`PlainStorage.find`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncGenerator, AsyncIterator
from typing import ClassVar, Final

from corral.errors import BlockDeviceError
from corral.objects.specs import DiskSpec
from corral.paths import Paths
from corral.storage.base import DEFAULT_CHUNK, BlockDevice, DiskInfo, DiskMissingError, DiskStatus
from corral.storage.blockio import device_numbers, read_device, write_device
from corral.storage.lvm import LogicalVolume, LvmTools, Runner, VolumeGroup, check_name

__all__ = ["PLAIN_DEV_TYPES", "PlainStorage", "lv_path"]

#: The device type of LVM disks.
PLAIN_DEV_TYPES: Final[tuple[str, ...]] = ("plain",)


def lv_path(vg: str, lv: str) -> str:
    """Where an active LV's device node is."""
    return f"/dev/{vg}/{lv}"


def _label(disk: DiskSpec) -> str:
    return f"disk/{disk.index}"


def _volume(disk: DiskSpec) -> tuple[str, str]:
    """``(vg, lv)`` of a plain disk, checked."""
    label = _label(disk)
    if disk.dev_type not in PLAIN_DEV_TYPES:
        raise BlockDeviceError(f"{label} has device type {disk.dev_type!r}: LVM handles "
                               "only plain disks")
    logical_id = disk.logical_id
    if len(logical_id) != 2 or not all(isinstance(part, str) for part in logical_id):
        raise BlockDeviceError(f"{label} has logical id {logical_id!r}: a plain disk's "
                               "logical id is [volume group, logical volume]")
    vg, lv = logical_id
    check_name(vg, f"{label}: volume group")
    check_name(lv, f"{label}: logical volume")
    return vg, lv


class PlainStorage(BlockDevice):
    """``plain`` disks (LVM logical volumes) on the node of ``paths``."""

    dev_types: ClassVar[tuple[str, ...]] = PLAIN_DEV_TYPES

    def __init__(self, paths: Paths, runner: Runner | None = None) -> None:
        self.paths = paths
        self.lvm = LvmTools(paths, runner)

    # -- looking up ------------------------------------------------------------------
    async def _group(self, vg: str, label: str) -> VolumeGroup:
        groups = await self.lvm.volume_groups()
        for group in groups:
            if group.name == vg:
                return group
        known = ", ".join(sorted(g.name for g in groups)) or "none"
        raise BlockDeviceError(f"{label}: volume group {vg!r} does not exist on this node "
                               f"(its volume groups: {known})")

    async def _lookup(self, vg: str, lv: str) -> LogicalVolume | None:
        for volume in await self.lvm.logical_volumes():
            if volume.vg == vg and volume.name == lv:
                return volume
        return None

    async def _existing(self, disk: DiskSpec) -> LogicalVolume:
        vg, lv = _volume(disk)
        volume = await self._lookup(vg, lv)
        if volume is None:
            raise DiskMissingError(f"{_label(disk)} is missing on this node: there is no "
                                   f"logical volume {vg}/{lv}")
        return volume

    # -- life cycle --------------------------------------------------------------------
    async def create(self, disk: DiskSpec) -> str:
        """Create the LV with ``disk.size`` MiB over up to ``stripes`` allocatable PVs.

        Refuses a volume that exists, a group that does not (naming those that do) and
        a size larger than the group's allocatable free space (naming both).
        """
        label = _label(disk)
        vg, lv = _volume(disk)
        if disk.size <= 0:
            raise BlockDeviceError(f"{label} has size {disk.size} MiB: expected a positive "
                                   "size")
        group = await self._group(vg, label)
        # A volume of that name is refused by lvcreate itself ("already exists").
        pvs = sorted((pv for pv in group.pvs if pv.allocatable and not pv.missing),
                     key=lambda pv: pv.free, reverse=True)
        free = sum(pv.free for pv in pvs)
        if disk.size > free:
            raise BlockDeviceError(
                f"cannot create {label} ({vg}/{lv}): not enough free space in volume group "
                f"{vg}: required {disk.size} MiB, available {free} MiB on its "
                f"{len(pvs)} allocatable physical volume(s)")
        wanted = _stripes(disk)
        stripes = max(1, min(wanted, len(pvs)))
        base = ["lvcreate", "-Wn", "-L", f"{disk.size}m", "-n", lv]
        failure: BlockDeviceError | None = None
        # Free space spread unevenly may not allow every stripe: fewer, down to one.
        for count in range(stripes, 0, -1):
            try:
                await self.lvm.run([*base, "-i", str(count), vg, *(pv.name for pv in pvs)],
                                   f"creating {label} ({vg}/{lv})")
            except BlockDeviceError as err:
                failure = err
                continue
            return lv_path(vg, lv)
        assert failure is not None
        raise failure

    async def remove(self, disk: DiskSpec) -> None:
        """Remove the LV; one that is gone already is fine."""
        vg, lv = _volume(disk)
        if await self._lookup(vg, lv) is None:
            return
        await self.lvm.run(["lvremove", "-f", f"{vg}/{lv}"],
                           f"removing {_label(disk)} ({vg}/{lv})")

    async def grow(self, disk: DiskSpec, amount: int, *, dryrun: bool = False) -> None:
        """Extend the LV by ``amount`` MiB (LVM rounds up to whole extents and
        stripes); refuses more than the group's allocatable free space."""
        label = _label(disk)
        if amount < 0:
            raise BlockDeviceError(f"cannot grow {label} by {amount} MiB: the amount must "
                                   "not be negative")
        volume = await self._existing(disk)
        group = await self._group(volume.vg, label)
        if amount > group.allocatable_free:
            raise BlockDeviceError(
                f"cannot grow {label} ({volume.vg}/{volume.name}) by {amount} MiB: volume "
                f"group {volume.vg} has only {group.allocatable_free} MiB free on its "
                "allocatable physical volumes")
        if amount == 0:
            return
        argv = ["lvextend", "-L", f"+{amount}m", f"{volume.vg}/{volume.name}"]
        if dryrun:
            argv.insert(1, "--test")
        await self.lvm.run(argv, f"growing {label} ({volume.vg}/{volume.name})")

    async def assemble(self, disk: DiskSpec) -> str:
        """Activate the LV (``lvchange -ay``) and answer its device node."""
        label = _label(disk)
        volume = await self._existing(disk)
        await self.lvm.run(["lvchange", "-ay", f"{volume.vg}/{volume.name}"],
                           f"activating {label} ({volume.vg}/{volume.name})")
        path = lv_path(volume.vg, volume.name)
        if not await asyncio.to_thread(os.path.exists, path):
            raise BlockDeviceError(
                f"cannot activate {label}: LVM activated {volume.vg}/{volume.name} but "
                f"{path} does not exist; this node's LVM cannot activate volumes (no "
                "device-mapper in its kernel, or activation disabled in its lvm.conf)")
        return path

    async def shutdown(self, disk: DiskSpec) -> None:
        """Nothing: LVs stay active (Ganeti never deactivates them); the logical id is
        checked."""
        _volume(disk)

    async def info(self, disk: DiskSpec) -> DiskInfo:
        """The LV's device node and size."""
        volume = await self._existing(disk)
        return {"path": volume.path, "size": volume.size, "allocated": volume.size}

    async def find(self, disk: DiskSpec) -> DiskStatus | None:
        """The LV's status: faulty when a physical volume it lives on is gone."""
        return (await self.find_all([disk]))[0]

    async def find_all(self, disks: list[DiskSpec]) -> list[DiskStatus | None]:
        """The status of each LV, from one listing."""
        wanted = [_volume(disk) for disk in disks]
        volumes = {(v.vg, v.name): v for v in await self.lvm.logical_volumes()}
        result: list[DiskStatus | None] = []
        for key in wanted:
            volume = volumes.get(key)
            if volume is None:
                result.append(None)
                continue
            numbers = await asyncio.to_thread(device_numbers, volume.path)
            result.append({
                "dev_path": volume.path,
                "major": numbers[0] if numbers else None,
                "minor": numbers[1] if numbers else None,
                "sync_percent": None, "estimated_time": None,
                "is_degraded": volume.faulty,
                "ldisk_status": "faulty" if volume.faulty else "ok",
                "active": volume.active,
            })
        return result

    async def rename(self, disk: DiskSpec, new_logical_id: list[str]) -> None:
        """``lvrename`` within the volume group; refuses another group and a name in
        use."""
        label = _label(disk)
        volume = await self._existing(disk)
        if len(new_logical_id) != 2:
            raise BlockDeviceError(f"cannot rename {label} to {new_logical_id!r}: expected "
                                   "[volume group, logical volume]")
        new_vg, new_lv = new_logical_id
        check_name(new_lv, f"{label}: new logical volume")
        if new_vg != volume.vg:
            raise BlockDeviceError(f"cannot rename {label} from volume group {volume.vg} to "
                                   f"{new_vg}: a logical volume stays in its group")
        if new_lv == volume.name:
            return
        if await self._lookup(new_vg, new_lv) is not None:
            raise BlockDeviceError(f"cannot rename {label} to {new_vg}/{new_lv}: that "
                                   "logical volume exists already")
        await self.lvm.run(["lvrename", volume.vg, volume.name, new_lv],
                           f"renaming {label} ({volume.vg}/{volume.name} to {new_lv})")

    async def snapshot(self, disk: DiskSpec, name: str, size: int) -> list[str]:
        """An LVM snapshot ``name`` of the LV with ``size`` MiB for changes (an old
        snapshot of that name is replaced); refuses more than the group has free."""
        label = _label(disk)
        volume = await self._existing(disk)
        check_name(name, f"{label}: snapshot")
        group = await self._group(volume.vg, label)
        old = await self._lookup(volume.vg, name)
        if old is not None:
            await self.lvm.run(["lvremove", "-f", f"{volume.vg}/{name}"],
                               f"removing the old snapshot {volume.vg}/{name}")
            group = await self._group(volume.vg, label)
        if size > group.allocatable_free:
            raise BlockDeviceError(
                f"cannot snapshot {label}: not enough free space in volume group "
                f"{volume.vg}: required {size} MiB, available {group.allocatable_free} MiB")
        await self.lvm.run(["lvcreate", "-L", f"{size}m", "-s", "-n", name,
                            f"{volume.vg}/{volume.name}"],
                           f"snapshotting {label} ({volume.vg}/{volume.name})")
        return [volume.vg, name]

    # -- data ----------------------------------------------------------------------
    async def read(self, disk: DiskSpec, *,
                   chunk: int = DEFAULT_CHUNK) -> AsyncGenerator[bytes, None]:
        """The LV's contents (it is activated first)."""
        if chunk <= 0:
            raise BlockDeviceError(
                f"invalid chunk size {chunk}: expected a positive number of bytes")
        path = await self.assemble(disk)
        return read_device(path, _label(disk), chunk)

    async def write(self, disk: DiskSpec, chunks: AsyncIterator[bytes]) -> int:
        """Write the LV from ``chunks``, creating it when missing (then activated)."""
        if await self._lookup(*_volume(disk)) is None:
            await self.create(disk)
        path = await self.assemble(disk)
        return await write_device(path, _label(disk), chunks)


def _stripes(disk: DiskSpec) -> int:
    """The ``stripes`` disk parameter (1 when absent or invalid)."""
    value = disk.params.get("stripes", 1)
    try:
        return max(1, int(value))
    except (TypeError, ValueError):
        return 1
