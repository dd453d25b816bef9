"""Request bodies: JSON decoding and the checks Placement's JSON schemas make.

Each check fails with a 400 whose detail starts ``JSON does not validate:`` and names
the field and what it accepts, as Placement's schema errors do (without a ``code``,
which Placement's schema errors do not give a finer value than the default).
"""

from __future__ import annotations

import re
import uuid as uuidlib
from collections.abc import Iterable, Mapping
from typing import Any, Final

from corral import serializer
from corral.placement.rest.protocol import HttpProblem, PlacementRequest

__all__ = ["check_keys", "check_uuid", "json_body", "need", "optional", "schema_problem"]

_JSON_TYPES: Final = {str: "string", int: "integer", float: "number", bool: "boolean",
                      dict: "object", list: "array"}
_UUID_DASHED: Final = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def schema_problem(message: str) -> HttpProblem:
    """A 400 for a body that breaks the schema."""
    return HttpProblem(400, f"JSON does not validate: {message}")


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
    names = [_JSON_TYPES.get(k, "null" if k is type(None) else k.__name__) for k in kinds]
    return names[0] if len(names) == 1 else ", ".join(repr(n) for n in names)


def need(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    """``data[key]``, which must be there and of ``kind``."""
    if key not in data:
        raise schema_problem(f"'{key}' is a required property")
    return optional(data, key, kind)


def optional(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...],
             default: Any = None) -> Any:
    """``data[key]`` of ``kind``, or ``default`` when it is absent."""
    if key not in data:
        return default
    value = data[key]
    if not _type_ok(value, kind):
        raise schema_problem(f"{serializer.dumps(value).decode()} is not of type "
                             f"'{_type_name(kind)}' (field '{key}')")
    return value


def check_keys(data: Any, allowed: Iterable[str], what: str = "body") -> dict[str, Any]:
    """``data`` as an object with no other keys than ``allowed``."""
    if not isinstance(data, dict):
        raise schema_problem(f"the {what} must be an object, got "
                             f"{serializer.dumps(data).decode()}")
    extra = [k for k in data if k not in set(allowed)]
    if extra:
        listed = ", ".join(repr(k) for k in extra)
        verb = "was" if len(extra) == 1 else "were"
        raise schema_problem(f"Additional properties are not allowed ({listed} {verb} "
                             "unexpected)")
    return data


def check_uuid(value: str, what: str) -> str:
    """``value`` when it is a UUID with its dashes (JSON schema's ``uuid`` format)."""
    if not _UUID_DASHED.match(value):
        raise schema_problem(f"'{value}' is not a 'uuid' (field '{what}')")
    return str(uuidlib.UUID(value))
