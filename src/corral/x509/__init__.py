"""Certificates, keys and other secrets of a cluster (engines layer).

- :mod:`~corral.x509.certs`: the cluster CA, node certificates, the master's client
  certificate, the self-signed RAPI certificate, verification, info.
- :mod:`~corral.x509.credentials`: the confd HMAC key and random passwords.
- :mod:`~corral.x509.join_token`: the join token bound to the joining node's certificate.
- :mod:`~corral.x509.tls`: SSL contexts for mutual TLS between nodes.
- :mod:`~corral.x509.moves`: per-move RSA keys and certificates, and the HMAC
  signatures (cluster domain secret) of what two clusters exchange for a move.
"""

from __future__ import annotations

from corral.utils.files import write_private, write_public
from corral.x509.certs import (
    CERT_DAYS,
    MASTER_CLIENT_OU,
    CertInfo,
    create_ca,
    create_self_signed,
    ensure_self_signed,
    fingerprint,
    is_master_client,
    load_cert_info,
    sign_master_client_cert,
    sign_node_cert,
    verify_signed_by,
)
from corral.x509.credentials import generate_hmac_key, random_password
from corral.x509.join_token import (
    check_join_proof,
    join_proof,
    make_join_token,
    split_join_token,
)
from corral.x509.tls import client_context, server_context

__all__ = [
    "CERT_DAYS",
    "MASTER_CLIENT_OU",
    "CertInfo",
    "check_join_proof",
    "client_context",
    "create_ca",
    "create_self_signed",
    "ensure_self_signed",
    "fingerprint",
    "generate_hmac_key",
    "is_master_client",
    "join_proof",
    "load_cert_info",
    "make_join_token",
    "random_password",
    "server_context",
    "sign_master_client_cert",
    "sign_node_cert",
    "split_join_token",
    "verify_signed_by",
    "write_private",
    "write_public",
]
