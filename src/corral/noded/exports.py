"""A node's export directory: instance exports as Ganeti lays them out.

Each export is a directory named after the instance in :attr:`Paths.export_dir`,
holding ``config.ini`` (the instance's configuration, Ganeti's format) and one raw
image per disk, named by the disk's UUID. An export is written as ``<name>.new``
and renamed into place by ``export_finalize`` once every disk arrived, so a failed
export never replaces a good one and ``export_list`` never shows a half one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

from corral.errors import BlockDeviceError, ParameterError
from corral.paths import Paths
from corral.rpc.args import ExportArgs, ExportFinalizeArgs, ExportPrepareArgs, NoArgs
from corral.utils.files import write_private

__all__ = ["CONFIG_FILE", "export_abort", "export_finalize", "export_info", "export_list",
           "export_prepare", "export_remove"]

#: The configuration file of an export.
CONFIG_FILE = "config.ini"

_NEW = ".new"


def _export(paths: Paths, name: str) -> Path:
    """The directory of export ``name`` (a plain name, or a path in the export
    directory); anything outside it is refused."""
    base = paths.export_dir
    candidate = Path(name)
    if candidate.is_absolute():
        candidate = paths.node_path(name) if not str(candidate).startswith(str(base)) \
            else candidate
        if candidate.parent != base:
            raise ParameterError(f"export {name!r} is not in the export directory "
                                 f"{base}")
        name = candidate.name
    if not name or "/" in name or name in (".", "..") or name.startswith("."):
        raise ParameterError(f"invalid export name {name!r}")
    return base / name


def _prepare(paths: Paths, args: ExportPrepareArgs) -> str:
    paths.export_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    usage = shutil.disk_usage(paths.export_dir)
    free_mib = usage.free // (1 << 20)
    if free_mib < args.size:
        raise BlockDeviceError(f"the export directory {paths.export_dir} has {free_mib} MiB "
                           f"free but the disks need {args.size} MiB")
    target = _export(paths, args.export).with_name(args.export + _NEW)
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(mode=0o700)
    return str(target)


async def export_prepare(paths: Paths, args: ExportPrepareArgs) -> Any:
    """Check the free space for ``size`` MiB and make ``<export>.new``; its path."""
    return await asyncio.to_thread(_prepare, paths, args)


def _finalize(paths: Paths, args: ExportFinalizeArgs) -> str:
    final = _export(paths, args.export)
    staged = final.with_name(final.name + _NEW)
    if not staged.is_dir():
        raise ParameterError(f"no export {args.export!r} being written on this node")
    write_private(staged / CONFIG_FILE, args.config, 0o600)
    old = final.with_name(final.name + ".old")
    if final.exists():
        final.rename(old)
    staged.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    fd = os.open(paths.export_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return str(final)


async def export_finalize(paths: Paths, args: ExportFinalizeArgs) -> Any:
    """Write the export's config.ini and put it in place; the export's path."""
    return await asyncio.to_thread(_finalize, paths, args)


def _list(paths: Paths) -> list[str]:
    with contextlib.suppress(FileNotFoundError):
        return sorted(p.name for p in paths.export_dir.iterdir()
                      if p.is_dir() and not p.name.endswith((_NEW, ".old"))
                      and (p / CONFIG_FILE).is_file())
    return []


async def export_list(paths: Paths, args: NoArgs) -> Any:
    """The names of the complete exports on this node."""
    return await asyncio.to_thread(_list, paths)


def _info(paths: Paths, name: str) -> dict[str, Any]:
    directory = _export(paths, name)
    try:
        config = (directory / CONFIG_FILE).read_text()
    except FileNotFoundError:
        raise ParameterError(f"no export {name!r} on this node") from None
    files = {p.name: p.stat().st_size for p in directory.iterdir() if p.name != CONFIG_FILE}
    return {"name": directory.name, "path": str(directory), "config": config, "files": files}


async def export_info(paths: Paths, args: ExportArgs) -> Any:
    """An export's config.ini text, its path and its files' sizes."""
    return await asyncio.to_thread(_info, paths, args.export)


def _remove(paths: Paths, name: str, suffix: str = "") -> bool:
    directory = _export(paths, name)
    directory = directory.with_name(directory.name + suffix)
    if not directory.is_dir():
        return False
    shutil.rmtree(directory)
    return True


async def export_remove(paths: Paths, args: ExportArgs) -> Any:
    """Remove an export; whether there was one."""
    return await asyncio.to_thread(_remove, paths, args.export)


async def export_abort(paths: Paths, args: ExportArgs) -> Any:
    """Remove an export being written (``<export>.new``); whether there was one."""
    return await asyncio.to_thread(_remove, paths, args.export, _NEW)
