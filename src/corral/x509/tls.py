"""TLS contexts for mutual authentication between nodes.

Both sides present their node certificate and accept only peers whose certificate
the cluster CA signed. TLS 1.2 is the minimum.
"""

from __future__ import annotations

import os
import ssl

__all__ = ["client_context", "server_context"]

_PathLike = str | os.PathLike[str]


def server_context(
    cert_file: _PathLike,
    key_file: _PathLike,
    ca_file: _PathLike,
    *,
    require_client_cert: bool = True,
) -> ssl.SSLContext:
    """A server context presenting ``cert_file``; clients need a CA-signed certificate.

    With ``require_client_cert=False`` (RAPI, whose clients authenticate with a
    password) clients without a certificate are let in.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(os.fspath(cert_file), os.fspath(key_file))
    ctx.load_verify_locations(cafile=os.fspath(ca_file))
    ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    return ctx


def client_context(
    ca_file: _PathLike,
    cert_file: _PathLike | None = None,
    key_file: _PathLike | None = None,
    *,
    check_hostname: bool = True,
) -> ssl.SSLContext:
    """A client context trusting only the cluster CA, presenting ``cert_file`` if given.

    Node certificates name the node and its addresses, so the host name (or IP
    address) the client connects to is checked unless ``check_hostname`` is False.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_verify_locations(cafile=os.fspath(ca_file))
    if cert_file is not None:
        ctx.load_cert_chain(
            os.fspath(cert_file), os.fspath(key_file) if key_file is not None else None
        )
    ctx.check_hostname = check_hostname
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx
