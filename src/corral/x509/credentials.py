"""Shared secrets: the confd HMAC key and random passwords.

(The RAPI users file is :mod:`corral.rapi.users`.)
"""

from __future__ import annotations

import secrets

__all__ = ["generate_hmac_key", "random_password"]


def generate_hmac_key() -> str:
    """A new random key for signing confd packets: 32 random bytes as 64 hex digits."""
    return secrets.token_hex(32)


def random_password(nbytes: int = 24) -> str:
    """A random password of ``nbytes`` random bytes, URL-safe base64 (no whitespace)."""
    return secrets.token_urlsafe(nbytes)
