"""The destination's part of an inter-cluster move: instance create with mode
``remote-import`` (design 2.2).

Before anything is made, the values the third party brought from the source cluster
are checked with this cluster's domain secret (:mod:`corral.cmdlib.move_checks`):
the handshake, the signed certificate (signature, validity) and the source instance
name; a refusal fails the job at once, naming the check that failed.

Then the instance's disks are made as for any creation and, instead of the OS
``create`` script, each disk gets an importer on the primary node
(``move_import``: the transport of :mod:`corral.noded.impexp` with the move key made
there and the source's certificate as the one CA it trusts), feeding the OS
``import`` script (or the disk itself for an instance without OS). Once all listen,
the job log gets one entry of type ``remote-import``, as Ganeti writes it::

    {"disks": [[host, port, magic, hmac, salt], ...], "x509_ca": "X-Ganeti-Signature: ..."}

which ``move-instance`` hands to the source's export. The job follows the transfers
(progress in its log) until every disk is received. Whatever happens, the move key is
removed at the end; a failed transfer aborts the others and fails the job with the
bytes received, and the creation then removes the disks it made (nothing is left).
When the source instance had another name, the OS ``rename`` script runs after the
data arrived, as Ganeti does.
"""

from __future__ import annotations

import secrets
from typing import Any

from corral.cmdlib import disk_transfer
from corral.cmdlib.backup_prepare import read_domain_secret
from corral.cmdlib.base import LogicalUnit
from corral.cmdlib.instance_base import RPC_INSTALL, call_node, wire
from corral.cmdlib.move_checks import RemoteImportSource, check_remote_import
from corral.errors import CorralError
from corral.objects import Node
from corral.objects.specs import InstanceSpec
from corral.x509 import moves

__all__ = ["ACCEPT_TIMEOUT", "remote_import_prereq", "run_remote_import"]

#: How long an importer waits for the source to connect (seconds).
ACCEPT_TIMEOUT = 600.0

async def remote_import_prereq(lu: LogicalUnit[Any]) -> RemoteImportSource:
    """Check the source values of a ``remote-import`` creation; the checked source."""
    op = lu.op
    secret = await read_domain_secret(lu.master.paths or getattr(lu.master.rpc, "paths", None))
    source = check_remote_import(secret, op.source_handshake, op.source_x509_ca,
                                 op.source_instance_name)
    lu.feedback(f"Source certificate of {source.instance_name} verified (signed with this "
                "cluster's domain secret, valid)")
    return source


async def run_remote_import(lu: LogicalUnit[Any], node: Node, spec: InstanceSpec,
                            source: RemoteImportSource, compression: str) -> None:
    """Receive every disk of the instance ``spec`` (its disks exist on ``node``)."""
    master = lu.master
    secret = await read_domain_secret(master.paths or getattr(master.rpc, "paths", None))
    key_name, cert_pem = await call_node(
        master, node, "x509_cert_create",
        {"validity": moves.RIE_CERT_VALIDITY, "common_name": node.name},
        f"creating the X509 key of the import on {node.name}")
    names: list[str] = []
    try:
        signed = moves.sign_certificate(cert_pem, secret)
        base = secrets.token_hex(8)
        salt = moves.new_salt()
        search_path = list(master.store.cluster.os_search_path)
        disks: list[list[Any]] = []
        for index, disk in enumerate(spec.disks):
            name = f"{spec.name}-import-{base}-{index}"
            magic = f"{base}-{secrets.token_hex(8)}-{index}"
            end: dict[str, Any] = (
                {"kind": "os", "instance": wire(spec), "index": index,
                 "search_path": search_path} if spec.os else
                {"kind": "disk", "disk": wire(disk)})
            answer = await call_node(master, node, "move_import", {
                "x509_key_name": key_name, "peer_ca": source.ca_pem,
                "transfer": {"name": name, "magic": magic, "compression": compression,
                             "destination": end, "host": node.primary_ip,
                             "accept_timeout": ACCEPT_TIMEOUT}},
                f"starting the import of disk {index} on {node.name}")
            names.append(name)
            lu.feedback(f"Disk {index} is now listening")
            disks.append(moves.sign_disk_info(secret, index, node.primary_ip,
                                              int(answer["port"]), magic, salt))
        lu.feedback({"disks": disks, "x509_ca": signed}, "remote-import")
        for index, name in enumerate(names):
            final = await disk_transfer.follow(master, lu.feedback, [node], name,
                                               f"disk/{index}")
            lu.feedback(f"Disk {index} finished receiving data "
                        f"({int(final.get('bytes') or 0)} bytes)")
    except BaseException:
        if names:
            await _abort(lu, node, names)
        raise
    finally:
        await _remove_key(lu, node, key_name)
    if source.instance_name != spec.name:
        await _rename_script(lu, node, spec, source.instance_name)


async def _abort(lu: LogicalUnit[Any], node: Node, names: list[str]) -> None:
    try:
        await call_node(lu.master, node, "impexp_abort", {"names": names},
                        f"stopping the transfers on {node.name}")
    except CorralError as err:
        lu.feedback(f" - WARNING: {err.message}; the watcher cleans them up")


async def _remove_key(lu: LogicalUnit[Any], node: Node, key_name: str) -> None:
    try:
        await call_node(lu.master, node, "x509_cert_remove", {"name": key_name},
                        f"removing the X509 key {key_name} on {node.name}")
    except CorralError as err:
        lu.feedback(f" - WARNING: {err.message}; the watcher removes it once expired")


async def _rename_script(lu: LogicalUnit[Any], node: Node, spec: InstanceSpec,
                         old_name: str) -> None:
    if not spec.os:
        return
    try:
        await call_node(lu.master, node, "instance_run_rename",
                        {"instance": wire(spec), "old_name": old_name,
                         "search_path": list(lu.master.store.cluster.os_search_path)},
                        f"running the OS rename script of instance {spec.name}",
                        timeout=RPC_INSTALL)
    except CorralError as err:
        lu.feedback(f" - WARNING: {err.message} (the instance was imported as {spec.name}; "
                    "the OS may still know it as {old_name})")
