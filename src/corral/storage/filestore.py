"""File-based disks: one sparse raw file per disk (templates ``file`` and ``sharedfile``).

A disk's ``logical_id`` is ``[driver, path]`` where the path is cluster-wide: the
configuration holds one path for every node, and each node maps it with
:meth:`corral.paths.Paths.node_path`. The path is derived from the instance's and
the disk's UUIDs (:func:`file_logical_id`), so renaming an instance touches no file.

Files are sparse: creating a 1 TiB disk allocates nothing, and copying a disk to
another node (:func:`read_chunks` on the source, :func:`write_from` on the target)
keeps the holes, so moving a mostly empty disk is cheap.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Final

from corral.errors import BlockDeviceError
from corral.objects.specs import DiskSpec
from corral.paths import Paths

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

#: The driver corral writes into new file disks' logical ids.
FILE_DRIVER: Final = "loop"
#: Drivers a file disk's logical id may name (Ganeti's file drivers).
FILE_DRIVERS: Final[tuple[str, ...]] = ("loop", "blktap", "blktap2")
#: Disk device types stored as files.
FILE_DEV_TYPES: Final[tuple[str, ...]] = ("file", "sharedfile")

_MIB: Final = 1024 * 1024
_DIR_MODE: Final = 0o750
_FILE_MODE: Final = 0o640


def file_logical_id(storage_dir: str, instance_uuid: str, disk_uuid: str, index: int) -> list[str]:
    """The logical id of a new file disk: ``[driver, cluster-wide path]``.

    Pure, for the master: the path is ``<storage_dir>/<instance uuid>/<disk
    uuid>.disk<index>``.
    """
    base = storage_dir.rstrip("/")
    return [FILE_DRIVER, f"{base}/{instance_uuid}/{disk_uuid}.disk{index}"]


def disk_path(paths: Paths, disk: DiskSpec) -> Path:
    """The node-local path of ``disk``'s file, after checking its logical id.

    Refuses a disk that is not file-based, a logical id that is not ``[driver,
    path]`` with a known driver, and a path that is relative or contains ``..``.
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
    return paths.node_path(cluster_path)


def create(paths: Paths, disk: DiskSpec) -> Path:
    """Create ``disk`` as a sparse file of ``disk.size`` MiB and return its path.

    Missing directories are created (mode 0750). Refuses a file that already
    exists and a size larger than the whole file system.
    """
    path = disk_path(paths, disk)
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
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, _FILE_MODE)
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


def remove(paths: Paths, disk: DiskSpec) -> None:
    """Delete ``disk``'s file, and its instance directory once empty.

    A disk that is already gone is not an error.
    """
    path = disk_path(paths, disk)
    label = _label(disk)
    try:
        path.unlink(missing_ok=True)
    except OSError as err:
        raise BlockDeviceError(f"cannot remove {label} ({path}): {err.strerror}") from err
    # The instance directory goes with its last disk; while other disks remain (or it
    # is gone already) rmdir fails and that is fine.
    with contextlib.suppress(OSError):
        path.parent.rmdir()


def grow(paths: Paths, disk: DiskSpec, amount: int, *, dryrun: bool = False) -> None:
    """Make ``disk``'s file ``amount`` MiB larger.

    Refuses when the file is missing or its file system has less than ``amount``
    MiB free. With ``dryrun`` only the checks are made.
    """
    label = _label(disk)
    if amount < 0:
        raise BlockDeviceError(
            f"cannot grow {label} by {amount} MiB: the amount must not be negative"
        )
    path = assemble(paths, disk)
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


def assemble(paths: Paths, disk: DiskSpec) -> Path:
    """The path of ``disk``'s file, ready for use; refuses a missing file."""
    path = disk_path(paths, disk)
    if not path.is_file():
        what = "is not a regular file" if path.exists() else "does not exist"
        raise BlockDeviceError(f"{_label(disk)} is missing on this node: {path} {what}")
    return path


def shutdown(paths: Paths, disk: DiskSpec) -> None:
    """Deactivate ``disk``: a file needs nothing, so only its logical id is checked."""
    disk_path(paths, disk)


def dir_info(path: Path) -> dict[str, int]:
    """Size and free space (MiB) of the file system holding directory ``path``.

    ``free`` is what an unprivileged writer may use. Creates nothing; a missing
    directory is a :class:`~corral.errors.BlockDeviceError`.
    """
    if not path.is_dir():
        raise BlockDeviceError(f"storage directory {path} does not exist on this node")
    size, free = _statvfs(path, f"storage directory {path}")
    return {"size": size, "free": free}


def read_chunks(paths: Paths, disk: DiskSpec, chunk: int = 1 << 20) -> Iterator[bytes]:
    """The contents of ``disk``'s file in chunks of ``chunk`` bytes (the last may be
    shorter). A missing file is refused at once, before iteration starts."""
    if chunk <= 0:
        raise BlockDeviceError(f"invalid chunk size {chunk}: expected a positive number of bytes")
    path = assemble(paths, disk)
    try:
        handle = path.open("rb", buffering=0)
    except OSError as err:
        raise BlockDeviceError(f"cannot read {_label(disk)} ({path}): {err.strerror}") from err
    return _chunks(handle, chunk)


def _chunks(handle: BinaryIO, chunk: int) -> Iterator[bytes]:
    with handle:
        while data := handle.read(chunk):
            yield data


async def write_from(paths: Paths, disk: DiskSpec, chunks: AsyncIterator[bytes]) -> int:
    """Write ``disk``'s file from ``chunks`` and return the number of bytes.

    The file is created if missing (its directories too) and its previous
    contents are discarded. All-zero chunks are skipped with a seek, so the copy
    of a sparse disk stays sparse; the file is then cut to the full length and
    synced to disk. If the stream fails midway the partial file is left for the
    caller to remove.
    """
    path = disk_path(paths, disk)
    label = _label(disk)
    _make_dirs(path.parent, label)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, _FILE_MODE)
    except OSError as err:
        raise BlockDeviceError(f"cannot write {label} ({path}): {err.strerror}") from err
    offset = 0
    try:
        async for data in chunks:
            if not data:
                continue
            if data.count(0) != len(data):
                await asyncio.to_thread(_pwrite_all, fd, data, offset)
            offset += len(data)
        os.ftruncate(fd, offset)
        await asyncio.to_thread(os.fsync, fd)
    except OSError as err:
        raise BlockDeviceError(
            f"cannot write {label} ({path}) at byte {offset}: {err.strerror}"
        ) from err
    finally:
        os.close(fd)
    return offset


# -- helpers ---------------------------------------------------------------------------


def _label(disk: DiskSpec) -> str:
    return f"disk/{disk.index}"


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


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
