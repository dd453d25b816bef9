"""The OpenAPI 3.1 document of the RAPI server, generated from the route table.

Nothing here describes a resource by hand: paths, methods, parameters, bodies,
responses and access levels all come from the route table it is given
(:data:`corral.rapi.routes.ROUTES`, whose :func:`~corral.rapi.routes.document` serves
it), so the document always says what the server does. Methods corral does not serve yet are left
out of ``paths`` and listed under ``x-corral-not-served`` with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from corral import __version__
from corral.rapi.schema import Schema
from corral.rapi.shapes import ERROR
from corral.rapi.spec import METHODS, PATH_PARAMS, NotServed, Operation, QueryArg, Route

__all__ = ["ERROR_STATUSES", "build_document"]

#: Statuses every operation may answer with an error body, and when.
ERROR_STATUSES: Final = {
    "400": "Bad input: the message says what was wrong and what is accepted",
    "401": "Credentials missing or wrong (see WWW-Authenticate)",
    "403": "The user lacks the option this operation needs",
    "404": "No such resource or object",
    "409": "Conflicts with the cluster's state (exists already, changed meanwhile)",
    "415": "The request body is not application/json",
    "500": "The operation failed on the cluster",
    "502": "The master daemon or a node daemon could not be reached",
    "503": "Not possible now (queue drained, instance not running)",
}

_ARG_SCHEMAS: Final[dict[str, Schema]] = {
    "flag": {"type": "integer", "description": "0 for false, any other integer for true"},
    "int": {"type": "integer"},
    "text": {"type": "string"},
    "texts": {"type": "array", "items": {"type": "string"}},
}

_ACCESS_TEXT: Final = {
    "public": "Anyone (any user when the daemon runs with --require-authentication).",
    "read": "Users with the 'read' or 'write' option.",
    "write": "Users with the 'write' option.",
}


def _query_parameter(arg: QueryArg) -> dict[str, Any]:
    schema = dict(_ARG_SCHEMAS[arg.kind])
    if arg.choices is not None:
        schema["enum"] = list(arg.choices)
    if arg.default is not None:
        schema["default"] = arg.default
    parameter: dict[str, Any] = {"name": arg.name, "in": "query", "required": arg.required,
                                 "description": arg.doc, "schema": schema}
    if arg.kind == "texts":
        parameter.update(style="form", explode=True)
    if not arg.required:  # a blank value counts as absent, as in Ganeti
        parameter["allowEmptyValue"] = True
    return parameter


def _path_parameters(route: Route) -> list[dict[str, Any]]:
    parameters = []
    for name in route.params:
        param = PATH_PARAMS[name]
        schema: Schema = {"type": "string", "pattern": f"^{param.pattern}$"}
        if param.enum is not None:
            schema = {"type": "string", "enum": list(param.enum)}
        parameters.append({"name": name, "in": "path", "required": True,
                           "description": param.doc, "schema": schema})
    return parameters


def _family(route: Route) -> str:
    parts = route.path.strip("/").split("/")
    return parts[1] if len(parts) > 1 and parts[0] == "2" else "cluster"


def _operation(route: Route, method: str, op: Operation) -> dict[str, Any]:
    responses: dict[str, Any] = {
        "200": {"description": op.summary,
                "content": {"application/json": {"schema": op.response}}},
    }
    responses.update({status: {"$ref": f"#/components/responses/E{status}"}
                      for status in ERROR_STATUSES})
    result: dict[str, Any] = {
        "operationId": f"{method.lower()}_{route.name}",
        "summary": op.summary,
        "description": " ".join(filter(None, (op.description, "Access: "
                                              + _ACCESS_TEXT[op.access]))),
        "tags": [_family(route)],
        "parameters": [_query_parameter(arg) for arg in op.args],
        "responses": responses,
        "security": ([{}, {"basic": []}] if op.access == "public" else [{"basic": []}]),
        "x-corral-access": op.access,
    }
    if op.body is not None:
        result["requestBody"] = {"required": op.body.required,
                                 "content": {"application/json": {"schema": op.body.schema}}}
    return result


def _path_item(route: Route) -> dict[str, Any]:
    item: dict[str, Any] = {"summary": route.doc}
    parameters = _path_parameters(route)
    if parameters:
        item["parameters"] = parameters
    for method in METHODS:
        op = route.methods.get(method)
        if isinstance(op, Operation):
            item[method.lower()] = _operation(route, method, op)
    return item


def build_document(routes: Sequence[Route]) -> dict[str, Any]:
    """The OpenAPI document of a server that dispatches through ``routes``."""
    paths = {route.path: _path_item(route) for route in routes if route.served}
    not_served = [{"path": route.path, "method": method, "reason": entry.reason,
                   "x-corral-access": entry.access}
                  for route in routes for method, entry in route.methods.items()
                  if isinstance(entry, NotServed)]
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "corral Remote API",
            "version": f"2 (corral {__version__})",
            "description": "Ganeti's Remote API v2, as corral serves it. Write operations "
                           "that run a job answer the job's id as a JSON string. Boolean "
                           "query arguments are integers (0 false, any other true). A query "
                           "argument an operation does not take is ignored, as Ganeti "
                           "ignores it, and named in the X-Corral-Ignored-Arguments "
                           "response header.",
        },
        "paths": paths,
        "components": {
            "securitySchemes": {"basic": {"type": "http", "scheme": "basic"}},
            "schemas": {"Error": ERROR},
            "responses": {
                f"E{status}": {"description": text, "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
                for status, text in ERROR_STATUSES.items()
            },
        },
        "x-corral-not-served": not_served,
    }
