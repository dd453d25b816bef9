"""Request bodies: JSON decoding and the checks Placement's JSON schemas make.

A body that breaks the schema is a 400 whose detail reads as Placement's (which quotes
its JSON-schema validator): ``JSON does not validate: <what is wrong>`` followed by
``Failed validating '<rule>' in schema['properties']['<field>']``, so the answer names
the rule and the field.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterable, Mapping
from typing import Any, Final

from corral import serializer
from corral.placement.rest.protocol import HttpProblem, PlacementRequest

__all__ = [
    "MAX_INT",
    "check_int",
    "check_keys",
    "check_length",
    "check_uuid",
    "json_body",
    "need",
    "optional",
    "prop",
    "schema_problem",
]

#: Largest integer Placement stores (its database's signed 32-bit int).
MAX_INT: Final = 0x7FFFFFFF
_JSON_TYPES: Final = {str: "string", int: "integer", float: "number", bool: "boolean",
                      dict: "object", list: "array", type(None): "null"}


def prop(where: str, key: str) -> str:
    """The schema path of property ``key`` of the object at ``where``."""
    return f"{where}['properties']['{key}']"


def schema_problem(message: str, rule: str, where: str = "") -> HttpProblem:
    """A 400 for a body that breaks ``rule`` of the schema at ``where``."""
    return HttpProblem(400, f"JSON does not validate: {message}\n\nFailed validating "
                            f"'{rule}' in schema{where}")


def json_body(req: PlacementRequest) -> Any:
    """The decoded body: 415 unless it is ``application/json``, 400 when it is not
    JSON."""
    ctype = (req.content_type or "").split(";", 1)[0].strip().lower()
    if ctype != "application/json":
        raise HttpProblem(415, f"The media type {ctype or 'None'} is not supported, use "
                               "application/json")
    try:
        return serializer.loads(req.body.encode())
    except serializer.DecodeError as err:
        raise HttpProblem(400, f"Malformed JSON: {err}") from None


def _type_ok(value: Any, kind: type | tuple[type, ...]) -> bool:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        return False
    if float in kinds and isinstance(value, int):
        return True
    return isinstance(value, kinds)


def _type_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = [_JSON_TYPES.get(k, k.__name__) for k in kinds]
    return repr(names[0]) if len(names) == 1 else ", ".join(repr(n) for n in names)


def need(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...],
         where: str = "") -> Any:
    """``data[key]`` (``data`` is the object at schema path ``where``), which must be
    there and of ``kind``."""
    if key not in data:
        raise schema_problem(f"'{key}' is a required property", "required", where)
    return optional(data, key, kind, where=where)


def optional(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...],
             default: Any = None, *, where: str = "") -> Any:
    """``data[key]`` of ``kind``, or ``default`` when it is absent."""
    if key not in data:
        return default
    value = data[key]
    if not _type_ok(value, kind):
        raise schema_problem(f"{value!r} is not of type {_type_name(kind)}", "type",
                             prop(where, key))
    return value


def check_int(value: int, key: str, where: str = "", *, minimum: int = 0,
              maximum: int = MAX_INT) -> int:
    """``value`` within ``minimum`` and ``maximum``."""
    if value < minimum:
        raise schema_problem(f"{value} is less than the minimum of {minimum}", "minimum",
                             prop(where, key))
    if value > maximum:
        raise schema_problem(f"{value} is greater than the maximum of {maximum}",
                             "maximum", prop(where, key))
    return value


def check_keys(data: Any, allowed: Iterable[str], where: str = "") -> dict[str, Any]:
    """``data`` as an object with no other keys than ``allowed``."""
    if not isinstance(data, dict):
        raise schema_problem(f"{data!r} is not of type 'object'", "type", where)
    known = set(allowed)
    extra = [k for k in data if k not in known]
    if extra:
        listed = ", ".join(repr(k) for k in extra)
        verb = "was" if len(extra) == 1 else "were"
        raise schema_problem(f"Additional properties are not allowed ({listed} {verb} "
                             "unexpected)", "additionalProperties", where)
    return data


def check_uuid(value: str, key: str, where: str = "") -> str:
    """``value`` in its canonical form when it is a UUID in any form Placement's
    ``uuid`` format accepts (upper case, without dashes, braces, ``urn:uuid:``)."""
    try:
        return str(uuidlib.UUID(value))
    except ValueError:
        raise schema_problem(f"{value!r} is not a 'uuid'", "format",
                             prop(where, key)) from None


def check_length(value: str, key: str, where: str = "", *, minimum: int = 1,
                 maximum: int = 255) -> str:
    """``value`` of ``minimum`` to ``maximum`` characters."""
    if len(value) < minimum:
        raise schema_problem(f"{value!r} is too short", "minLength", prop(where, key))
    if len(value) > maximum:
        raise schema_problem(f"{value!r} is too long", "maxLength", prop(where, key))
    return value
