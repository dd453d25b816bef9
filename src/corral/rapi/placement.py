"""``/placement/``: OpenStack Placement's API, served by the RAPI daemon.

The RAPI daemon is the cluster's HTTPS edge, so it authenticates here and forwards
each request as one ``Placement`` luxi call to the master daemon, which owns the
placement engine and its rows (:mod:`corral.masterd.placement`); the body goes as text
both ways and is never decoded here.

Authentication: HTTP Basic with a user of the RAPI users file, or ``X-Auth-Token``
with a token given to such a user (``placement-token=`` option,
:mod:`corral.rapi.tokens`). Every such user may read; changes need the ``write``
option (403 otherwise, decided by the master with Placement's error body). No
credentials, or wrong ones, are 401, except for the version document at the root,
which is public as in Placement.
"""

from __future__ import annotations

import logging
import uuid as uuidlib
from typing import Final

from aiohttp import web

from corral.errors import CorralError
from corral.placement.rest.protocol import HttpProblem, error_response
from corral.rapi.auth import CHALLENGE, Users, check_credentials
from corral.rapi.luxi_pool import LuxiPool
from corral.rapi.users import RapiUser

__all__ = ["PREFIX", "TOKEN_HEADER", "forward"]

log = logging.getLogger(__name__)

#: Where the API is mounted.
PREFIX: Final = "/placement"
#: The header OpenStack clients send their token in.
TOKEN_HEADER: Final = "X-Auth-Token"


def _refusal(status: int, detail: str, headers: dict[str, str] | None = None,
             ) -> web.Response:
    answer = error_response(HttpProblem(status, detail, headers=headers),
                            f"req-{uuidlib.uuid4()}", None)
    return web.Response(status=answer.status, headers=answer.headers,
                        body=answer.body.encode())


def _user(users: Users, request: web.Request) -> RapiUser | web.Response | None:
    token = request.headers.get(TOKEN_HEADER)
    if token is not None:
        user = users.by_token(token.strip())
        if user is None:
            return _refusal(401, "The request you have made requires authentication: "
                                 "the X-Auth-Token is not known",
                            {"WWW-Authenticate": CHALLENGE})
        return user
    header = request.headers.get("Authorization")
    if header is None:
        return None
    found = check_credentials(users, header)
    if found is None:
        return _refusal(401, "The request you have made requires authentication: "
                             "unknown user, wrong password or credentials that are not "
                             "HTTP Basic", {"WWW-Authenticate": CHALLENGE})
    return found


async def forward(request: web.Request, luxi: LuxiPool, users: Users) -> web.Response:
    """Answer one ``/placement/...`` request through the master daemon."""
    path = request.path[len(PREFIX):]
    user = _user(users, request)
    if isinstance(user, web.Response):
        return user
    if user is None and path not in ("", "/"):
        return _refusal(401, "The request you have made requires authentication: send "
                             "HTTP Basic credentials of a RAPI user or an X-Auth-Token",
                        {"WWW-Authenticate": CHALLENGE})
    raw = await request.read() if request.body_exists else b""
    try:
        body = raw.decode("utf-8")
    except UnicodeDecodeError:
        return _refusal(400, "Malformed JSON: the body is not UTF-8")
    versions = request.headers.getall("OpenStack-API-Version", [])
    try:
        answer = await luxi.call(
            "Placement", request.method, path, request.query_string,
            ",".join(versions) if versions else None,
            request.headers.get("Content-Type"), body,
            user.name if user is not None else None,
            not (user is not None and user.can_write), PREFIX,
            request.headers.get("Accept"), read_only=request.method in ("GET", "HEAD"))
    except CorralError as err:
        log.warning("%s %s: %s", request.method, request.path, err.message)
        return _refusal(err.http_status if err.http_status >= 500 else 503,
                        f"the master daemon could not answer: {err.message}")
    status = int(answer["status"])
    headers = {str(k): str(v) for k, v in answer["headers"].items()}
    text = str(answer["body"])
    location = headers.get("Location")
    if location is not None and location.startswith("/"):
        # Absolute, as Placement's web framework makes it; clients follow it as it is.
        headers["Location"] = f"{request.scheme}://{request.host}{location}"
    if status == 204 or not text:
        headers.pop("Content-Type", None)
        return web.Response(status=status, headers=headers)
    return web.Response(status=status, headers=headers, body=text.encode())
