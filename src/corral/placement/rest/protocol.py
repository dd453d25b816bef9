"""The HTTP-free request, response and error shapes of the ``/placement/`` API.

A request reaches the handlers as a :class:`PlacementRequest` (method, path below the
mount point, raw query string, the ``OpenStack-API-Version`` header, body text, the
authenticated user and whether that user may write); the answer is a
:class:`PlacementResponse` (status, headers, body text). Keeping both as plain values
lets the RAPI daemon forward a call to the master daemon as one luxi call and lets the
unit tests run the API without a server.

Microversions follow OpenStack Placement: the ``OpenStack-API-Version: placement X.Y``
header (``latest`` is the newest, no header the oldest); a version outside 1.0-1.39 is
406, a malformed one 400; every answer names the version it was made at and carries
``Vary: openstack-api-version``. Errors have Placement's body
``{"errors": [{"status", "title", "detail", "code", "request_id"}]}`` (``code`` from
1.23) and the ``openstack-request-id`` header.
"""

from __future__ import annotations

import html
import uuid as uuidlib
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Final

from corral import serializer
from corral.errors import PlacementError

__all__ = ["JSON", "MAX_VERSION", "MIN_VERSION", "REQUEST_ID_HEADER", "VERSION_HEADER", "Changes",
           "HttpProblem", "PlacementRequest", "PlacementResponse", "Version",
           "accepts_json", "error_response", "json_response", "negotiate", "parse_version_header",
           "version_headers", "version_text"]

#: The one media type the API speaks.
JSON: Final = "application/json"
#: A microversion as ``(major, minor)``.
Version = tuple[int, int]
#: Oldest and newest microversions served.
MIN_VERSION: Final[Version] = (1, 0)
MAX_VERSION: Final[Version] = (1, 39)
#: The standard microversion header (lower case; HTTP header names ignore case).
VERSION_HEADER: Final = "openstack-api-version"
#: Where an answer names its request.
REQUEST_ID_HEADER: Final = "openstack-request-id"
#: The service type a version header must name.
SERVICE_TYPE: Final = "placement"
#: First microversion whose error bodies carry ``code``.
ERROR_CODE_VERSION: Final[Version] = (1, 23)


@dataclass(frozen=True)
class PlacementRequest:
    """One API call as the handlers see it."""

    method: str
    #: Below the mount point, starting with ``/`` (``/resource_providers``); ``""`` or
    #: ``/`` is the version document.
    path: str
    #: The raw query string (without ``?``).
    query: str = ""
    #: The value(s) of the ``OpenStack-API-Version`` header, folded with ``,``.
    version_header: str | None = None
    body: str = ""
    content_type: str | None = None
    #: Who called (None: not authenticated, e.g. the version document).
    user: str | None = None
    #: True when the user may only read: every change is refused with 403.
    read_only: bool = False
    #: Where the API is mounted, for the links in answers.
    prefix: str = "/placement"
    #: The ``Accept`` header, if any.
    accept: str | None = None
    request_id: str = field(default_factory=lambda: f"req-{uuidlib.uuid4()}")


@dataclass
class PlacementResponse:
    """One answer: status, headers and the body as text (empty for 204)."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""

    def to_wire(self) -> dict[str, Any]:
        """The answer as the master daemon sends it over luxi."""
        return {"status": self.status, "headers": self.headers, "body": self.body}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> PlacementResponse:
        """The answer from its luxi form."""
        return cls(int(data["status"]), dict(data["headers"]), str(data["body"]))


@dataclass
class Changes:
    """What a call changed, so that the caller persists exactly that: providers,
    consumers, custom resource classes and custom traits (each by key; one missing
    from the store afterwards was deleted)."""

    providers: set[str] = field(default_factory=set)
    consumers: set[str] = field(default_factory=set)
    resource_classes: set[str] = field(default_factory=set)
    traits: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.providers or self.consumers or self.resource_classes
                    or self.traits)


class HttpProblem(Exception):
    """An HTTP error raised by a handler: status, Placement's detail text and code."""

    def __init__(self, status: int, detail: str, *, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.code = code or "placement.undefined_code"
        self.headers = headers or {}

    @classmethod
    def from_error(cls, err: PlacementError) -> HttpProblem:
        """The HTTP form of an engine error; a query-string schema error names the
        rule it broke as Placement's validator does."""
        detail = err.message
        if err.placement_code is None and detail.startswith(_QUERY_SCHEMA):
            rule = next((rule for words, rule in _SCHEMA_RULES if words in detail), None)
            if rule is not None:
                detail = f"{detail}\n\nFailed validating '{rule}' in schema"
        return cls(err.http_status, detail,
                   code=err.placement_code or "placement.undefined_code")


#: How the engine's query-string schema errors start.
_QUERY_SCHEMA: Final = "Invalid query string parameters:"
#: The JSON-schema rule behind a schema error, by the words of its message.
_SCHEMA_RULES: Final = (
    ("do not match any of the regexes", "additionalProperties"),
    ("does not match any of the regexes", "additionalProperties"),
    ("Additional properties are not allowed", "additionalProperties"),
    ("does not match", "pattern"),
    ("is a required property", "required"),
    ("is not of type", "type"),
    ("is not one of", "enum"),
    ("is too short", "minLength"),
    ("should be non-empty", "minLength"),
)


#: The first sentence webob puts before a detail, per status (Placement's bodies).
_EXPLANATIONS: Final = {
    400: "The server could not comply with the request since it is either malformed or "
         "otherwise incorrect.",
    401: "This server could not verify that you are authorized to access the document "
         "you requested.",
    403: "Access was denied to this resource.",
    404: "The resource could not be found.",
    405: "The method {method} is not allowed for this resource.",
    406: "The resource could not be generated that was acceptable to your browser "
         "(content of type application/json.",
    409: "There was a conflict when trying to complete your request.",
    415: "The request media type application/json is not supported by this server.",
    500: "The server has either erred or is incapable of performing the requested "
         "operation.",
    501: "The server has not implemented the requested operation.",
}


def accepts_json(accept: str | None) -> bool:
    """Whether an ``Accept`` header lets the answer be JSON (no header does)."""
    if accept is None or not accept.strip():
        return True
    for entry in accept.split(","):
        media, *params = (part.strip() for part in entry.split(";"))
        quality = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        if quality > 0 and media.lower() in (JSON, "application/*", "*/*"):
            return True
    return False


def version_text(version: Version) -> str:
    """``1.39`` for ``(1, 39)``."""
    return f"{version[0]}.{version[1]}"


def parse_version_header(value: str | None) -> str | None:
    """The version a folded ``OpenStack-API-Version`` value asks of placement (the last
    ``placement X`` entry wins), or None when it names none."""
    if not value:
        return None
    for entry in reversed(value.split(",")):
        parts = entry.strip().split(None, 1)
        if len(parts) == 2 and parts[0].lower() == SERVICE_TYPE:
            return parts[1].strip()
    return None


def negotiate(header: str | None) -> Version:
    """The microversion a request asks for; :class:`HttpProblem` 400 when it is not
    ``X.Y`` or ``latest``, 406 when it is outside the served range."""
    asked = parse_version_header(header)
    text = asked if asked is not None else version_text(MIN_VERSION)
    if text == "latest":
        return MAX_VERSION
    major, dot, minor = text.partition(".")
    try:
        version = (int(major), int(minor) if dot else -1)
        if not dot:
            raise ValueError(text)
    except ValueError:
        raise HttpProblem(400, f"Invalid microversion: invalid version string: {text}; "
                               "expected 'X.Y' or 'latest'") from None
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise HttpProblem(406, f"Invalid microversion: Unacceptable version header: {text}")
    return version


def version_headers(version: Version) -> dict[str, str]:
    """The headers every answer at ``version`` carries."""
    return {"OpenStack-API-Version": f"{SERVICE_TYPE} {version_text(version)}",
            "Vary": VERSION_HEADER}


def json_response(status: int, data: Any, headers: dict[str, str] | None = None,
                  ) -> PlacementResponse:
    """A JSON answer."""
    out = {"Content-Type": "application/json"}
    if headers:
        out.update(headers)
    return PlacementResponse(status, out, serializer.dumps(data).decode())


def wants_html(accept: str | None) -> bool:
    """Whether an error should be HTML, as Placement's web framework makes it for a
    client that names ``text/html`` and not JSON (no ``Accept`` or ``*/*``: JSON)."""
    if not accept:
        return False
    named = {part.split(";", 1)[0].strip().lower() for part in accept.split(",")}
    return "text/html" in named and JSON not in named


def error_response(problem: HttpProblem, request_id: str, version: Version | None,
                   method: str = "GET", accept: str | None = None) -> PlacementResponse:
    """Placement's error answer for ``problem`` (at ``version``; None when the version
    itself was refused, then the body names the range served)."""
    title = HTTPStatus(problem.status).phrase
    explanation = _EXPLANATIONS.get(problem.status, title).replace("{method}", method)
    error: dict[str, Any] = {"status": problem.status, "title": title,
                             "detail": (problem.detail if problem.detail == explanation
                                        else f"{explanation}\n\n {problem.detail}  ")}
    if version is not None and version >= ERROR_CODE_VERSION:
        error["code"] = problem.code
    error["request_id"] = request_id
    if problem.status == 406 and version is None:
        error["max_version"] = version_text(MAX_VERSION)
        error["min_version"] = version_text(MIN_VERSION)
    headers = dict(problem.headers)
    headers[REQUEST_ID_HEADER] = request_id
    if version is not None:
        headers.update(version_headers(version))
    if wants_html(accept):
        heading = f"{problem.status} {title}"
        text = (f"<html>\n <head>\n  <title>{heading}</title>\n </head>\n <body>\n"
                f"  <h1>{heading}</h1>\n  {html.escape(explanation)}<br /><br />\n"
                f"{html.escape(problem.detail)}\n\n\n </body>\n</html>")
        return PlacementResponse(problem.status, {
            **headers, "Content-Type": "text/html; charset=UTF-8"}, text)
    return json_response(problem.status, {"errors": [error]}, headers)
