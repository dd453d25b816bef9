"""The one-time join token, bound to the certificate of the node that made it.

A node daemon that belongs to no cluster serves with a throwaway self-signed
certificate and prints a token of two parts, ``<secret>.<fingerprint>``: a random
secret and the SHA-256 fingerprint of that certificate (both URL-safe base64, no
padding). The master that is given the token

* connects only to a server presenting the certificate the token names, so a
  token seen by someone else cannot make the master hand the cluster's secrets
  (the join bundle) to another server, and
* sends not the secret but :func:`join_proof`, an HMAC of the fingerprint under the
  secret, which the node checks against its own certificate: the secret never
  travels, and a proof made for one certificate is worth nothing for another.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets

from corral.errors import JoinError

__all__ = ["check_join_proof", "join_proof", "make_join_token", "split_join_token"]

_SECRET_BYTES = 24
_FINGERPRINT_BYTES = 32  # SHA-256


def _encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def make_join_token(fingerprint: bytes) -> str:
    """A new token for the node whose certificate has this SHA-256 ``fingerprint``."""
    if len(fingerprint) != _FINGERPRINT_BYTES:
        raise ValueError("a join token binds a SHA-256 certificate fingerprint (32 bytes)")
    return f"{_encode(secrets.token_bytes(_SECRET_BYTES))}.{_encode(fingerprint)}"


def split_join_token(token: str) -> tuple[bytes, bytes]:
    """The secret and the certificate fingerprint of a token.

    :raises JoinError: for anything but a token a node daemon prints.
    """
    secret_text, dot, fingerprint_text = token.strip().partition(".")
    try:
        secret = _decode(secret_text)
        fingerprint = _decode(fingerprint_text)
    except (binascii.Error, ValueError):
        secret, fingerprint = b"", b""
    if not dot or len(secret) != _SECRET_BYTES or len(fingerprint) != _FINGERPRINT_BYTES:
        raise JoinError(
            "invalid join token: expected '<secret>.<certificate fingerprint>' as the node "
            "daemon prints it at start (also in its join-token file)")
    return secret, fingerprint


def join_proof(secret: bytes, fingerprint: bytes) -> str:
    """What the master sends for the node with certificate ``fingerprint``."""
    return _encode(hmac.new(secret, fingerprint, hashlib.sha256).digest())


def check_join_proof(token: str, own_fingerprint: bytes, proof: object) -> None:
    """Refuse (:class:`JoinError`) a proof not made from ``token`` for this node's
    certificate (``own_fingerprint``), comparing in constant time."""
    if not isinstance(proof, str) or not proof:
        raise JoinError("the join request has no proof of the token; use a master that "
                        "binds the token to this node's certificate")
    secret, _fingerprint = split_join_token(token)
    if not hmac.compare_digest(join_proof(secret, own_fingerprint).encode(), proof.encode()):
        raise JoinError(
            "invalid join token: the proof does not match the token this node printed for "
            "its certificate (a wrong token, or one replayed with another certificate)")
