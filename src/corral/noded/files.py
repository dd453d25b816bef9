"""The cluster's ancillary files: which they are, reading them on the master and the
``upload_files`` procedure that writes them on a node (``gnt-cluster
redistribute-conf``, design 2.1 "Redistribute Config").

Besides the configuration, every node keeps copies of a few files the master owns:
the cluster CA certificate and the confd HMAC key on every node, the RAPI users file
and the master's client certificate on the master candidates (any of them may become
the master). Every node also keeps files made from the configuration
(:data:`CONFIG_FILES`: the user-id pool), which the master sends when they change,
and the VNC password files the configuration names (:data:`PATH_FILES`). A file
travels as ``{"name": known name}`` with its ``data`` (base64).

What a node lets the master write is decided on the node, never by the request:
the known files are a fixed table of this node's own :class:`Paths`, each with the
mode given here (a ``mode`` in the request is ignored for them). The files of the
administrator's list (:attr:`Paths.user_file_list`) travel as ``{"path": absolute
path}`` with their ``mode``; a node writes one only when its *own* copy of the list
names it, which the master cannot change (the list itself is never uploaded: put it
on each node that should receive the files), and never with a set-user-ID,
set-group-ID or sticky bit.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any

from corral.daemon_users import refresh_modes
from corral.errors import ParameterError
from corral.paths import Paths
from corral.rpc.args import UploadFilesArgs
from corral.utils.files import write_private, write_public

__all__ = ["CONFIG_FILES", "KNOWN_FILES", "MASTER_FILES", "PATH_FILES", "read_ancillary_files",
           "read_user_list", "upload_files"]

#: Known files by name: (``Paths`` attribute, mode, master candidates only). The only
#: files of the node's own places that ``upload_files`` writes.
KNOWN_FILES: dict[str, tuple[str, int, bool]] = {
    "ca_cert": ("ca_cert", 0o644, False),
    "confd_key": ("confd_hmac_key", 0o400, False),
    "rapi_users": ("rapi_users", 0o400, True),
    "master_client_cert": ("master_client_cert", 0o400, True),
    "cluster_domain_secret": ("cluster_domain_secret", 0o400, False),
}

#: Files of the master node only that ``upload_files`` accepts by name (``gnt-cluster
#: renew-crypto`` sends them to the master's node daemon), but that redistribute-conf
#: does not ship: the RAPI certificate, which a new master makes for itself.
MASTER_FILES: dict[str, tuple[str, int]] = {
    "rapi_cert": ("rapi_cert", 0o644),
    "rapi_key": ("rapi_key", 0o400),
}

#: Files made from the configuration that every node keeps (Ganeti's ssconf): name ->
#: (``Paths`` attribute, mode). The master builds them from its configuration when it
#: changes, so :func:`read_ancillary_files` does not read them from its own disk.
CONFIG_FILES: dict[str, tuple[str, int]] = {
    "uid_pool": ("uid_pool", 0o444),
}

#: Known files written where the configuration names them (a hypervisor parameter's
#: path, below this node's root): name -> mode. They travel with ``name`` and
#: ``path``; the VNC password files of design 2.1 are read by noded only.
PATH_FILES: dict[str, int] = {
    "vnc_password_file": 0o400,
}

#: Mode bits a file of the user list may not carry: set-user-ID, set-group-ID, sticky.
SPECIAL_MODE_BITS = 0o7000


def read_user_list(text: str) -> list[str]:
    """The absolute paths a user file list names (blank lines and ``#`` comments
    skipped); a relative path is an error naming the line."""
    paths: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        entry = line.split("#", 1)[0].strip()
        if not entry:
            continue
        if not PurePosixPath(entry).is_absolute() or ".." in PurePosixPath(entry).parts:
            raise ParameterError(f"user file list, line {number}: {entry!r} is not an "
                                 "absolute path without '..'")
        paths.append(entry)
    return paths


def _entry(data: bytes, mode: int, **where: Any) -> dict[str, Any]:
    return {**where, "data": base64.b64encode(data).decode("ascii"), "mode": mode}


def read_ancillary_files(paths: Paths, vnc_password_files: Iterable[str] = ()
                         ) -> list[dict[str, Any]]:
    """The master's ancillary files as ``upload_files`` entries, each with
    ``candidates_only``; missing optional files are left out. ``vnc_password_files``
    are the cluster-wide paths the configuration's ``vnc_password_file`` parameters
    name (design 2.1: redistribute-config ships them to every node)."""
    files: list[dict[str, Any]] = []
    for name in sorted(set(vnc_password_files)):
        password_file = paths.node_path(name)
        if password_file.is_file():
            files.append(_entry(password_file.read_bytes(), PATH_FILES["vnc_password_file"],
                                name="vnc_password_file", path=name,
                                candidates_only=False))
    for name, (attribute, mode, candidates_only) in KNOWN_FILES.items():
        source: Path = getattr(paths, attribute)
        if source.exists():
            files.append(_entry(source.read_bytes(), mode, name=name,
                                candidates_only=candidates_only))
    if paths.user_file_list.exists():
        for entry in read_user_list(paths.user_file_list.read_text()):
            source = paths.node_path(entry)
            if source.is_file():
                files.append(_entry(source.read_bytes(), source.stat().st_mode & 0o777,
                                    path=entry, candidates_only=False))
    return files


def _accepted() -> str:
    return ", ".join(sorted([*KNOWN_FILES, *CONFIG_FILES, *MASTER_FILES, *PATH_FILES]))


def _configured_path(paths: Paths, name: str, path: str | None) -> Path:
    """Where this node keeps the file ``name`` a configuration parameter puts at
    ``path``: an absolute path without ``..``, below the node's root."""
    if path is None or not PurePosixPath(path).is_absolute() or ".." in PurePosixPath(
            path).parts:
        raise ParameterError(f"procedure upload_files: {name} path {path!r} is not an "
                             "absolute path without '..'")
    return paths.node_path(path)


def _write(target: Path, data: bytes, mode: int) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if mode & 0o077 & ~0o040:
        write_public(target, data, mode)
    else:
        write_private(target, data, mode)


async def upload_files(paths: Paths, args: UploadFilesArgs) -> list[str]:
    """Write the files the master sends (see the module doc); the names/paths written.

    Everything is checked before anything is written: one file this node does not
    accept refuses the whole call, naming the file.
    """
    allowed: set[str] = set()
    if paths.user_file_list.exists():
        allowed.update(read_user_list(paths.user_file_list.read_text()))
    plan: list[tuple[str, Path, bytes, int]] = []
    for entry in args.files:
        name, path, data, mode = entry.name, entry.path, entry.data, entry.mode
        if name is not None and name in PATH_FILES:
            plan.append((f"{name} {path}", _configured_path(paths, name, path), data,
                         PATH_FILES[name]))
            continue
        if name is not None:
            if name in CONFIG_FILES:
                attribute, known_mode = CONFIG_FILES[name]
            elif name in MASTER_FILES:
                attribute, known_mode = MASTER_FILES[name]
            elif name in KNOWN_FILES:
                attribute, known_mode, _candidates = KNOWN_FILES[name]
            else:
                raise ParameterError(
                    f"procedure upload_files: this node does not accept the file {name!r}; "
                    f"it accepts {_accepted()}"
                    " and the "
                    f"paths its own user file list ({paths.user_file_list}) names")
            plan.append((name, getattr(paths, attribute), data, known_mode))
            continue
        if path is None or path not in allowed:
            raise ParameterError(
                f"procedure upload_files: this node does not accept the file {path!r}: it "
                f"is not in its own user file list ({paths.user_file_list}); add it there "
                "on this node to receive it")
        if mode & SPECIAL_MODE_BITS:
            raise ParameterError(
                f"procedure upload_files: {path}: mode {mode:04o} has a set-user-ID, "
                "set-group-ID or sticky bit, which a node never writes; use permission "
                "bits only (at most 0777)")
        plan.append((path, paths.node_path(path), data, mode))
    # Each file is written with fsync: off the event loop, so a slow disk does not
    # stall this node's other calls.
    await asyncio.to_thread(_write_plan, plan)
    # written as root: the daemons' files get their owners and modes back
    await asyncio.to_thread(refresh_modes, paths)
    return [label for label, *_rest in plan]


def _write_plan(plan: list[tuple[str, Path, bytes, int]]) -> None:
    for _label, target, data, mode in plan:
        _write(target, data, mode)
