"""Writing files atomically: keys, certificates, secrets and state files.

A file is written to a temporary file in the same directory, flushed to disk and
renamed over the target, so readers see either the old content or the new, never a
torn one. The temporary file is created readable by its owner only, and gets its
final mode before it receives any data: a private key is never world-readable, not
even for a moment.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["fsync_dir", "write_private", "write_public"]


def _atomic_write(
    path: str | os.PathLike[str],
    data: bytes | str,
    mode: int,
    uid: int | None,
    gid: int | None,
) -> None:
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    # mkstemp creates the file with mode 0600 (O_EXCL), whatever the umask.
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        try:
            os.fchmod(fd, mode)
            if uid is not None or gid is not None:
                os.fchown(fd, -1 if uid is None else uid, -1 if gid is None else gid)
            view = memoryview(payload)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    fsync_dir(target.parent)


def fsync_dir(directory: Path) -> None:
    """Make a rename or link in ``directory`` durable."""
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_private(
    path: str | os.PathLike[str],
    data: bytes | str,
    mode: int = 0o400,
    *,
    uid: int | None = None,
    gid: int | None = None,
) -> None:
    """Atomically write a secret (a key, a password file) with ``mode`` (default 0400).

    ``uid``/``gid`` hand the file to another owner, for example the unprivileged user
    a daemon runs as. Refuses modes that let others read the file.
    """
    if mode & 0o077 & ~0o040:
        raise ValueError(f"mode {mode:#o} would expose a private file to others")
    _atomic_write(path, data, mode, uid, gid)


def write_public(
    path: str | os.PathLike[str],
    data: bytes | str,
    mode: int = 0o644,
    *,
    uid: int | None = None,
    gid: int | None = None,
) -> None:
    """Atomically write a file anyone may read (a certificate) with ``mode`` (default 0644)."""
    _atomic_write(path, data, mode, uid, gid)
