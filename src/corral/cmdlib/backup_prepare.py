"""``OP_BACKUP_PREPARE`` (RAPI ``PUT /2/instances/N/prepare-export``): the source
cluster's first step of an inter-cluster move (design 2.2).

Mode ``remote`` makes an RSA key and a self-signed certificate for the move on the
instance's primary node (``x509_cert_create``; the private key stays there) and
answers what the third party hands to the destination cluster, each part signed
with the cluster domain secret (:mod:`corral.x509.moves`), exactly as Ganeti 3.0
answers it::

    {"handshake": [0, HMAC, SALT],
     "x509_key_name": [NAME, HMAC, SALT],
     "x509_ca": "X-Ganeti-Signature: SALT/HMAC\\n\\n-----BEGIN CERTIFICATE-----..."}

The certificate's salt is the key name's. Mode ``local`` needs no preparation and
answers null. The key is removed after the export's last disk, or by the watcher
once its certificate expired (a move that was abandoned).
"""

from __future__ import annotations

import asyncio
from typing import Any

from corral.cmdlib.instance_base import InstanceLU
from corral.errors import OpExecError, OpPrereqError
from corral.opcodes.move_ops import OpBackupPrepare
from corral.paths import Paths
from corral.x509 import moves

__all__ = ["UNITS", "LUBackupPrepare", "read_domain_secret"]


async def read_domain_secret(paths: Paths | None) -> str:
    """This cluster's domain secret, read on the master node."""
    if paths is None:
        raise OpExecError("the master's files are not available to read the cluster "
                          "domain secret")
    try:
        text = await asyncio.to_thread(paths.cluster_domain_secret.read_text)
    except FileNotFoundError:
        raise OpPrereqError(
            "this cluster has no cluster domain secret: make one with 'gnt-cluster "
            "renew-crypto --new-cluster-domain-secret' (or give the other cluster's with "
            "--cluster-domain-secret=FILE)") from None
    except OSError as err:
        raise OpExecError(f"cannot read the cluster domain secret: {err}") from None
    return moves.read_domain_secret(text)


class LUBackupPrepare(InstanceLU[OpBackupPrepare]):
    """Prepare an export (see the module doc)."""

    OP_ID = "OP_BACKUP_PREPARE"
    SHARED_NODES = True

    def check_prereq(self) -> None:
        """The primary node must answer to make the key."""
        super().check_prereq()
        if self.op.mode == "remote" and self.primary.offline:
            raise OpPrereqError(f"cannot prepare the export of {self.instance.name}: its "
                                f"primary node {self.primary.name} is offline")

    async def execute(self) -> dict[str, Any] | None:
        """Nothing for ``local``; the signed key, certificate and handshake for
        ``remote``."""
        if self.op.mode == "local":
            return None
        secret = await read_domain_secret(self.master.paths
                                          or getattr(self.master.rpc, "paths", None))
        node = self.primary
        self.feedback(f"Generating X509 certificate on {node.name}")
        answer = await self.call_one(node, "x509_cert_create",
                                     {"validity": moves.RIE_CERT_VALIDITY,
                                      "common_name": node.name},
                                     f"creating the X509 key of the move on {node.name}")
        if not (isinstance(answer, list) and len(answer) == 2):
            raise OpExecError(f"node {node.name} answered {answer!r} for a new X509 key; "
                              "expected [name, certificate]")
        name, cert_pem = answer
        salt = moves.new_salt()
        return {
            "handshake": moves.make_handshake(secret),
            "x509_key_name": moves.sign_key_name(name, secret, salt),
            "x509_ca": moves.sign_certificate(cert_pem, secret, salt),
        }


#: The logical units of this area.
UNITS = (LUBackupPrepare,)
