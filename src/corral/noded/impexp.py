"""A node's disk transfers (``impexp_*`` procedures) on top of :mod:`corral.impexp`.

The master starts an importer on the receiving node (``impexp_import``, which
answers the port it listens on), then an exporter on the sending node
(``impexp_export``), and follows both with ``impexp_status`` until they are done;
``impexp_abort`` stops one. Transfers run inside the node daemon as tasks. Each has
a status file in :attr:`Paths.impexp_dir`, written when its state changes, so a
transfer a previous node daemon left (it was killed mid-way) is seen as *stale* by
``impexp_status`` and cleaned by ``impexp_cleanup`` (the watcher calls it): its
processes are killed (only when the pid still names the same process) and the file
it was writing is removed.

Inside a cluster both ends use the node certificates and the cluster CA (mutual TLS
as for RPC). A transfer between clusters passes its own certificate, key and CA
(:class:`corral.rpc.args.TransferTls`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import ssl
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from corral import impexp, osapi, storage
from corral.errors import ParameterError
from corral.impexp import Endpoint, Transfer
from corral.paths import Paths
from corral.rpc.args import (
    ImpexpCleanupArgs,
    ImpexpExportArgs,
    ImpexpImportArgs,
    ImpexpNamesArgs,
    TransferEnd,
    TransferTls,
)
from corral.x509.tls import client_context, server_context

__all__ = ["impexp_abort", "impexp_cleanup", "impexp_export", "impexp_import",
           "impexp_status", "resolve_end"]

log = logging.getLogger(__name__)

#: The transfers this node daemon runs or ran, by name.
_TRANSFERS: dict[str, Transfer] = {}


# -- status files -----------------------------------------------------------------------
def _status_file(paths: Paths, name: str) -> Path:
    return paths.impexp_dir / f"{name}.json"


def _start_time(pid: int) -> str | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[19] if len(fields) > 19 else None


def _saver(paths: Paths) -> Any:
    def save(transfer: Transfer) -> None:
        status = transfer.status()
        status["pid_starts"] = {str(pid): _start_time(pid) for pid in transfer.pids}
        status["daemon_pid"] = os.getpid()
        paths.impexp_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        target = _status_file(paths, transfer.name)
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(status))
        tmp.replace(target)
    return save


def _stale(paths: Paths) -> list[dict[str, Any]]:
    """Status files of transfers this node daemon does not run (an earlier one did)."""
    found = []
    with contextlib.suppress(FileNotFoundError):
        for path in sorted(paths.impexp_dir.glob("*.json")):
            name = path.name[:-5]
            if name in _TRANSFERS:
                continue
            try:
                status = json.loads(path.read_text())
            except (OSError, ValueError):
                status = {"name": name}
            if status.get("state") not in impexp.FINAL_STATES:
                status["error"] = "left by an earlier node daemon"
                status["state"] = "stale"
            found.append(status)
    return found


# -- ends -------------------------------------------------------------------------------
def _export_file(paths: Paths, end: TransferEnd, writing: bool) -> str:
    if not end.export or not end.file:
        raise ParameterError("a transfer end of kind 'export' needs 'export' and 'file'")
    directory = paths.export_dir / (f"{end.export}.new" if writing else end.export)
    if not directory.is_dir():
        raise ParameterError(f"no export {end.export!r} on this node"
                             + (" being written (export_prepare first)" if writing else ""))
    return str(directory / end.file)


async def resolve_end(paths: Paths, end: TransferEnd,
                      direction: Literal["import", "export"]) -> Endpoint:
    """What an end the master names is on this node: a file, a device or a command."""
    if end.kind == "export":
        return Endpoint(kind="file", path=_export_file(paths, end, direction == "import"))
    if end.kind == "disk":
        if end.disk is None:
            raise ParameterError("a transfer end of kind 'disk' needs 'disk'")
        driver = storage.get_block_device(end.disk.dev_type, paths)
        return Endpoint(kind="device", path=await driver.assemble(end.disk))
    spec = end.instance
    if spec is None or end.index >= len(spec.disks):
        raise ParameterError("a transfer end of kind 'os' needs 'instance' and the "
                             "'index' of one of its disks")
    search = [paths.node_path(p) for p in end.search_path]
    definition, variant = await asyncio.to_thread(osapi.find_os, search, spec.os)
    where = [await storage.get_block_device(d.dev_type, paths).assemble(d)
             for d in spec.disks]
    env = osapi.build_env(definition, variant, spec, where)
    env = osapi.transfer_env(env, direction, end.index)
    return Endpoint(kind="command", argv=[str(definition.script(direction))], env=env,
                    cwd=str(definition.path))


def _tls(paths: Paths, tls: TransferTls | None, server: bool) -> ssl.SSLContext:
    """The cluster's mutual TLS, or the transfer's own certificate, key and CA."""
    if tls is None:
        if server:
            return server_context(paths.node_cert, paths.node_key, paths.ca_cert)
        return client_context(paths.ca_cert, paths.node_cert, paths.node_key,
                              check_hostname=False)
    paths.impexp_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    with tempfile.TemporaryDirectory(dir=paths.impexp_dir) as tmp:
        cert, key, ca = Path(tmp, "cert.pem"), Path(tmp, "key.pem"), Path(tmp, "ca.pem")
        for path, text in ((cert, tls.cert), (key, tls.key), (ca, tls.ca)):
            path.touch(mode=0o600)
            path.write_text(text)
        try:
            if server:
                return server_context(cert, key, ca)
            return client_context(ca, cert, key, check_hostname=False)
        except (ssl.SSLError, OSError) as err:
            raise ParameterError(f"the transfer's certificate, key or CA is not usable: "
                                 f"{err}") from None


def _new_transfer(paths: Paths, name: str, direction: Literal["import", "export"],
                  compression: str, magic: str, end: Endpoint,
                  expected: int | None = None) -> Transfer:
    old = _TRANSFERS.get(name)
    if old is not None and old.state not in impexp.FINAL_STATES:
        raise ParameterError(f"a transfer named {name!r} is already running on this node")
    impexp.check_tool_name(compression)
    transfer = Transfer(name, direction, compression, magic, end,
                        paths.impexp_dir / f"{name}.log", expected=expected,
                        on_change=_saver(paths))
    _TRANSFERS[name] = transfer
    return transfer


# -- procedures -------------------------------------------------------------------------
async def impexp_import(paths: Paths, args: ImpexpImportArgs) -> Any:
    """Start an importer; ``{"name", "port"}`` once it listens."""
    end = await resolve_end(paths, args.destination, "import")
    context = await asyncio.to_thread(_tls, paths, args.tls, True)
    transfer = _new_transfer(paths, args.name, "import", args.compression, args.magic, end)
    try:
        port = await impexp.start_import(transfer, args.host, args.ports, context,
                                         accept_timeout=args.accept_timeout)
    except BaseException:
        _TRANSFERS.pop(args.name, None)
        raise
    return {"name": args.name, "port": port}


async def impexp_export(paths: Paths, args: ImpexpExportArgs) -> Any:
    """Start an exporter towards ``host``:``port``; ``{"name"}`` (it runs on)."""
    end = await resolve_end(paths, args.source, "export")
    context = await asyncio.to_thread(_tls, paths, args.tls, False)
    transfer = _new_transfer(paths, args.name, "export", args.compression, args.magic, end,
                             args.expected)
    await impexp.start_export(transfer, args.host, args.port, context,
                              bandwidth=args.bandwidth)
    return {"name": args.name}


async def impexp_status(paths: Paths, args: ImpexpNamesArgs) -> Any:
    """The status of the named transfers (all, with the stale ones, when none are
    named); a name this node does not know has state ``unknown``."""
    stale = {s["name"]: s for s in await asyncio.to_thread(_stale, paths)}
    if not args.names:
        return [t.status() for t in _TRANSFERS.values()] + list(stale.values())
    answer = []
    for name in args.names:
        transfer = _TRANSFERS.get(name)
        answer.append(transfer.status() if transfer is not None else
                      stale.get(name, {"name": name, "state": "unknown"}))
    return answer


async def impexp_abort(paths: Paths, args: ImpexpNamesArgs) -> Any:
    """Stop the named transfers (a file being imported is removed); the names of
    those that were still running."""
    stopped = []
    for name in args.names:
        transfer = _TRANSFERS.get(name)
        if transfer is not None and transfer.state not in impexp.FINAL_STATES:
            await transfer.abort("aborted by the master")
            stopped.append(name)
    return stopped


def _kill_stale(status: dict[str, Any]) -> None:
    for pid_text, started in (status.get("pid_starts") or {}).items():
        pid = int(pid_text)
        if started is not None and _start_time(pid) == started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
    destination = status.get("destination")
    if destination and status.get("direction") == "import" and status.get("state") != "done":
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            Path(destination).unlink()


def _forget(paths: Paths, name: str) -> None:
    for path in (_status_file(paths, name), paths.impexp_dir / f"{name}.log"):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


async def impexp_cleanup(paths: Paths, args: ImpexpCleanupArgs) -> Any:
    """Forget finished transfers older than ``older_than`` seconds; stop and remove
    stale ones (left by an earlier node daemon). The names cleaned."""
    now = time.time()
    cleaned = []
    for name, transfer in list(_TRANSFERS.items()):
        if transfer.state in impexp.FINAL_STATES and transfer.finished is not None \
                and now - transfer.finished >= args.older_than:
            del _TRANSFERS[name]
            await asyncio.to_thread(_forget, paths, name)
            cleaned.append(name)
    for status in await asyncio.to_thread(_stale, paths):
        finished = status.get("finished") or status.get("started") or 0
        if status["state"] == "stale" or now - float(finished) >= args.older_than:
            await asyncio.to_thread(_kill_stale, status)
            await asyncio.to_thread(_forget, paths, status["name"])
            cleaned.append(status["name"])
    return cleaned
