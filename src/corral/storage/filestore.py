"""File-based disks: one sparse raw file per disk (templates ``file`` and ``sharedfile``).

A disk's ``logical_id`` is ``[driver, path]`` where the path is cluster-wide: the
configuration holds one path for every node, and each node maps it with
:meth:`corral.paths.Paths.node_path`, then confines it to the storage directories
it allows (:mod:`corral.storage.confine`). The path is derived from the instance's
and the disk's UUIDs (:func:`file_logical_id`), so renaming an instance touches no
file.

Files are sparse: creating a 1 TiB disk allocates nothing, and copying a disk to
another node (:meth:`FileStorage.read` on the source, :meth:`FileStorage.write` on
the target) keeps the holes, so moving a mostly empty disk is cheap. Every blocking
file operation runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path, PurePosixPath
from typing import ClassVar, Final

from corral.errors import BlockDeviceError
from corral.objects.specs import DiskSpec
from corral.paths import Paths
from corral.storage.base import DEFAULT_CHUNK, BlockDevice, DiskInfo, DiskMissingError
from corral.storage.blockio import pwrite_all, read_device
from corral.storage.confine import confine

__all__ = [
    "FILE_DEV_TYPES",
    "FILE_DRIVER",
    "FILE_DRIVERS",
    "FileStorage",
    "dir_info",
    "disk_path",
    "file_logical_id",
]

#: The driver corral writes into new file disks' logical ids.
FILE_DRIVER: Final = "loop"
#: Drivers a file disk's logical id may name (Ganeti's file drivers).
FILE_DRIVERS: Final[tuple[str, ...]] = ("loop", "blktap", "blktap2")
#: Disk device types stored as files.
FILE_DEV_TYPES: Final[tuple[str, ...]] = ("file", "sharedfile")

_MIB: Final = 1024 * 1024
_DIR_MODE: Final = 0o750
_FILE_MODE: Final = 0o640
# A disk file is never reached through a link swapped in after the path was checked.
_OPEN_FLAGS: Final = os.O_CLOEXEC | os.O_NOFOLLOW


def file_logical_id(storage_dir: str, instance_uuid: str, disk_uuid: str, index: int) -> list[str]:
    """The logical id of a new file disk: ``[driver, cluster-wide path]``.

    Pure, for the master: the path is ``<storage_dir>/<instance uuid>/<disk
    uuid>.disk<index>``.
    """
    base = storage_dir.rstrip("/")
    return [FILE_DRIVER, f"{base}/{instance_uuid}/{disk_uuid}.disk{index}"]


def disk_path(paths: Paths, disk: DiskSpec) -> Path:
    """The node-local path of ``disk``'s file, symbolic links resolved.

    Refuses a disk that is not file-based, a logical id that is not ``[driver,
    path]`` with a known driver, a path that is relative or contains ``..``, and
    a path outside the storage directories this node allows. Blocking: it reads
    the allowed list and resolves links.
    """
    label = _label(disk)
    if disk.dev_type not in FILE_DEV_TYPES:
        raise BlockDeviceError(
            f"{label} has device type {disk.dev_type!r}: file storage handles only"
            f" {', '.join(FILE_DEV_TYPES)}"
        )
    logical_id = disk.logical_id
    if len(logical_id) != 2 or not all(isinstance(part, str) for part in logical_id):
        raise BlockDeviceError(
            f"{label} has logical id {logical_id!r}: a file disk's logical id is [driver, path]"
        )
    driver, cluster_path = logical_id
    if driver not in FILE_DRIVERS:
        raise BlockDeviceError(
            f"{label} has file driver {driver!r}: expected one of {', '.join(FILE_DRIVERS)}"
        )
    parts = PurePosixPath(cluster_path).parts
    if (
        not cluster_path.startswith("/")
        or "\0" in cluster_path
        or ".." in parts
        or len(parts) < 2
        or cluster_path.endswith("/")
    ):
        raise BlockDeviceError(
            f"{label} has file path {cluster_path!r}: expected an absolute path of a file,"
            " without '..'"
        )
    return confine(paths, cluster_path, label)


class FileStorage(BlockDevice):
    """Disks of types ``file`` and ``sharedfile`` on the node of ``paths``."""

    dev_types: ClassVar[tuple[str, ...]] = FILE_DEV_TYPES

    def __init__(self, paths: Paths) -> None:
        self.paths = paths

    async def create(self, disk: DiskSpec) -> str:
        """Create ``disk`` as a sparse file of ``disk.size`` MiB.

        Missing directories are created (mode 0750). Refuses a file that already
        exists and a size larger than the whole file system.
        """
        return str(await asyncio.to_thread(self._create, disk))

    async def remove(self, disk: DiskSpec) -> None:
        """Delete ``disk``'s file, and its instance directory once empty."""
        await asyncio.to_thread(self._remove, disk)

    async def grow(self, disk: DiskSpec, amount: int, *, dryrun: bool = False) -> None:
        """Make the file ``amount`` MiB larger; refuses when it is missing or its file
        system has less than ``amount`` MiB free."""
        await asyncio.to_thread(self._grow, disk, amount, dryrun)

    async def assemble(self, disk: DiskSpec) -> str:
        """The path of ``disk``'s file; refuses a missing file."""
        return str(await asyncio.to_thread(self._existing, disk))

    async def shutdown(self, disk: DiskSpec) -> None:
        """A file needs no deactivation: only its logical id and path are checked."""
        await asyncio.to_thread(disk_path, self.paths, disk)

    async def info(self, disk: DiskSpec) -> DiskInfo:
        """The file's path, its apparent size and the space allocated to it."""
        return await asyncio.to_thread(self._info, disk)

    async def rename(self, disk: DiskSpec, new_logical_id: list[str]) -> None:
        """Move the file to the path of ``new_logical_id`` (same driver, a path the
        node allows too); refuses when a file is there already."""
        await asyncio.to_thread(self._rename, disk, new_logical_id)

    async def read(self, disk: DiskSpec, *,
                   chunk: int = DEFAULT_CHUNK) -> AsyncGenerator[bytes, None]:
        """The file's contents, read in a worker thread chunk by chunk."""
        if chunk <= 0:
            raise BlockDeviceError(
                f"invalid chunk size {chunk}: expected a positive number of bytes")
        path = await asyncio.to_thread(self._existing, disk)
        return read_device(path, _label(disk), chunk, flags=_OPEN_FLAGS)

    async def write(self, disk: DiskSpec, chunks: AsyncIterator[bytes]) -> int:
        """Write the file from ``chunks``, creating it (and its directories) if missing.

        Its previous contents are discarded. All-zero chunks are skipped with a seek,
        so the copy of a sparse disk stays sparse; the file is then cut to the full
        length and synced to disk.
        """
        label = _label(disk)
        path, fd = await asyncio.to_thread(self._open_for_writing, disk)
        offset = 0
        try:
            async for data in chunks:
                if not data:
                    continue
                if data.count(0) != len(data):
                    await asyncio.to_thread(pwrite_all, fd, data, offset)
                offset += len(data)
            await asyncio.to_thread(_finish, fd, offset)
        except OSError as err:
            raise BlockDeviceError(
                f"cannot write {label} ({path}) at byte {offset}: {err.strerror}"
            ) from err
        finally:
            os.close(fd)
        return offset

    # -- blocking work, in worker threads ----------------------------------------------
    def _create(self, disk: DiskSpec) -> Path:
        path = disk_path(self.paths, disk)
        label = _label(disk)
        if disk.size <= 0:
            raise BlockDeviceError(f"{label} has size {disk.size} MiB: expected a positive size")
        existing = _nearest_existing(path.parent)
        total = _statvfs(existing, label)[0]
        if disk.size > total:
            raise BlockDeviceError(
                f"cannot create {label} ({path}): it needs {disk.size} MiB but the file system"
                f" holding {existing} is only {total} MiB in total"
            )
        _make_dirs(path.parent, label)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS, _FILE_MODE)
        except FileExistsError:
            raise BlockDeviceError(
                f"cannot create {label}: the file {path} already exists on this node"
            ) from None
        except OSError as err:
            raise BlockDeviceError(f"cannot create {label} ({path}): {err.strerror}") from err
        try:
            try:
                os.ftruncate(fd, disk.size * _MIB)
            finally:
                os.close(fd)
        except OSError as err:
            path.unlink(missing_ok=True)
            raise BlockDeviceError(
                f"cannot create {label} ({path}) with {disk.size} MiB: {err.strerror}"
            ) from err
        return path

    def _remove(self, disk: DiskSpec) -> None:
        path = disk_path(self.paths, disk)
        try:
            path.unlink(missing_ok=True)
        except OSError as err:
            raise BlockDeviceError(
                f"cannot remove {_label(disk)} ({path}): {err.strerror}") from err
        # The instance directory goes with its last disk; while other disks remain (or
        # it is gone already) rmdir fails and that is fine.
        with contextlib.suppress(OSError):
            path.parent.rmdir()

    def _grow(self, disk: DiskSpec, amount: int, dryrun: bool) -> None:
        label = _label(disk)
        if amount < 0:
            raise BlockDeviceError(
                f"cannot grow {label} by {amount} MiB: the amount must not be negative"
            )
        path = self._existing(disk)
        free = _statvfs(path.parent, label)[1]
        if amount > free:
            raise BlockDeviceError(
                f"cannot grow {label} ({path}) by {amount} MiB: the file system holding"
                f" {path.parent} has only {free} MiB free"
            )
        if dryrun:
            return
        try:
            current = path.stat().st_size
            os.truncate(path, current + amount * _MIB)
        except OSError as err:
            raise BlockDeviceError(f"cannot grow {label} ({path}): {err.strerror}") from err

    def _existing(self, disk: DiskSpec) -> Path:
        path = disk_path(self.paths, disk)
        if not path.is_file():
            what = "is not a regular file" if path.exists() else "does not exist"
            raise DiskMissingError(f"{_label(disk)} is missing on this node: {path} {what}")
        return path

    def _rename(self, disk: DiskSpec, new_logical_id: list[str]) -> None:
        label = _label(disk)
        source = self._existing(disk)
        target_disk = DiskSpec(uuid=disk.uuid, index=disk.index, dev_type=disk.dev_type,
                               size=disk.size, logical_id=list(new_logical_id))
        target = disk_path(self.paths, target_disk)
        if target.exists():
            raise BlockDeviceError(
                f"cannot rename {label} to {target}: a file is there already")
        _make_dirs(target.parent, label)
        try:
            os.rename(source, target)
        except OSError as err:
            raise BlockDeviceError(
                f"cannot rename {label} ({source}) to {target}: {err.strerror}") from err
        with contextlib.suppress(OSError):
            source.parent.rmdir()

    def _info(self, disk: DiskSpec) -> DiskInfo:
        path = self._existing(disk)
        try:
            st = path.stat()
        except OSError as err:
            raise BlockDeviceError(
                f"cannot tell the size of {_label(disk)} ({path}): {err.strerror}") from err
        return {"path": str(path), "size": st.st_size // _MIB,
                "allocated": st.st_blocks * 512 // _MIB}

    def _open_for_writing(self, disk: DiskSpec) -> tuple[Path, int]:
        path = disk_path(self.paths, disk)
        label = _label(disk)
        _make_dirs(path.parent, label)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _OPEN_FLAGS, _FILE_MODE)
        except OSError as err:
            raise BlockDeviceError(f"cannot write {label} ({path}): {err.strerror}") from err
        return path, fd


async def dir_info(path: Path, *, nearest_existing: bool = False) -> dict[str, int]:
    """Size and free space (MiB) of the file system holding directory ``path``.

    ``free`` is what an unprivileged writer may use. Creates nothing; a missing
    directory is a :class:`~corral.errors.BlockDeviceError`, unless
    ``nearest_existing`` asks for the file system of its nearest existing parent
    (where a storage directory made on first use will be).
    """
    return await asyncio.to_thread(_dir_info, path, nearest_existing)


def _dir_info(path: Path, nearest_existing: bool) -> dict[str, int]:
    if nearest_existing:
        path = _nearest_existing(path)
    if not path.is_dir():
        raise BlockDeviceError(f"storage directory {path} does not exist on this node")
    size, free = _statvfs(path, f"storage directory {path}")
    return {"size": size, "free": free}


# -- helpers ---------------------------------------------------------------------------


def _label(disk: DiskSpec) -> str:
    return f"disk/{disk.index}"


def _finish(fd: int, length: int) -> None:
    os.ftruncate(fd, length)
    os.fsync(fd)


def _nearest_existing(directory: Path) -> Path:
    while not directory.exists() and directory != directory.parent:
        directory = directory.parent
    return directory


def _make_dirs(directory: Path, label: str) -> None:
    missing: list[Path] = []
    while not directory.exists() and directory != directory.parent:
        missing.append(directory)
        directory = directory.parent
    for entry in reversed(missing):
        try:
            entry.mkdir(mode=_DIR_MODE, exist_ok=True)
        except OSError as err:
            raise BlockDeviceError(
                f"cannot create directory {entry} for {label}: {err.strerror}"
            ) from err


def _statvfs(directory: Path, label: str) -> tuple[int, int]:
    """``(size, free)`` in MiB of the file system holding ``directory``."""
    try:
        st = os.statvfs(directory)
    except OSError as err:
        raise BlockDeviceError(
            f"cannot tell the free space for {label} at {directory}: {err.strerror}"
        ) from err
    return st.f_blocks * st.f_frsize // _MIB, st.f_bavail * st.f_frsize // _MIB
