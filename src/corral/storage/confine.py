"""Which directories a node lets disks live in, and the check every disk path passes.

The master names a disk by a cluster-wide path, but a node daemon runs as root: a
path taken on trust from a request would let any holder of a cluster certificate
read, create or delete any file on the node (the CA key included). So each node
decides for itself. Its list of allowed directories is the file
:attr:`~corral.paths.Paths.file_storage_paths` (as Ganeti's ``file-storage-paths``:
one absolute path per line, ``#`` comments); without that file, the default file
and shared-file storage directories. No procedure writes the list.

A disk path is accepted only when, after every symbolic link is resolved, it lies
strictly below one of the allowed directories (also resolved), is not below one of
the system directories no storage may use, and is not inside this node's own data
or run directories. The resolved path is what the caller then works on.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from corral.errors import BlockDeviceError
from corral.paths import Paths

__all__ = ["FORBIDDEN_PREFIXES", "allowed_dirs", "confine"]


def _forbidden() -> frozenset[str]:
    prefixes = {"/boot", "/dev", "/etc", "/home", "/proc", "/root", "/sys"}
    for base in ("", "/usr", "/usr/local"):
        prefixes.update(f"{base}/{sub}" for sub in ("bin", "lib", "lib32", "lib64", "sbin"))
    return frozenset(prefixes)


#: Cluster-wide directories no disk may be in or below, whatever the allowed list says.
FORBIDDEN_PREFIXES: Final[frozenset[str]] = _forbidden()


def allowed_dirs(paths: Paths) -> list[str]:
    """The cluster-wide directories this node accepts disks below, in file order.

    Relative entries, ``/`` itself and entries below :data:`FORBIDDEN_PREFIXES` are
    skipped. A
    missing file means the two default storage directories; an unreadable one is a
    :class:`~corral.errors.BlockDeviceError`.
    """
    try:
        text = paths.file_storage_paths.read_text()
    except FileNotFoundError:
        return [Paths.DEFAULT_FILE_STORAGE_DIR, Paths.DEFAULT_SHARED_FILE_STORAGE_DIR]
    except OSError as err:
        raise BlockDeviceError(
            f"cannot read this node's allowed storage directories from "
            f"{paths.file_storage_paths}: {err.strerror}") from err
    result: list[str] = []
    for line in text.splitlines():
        entry = line.split("#", 1)[0].strip()
        if not entry.startswith("/"):
            continue
        normal = os.path.normpath(entry)
        if normal != "/" and not _is_forbidden(normal) and normal not in result:
            result.append(normal)
    return result


def _is_forbidden(cluster_path: str) -> bool:
    return any(cluster_path == prefix or cluster_path.startswith(prefix + "/")
               for prefix in FORBIDDEN_PREFIXES)


def _below(path: Path, directory: Path) -> bool:
    """Whether ``path`` is strictly below ``directory`` (both resolved)."""
    return path != directory and path.is_relative_to(directory)


def confine(paths: Paths, cluster_path: str, label: str) -> Path:
    """The node-local, symlink-free path of disk ``label`` at ``cluster_path``.

    Refuses (:class:`~corral.errors.BlockDeviceError`, naming the path and the
    allowed directories) a path outside every allowed directory once symbolic links
    are resolved, one below a forbidden system directory and one inside the node's
    data or run directory. Blocking (it reads the list and resolves links): call it
    from a worker thread.
    """
    allowed = allowed_dirs(paths)
    where = ", ".join(allowed) if allowed else f"none ({paths.file_storage_paths} lists none)"
    normal = os.path.normpath(cluster_path)
    if _is_forbidden(normal):
        raise BlockDeviceError(
            f"{label} has file path {cluster_path!r}, below a system directory that no "
            f"storage may use; this node allows disks only below: {where}")
    real = Path(os.path.realpath(paths.node_path(normal)))
    for private in (paths.data_dir, paths.run_dir):
        if real.is_relative_to(os.path.realpath(private)):
            raise BlockDeviceError(
                f"{label} has file path {cluster_path!r}, which leads into this node's "
                f"private directory {private}; this node allows disks only below: {where}")
    for directory in allowed:
        if _below(real, Path(os.path.realpath(paths.node_path(directory)))):
            return real
    listed = (f"listed in {paths.file_storage_paths}" if paths.file_storage_paths.exists()
              else f"the defaults, as there is no {paths.file_storage_paths}")
    raise BlockDeviceError(
        f"{label} has file path {cluster_path!r} ({real} on this node once links are "
        f"resolved), outside the storage directories this node allows: {where} ({listed})")
