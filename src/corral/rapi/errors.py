"""Errors that only exist in HTTP, and the one body every failed request answers.

Everything else a request can run into is a :class:`corral.errors.CorralError`, whose
``http_status`` says how RAPI answers it; the server turns both into the same body::

    {"code": 404, "message": "...", "explain": "...",
     "error_code": "not-found", "retryable": false}

``code``, ``message`` and ``explain`` are Ganeti's keys, kept as they are because
clients parse them (``code`` is the HTTP status). ``error_code`` is corral's stable,
machine-readable name of the error (:mod:`corral.errors`, or one of
:data:`HTTP_ERROR_CODES` for a refusal at the HTTP level) and ``retryable`` says
whether sending the same request again later can help.
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import Any, Final

__all__ = ["HTTP_ERROR_CODES", "RETRYABLE_STATUSES", "HttpError", "error_body"]

#: ``error_code`` of the refusals that happen before any corral code runs.
HTTP_ERROR_CODES: Final[Mapping[int, str]] = {
    400: "bad-request",
    401: "unauthorized",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    408: "request-timeout",
    413: "body-too-large",
    415: "unsupported-media-type",
    501: "not-implemented",
    503: "unavailable",
}
#: HTTP-level refusals that may pass by themselves.
RETRYABLE_STATUSES: Final = frozenset({429, 502, 503, 504})


class HttpError(Exception):
    """An HTTP-level refusal: ``status``, a message for the client, extra headers."""

    def __init__(self, status: int, message: str,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})

    @property
    def code(self) -> str:
        """The ``error_code`` of this refusal."""
        return HTTP_ERROR_CODES.get(self.status, "http-error")

    @property
    def retryable(self) -> bool:
        """Whether the same request may succeed later."""
        return self.status in RETRYABLE_STATUSES


def _explain(status: int) -> str:
    try:
        return HTTPStatus(status).description or HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def error_body(status: int, message: str, error_code: str, retryable: bool) -> dict[str, Any]:
    """The JSON body of a failed request (see the module docstring)."""
    return {"code": status, "message": message, "explain": _explain(status),
            "error_code": error_code, "retryable": retryable}
