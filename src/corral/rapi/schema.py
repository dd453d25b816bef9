"""JSON Schema fragments for the RAPI table, and a validator for the subset they use.

The route table describes request bodies and responses with these fragments once;
:mod:`corral.rapi.openapi` publishes them and the server checks request bodies
against them, so the document and the behaviour cannot drift apart. Opcode bodies
are described from the opcode's own type (:func:`opcode_schema`), whose decoding
checks them.

The validator understands the keywords the builders produce: ``type``, ``enum``,
``properties``, ``required``, ``additionalProperties``, ``items``, ``minimum``,
``maximum``, ``minLength`` and ``anyOf``. Its errors say where the value is, what
was found and what is accepted.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from corral.errors import ParameterError
from corral.opcodes import REGISTRY

__all__ = [
    "ANY",
    "NULL",
    "Schema",
    "any_of",
    "array",
    "boolean",
    "describe",
    "integer",
    "nullable",
    "obj",
    "opcode_schema",
    "string",
    "validate",
]

#: A JSON Schema (2020-12, as OpenAPI 3.1 uses it) as plain data.
Schema = dict[str, Any]

#: Anything at all.
ANY: Schema = {}
#: JSON ``null``.
NULL: Schema = {"type": "null"}


def _with_doc(schema: Schema, doc: str) -> Schema:
    if doc:
        schema["description"] = doc
    return schema


def string(doc: str = "", *, enum: Sequence[str] | None = None,
           pattern: str | None = None, min_length: int | None = None) -> Schema:
    """A string, optionally one of ``enum`` or matching ``pattern``."""
    schema: Schema = {"type": "string"}
    if enum is not None:
        schema["enum"] = list(enum)
    if pattern is not None:
        schema["pattern"] = pattern
    if min_length is not None:
        schema["minLength"] = min_length
    return _with_doc(schema, doc)


def integer(doc: str = "", *, minimum: int | None = None,
            maximum: int | None = None) -> Schema:
    """An integer, optionally bounded."""
    schema: Schema = {"type": "integer"}
    if minimum is not None:
        schema["minimum"] = minimum
    if maximum is not None:
        schema["maximum"] = maximum
    return _with_doc(schema, doc)


def boolean(doc: str = "") -> Schema:
    """``true`` or ``false``."""
    return _with_doc({"type": "boolean"}, doc)


def array(items: Schema, doc: str = "") -> Schema:
    """A list whose elements all match ``items``."""
    return _with_doc({"type": "array", "items": items}, doc)


def obj(properties: Mapping[str, Schema] | None = None, *, required: Iterable[str] = (),
        additional: bool | Schema = True, doc: str = "") -> Schema:
    """An object with the given properties; ``additional`` says what other keys may hold."""
    schema: Schema = {"type": "object"}
    if properties:
        schema["properties"] = dict(properties)
    names = list(required)
    if names:
        schema["required"] = names
    if additional is not True:
        schema["additionalProperties"] = additional
    return _with_doc(schema, doc)


def any_of(*schemas: Schema, doc: str = "") -> Schema:
    """A value matching at least one of ``schemas``."""
    return _with_doc({"anyOf": list(schemas)}, doc)


def nullable(schema: Schema) -> Schema:
    """``schema`` or ``null``."""
    return any_of(schema, NULL)


# -- validation ---------------------------------------------------------------------

_TYPE_WORDS = {
    "string": "a string", "integer": "an integer", "number": "a number",
    "boolean": "true or false", "array": "a list", "object": "an object", "null": "null",
}


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
    return kind == "null" and value is None


def describe(schema: Schema) -> str:
    """A short description of what ``schema`` accepts, for error messages."""
    if "enum" in schema:
        return "one of " + ", ".join(repr(v) for v in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(describe(s) for s in schema["anyOf"])
    kind = schema.get("type")
    if kind == "array" and "items" in schema and schema["items"]:
        return f"a list of {_plural(describe(schema['items']))}"
    if kind == "object" and "properties" in schema:
        keys = ", ".join(schema["properties"])
        return f"an object with keys {keys}"
    if isinstance(kind, str):
        return _TYPE_WORDS.get(kind, kind)
    return "any value"


def _plural(text: str) -> str:
    for article in ("a ", "an "):
        if text.startswith(article):
            return text[len(article):] + "s"
    return text


def _found(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(value).__name__})" if value is not None else "null"


def validate(schema: Schema, value: Any, where: str = "body") -> None:
    """Check ``value`` against ``schema``.

    :raises ParameterError: naming the place (``body``, ``body: 'priority'``, ...),
        the value found and what is accepted there.
    """
    if "anyOf" in schema:
        if not any(_matches(s, value) for s in schema["anyOf"]):
            raise ParameterError(f"{where} must be {describe(schema)}, got {_found(value)}")
        return
    kind = schema.get("type")
    if isinstance(kind, str) and not _type_ok(kind, value):
        raise ParameterError(f"{where} must be {describe(schema)}, got {_found(value)}")
    if "enum" in schema and value not in schema["enum"]:
        raise ParameterError(f"{where} must be {describe(schema)}, got {_found(value)}")
    if isinstance(value, int) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise ParameterError(f"{where} must be at least {schema['minimum']}, got {value}")
        if "maximum" in schema and value > schema["maximum"]:
            raise ParameterError(f"{where} must be at most {schema['maximum']}, got {value}")
    if isinstance(value, str) and len(value) < schema.get("minLength", 0):
        raise ParameterError(f"{where} must not be empty")
    if isinstance(value, list) and schema.get("items"):
        for index, item in enumerate(value):
            validate(schema["items"], item, f"{where}[{index}]")
    if isinstance(value, dict):
        _validate_object(schema, value, where)


def _validate_object(schema: Schema, value: dict[str, Any], where: str) -> None:
    properties: dict[str, Schema] = schema.get("properties", {})
    missing = [name for name in schema.get("required", ()) if name not in value]
    if missing:
        raise ParameterError(
            f"{where}: missing {', '.join(repr(m) for m in missing)}; "
            f"{where} must be {describe(schema)}")
    additional = schema.get("additionalProperties", True)
    for key, item in value.items():
        inner = f"{where}: {key!r}" if where == "body" else f"{where}.{key}"
        if key in properties:
            validate(properties[key], item, inner)
        elif additional is False:
            known = ", ".join(properties) or "none"
            raise ParameterError(f"{where}: unknown key {key!r}; accepted keys: {known}")
        elif isinstance(additional, dict):
            validate(additional, item, inner)


def _matches(schema: Schema, value: Any) -> bool:
    try:
        validate(schema, value)
    except ParameterError:
        return False
    return True


# -- opcode bodies ------------------------------------------------------------------


def _inline(node: Any, defs: Mapping[str, Any]) -> Any:
    """Replace ``$ref`` to ``$defs`` by the definitions themselves."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inline(defs[ref.rsplit("/", 1)[1]], defs)
        return {key: _inline(value, defs) for key, value in node.items()}
    if isinstance(node, list):
        return [_inline(item, defs) for item in node]
    return node


def opcode_schema(op_id: str, *, fixed: Iterable[str] = (),
                  rename: Mapping[str, str] | None = None, only: Iterable[str] | None = None,
                  extra: Mapping[str, Schema] | None = None, doc: str = "") -> Schema:
    """The body schema of a request that becomes opcode ``op_id``.

    Generated from the opcode's type: its parameters minus ``fixed`` ones (those the
    URL or query arguments set, and the reason trail RAPI builds), keyed by their
    RAPI names (``rename`` maps a body key to the opcode parameter it fills).
    ``only`` keeps just those parameters; ``extra`` adds keys that are not opcode
    parameters (such as ``__version__``).
    """
    cls = REGISTRY[op_id]
    full = msgspec.json.schema(cls)
    defs = full.get("$defs", {})
    struct: Schema = copy.deepcopy(_inline(defs[cls.__name__], defs))
    dropped = {"OP_ID", "reason", *fixed}
    keep = None if only is None else set(only)
    body_name = {param: key for key, param in (rename or {}).items()}
    properties: dict[str, Schema] = {}
    for name, prop in struct.get("properties", {}).items():
        if name in dropped or (keep is not None and name not in keep):
            continue
        properties[body_name.get(name, name)] = prop
    required = [body_name.get(n, n) for n in struct.get("required", ())
                if body_name.get(n, n) in properties]
    properties.update(extra or {})
    return obj(properties, required=required, additional=False,
               doc=doc or struct.get("description", ""))
