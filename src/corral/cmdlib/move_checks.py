"""What each cluster checks, before any data flows, in what the third party hands
it for an inter-cluster move (design 2.2).

The destination (instance create, mode ``remote-import``) checks the source's
handshake and its signed certificate; the source (export, mode ``remote``) checks
its own key name, the destination's signed certificate and each disk's signed
destination. Every check uses this cluster's domain secret; a refusal is a
:class:`~corral.x509.moves.MoveCertificateError` whose ``check`` says which check
failed and whose text says which value (Ganeti's words where Ganeti has them).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from corral.errors import OpPrereqError
from corral.x509 import moves

__all__ = ["RemoteExportTarget", "RemoteImportSource", "check_remote_export",
           "check_remote_import"]


def _refuse(prefix: str, err: moves.MoveCertificateError) -> moves.MoveCertificateError:
    return moves.MoveCertificateError(f"{prefix}: {err.message}", check=err.check)


@dataclass(frozen=True, slots=True)
class RemoteImportSource:
    """The checked source of a remote import."""

    #: The source's move certificate (PEM, no header): the one CA the importer trusts.
    ca_pem: str
    instance_name: str


def check_remote_import(secret: str, handshake: Any, source_x509_ca: str | None,
                        source_instance_name: str | None, *,
                        now: dt.datetime | None = None) -> RemoteImportSource:
    """Check what a ``remote-import`` creation got from the source cluster."""
    if not handshake:
        raise OpPrereqError("Missing source handshake (source_handshake: the 'handshake' "
                            "of the source cluster's prepare-export answer)")
    try:
        moves.check_handshake(handshake, secret)
    except moves.MoveCertificateError as err:
        raise _refuse("Invalid handshake", err) from None
    if not source_x509_ca:
        raise OpPrereqError("Missing source X509 CA (source_x509_ca: the 'x509_ca' of the "
                            "source cluster's prepare-export answer)")
    try:
        verified = moves.verify_signed_certificate(source_x509_ca, secret, now=now)
    except moves.MoveCertificateError as err:
        raise _refuse("Invalid source X509 CA", err) from None
    if not source_instance_name:
        raise OpPrereqError("Missing source instance name (source_instance_name)")
    return RemoteImportSource(verified.pem, source_instance_name)


@dataclass(frozen=True, slots=True)
class RemoteExportTarget:
    """The checked destination of a remote export."""

    key_name: str
    #: The destination's move certificate (PEM, no header).
    ca_pem: str
    #: ``(host, port, magic)`` of each disk's importer, by disk index.
    disks: list[tuple[str, int, str]]


def check_remote_export(secret: str, instance_name: str, disk_count: int,
                        x509_key_name: Any, destination_x509_ca: str | None,
                        target_node: Any, *,
                        now: dt.datetime | None = None) -> RemoteExportTarget:
    """Check what a ``remote`` export got: this cluster's key name, the
    destination's certificate and one signed destination per disk."""
    if not x509_key_name:
        raise OpPrereqError("Missing X509 key name for encryption (x509_key_name: the "
                            "'x509_key_name' of this cluster's prepare-export answer)")
    if not destination_x509_ca:
        raise OpPrereqError("Missing destination X509 CA (destination_x509_ca: the "
                            "'x509_ca' the destination's import reported)")
    if not isinstance(target_node, list | tuple):
        raise OpPrereqError("for a remote export, target_node (RAPI: destination) must be "
                            "the list of the destination's disk answers, "
                            "[host, port, magic, hmac, salt] per disk")
    if len(target_node) != disk_count:
        raise OpPrereqError(f"Received destination information for {len(target_node)} "
                            f"disks, but instance {instance_name} has {disk_count} disks")
    key_name = moves.verify_key_name(x509_key_name, secret)
    try:
        verified = moves.verify_signed_certificate(destination_x509_ca, secret, now=now)
    except moves.MoveCertificateError as err:
        raise _refuse("Invalid destination X509 CA", err) from None
    disks = [moves.check_disk_info(info, index, secret)
             for index, info in enumerate(target_node)]
    return RemoteExportTarget(key_name, verified.pem, disks)
