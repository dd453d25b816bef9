"""Errors that only exist in HTTP: no such path, method, media type, credentials.

Everything else a request can run into is a :class:`corral.errors.CorralError`, whose
``http_status`` says how RAPI answers it; the server turns both into the same body.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["HttpError"]


class HttpError(Exception):
    """An HTTP-level refusal: ``status``, a message for the client, extra headers."""

    def __init__(self, status: int, message: str,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})
