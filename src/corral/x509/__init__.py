"""Certificates, keys and other secrets of a cluster (engines layer).

- :mod:`~corral.x509.certs`: the cluster CA, node certificates, verification, info.
- :mod:`~corral.x509.credentials`: the confd HMAC key and random passwords.
- :mod:`~corral.x509.tls`: SSL contexts for mutual TLS between nodes.
"""

from __future__ import annotations

from corral.utils.files import write_private, write_public
from corral.x509.certs import (
    CertInfo,
    create_ca,
    load_cert_info,
    sign_node_cert,
    verify_signed_by,
)
from corral.x509.credentials import generate_hmac_key, random_password
from corral.x509.tls import client_context, server_context

__all__ = [
    "CertInfo",
    "client_context",
    "create_ca",
    "generate_hmac_key",
    "load_cert_info",
    "random_password",
    "server_context",
    "sign_node_cert",
    "verify_signed_by",
    "write_private",
    "write_public",
]
