"""Storage units (design 2.1): the pools disks take their space from, one type each.

The types are Ganeti's: ``lvm-pv`` (physical volumes), ``lvm-vg`` (volume groups),
``file`` and ``sharedfile`` (storage directories). Every type has the generic
methods: :meth:`StorageUnits.list` (rows of the fields asked for: ``name``, ``size``,
``used``, ``free``, ``allocatable``, and corral's ``status``; sizes in MiB) and
:meth:`StorageUnits.status` (whether a unit is usable: ``ok``, or what is wrong).
Some have specific ones: a physical volume's ``allocatable`` flag can be changed
(``pvchange -x``, :meth:`LvmPvUnits.modify`); a volume group whose physical volume
vanished is made consistent again
(``vgreduce --removemissing``, operation ``fix-consistency``); a storage directory
is created or removed (operations ``create-dir`` and ``remove-dir``). As the design
says, the framework models no relation between the types: repairing a volume group
removes physical volumes from it without the ``lvm-pv`` type knowing.

Unit names are what the type's own tool calls them (``/dev/sdb1``, ``xenvg``), and
storage directories are cluster-wide paths, mapped below the node's root. A name
that does not exist is refused with an error listing the names that do.
"""

from __future__ import annotations

import asyncio
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from corral.errors import BlockDeviceError, ParameterError
from corral.paths import Paths
from corral.storage.confine import allowed_dirs, confine
from corral.storage.lvm import LvmTools, PhysicalVolume, Runner, VolumeGroup

__all__ = [
    "MODIFIABLE_FIELDS",
    "OPERATIONS",
    "STORAGE_FIELDS",
    "UNIT_TYPES",
    "FileUnits",
    "LvmPvUnits",
    "LvmVgUnits",
    "StorageUnits",
    "get_units",
]

#: The fields a unit row can have (Ganeti's ``VALID_STORAGE_FIELDS`` less ``node`` and
#: ``type``, which the master adds; ``status`` is corral's: ``ok``, or what is wrong).
STORAGE_FIELDS: Final[tuple[str, ...]] = ("name", "size", "used", "free", "allocatable",
                                          "status")
#: Fields a change may set, by type (Ganeti's ``MODIFIABLE_STORAGE_FIELDS``).
MODIFIABLE_FIELDS: Final[dict[str, frozenset[str]]] = {"lvm-pv": frozenset({"allocatable"})}
#: Operations a type runs, by type: Ganeti's ``fix-consistency`` for volume groups,
#: corral's directory creation and removal for the file types.
OPERATIONS: Final[dict[str, frozenset[str]]] = {
    "lvm-vg": frozenset({"fix-consistency"}),
    "file": frozenset({"create-dir", "remove-dir"}),
    "sharedfile": frozenset({"create-dir", "remove-dir"}),
}
_MIB: Final = 1024 * 1024


def _not_found(kind: str, name: str, known: Sequence[str], plural: str = "") -> BlockDeviceError:
    listing = ", ".join(sorted(known)) or "none"
    return BlockDeviceError(f"{kind} {name!r} does not exist on this node (its "
                            f"{plural or kind + 's'}: {listing})")


class StorageUnits(ABC):
    """The units of one storage type on a node."""

    #: The storage type's name.
    type_name: str = ""

    def check_fields(self, fields: Sequence[str]) -> None:
        """Refuse fields no unit has."""
        unknown = [f for f in fields if f not in STORAGE_FIELDS]
        if unknown:
            raise ParameterError(f"unknown storage field(s) {', '.join(unknown)}; known: "
                                 f"{', '.join(STORAGE_FIELDS)}")

    @abstractmethod
    async def list(self, name: str | None, fields: Sequence[str]) -> list[list[Any]]:
        """One row per unit (only ``name`` when given, which must exist), the values
        of ``fields`` in order."""

    async def status(self, name: str) -> dict[str, Any]:
        """Whether unit ``name`` is usable: ``{"name", "ok", "message"}`` (its
        ``status`` field: ``ok``, or what is wrong)."""
        [[text]] = await self.list(name, ["status"])
        return {"name": name, "ok": text == "ok", "message": "" if text == "ok" else text}

    async def modify(self, name: str, changes: Mapping[str, Any]) -> None:
        """Change fields of unit ``name``; this type has none to change."""
        if changes:
            raise ParameterError(f"storage units of type {self.type_name} cannot be "
                                 f"modified (asked to change {', '.join(sorted(changes))})")

    async def execute(self, name: str, operation: str) -> None:
        """Run ``operation`` on unit ``name``; this type has none."""
        raise ParameterError(f"storage units of type {self.type_name} have no operation "
                             f"{operation!r}")


# -- LVM -----------------------------------------------------------------------------


class LvmPvUnits(StorageUnits):
    """``lvm-pv``: the physical volumes this node's LVM sees."""

    type_name = "lvm-pv"

    def __init__(self, paths: Paths, runner: Runner | None = None) -> None:
        self.lvm = LvmTools(paths, runner)

    async def _pvs(self, name: str | None) -> list[PhysicalVolume]:
        pvs = await self.lvm.physical_volumes()
        if name is None:
            return sorted(pvs, key=lambda pv: pv.name)
        chosen = [pv for pv in pvs if pv.name == name]
        if not chosen:
            raise _not_found("physical volume", name, [pv.name for pv in pvs])
        return chosen

    async def list(self, name: str | None, fields: Sequence[str]) -> list[list[Any]]:
        """Physical volumes: size, used and free MiB, whether allocatable."""
        self.check_fields(fields)
        return [[_pv_value(pv, f) for f in fields] for pv in await self._pvs(name)]

    async def modify(self, name: str, changes: Mapping[str, Any]) -> None:
        """Set the ``allocatable`` flag (``pvchange -x y|n``)."""
        rest = {k: v for k, v in changes.items() if k != "allocatable"}
        if rest:
            raise ParameterError(f"fields {', '.join(sorted(rest))} of physical volumes "
                                 "cannot be modified; only allocatable")
        if "allocatable" not in changes:
            return
        value = changes["allocatable"]
        if not isinstance(value, bool):
            raise ParameterError(f"allocatable must be true or false, not {value!r}")
        await self._pvs(name)
        await self.lvm.run(["pvchange", "-x", "y" if value else "n", name],
                           f"changing physical volume {name}")


def _pv_value(pv: PhysicalVolume, field: str) -> Any:
    if field == "allocatable":
        return pv.allocatable
    if field == "status":  # a physical volume is not usable when its device is gone
        return "its device is missing" if pv.missing else "ok"
    return {"name": pv.name, "size": pv.size, "used": pv.used, "free": pv.free}[field]


def _vg_value(vg: VolumeGroup, field: str) -> Any:
    if field == "allocatable":
        return True
    if field == "status":  # a group missing a physical volume needs fix-consistency
        return f"{vg.missing_pvs or 1} physical volume(s) missing" if vg.partial else "ok"
    return {"name": vg.name, "size": vg.size, "used": vg.size - vg.free,
            "free": vg.free}[field]


class LvmVgUnits(StorageUnits):
    """``lvm-vg``: the volume groups this node's LVM sees."""

    type_name = "lvm-vg"

    def __init__(self, paths: Paths, runner: Runner | None = None) -> None:
        self.lvm = LvmTools(paths, runner)

    async def _vgs(self, name: str | None) -> list[VolumeGroup]:
        vgs = await self.lvm.volume_groups()
        if name is None:
            return sorted(vgs, key=lambda vg: vg.name)
        chosen = [vg for vg in vgs if vg.name == name]
        if not chosen:
            raise _not_found("volume group", name, [vg.name for vg in vgs])
        return chosen

    async def list(self, name: str | None, fields: Sequence[str]) -> list[list[Any]]:
        """Volume groups: size and free MiB (free over all their physical volumes, as
        ``vgs`` counts it), used = size - free, always allocatable."""
        self.check_fields(fields)
        return [[_vg_value(vg, f) for f in fields] for vg in await self._vgs(name)]

    async def execute(self, name: str, operation: str) -> None:
        """``fix-consistency``: drop the missing physical volumes from the group
        (``vgreduce --removemissing``, with ``--force`` when LVM asks for it: the
        volumes that lived on them are removed) and check the group is whole again."""
        if operation != "fix-consistency":
            await super().execute(name, operation)
        await self._vgs(name)
        what = f"repairing volume group {name}"
        argv = ["vgreduce", "--removemissing", name]
        result = await self.lvm.run_unchecked(argv)
        said = result.stdout + result.stderr
        if "Wrote out consistent volume group" not in said or "--force" in said:
            forced = await self.lvm.run_unchecked([*argv[:2], "--force", name])
            said += forced.stdout + forced.stderr
        after = (await self._vgs(name))[0]
        if after.partial:
            lines = [line.strip() for line in said.splitlines() if line.strip()][-4:]
            raise BlockDeviceError(f"{what}: volume group {name} is still not consistent "
                                   f"({after.missing_pvs} physical volume(s) missing); "
                                   f"vgreduce said: {'; '.join(lines) or 'nothing'}")


# -- storage directories -------------------------------------------------------------


class FileUnits(StorageUnits):
    """``file`` and ``sharedfile``: the storage directories the master names."""

    def __init__(self, paths: Paths, directories: Sequence[str], type_name: str = "file"
                 ) -> None:
        self.paths = paths
        self.directories = list(directories)
        self.type_name = type_name

    def _chosen(self, name: str | None) -> list[str]:
        if name is None:
            return self.directories
        if name not in self.directories:
            raise _not_found("storage directory", name, self.directories,
                             "storage directories")
        return [name]

    async def list(self, name: str | None, fields: Sequence[str]) -> list[list[Any]]:
        """Storage directories: the size and free MiB of their file system, the MiB
        their files use, always allocatable. A directory not made yet reports the file
        system it will be on, and 0 used."""
        self.check_fields(fields)
        return [await asyncio.to_thread(_directory_row, self.paths.node_path(d), d, fields)
                for d in self._chosen(name)]

    async def execute(self, name: str, operation: str) -> None:
        """``create-dir`` makes the directory (mode 0750, parents too); ``remove-dir``
        removes it when empty and refuses when it holds anything. Only a directory
        this node allows disks in (or below one) is touched (see
        :mod:`corral.storage.confine`)."""
        self._chosen(name)
        await asyncio.to_thread(_check_allowed, self.paths, name)
        local = self.paths.node_path(name)
        if operation == "create-dir":
            await asyncio.to_thread(_make_dir, local, name)
        elif operation == "remove-dir":
            await asyncio.to_thread(_remove_dir, local, name)
        else:
            await super().execute(name, operation)


def _check_allowed(paths: Paths, name: str) -> None:
    normal = os.path.normpath(name)
    allowed = allowed_dirs(paths)
    if normal in allowed:
        return
    confine(paths, normal, f"storage directory {name}")


def _make_dir(local: Path, name: str) -> None:
    try:
        local.mkdir(mode=0o750, parents=True, exist_ok=True)
    except OSError as err:
        raise BlockDeviceError(f"cannot create storage directory {name}: {err.strerror}") \
            from err


def _remove_dir(local: Path, name: str) -> None:
    try:
        local.rmdir()
    except FileNotFoundError:
        return
    except OSError as err:
        if local.is_dir() and any(local.iterdir()):
            raise BlockDeviceError(f"cannot remove storage directory {name}: it is not "
                                   "empty") from err
        raise BlockDeviceError(f"cannot remove storage directory {name}: {err.strerror}") \
            from err


def _directory_row(local: Path, name: str, fields: Sequence[str]) -> list[Any]:
    where = local
    while not where.exists() and where != where.parent:
        where = where.parent
    stats = os.statvfs(where) if {"size", "free"} & set(fields) else None
    row: list[Any] = []
    for field in fields:
        if field == "name":
            row.append(name)
        elif field == "size":
            assert stats is not None
            row.append(stats.f_blocks * stats.f_frsize // _MIB)
        elif field == "free":
            assert stats is not None
            row.append(stats.f_bavail * stats.f_frsize // _MIB)
        elif field == "used":
            row.append(_directory_usage(local) // _MIB)
        elif field == "status":  # a storage directory is usable once it exists
            row.append("ok" if local.is_dir() else "the directory does not exist")
        else:
            row.append(True)
    return row


def _directory_usage(directory: Path) -> int:
    """Bytes allocated to the files below ``directory`` (0 when it does not exist)."""
    total = 0
    for root, _dirs, files in os.walk(directory):
        for entry in files:
            try:
                total += os.lstat(os.path.join(root, entry)).st_blocks * 512
            except OSError:
                continue
    return total


#: The storage types a node has units of.
UNIT_TYPES: Final[tuple[str, ...]] = ("file", "lvm-pv", "lvm-vg", "sharedfile")


def get_units(type_name: str, paths: Paths, args: Sequence[str] = (),
              runner: Runner | None = None) -> StorageUnits:
    """The units of ``type_name`` on the node of ``paths``; ``args`` are the storage
    directories for ``file`` and ``sharedfile``."""
    if type_name in ("file", "sharedfile"):
        return FileUnits(paths, args, type_name)
    if type_name == "lvm-pv":
        return LvmPvUnits(paths, runner)
    if type_name == "lvm-vg":
        return LvmVgUnits(paths, runner)
    raise ParameterError(f"storage type {type_name!r} has no units on this node; types: "
                         f"{', '.join(UNIT_TYPES)}")
