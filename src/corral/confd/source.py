"""Where confd's configuration comes from, and reloading it without a restart.

On the master node confd reads the configuration store itself
(:attr:`~corral.paths.Paths.config_db`); on the other master candidates it reads the
replica their node daemon keeps (:attr:`~corral.paths.Paths.config_replica`), which
has the same SQLite schema. Both are opened read-only (:func:`load_readonly`).

:class:`SnapshotSource` notices a change cheaply: every ``interval`` seconds (and on
:meth:`~SnapshotSource.poke`) it compares the ``stat`` of the file and of its
``-wal`` file with what it saw at the last load. Only when they differ does it load
the configuration, in a worker thread so that answering goes on meanwhile, build
the answer indexes and swap them in with one assignment. A load that fails keeps
the previous snapshot and is logged; it is retried when the files change again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path

from corral.confd.answers import Snapshot, build_snapshot
from corral.config.readonly import load_readonly
from corral.config.storage import sidecar_files
from corral.errors import CorralError
from corral.paths import Paths

__all__ = ["SnapshotSource", "config_path", "load_snapshot"]

log = logging.getLogger("corral.confd")

#: What identifies one state of the files: (path, (inode, size, mtime) per file).
_Signature = tuple[str, tuple[tuple[int, int, int] | None, ...]]


def config_path(paths: Paths) -> Path:
    """The file confd answers from on this node: the store on the master, else the
    replica (:meth:`~corral.paths.Paths.local_config`)."""
    return paths.local_config()


def load_snapshot(path: Path) -> Snapshot:
    """Load the configuration at ``path`` read-only and build its answer indexes.

    Raises :class:`~corral.errors.CorralError` when the file cannot be used (also
    when it holds no cluster yet, as a fresh replica does).
    """
    store = load_readonly(path)
    if not store.all("cluster"):
        raise CorralError(f"configuration {path} holds no cluster yet (serial {store.serial})")
    return build_snapshot(store)


def _stat(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class SnapshotSource:
    """The current :class:`Snapshot`, reloaded when the configuration file changes.

    ``path`` fixes the file; without it the file is chosen by :func:`config_path`
    at every check, so a node that becomes master switches to its store.
    """

    def __init__(self, paths: Paths, path: Path | None = None, *,
                 interval: float = 0.5) -> None:
        self._paths = paths
        self._fixed = path
        self.interval = interval
        #: The snapshot answers come from (None until the first successful load).
        self.current: Snapshot | None = None
        self._seen: _Signature | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def path(self) -> Path:
        """The file read now."""
        return self._fixed if self._fixed is not None else config_path(self._paths)

    def _signature(self, path: Path) -> _Signature:
        return (str(path), tuple(_stat(p) for p in (path, sidecar_files(path)[0])))

    async def check(self) -> bool:
        """Reload if the files changed since the last attempt; True if a new
        snapshot was installed."""
        path = self.path
        signature = self._signature(path)
        if signature == self._seen:
            return False
        self._seen = signature
        if signature[1][0] is None:
            log.warning("no configuration at %s yet; answers wait for it", path)
            return False
        try:
            snap = await asyncio.to_thread(load_snapshot, path)
        except CorralError as err:
            log.error("cannot load %s, keeping serial %s: %s", path,
                      self.current.serial if self.current else "none", err)
            return False
        except Exception:
            log.exception("cannot load %s, keeping the previous configuration", path)
            return False
        old = self.current
        if old is not None and snap.serial == old.serial and snap == old:
            return False
        self.current = snap
        log.info("loaded configuration serial %d from %s", snap.serial, path)
        return True

    def poke(self) -> None:
        """Check for a change now rather than at the next interval."""
        self._wake.set()

    async def _run(self) -> None:
        while True:
            try:
                await self.check()
            except Exception:  # the watcher must outlive any surprise
                log.exception("checking %s for changes failed", self.path)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval):
                    await self._wake.wait()
            self._wake.clear()

    def start(self) -> None:
        """Start watching in the background (call from the running loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop watching."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
