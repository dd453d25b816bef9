"""A node's part in ``gnt-cluster renew-crypto``: new certificates without a break.

The master rolls new certificates out in steps, each done on every node before the
next begins, so that at every moment every node trusts the certificate every other
node presents (mutual TLS never breaks half-way, and no instance is touched):

1. ``stage``: trust the old and the new cluster CA (``ca.pem`` becomes the bundle
   of both) and keep the new node certificate, key and (master candidates) master
   client certificate aside, as ``*.new`` files;
2. ``activate``: put them in place: the node daemon serves with its new
   certificate, and calls other nodes with it;
3. ``finish``: trust the new CA only (the master also keeps the new CA key).

``abort`` (a node failed to stage) goes back to trusting the old CA alone and drops
what was kept aside. After each step the node daemon listens again with the new
files (:meth:`corral.noded.server.NodeServer`), on the same port, without a moment
without a listener; the request that asked for it is answered first.

``restart_daemons`` restarts daemons of this node that read a key at start (confd
after a new confd key, RAPI after a new certificate, mond).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from corral import daemons
from corral.daemon_users import refresh_modes
from corral.errors import CorralError, ParameterError
from corral.paths import Paths
from corral.rpc.args import RenewCryptoArgs, RestartDaemonsArgs
from corral.utils.files import write_private, write_public
from corral.utils.process import running_pid, stop_daemon

__all__ = ["PHASES_THAT_RELISTEN", "renew_crypto", "restart_daemons"]

#: The phases after which the node daemon listens again with the new files.
PHASES_THAT_RELISTEN = frozenset({"stage", "activate", "finish", "abort"})

_BEGIN = "-----BEGIN CERTIFICATE-----"


def _staged(path: Path) -> Path:
    return path.with_name(path.name + ".new")


def _staged_files(paths: Paths) -> list[Path]:
    return [_staged(p) for p in (paths.node_cert, paths.node_key, paths.master_client_cert,
                                 paths.ca_key)]


def _check_bundle(bundle: str) -> None:
    if _BEGIN not in bundle:
        raise ParameterError("procedure renew_crypto: ca_bundle holds no PEM certificate")


def _stage(paths: Paths, args: RenewCryptoArgs) -> None:
    _check_bundle(args.ca_bundle)
    if not args.node_cert or not args.node_key:
        raise ParameterError("procedure renew_crypto: stage needs node_cert and node_key")
    write_private(_staged(paths.node_key), args.node_key, 0o400)
    write_public(_staged(paths.node_cert), args.node_cert, 0o644)
    if args.master_client is not None and paths.master_client_cert.exists():
        write_private(_staged(paths.master_client_cert), args.master_client, 0o400)
    if args.ca_key is not None:
        write_private(_staged(paths.ca_key), args.ca_key, 0o400)
    write_public(paths.ca_cert, args.ca_bundle, 0o644)


def _activate(paths: Paths) -> None:
    for target in (paths.node_key, paths.node_cert, paths.master_client_cert):
        staged = _staged(target)
        if staged.exists():
            staged.replace(target)
    if not paths.node_cert.exists():
        raise ParameterError("procedure renew_crypto: nothing was staged to activate")


def _finish(paths: Paths, args: RenewCryptoArgs) -> None:
    _check_bundle(args.ca_bundle)
    staged_key = _staged(paths.ca_key)
    if staged_key.exists():
        staged_key.replace(paths.ca_key)
    write_public(paths.ca_cert, args.ca_bundle, 0o644)


def _abort(paths: Paths, args: RenewCryptoArgs) -> None:
    for staged in _staged_files(paths):
        with contextlib.suppress(FileNotFoundError):
            staged.unlink()
    if args.ca_bundle:
        _check_bundle(args.ca_bundle)
        write_public(paths.ca_cert, args.ca_bundle, 0o644)


async def renew_crypto(paths: Paths, args: RenewCryptoArgs) -> str:
    """Do one step (see the module doc); the step done. The files are written with
    fsync, off the event loop; the node daemon then listens with them."""
    step = {"stage": lambda: _stage(paths, args), "activate": lambda: _activate(paths),
            "finish": lambda: _finish(paths, args), "abort": lambda: _abort(paths, args)}
    await asyncio.to_thread(step[args.phase])
    await asyncio.to_thread(refresh_modes, paths)  # written as root: owners and modes back
    return args.phase


def _restart(paths: Paths, names: list[str]) -> list[str]:
    restarted = []
    for name in names:
        if running_pid(paths.pid_file(name)) is None:
            continue
        stop_daemon(paths.pid_file(name))
        try:
            daemons.start(paths, only={name})
        except CorralError as err:
            raise CorralError(f"corral-{name} did not start again: {err.message}") from None
        restarted.append(name)
    return restarted


async def restart_daemons(paths: Paths, args: RestartDaemonsArgs) -> list[str]:
    """Restart those of ``args.daemons`` that run here; the ones restarted."""
    return await asyncio.to_thread(_restart, paths, list(args.daemons))
