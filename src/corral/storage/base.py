"""The interface every block device driver implements on a node.

A driver handles the disks of one or more device types (``file`` and ``sharedfile``,
``plain`` for LVM, ``blockdev`` for adopted block devices; ``rbd`` and ``ext``). Every
operation is a coroutine:
real drivers wait for files, ``lvcreate`` or a storage API, and noded serves many
requests from one event loop, so a driver does its blocking work in a worker thread
or a subprocess, never on the loop.

Each operation takes the :class:`~corral.objects.specs.DiskSpec` the master sent and
raises :class:`~corral.errors.BlockDeviceError` with a message naming the disk and
saying what was wrong. The driver, not the request, decides where a disk may be on
this node (see :mod:`corral.storage.confine` for file disks).

Beyond the operations every driver must have, some have a default that refuses,
derives or does nothing: :meth:`BlockDevice.find` (a disk's status, derived from
:meth:`~BlockDevice.info`), :meth:`BlockDevice.rename` and :meth:`BlockDevice.snapshot`
(refused unless the driver can), :meth:`BlockDevice.set_info`, :meth:`BlockDevice.open`
and :meth:`BlockDevice.close` (nothing to do unless the driver has: ExtStorage
providers have scripts for them). The interface names one disk on one node; a
mirrored template (DRBD, on hosts that have it) reports the state of its mirror through the same
:class:`DiskStatus` (``is_degraded``, ``sync_percent``), so the master's repairs
need nothing else from it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator
from typing import ClassVar, Final, Literal, TypedDict

from corral.errors import BlockDeviceError
from corral.objects.specs import DiskSpec

__all__ = [
    "DEFAULT_CHUNK",
    "LDISK_CODES",
    "BlockDevice",
    "DiskInfo",
    "DiskMissingError",
    "DiskStatus",
    "LdiskStatus",
]

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


#: The local disk status (Ganeti's ``ldisk``): the data here is fine (``ok``), being
#: brought up to date from a mirror (``syncing``), cannot be told (``unknown``) or
#: lost (``faulty``: an LV whose physical volume vanished, a mirror half gone).
LdiskStatus = Literal["ok", "syncing", "unknown", "faulty"]

#: Ganeti's numbers for the local disk status (``constants.LDS_*``), as
#: ``OP_INSTANCE_QUERY_DATA`` reports them.
LDISK_CODES: Final[dict[str, int]] = {"ok": 1, "syncing": 2, "unknown": 3, "faulty": 4}


class DiskStatus(TypedDict):
    """The state of one disk on this node (Ganeti's ``BlockDevStatus``)."""

    dev_path: str
    """The node-local path the disk is (or would be) used through."""
    major: int | None
    """Device numbers of the path when it is a block device here, else None."""
    minor: int | None
    sync_percent: float | None
    """How far a resynchronisation is (mirrored disks); None when none runs."""
    estimated_time: int | None
    """Seconds a running resynchronisation still needs; None when unknown or none."""
    is_degraded: bool
    """Whether the disk lacks redundancy or data it should have."""
    ldisk_status: LdiskStatus
    active: bool
    """Whether it is ready for use here now (an LV activated); a disk that exists but
    is not active needs ``activate-disks`` before an instance can use it."""


class DiskMissingError(BlockDeviceError):
    """The disk does not exist on this node (as opposed to: it could not be looked at).

    Drivers raise it from :meth:`BlockDevice.info` so that :meth:`BlockDevice.find`
    can tell a missing disk from a failing look-up; it crosses the wire as a
    :class:`~corral.errors.BlockDeviceError`.
    """


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
        """Make ``disk`` usable here; answer where an instance uses it: an absolute
        node-local path (a file or a block device), or, for a disk the hypervisor
        reaches with its own client (``access=userspace``), a URI that does not start
        with ``/`` (``rbd:pool/image``, qemu's notation)."""

    @abstractmethod
    async def shutdown(self, disk: DiskSpec) -> None:
        """Make ``disk`` unused here (its data stays)."""

    @abstractmethod
    async def info(self, disk: DiskSpec) -> DiskInfo:
        """Where ``disk`` is and how large; refuses a disk that is missing here
        (with :class:`DiskMissingError`)."""

    async def find(self, disk: DiskSpec) -> DiskStatus | None:
        """``disk``'s status here, or None when it does not exist on this node.

        The default reads :meth:`info`: a disk that is there is fine. Drivers that
        know better (an LV whose physical volume vanished, a degraded mirror) say so.
        A look-up that fails for another reason raises.
        """
        try:
            info = await self.info(disk)
        except DiskMissingError:
            return None
        return {"dev_path": info["path"], "major": None, "minor": None,
                "sync_percent": None, "estimated_time": None, "is_degraded": False,
                "ldisk_status": "ok", "active": True}

    async def find_all(self, disks: list[DiskSpec]) -> list[DiskStatus | None]:
        """:meth:`find` for each of ``disks``, in order; drivers that can look them
        all up at once (one ``lvs``) do so."""
        return [await self.find(disk) for disk in disks]

    async def rename(self, disk: DiskSpec, new_logical_id: list[str]) -> None:
        """Give ``disk`` the logical id ``new_logical_id`` (its data stays)."""
        raise BlockDeviceError(
            f"disk/{disk.index}: disks of type {disk.dev_type} cannot be renamed")

    async def set_info(self, disk: DiskSpec, text: str) -> None:
        """Attach ``text`` to ``disk`` as metadata for an administrator (Ganeti's
        ``originstname+<instance>``); drivers without a place for it ignore it."""
        return

    async def open(self, disk: DiskSpec, *, exclusive: bool = True) -> None:
        """Make an assembled ``disk`` ready for I/O here: ``exclusive`` unless another
        node opens it too (the target of a migration of shared storage). Drivers
        with nothing to do here do nothing."""
        return

    async def close(self, disk: DiskSpec) -> None:
        """The instance no longer does I/O on ``disk`` here (the source after a
        migration); the counterpart of :meth:`open`."""
        return

    async def snapshot(self, disk: DiskSpec, name: str, size: int) -> list[str]:
        """Make a snapshot of ``disk`` called ``name`` with room for ``size`` MiB of
        changes; answer the snapshot's logical id."""
        raise BlockDeviceError(
            f"disk/{disk.index}: disks of type {disk.dev_type} have no snapshots")

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
