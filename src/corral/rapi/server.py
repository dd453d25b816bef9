"""The RAPI HTTP application: one dispatcher over the route table.

Every request goes through :meth:`Dispatcher.handle`, in Ganeti's order:

1. find the route (404 when no resource has the path);
2. find the method (501 with ``Allow`` when the resource has no such method);
3. authenticate and authorise (401 with ``WWW-Authenticate``, 403), then answer 501
   for a method Ganeti has there and corral does not serve yet;
4. read the query arguments by their declared kinds (an argument the operation does
   not take is ignored, as Ganeti ignores it: logged at debug level and named in the
   ``X-Corral-Ignored-Arguments`` response header) and the body, which must be
   ``application/json`` (415) and well-formed (400), and check it where declared (a
   body where the operation takes none, or keys of a ``depends``-only body other than
   ``depends``, are ignored as Ganeti ignores them, named in ``X-Corral-Ignored-Body``);
5. run the handler and answer its result as JSON.

Every failure, whichever step raised it, becomes ``{"code", "message", "explain",
"error_code", "retryable"}`` (:mod:`corral.rapi.errors`) with the status of the error
in one place, :func:`error_response`; corral errors carry their own status and code
(:mod:`corral.errors`). An unexpected exception answers 500 with an incident id, never
its own text; the log keeps its traceback. Connections are kept alive.

Slow clients hold a coroutine, never a worker, and not for ever: a request whose
headers are not complete when the keep-alive timeout of the daemon's runner passes is
dropped by aiohttp, and a body must arrive within :data:`BODY_TIMEOUT` seconds of the
headers (otherwise 408).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final
from urllib.parse import quote

from aiohttp import web

from corral import __version__, serializer
from corral.errors import CorralError, ParameterError, unexpected
from corral.rapi import placement
from corral.rapi.auth import Users, authorize
from corral.rapi.errors import HttpError, error_body
from corral.rapi.luxi_pool import LuxiPool
from corral.rapi.request import IGNORED_ARGS_HEADER, RapiRequest, ignored_args, parse_args
from corral.rapi.routes import find
from corral.rapi.schema import describe, validate
from corral.rapi.spec import METHODS, NotServed, Operation

__all__ = ["BODY_TIMEOUT", "IGNORED_BODY_HEADER", "JSON", "MAX_BODY", "Dispatcher",
           "build_app", "error_response"]

log = logging.getLogger(__name__)

#: Paths below this go to OpenStack Placement's API (:mod:`corral.rapi.placement`).
PLACEMENT: Final = placement.PREFIX

#: The one media type RAPI speaks.
JSON: Final = "application/json"
#: Largest request body accepted (bytes).
MAX_BODY: Final = 16 * 1024 * 1024
#: Seconds a request body may take to arrive once the headers have.
BODY_TIMEOUT: Final = 60.0
_SERVER: Final = f"corral-rapi/{__version__}"
#: Where a request keeps the query arguments it gave and its operation does not take.
_IGNORED_KEY: Final = web.RequestKey("corral_ignored_arguments", list[str])
#: Where a request keeps the body keys its operation ignores.
_IGNORED_BODY_KEY: Final = web.RequestKey("corral_ignored_body", list[str])
#: The response header naming them.
IGNORED_BODY_HEADER: Final = "X-Corral-Ignored-Body"
#: Printable ASCII left as it is in those headers (not the comma, space or percent).
_HEADER_SAFE: Final = "".join(c for c in map(chr, range(0x21, 0x7f))
                              if c not in ",%" and not c.isalnum())


def error_response(status: int, message: str, headers: dict[str, str] | None = None, *,
                   error_code: str | None = None, retryable: bool | None = None,
                   ) -> web.Response:
    """The answer to every failed request (:func:`corral.rapi.errors.error_body`);
    ``error_code`` and ``retryable`` default to those of an HTTP refusal of ``status``."""
    refusal = HttpError(status, message)
    body = error_body(status, message, refusal.code if error_code is None else error_code,
                      refusal.retryable if retryable is None else retryable)
    return web.Response(status=status, body=serializer.dumps(body), content_type=JSON,
                        headers=headers)


def _media_type(value: str) -> str:
    return value.split(";", 1)[0].strip().lower()


def _corral_error(err: CorralError) -> web.Response:
    return error_response(err.http_status, err.message, error_code=err.code,
                          retryable=err.retryable)


class Dispatcher:
    """Answers every request from the route table."""

    def __init__(self, *, luxi: LuxiPool, users: Users, require_auth: bool,
                 body_timeout: float = BODY_TIMEOUT) -> None:
        self.luxi = luxi
        self.users = users
        self.require_auth = require_auth
        self.body_timeout = body_timeout

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Answer one request (every path and method comes here)."""
        if request.path == PLACEMENT or request.path.startswith(PLACEMENT + "/"):
            return await placement.forward(request, self.luxi, self.users)
        try:
            result = await self._answer(request)
        except HttpError as err:
            response = error_response(err.status, err.message, err.headers)
            if err.headers.get("Connection") == "close":
                response.force_close()  # the rest of what the client sends is not read
            return response
        except CorralError as err:
            if err.http_status >= 500:
                log.warning("%s %s failed: %s", request.method, request.path, err.message)
            return _corral_error(err)
        except web.HTTPException as err:  # raised by aiohttp itself, e.g. body too large
            return error_response(err.status, err.text or err.reason)
        except Exception as err:
            what = f"{request.method} {request.path}"
            return _corral_error(unexpected(err, log, what, "corral-rapi"))
        return web.Response(body=serializer.dumps(result), content_type=JSON)

    async def _answer(self, request: web.Request) -> Any:
        path = request.path
        route, path_args = find(path)
        method = request.method
        entry = route.methods.get(method)
        allow = ", ".join(m for m in METHODS if m in route.served)
        if entry is None:
            raise HttpError(501, f"method {method} is not supported for {route.path}; "
                                 f"supported: {allow or 'none'}", {"Allow": allow})
        user = authorize(self.users, entry.access, request.headers.get("Authorization"),
                         require_auth=self.require_auth, what=f"{method} {route.path}")
        if isinstance(entry, NotServed):
            raise HttpError(501, f"{method} {route.path} is not served by corral yet: "
                                 f"{entry.reason}", {"Allow": allow})
        ignored = ignored_args(entry, method, route.path, request.query.keys())
        if ignored:
            request[_IGNORED_KEY] = ignored
        args = parse_args(entry, request.query.items())
        body = await self._body(request, entry, f"{method} {route.path}")
        req = RapiRequest(route=route, operation=entry, method=method, path=path,
                          path_args=path_args, args=args, body=body, user=user,
                          luxi=self.luxi)
        return await entry.handler(req)

    async def _body(self, request: web.Request, operation: Operation, what: str) -> Any:
        raw = b""
        if request.body_exists:
            try:
                async with asyncio.timeout(self.body_timeout):
                    raw = await request.read()
            except TimeoutError:
                log.warning("%s: dropped a client whose body did not arrive within %g s",
                            what, self.body_timeout)
                raise HttpError(408, f"the request body did not arrive within "
                                     f"{self.body_timeout:g} s of its headers",
                                {"Connection": "close"}) from None
            except ConnectionError:  # the client left mid-body: nobody to answer
                log.info("%s: the client closed the connection before its body arrived",
                         what)
                raise HttpError(400, "the connection closed before the request body "
                                     "arrived", {"Connection": "close"}) from None
        if raw.strip():
            content_type = request.headers.get("Content-Type", "application/octet-stream")
            if _media_type(content_type) != JSON:
                raise HttpError(415, f"request bodies must be JSON with Content-Type: {JSON}; "
                                     f"got {content_type!r}")
            try:
                body = serializer.loads(raw)
            except serializer.DecodeError as err:
                raise ParameterError(f"the request body is not valid JSON: {err}") from None
        else:
            body = None
        spec = operation.body
        if spec is None:
            if body not in (None, {}):
                # Ganeti ignores a body where it takes none; so does corral, saying so.
                self._ignored_body(request, what, sorted(body) if isinstance(body, dict)
                                   else [f"({type(body).__name__})"])
            return None
        if spec.ignore_unknown and isinstance(body, dict):
            known = spec.schema.get("properties", {})
            unknown = sorted(key for key in body if key not in known)
            if unknown:
                self._ignored_body(request, what, unknown)
                body = {key: value for key, value in body.items() if key in known}
        if body is None:
            if spec.required:
                raise ParameterError(f"{what} needs a JSON body: {describe(spec.schema)}")
            return None
        if spec.check:
            validate(spec.schema, body)
        elif not isinstance(body, dict):
            raise ParameterError(f"the body of {what} must be a JSON object of parameters, "
                                 f"got {type(body).__name__}")
        return body

    @staticmethod
    def _ignored_body(request: web.Request, what: str, keys: list[str]) -> None:
        log.debug("%s: ignoring the request body's %s", what, ", ".join(keys))
        request[_IGNORED_BODY_KEY] = keys


async def _server_header(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["Server"] = _SERVER
    ignored = request.get(_IGNORED_KEY)
    if ignored:
        response.headers[IGNORED_ARGS_HEADER] = _header_list(ignored)
    ignored_body = request.get(_IGNORED_BODY_KEY)
    if ignored_body:
        response.headers[IGNORED_BODY_HEADER] = _header_list(ignored_body)


def _header_list(names: list[str]) -> str:
    """``names`` as one header value: ``a, b``, each name percent-encoded where it has
    characters a header cannot carry (controls, non-ASCII) or that would split the list."""
    return ", ".join(quote(name, safe=_HEADER_SAFE) for name in names)


def build_app(*, luxi: LuxiPool, users: Users, require_auth: bool,
              body_timeout: float = BODY_TIMEOUT) -> web.Application:
    """The aiohttp application serving the route table."""
    app = web.Application(client_max_size=MAX_BODY)
    dispatcher = Dispatcher(luxi=luxi, users=users, require_auth=require_auth,
                            body_timeout=body_timeout)
    # Every path, newlines included, reaches the dispatcher, which owns the 404s.
    app.router.add_route("*", r"/{path:[\s\S]*}", dispatcher.handle)
    app.on_response_prepare.append(_server_header)
    return app
