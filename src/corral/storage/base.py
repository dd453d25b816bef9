"""The interface every block device driver implements on a node.

A driver handles the disks of one or more device types (``file`` and ``sharedfile``
today; ``plain`` for LVM, ``rbd`` and ``ext`` later). Every operation is a coroutine:
real drivers wait for files, ``lvcreate`` or a storage API, and noded serves many
requests from one event loop, so a driver does its blocking work in a worker thread
or a subprocess, never on the loop.

Each operation takes the :class:`~corral.objects.specs.DiskSpec` the master sent and
raises :class:`~corral.errors.BlockDeviceError` with a message naming the disk and
saying what was wrong. The driver, not the request, decides where a disk may be on
this node (see :mod:`corral.storage.confine` for file disks).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator
from typing import ClassVar, Final, TypedDict

from corral.objects.specs import DiskSpec

__all__ = ["DEFAULT_CHUNK", "BlockDevice", "DiskInfo"]

#: How many bytes :meth:`BlockDevice.read` yields at a time unless told otherwise.
DEFAULT_CHUNK: Final = 1 << 20


class DiskInfo(TypedDict):
    """What a driver reports about one disk on this node."""

    path: str
    """The node-local path the disk is used through."""
    size: int
    """Its size in MiB (rounded down)."""
    allocated: int
    """MiB actually allocated to it (less than ``size`` for a sparse disk)."""


class BlockDevice(ABC):
    """The disks of some device types on one node."""

    #: The disk device types this driver handles.
    dev_types: ClassVar[tuple[str, ...]]

    @abstractmethod
    async def create(self, disk: DiskSpec) -> str:
        """Create ``disk`` with ``disk.size`` MiB; answer its node-local path.

        Refuses a disk that exists already and one that cannot fit.
        """

    @abstractmethod
    async def remove(self, disk: DiskSpec) -> None:
        """Delete ``disk``; one that is already gone is not an error."""

    @abstractmethod
    async def grow(self, disk: DiskSpec, amount: int, *, dryrun: bool = False) -> None:
        """Make ``disk`` ``amount`` MiB larger (``dryrun``: only check that it can)."""

    @abstractmethod
    async def assemble(self, disk: DiskSpec) -> str:
        """Make ``disk`` usable here; answer the path an instance uses it through."""

    @abstractmethod
    async def shutdown(self, disk: DiskSpec) -> None:
        """Make ``disk`` unused here (its data stays)."""

    @abstractmethod
    async def info(self, disk: DiskSpec) -> DiskInfo:
        """Where ``disk`` is and how large; refuses a disk that is missing here."""

    @abstractmethod
    async def read(self, disk: DiskSpec, *,
                   chunk: int = DEFAULT_CHUNK) -> AsyncGenerator[bytes, None]:
        """The contents of ``disk`` in chunks of ``chunk`` bytes (the last may be
        shorter).

        Checks happen before this returns, so a missing disk is refused at once, not
        at the first chunk. Close the generator (``contextlib.aclosing``) when not
        reading it to the end.
        """

    @abstractmethod
    async def write(self, disk: DiskSpec, chunks: AsyncIterator[bytes]) -> int:
        """Replace ``disk``'s contents with ``chunks``; answer the number of bytes.

        The disk is created when missing. If the stream fails midway, what was
        written stays for the caller to remove.
        """
