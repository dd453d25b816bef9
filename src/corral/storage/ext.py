"""Disks of template ``ext``: volumes an ExtStorage provider keeps (see
:mod:`corral.storage.extstorage` for providers and their scripts).

A disk's logical id is ``[provider, volume]``; the volume's name is Ganeti's
``<unique id>.ext.disk<index>``. Its parameters (``DiskSpec.params``) are what the
scripts get as ``EXTP_*``: the provider's own parameters given at creation,
``provider`` and ``access``.

How corral calls the scripts (``ganeti-extstorage-interface(7)``):

- create: ``create`` (``VOL_SIZE``), then ``setinfo`` with the instance's metadata;
- assemble (start, OS installation, activate-disks): ``attach``, then ``open``
  exclusively (not exclusively on the target of a migration). ``attach`` prints the
  volume's local path on its first line (a block device, or a regular file: corral
  takes files too) and, on further lines, URIs of
  the form ``<hypervisor>:<uri>``; with ``access=userspace`` the guest uses the
  ``kvm:`` URI instead of the path, and the first line may then be empty;
- shutdown (stop, deactivate-disks): ``detach``;
- remove: ``detach``, then ``remove``;
- grow: ``grow`` (``VOL_SIZE`` the current size, ``VOL_NEW_SIZE`` the new one);
- snapshot: ``snapshot`` (``VOL_SNAPSHOT_NAME``, ``VOL_SNAPSHOT_SIZE``); the
  snapshot is a volume of the same provider;
- a migration opens the volume on both nodes with ``VOL_OPEN_EXCLUSIVE=False`` and
  ``close`` s it on the source afterwards.

Ganeti runs ``attach`` around most of these too (to check the volume is there);
corral runs each script where its action needs it. The scripts should be idempotent
for ``attach`` and ``detach``, as the interface asks.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from corral.errors import BlockDeviceError
from corral.objects.specs import DiskSpec
from corral.paths import Paths
from corral.storage.base import DEFAULT_CHUNK, BlockDevice, DiskInfo, DiskMissingError
from corral.storage.blockio import read_device, write_device
from corral.storage.extstorage import (
    Action,
    Provider,
    find_provider,
    metadata_text,
    node_search_path,
    run_action,
    volume_env,
)

__all__ = ["Attachment", "ExtStorage", "parse_attach"]

#: The hypervisor whose URI ``access=userspace`` uses (the only one with userspace
#: access: Ganeti refuses the parameter for the others).
USERSPACE_HYPERVISOR: Final = "kvm"

_MIB: Final = 1024 * 1024


@dataclass(frozen=True)
class Attachment:
    """What ``attach`` printed: the local path (empty: none) and URIs by hypervisor."""

    path: str
    uris: dict[str, str]


def parse_attach(output: str) -> Attachment:
    """``attach``'s standard output: the path on the first line, then
    ``<hypervisor>:<uri>`` lines (hypervisor names compared in lower case)."""
    lines = output.split("\n")
    path = lines[0].strip() if lines else ""
    uris: dict[str, str] = {}
    for line in lines[1:]:
        line = line.strip()
        hypervisor, sep, uri = line.partition(":")
        if sep and hypervisor and uri:
            uris.setdefault(hypervisor.lower(), uri)
    return Attachment(path=path, uris=uris)


def _label(disk: DiskSpec) -> str:
    return f"disk/{disk.index}"


class ExtStorage(BlockDevice):
    """Disks of template ``ext`` on the node of ``paths``."""

    dev_types: ClassVar[tuple[str, ...]] = ("ext",)

    def __init__(self, paths: Paths) -> None:
        self.paths = paths

    # -- helpers ---------------------------------------------------------------------------
    def _volume(self, disk: DiskSpec) -> tuple[str, str]:
        logical_id = disk.logical_id
        if len(logical_id) != 2 or not all(isinstance(p, str) and p for p in logical_id):
            raise BlockDeviceError(f"{_label(disk)} has logical id {logical_id!r}: an ext "
                                   "disk's logical id is [provider, volume]")
        return logical_id[0], logical_id[1]

    async def _provider(self, disk: DiskSpec) -> tuple[Provider, str]:
        name, volume = self._volume(disk)
        search_path = node_search_path(self.paths, disk.search_path)
        provider = await asyncio.to_thread(find_provider, search_path, name)
        return provider, volume

    async def _run(self, disk: DiskSpec, action: Action, *, identity: bool = True,
                   **extra: Any) -> str | None:
        """Run ``action`` for ``disk`` with its environment (``identity``: with the
        disk's name and UUID, as every action but ``snapshot`` gets them)."""
        provider, volume = await self._provider(disk)
        env = volume_env(volume, disk.params, cname=disk.name if identity else None,
                         uuid=disk.uuid if identity and disk.uuid else None, **extra)
        return await run_action(self.paths, provider, action, env)

    async def _attach(self, disk: DiskSpec) -> Attachment:
        output = await self._run(disk, "attach") or ""
        attachment = parse_attach(output)
        if "\0" in attachment.path or any("\0" in uri for uri in attachment.uris.values()):
            _, volume = self._volume(disk)
            raise BlockDeviceError(
                f"{_label(disk)}: the attach script of ExtStorage provider "
                f"{disk.logical_id[0]} printed a NUL byte for volume {volume}; it must print "
                "the volume's path on the first line, then <hypervisor>:<uri> lines")
        if not attachment.path and not attachment.uris:
            _, volume = self._volume(disk)
            raise BlockDeviceError(
                f"{_label(disk)}: the attach script of ExtStorage provider "
                f"{disk.logical_id[0]} gave neither a local path nor a userspace URI for "
                f"volume {volume}")
        return attachment

    def _where(self, disk: DiskSpec, attachment: Attachment) -> str:
        """Where the guest uses the disk: the ``kvm`` URI for ``access=userspace``,
        else the local path (which must be a block device or a file)."""
        provider, volume = self._volume(disk)
        if disk.params.get("access") == "userspace":
            uri = attachment.uris.get(USERSPACE_HYPERVISOR)
            if uri is None:
                raise BlockDeviceError(
                    f"Userspace access is not supported by the '{provider}' ExtStorage "
                    f"provider for the '{USERSPACE_HYPERVISOR}' hypervisor ({_label(disk)}, "
                    f"volume {volume}): its attach script printed no "
                    f"'{USERSPACE_HYPERVISOR}:<uri>' line")
            return uri
        if not attachment.path:
            raise BlockDeviceError(
                f"{_label(disk)}: ExtStorage provider {provider} gives volume {volume} no "
                "local device (only userspace URIs): use the disk parameter "
                "access=userspace")
        return attachment.path

    @staticmethod
    def _check_local(disk: DiskSpec, path: str) -> os.stat_result:
        try:
            st = os.stat(path)
        except OSError as err:
            raise BlockDeviceError(f"{_label(disk)}: the attach script gave {path}, which "
                                   f"cannot be used: {err.strerror}") from None
        if not (stat.S_ISBLK(st.st_mode) or stat.S_ISREG(st.st_mode)):
            raise BlockDeviceError(f"{_label(disk)}: the attach script gave {path}, which is "
                                   "neither a block device nor a file")
        return st

    async def _local_path(self, disk: DiskSpec) -> str:
        attachment = await self._attach(disk)
        if not attachment.path:
            _, volume = self._volume(disk)
            raise BlockDeviceError(f"{_label(disk)}: volume {volume} has no local device on "
                                   "this node (its provider gives only userspace URIs)")
        await asyncio.to_thread(self._check_local, disk, attachment.path)
        return attachment.path

    # -- the interface -------------------------------------------------------------------
    async def create(self, disk: DiskSpec) -> str:
        """Run ``create`` for the volume; answer its logical id's volume name (the
        local path exists only once the volume is attached)."""
        if disk.size <= 0:
            raise BlockDeviceError(f"{_label(disk)} has size {disk.size} MiB: expected a "
                                   "positive size")
        await self._run(disk, "create", size=disk.size)
        return self._volume(disk)[1]

    async def set_info(self, disk: DiskSpec, text: str) -> None:
        """Run ``setinfo`` with ``text`` made safe (``VOL_METADATA``)."""
        await self._run(disk, "setinfo", metadata=metadata_text(text))

    async def remove(self, disk: DiskSpec) -> None:
        """``detach``, then ``remove``. (Whether a volume already gone counts as
        removed is the provider's to say: its scripts should succeed then.)"""
        await self._run(disk, "detach")
        await self._run(disk, "remove")

    async def grow(self, disk: DiskSpec, amount: int, *, dryrun: bool = False) -> None:
        """Run ``grow`` from ``disk.size`` to ``disk.size + amount`` MiB. A dry run only
        checks that the provider is there and valid (providers have no dry run)."""
        if amount < 0:
            raise BlockDeviceError(f"cannot grow {_label(disk)} by {amount} MiB: the amount "
                                   "must not be negative")
        if dryrun:
            provider, _ = await self._provider(disk)
            if not provider.valid:
                raise BlockDeviceError(f"ExtStorage provider {provider.name} is not valid on "
                                       f"this node: {provider.message}")
            return
        await self._run(disk, "grow", size=disk.size, new_size=disk.size + amount)

    async def assemble(self, disk: DiskSpec) -> str:
        """``attach``; the local path, or the ``kvm`` URI for ``access=userspace``
        (the node daemon then opens the volume, see :meth:`open`)."""
        attachment = await self._attach(disk)
        where = self._where(disk, attachment)
        if where.startswith("/"):
            await asyncio.to_thread(self._check_local, disk, where)
        return where

    async def open(self, disk: DiskSpec, *, exclusive: bool = True) -> None:
        """Run ``open`` (``VOL_OPEN_EXCLUSIVE``)."""
        await self._run(disk, "open", exclusive=exclusive)

    async def close(self, disk: DiskSpec) -> None:
        """Run ``close``."""
        await self._run(disk, "close")

    async def shutdown(self, disk: DiskSpec) -> None:
        """Run ``detach`` (the volume stays in the storage)."""
        await self._run(disk, "detach")

    async def info(self, disk: DiskSpec) -> DiskInfo:
        """``attach`` tells where the volume is; its size is the configured one (a
        provider has no script to tell it). A volume the provider cannot attach counts
        as missing."""
        try:
            attachment = await self._attach(disk)
        except BlockDeviceError as err:
            raise DiskMissingError(err.message) from None
        where = self._where(disk, attachment) if attachment.path or attachment.uris else ""
        allocated = disk.size
        if where.startswith("/"):
            st = await asyncio.to_thread(self._check_local, disk, where)
            if stat.S_ISREG(st.st_mode):
                allocated = st.st_blocks * 512 // _MIB
        return {"path": where, "size": disk.size, "allocated": allocated}

    async def snapshot(self, disk: DiskSpec, name: str, size: int) -> list[str]:
        """Run ``snapshot`` (``VOL_SNAPSHOT_NAME``, ``VOL_SNAPSHOT_SIZE``); the
        snapshot's logical id is ``[provider, name]``. A provider without the
        (optional) script cannot snapshot."""
        provider, _ = await self._provider(disk)
        if provider.valid and "snapshot" not in provider.scripts:
            raise BlockDeviceError(f"{_label(disk)}: ExtStorage provider {provider.name} has "
                                   "no snapshot script: its volumes have no snapshots")
        await self._run(disk, "snapshot", identity=False, snap_name=name, snap_size=size)
        return [provider.name, name]

    async def read(self, disk: DiskSpec, *,
                   chunk: int = DEFAULT_CHUNK) -> AsyncGenerator[bytes, None]:
        """The contents of the attached volume's local device or file."""
        if chunk <= 0:
            raise BlockDeviceError(
                f"invalid chunk size {chunk}: expected a positive number of bytes")
        path = await self._local_path(disk)
        return read_device(path, _label(disk), chunk)

    async def write(self, disk: DiskSpec, chunks: AsyncIterator[bytes]) -> int:
        """Write the attached volume's local device or file from its start (the volume
        must exist: ``create`` it first)."""
        path = await self._local_path(disk)
        return await write_device(path, _label(disk), chunks)
