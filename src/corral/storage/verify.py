"""What ``gnt-cluster verify`` asks of a node's storage, one small hook per disk template.

For each template a node can hold disks of, a :class:`StorageVerifier` answers two
questions about the place the cluster configures for it here (a cluster-wide
directory for ``file`` and ``sharedfile``; a volume group for ``plain``):

* ``check``: is it usable? ``None``, or what is wrong, in a sentence;
* ``volumes``: which volumes are there? Their cluster-wide names (a disk file's
  cluster-wide path, ``vg/lv`` for a logical volume), which the master compares
  with the disks its configuration puts on this node (missing and orphan disks).

Both are blocking functions; :func:`check_storage` and :func:`list_volumes` run them in
a worker thread. Templates without disks (``diskless``) need no hook. Another storage
kind registers its own with :func:`register`. LVM's ``plain``: the cluster's volume
group exists here and misses no physical volume; its logical volumes, as ``vg/lv``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from corral.errors import BlockDeviceError, ParameterError
from corral.paths import Paths
from corral.storage.confine import FORBIDDEN_PREFIXES, allowed_dirs
from corral.storage.lvm import LvmTools

__all__ = ["MAX_VOLUMES", "VERIFIERS", "StorageVerifier", "check_storage", "list_volumes",
           "register"]

#: At most this many volumes are listed per template (a bound on the answer's size).
MAX_VOLUMES: Final = 100_000


@dataclass(frozen=True, slots=True)
class StorageVerifier:
    """The two questions about one template's storage on a node (see the module doc)."""

    #: ``check(paths, location)``: None when usable, else what is wrong.
    check: Callable[[Paths, str], str | None]
    #: ``volumes(paths, location)``: the cluster-wide names of the volumes there.
    volumes: Callable[[Paths, str], list[str]]


def _allowed(paths: Paths, cluster_dir: str) -> str | None:
    """Why this node refuses disks in ``cluster_dir``, or None."""
    normal = os.path.normpath(cluster_dir)
    if not cluster_dir.startswith("/"):
        return f"Path '{cluster_dir}' is not an absolute path"
    if any(normal == p or normal.startswith(p + "/") for p in FORBIDDEN_PREFIXES):
        return f"Path '{cluster_dir}' uses a forbidden prefix"
    try:
        allowed = allowed_dirs(paths)
    except BlockDeviceError as err:
        return err.message
    if not any(normal == d or normal.startswith(d.rstrip("/") + "/") for d in allowed):
        return (f"Path '{cluster_dir}' is not one of the directories this node allows disks "
                f"in ({', '.join(allowed) or 'none'}; see {paths.file_storage_paths})")
    return None


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _check_dir(paths: Paths, cluster_dir: str, *, made_on_first_use: bool) -> str | None:
    refused = _allowed(paths, cluster_dir)
    if refused:
        return refused
    local = paths.node_path(cluster_dir)
    if not local.exists():
        if not made_on_first_use:
            return f"Path '{cluster_dir}' is not existing or not a directory."
        parent = _nearest_existing(local)
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            return (f"Path '{cluster_dir}' does not exist and cannot be made: "
                    f"{parent} is not a writable directory")
        return None
    if not local.is_dir():
        return f"Path '{cluster_dir}' is not existing or not a directory."
    if not os.access(local, os.W_OK | os.X_OK):
        return f"Path '{cluster_dir}' is not writable"
    return None


def _check_file(paths: Paths, cluster_dir: str) -> str | None:
    """``file``: a local directory, made when the first disk is created."""
    return _check_dir(paths, cluster_dir, made_on_first_use=True)


def _check_sharedfile(paths: Paths, cluster_dir: str) -> str | None:
    """``sharedfile``: the shared file system must be there (mounted) already."""
    return _check_dir(paths, cluster_dir, made_on_first_use=False)


def _file_volumes(paths: Paths, cluster_dir: str) -> list[str]:
    """Every file in the directory and one level below (``<instance uuid>/<disk>``),
    by cluster-wide path; a missing directory holds none."""
    base = cluster_dir.rstrip("/")
    local = paths.node_path(cluster_dir)
    found: list[str] = []
    try:
        entries = list(os.scandir(local))
    except FileNotFoundError:
        return []
    except OSError as err:
        raise BlockDeviceError(f"cannot list storage directory {cluster_dir}: "
                               f"{err.strerror}") from None
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            try:
                inner = list(os.scandir(entry.path))
            except OSError as err:
                raise BlockDeviceError(f"cannot list {base}/{entry.name}: "
                                       f"{err.strerror}") from None
            found.extend(f"{base}/{entry.name}/{item.name}" for item in inner
                         if not item.is_dir(follow_symlinks=False))
        else:
            found.append(f"{base}/{entry.name}")
        if len(found) >= MAX_VOLUMES:
            break
    return sorted(found[:MAX_VOLUMES])


def _check_plain(paths: Paths, vg_name: str) -> str | None:
    """``plain``: the volume group exists here (Ganeti's ``volume group 'X' missing``)
    and misses no physical volume (``gnt-node repair-storage`` fixes that)."""
    try:
        groups = asyncio.run(LvmTools(paths).volume_groups())
    except BlockDeviceError as err:
        return f"unable to check volume groups: {err.message}"
    for group in groups:
        if group.name == vg_name:
            if group.partial:
                return (f"volume group '{vg_name}' misses {group.missing_pvs or 1} "
                        "physical volume(s); see 'gnt-node repair-storage'")
            return None
    return f"volume group '{vg_name}' missing"


def _plain_volumes(paths: Paths, vg_name: str) -> list[str]:
    """The logical volumes of the volume group, as ``vg/lv`` (none when it is not
    here); volumes whose data is gone (LVM's virtual ones) are left out."""
    volumes = asyncio.run(LvmTools(paths).logical_volumes())
    return sorted(f"{lv.vg}/{lv.name}" for lv in volumes
                  if lv.vg == vg_name and not lv.attr.startswith("v"))[:MAX_VOLUMES]


#: The hooks by disk template.
VERIFIERS: dict[str, StorageVerifier] = {
    "file": StorageVerifier(_check_file, _file_volumes),
    "sharedfile": StorageVerifier(_check_sharedfile, _file_volumes),
    "plain": StorageVerifier(_check_plain, _plain_volumes),
}


def register(template: str, verifier: StorageVerifier) -> None:
    """Add (or replace) the hooks of ``template``."""
    VERIFIERS[template] = verifier


def _verifier(template: str) -> StorageVerifier:
    try:
        return VERIFIERS[template]
    except KeyError:
        raise ParameterError(
            f"this node cannot verify storage of disk template {template!r}; it knows "
            f"{', '.join(sorted(VERIFIERS))}") from None


async def check_storage(paths: Paths, template: str, location: str) -> str | None:
    """Whether ``template``'s storage at ``location`` is usable here (None) or not."""
    return await asyncio.to_thread(_verifier(template).check, paths, location)


async def list_volumes(paths: Paths, template: str, location: str) -> list[str]:
    """The volumes of ``template``'s storage at ``location`` on this node."""
    return await asyncio.to_thread(_verifier(template).volumes, paths, location)
