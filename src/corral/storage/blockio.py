"""Reading and writing a block device's contents (LVs, adopted devices), off the loop.

Unlike a sparse file, a block device has a fixed size and no holes: a copy writes
every byte (zeroes included, since the device may hold old data), and the writer
refuses a stream larger than the device.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Final

from corral.errors import BlockDeviceError

__all__ = ["device_numbers", "device_size", "pwrite_all", "read_device", "write_device"]

_OPEN_FLAGS: Final = os.O_CLOEXEC


def device_size(path: str) -> int:
    """The size of the block device at ``path`` in bytes (blocking)."""
    try:
        fd = os.open(path, os.O_RDONLY | _OPEN_FLAGS)
    except OSError as err:
        raise BlockDeviceError(f"cannot open {path}: {err.strerror}") from err
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    finally:
        os.close(fd)


def device_numbers(path: str) -> tuple[int, int] | None:
    """``(major, minor)`` of the block device at ``path``; None when it is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISBLK(st.st_mode):
        return None
    return os.major(st.st_rdev), os.minor(st.st_rdev)


async def read_device(path: str | os.PathLike[str], label: str, chunk: int, *,
                      flags: int = 0) -> AsyncGenerator[bytes, None]:
    """The contents of the device (or file) at ``path`` in chunks, opened with the extra
    open ``flags`` at the first chunk, so that a generator never iterated holds
    nothing."""
    try:
        fd = await asyncio.to_thread(os.open, path, os.O_RDONLY | _OPEN_FLAGS | flags)
    except OSError as err:
        raise BlockDeviceError(f"cannot read {label} ({path}): {err.strerror}") from err
    try:
        while data := await asyncio.to_thread(os.read, fd, chunk):
            yield data
    finally:
        os.close(fd)


async def write_device(path: str, label: str, chunks: AsyncIterator[bytes]) -> int:
    """Write ``chunks`` to the device at ``path`` from its start; the bytes written.

    Refuses (before writing past it) a stream longer than the device. The device is
    synced at the end.
    """
    try:
        fd = await asyncio.to_thread(os.open, path, os.O_WRONLY | _OPEN_FLAGS)
    except OSError as err:
        raise BlockDeviceError(f"cannot write {label} ({path}): {err.strerror}") from err
    offset = 0
    try:
        size = await asyncio.to_thread(os.lseek, fd, 0, os.SEEK_END)
        async for data in chunks:
            if not data:
                continue
            if offset + len(data) > size:
                raise BlockDeviceError(
                    f"cannot write {label} ({path}): the data is larger than the device "
                    f"({size} bytes)")
            await asyncio.to_thread(pwrite_all, fd, data, offset)
            offset += len(data)
        await asyncio.to_thread(os.fsync, fd)
    except OSError as err:
        raise BlockDeviceError(
            f"cannot write {label} ({path}) at byte {offset}: {err.strerror}") from err
    finally:
        os.close(fd)
    return offset


def pwrite_all(fd: int, data: bytes, offset: int) -> None:
    """Write all of ``data`` at ``offset`` of ``fd`` (blocking)."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written
