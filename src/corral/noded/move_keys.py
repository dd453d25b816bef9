"""A node's keys for inter-cluster moves: made, listed and removed for the master.

Each move has its own RSA key and self-signed certificate (see
:mod:`corral.x509.moves`), made on the node that sends or receives the disks and
kept there: the private key never leaves the node. They live in
``Paths.crypto_dir/NAME/{key,cert}`` (mode 0400, directory 0700), under the run
directory, so a reboot forgets them as it forgets the transfers that used them.

- ``x509_cert_create`` ``{"validity": seconds, "common_name"}``: a new key; answers
  ``[name, cert_pem]``.
- ``x509_cert_remove`` ``{"name": NAME}``: forget the key (no error if it is gone).
- ``move_import`` / ``move_export``: a transfer of :mod:`corral.noded.impexp` whose TLS
  is this node's move key and the other cluster's move certificate (the key is read
  here: it never crosses the wire).
- ``x509_cert_list``: ``[{"name", "not_after"}]`` (``not_after`` a Unix time, null
  for a directory without a readable certificate).

:func:`clean_expired` is the watcher's cleaner (:mod:`corral.watcher.cleanup`): a move
abandoned half-way leaves its key behind, which it removes once the certificate
expired (a directory without a readable certificate once it is as old as a
certificate's validity).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import shutil
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from cryptography import x509 as cx509

from corral.errors import ParameterError
from corral.paths import Paths
from corral.rpc.args import (
    MoveExportArgs,
    MoveImportArgs,
    NoArgs,
    TransferTls,
    X509CertCreateArgs,
    X509CertRemoveArgs,
)
from corral.utils.files import write_private
from corral.x509 import moves

__all__ = ["clean_expired", "key_dir", "list_keys", "move_context", "move_export", "move_import",
           "x509_cert_create", "x509_cert_list", "x509_cert_remove"]


def key_dir(paths: Paths, name: str) -> Path:
    """The directory of the key ``name``; refuses a name that is not a key name (it
    could point elsewhere)."""
    if not moves.KEY_NAME_RE.match(name):
        raise ParameterError(f"invalid X509 key name {name!r}: expected "
                             "x509-YYYY-MM-DD_HH_MM_SS-xxxxxxxx")
    return paths.crypto_dir / name


def _create(paths: Paths, validity: int, common_name: str) -> list[str]:
    key_pem, cert_pem = moves.create_move_certificate(common_name or "corral", validity)
    paths.crypto_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    while True:
        name = moves.new_key_name()
        directory = key_dir(paths, name)
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            continue
        break
    write_private(directory / "key", key_pem)
    write_private(directory / "cert", cert_pem)
    return [name, cert_pem.decode("ascii")]


async def x509_cert_create(paths: Paths, args: X509CertCreateArgs) -> list[str]:
    """A new key and certificate for one move, valid ``args.validity`` seconds."""
    return await asyncio.to_thread(_create, paths, args.validity, args.common_name)


async def x509_cert_remove(paths: Paths, args: X509CertRemoveArgs) -> bool:
    """Forget a move's key; whether there was one."""
    directory = key_dir(paths, args.name)
    existed = directory.exists()
    await asyncio.to_thread(shutil.rmtree, directory, True)
    return existed


def list_keys(paths: Paths) -> list[dict[str, Any]]:
    """The move keys on this node with the end of their certificate's validity."""
    keys: list[dict[str, Any]] = []
    with contextlib.suppress(FileNotFoundError):
        for entry in sorted(paths.crypto_dir.iterdir()):
            if not moves.KEY_NAME_RE.match(entry.name):
                continue
            not_after: float | None = None
            with contextlib.suppress(OSError, ValueError):
                cert = cx509.load_pem_x509_certificate((entry / "cert").read_bytes())
                not_after = cert.not_valid_after_utc.replace(tzinfo=dt.UTC).timestamp()
            keys.append({"name": entry.name, "not_after": not_after})
    return keys


async def x509_cert_list(paths: Paths, args: NoArgs) -> list[dict[str, Any]]:
    """The move keys of this node (see :func:`list_keys`)."""
    del args
    return await asyncio.to_thread(list_keys, paths)


def clean_expired(paths: Paths, now: Callable[[], float] = time.time) -> list[str]:
    """Remove the move keys whose certificate expired; what was removed."""
    moment = now()
    removed: list[str] = []
    for entry in list_keys(paths):
        directory = paths.crypto_dir / entry["name"]
        not_after = entry["not_after"]
        if not_after is None:
            try:
                made = directory.stat().st_mtime
            except FileNotFoundError:
                continue
            if moment - made < moves.RIE_CERT_VALIDITY:
                continue  # being written, or a certificate we cannot read yet
            why = "without a readable certificate"
        elif not_after < moment:
            why = time.strftime("expired %Y-%m-%d %H:%M:%S UTC", time.gmtime(not_after))
        else:
            continue
        shutil.rmtree(directory, ignore_errors=True)
        removed.append(f"inter-cluster move key {entry['name']} ({why})")
    return removed


def move_context(paths: Paths, name: str, peer_ca_pem: str, *, server: bool) -> ssl.SSLContext:
    """TLS for one move's disk stream: this node presents its move key ``name`` and
    accepts only a peer whose certificate is ``peer_ca_pem`` (the other cluster's
    move certificate, whose signature the master checked). Both sides verify: the
    importer (``server``) requires the exporter's certificate.

    Host names are not checked: the peer's certificate is the one trust anchor of
    this connection, and it names the peer's node, not the address it is reached at.
    """
    directory = key_dir(paths, name)
    if not (directory / "key").exists():
        raise ParameterError(f"there is no X509 key {name} on this node (expired, removed "
                             "by the watcher, or made on another node)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(directory / "cert", directory / "key")
    try:
        ctx.load_verify_locations(cadata=peer_ca_pem)
    except ssl.SSLError as err:
        raise ParameterError(f"the peer's move certificate is not a PEM certificate: {err}"
                             ) from None
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def _move_tls(paths: Paths, name: str, peer_ca: str, given: TransferTls | None) -> TransferTls:
    if given is not None:
        raise ParameterError("a move's transfer takes its TLS from the move key; do not "
                             "give the transfer's own 'tls'")
    directory = key_dir(paths, name)
    try:
        return TransferTls(cert=(directory / "cert").read_text(),
                           key=(directory / "key").read_text(), ca=peer_ca)
    except FileNotFoundError:
        raise ParameterError(f"there is no X509 key {name} on this node (expired, removed "
                             "by the watcher, or made on another node)") from None


async def move_import(paths: Paths, args: MoveImportArgs) -> Any:
    """Start the importer of one disk of a move; ``{"name", "port"}``."""
    from corral.noded import impexp as impexp_procs  # the watcher imports this module

    tls = await asyncio.to_thread(_move_tls, paths, args.x509_key_name, args.peer_ca,
                                  args.transfer.tls)
    return await impexp_procs.impexp_import(paths, msgspec.structs.replace(args.transfer,
                                                                           tls=tls))


async def move_export(paths: Paths, args: MoveExportArgs) -> Any:
    """Start the exporter of one disk of a move; ``{"name"}``."""
    from corral.noded import impexp as impexp_procs

    tls = await asyncio.to_thread(_move_tls, paths, args.x509_key_name, args.peer_ca,
                                  args.transfer.tls)
    return await impexp_procs.impexp_export(paths, msgspec.structs.replace(args.transfer,
                                                                           tls=tls))
