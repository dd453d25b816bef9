"""JSON Schema fragments for the RAPI table, and a validator for the subset they use.

The route table describes request bodies and responses with these fragments once;
:mod:`corral.rapi.openapi` publishes them and the server checks request bodies
against them, so the document and the behaviour cannot drift apart. Opcode bodies
are described from the opcode's own type (:func:`opcode_schema`), whose decoding
checks them.

The validator enforces every keyword in :data:`ENFORCED` (all that the builders and
msgspec's opcode schemas emit) and refuses to run on a schema holding any keyword it
does not know, so no published rule goes unchecked; a test walks every schema the
route table publishes to hold it to that. Its errors say where the value is, what was
found and what is accepted. One deliberate difference from JSON Schema: an
``integer`` must be written without a fraction (``1``, not ``1.0``), as msgspec
decodes it.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import msgspec

from corral.errors import ParameterError
from corral.opcodes import REGISTRY

__all__ = [
    "ANNOTATIONS",
    "ANY",
    "ENFORCED",
    "KEYWORDS",
    "NULL",
    "Refs",
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

#: Keywords that only document a value; the validator reads none of them.
ANNOTATIONS: Final = frozenset({"description", "title", "default", "examples"})

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
    if "const" in schema:
        return repr(schema["const"])
    if "anyOf" in schema:
        return " or ".join(describe(s) for s in schema["anyOf"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " or ".join(_TYPE_WORDS.get(str(k), str(k)) for k in kind)
    if kind == "array" and schema.get("prefixItems"):
        return "a list [" + ", ".join(describe(s) for s in schema["prefixItems"]) + "]"
    if kind == "array" and isinstance(schema.get("items"), dict) and schema["items"]:
        return f"a list of {_plural(describe(schema['items']))}"
    if kind == "object" and "properties" in schema:
        keys = ", ".join(schema["properties"])
        return f"an object with keys {keys}"
    if kind == "string" and "pattern" in schema:
        return f"a string matching {schema['pattern']}"
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


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``, and ``1`` is ``1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(type(a) is type(b) or (_number(a) and _number(b))) and a == b


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> re.Pattern[str]:
    # JSON Schema patterns are ECMA-262: \d and \w are ASCII, and they are not anchored.
    return re.compile(pattern, re.ASCII)


#: What a schema reference resolves against: ``{"#/components/schemas/Error": {...}}``.
Refs = Mapping[str, Schema]


class _Check:
    """One validation of one value; ``refs`` resolves ``$ref``."""

    def __init__(self, refs: Refs) -> None:
        self.refs = refs

    def fail(self, where: str, schema: Schema, value: Any) -> ParameterError:
        return ParameterError(f"{where} must be {describe(schema)}, got {_found(value)}")

    def run(self, schema: Schema, value: Any, where: str) -> None:
        unknown = schema.keys() - KEYWORDS
        if unknown:
            raise ValueError(f"schema keyword(s) {sorted(unknown)} not understood at {where}")
        if "$ref" in schema:
            target = self.refs.get(schema["$ref"])
            if target is None:
                raise ValueError(f"schema reference {schema['$ref']!r} at {where} is unknown")
            self.run(target, value, where)
        if "anyOf" in schema and not any(self.matches(s, value) for s in schema["anyOf"]):
            raise self.fail(where, schema, value)
        kind = schema.get("type")
        if kind is not None:
            kinds = [kind] if isinstance(kind, str) else kind
            if not any(_type_ok(k, value) for k in kinds):
                raise self.fail(where, schema, value)
        if "enum" in schema and not any(_same(value, v) for v in schema["enum"]):
            raise self.fail(where, schema, value)
        if "const" in schema and not _same(value, schema["const"]):
            raise self.fail(where, schema, value)
        if _number(value):
            self._number(schema, value, where)
        elif isinstance(value, str):
            self._string(schema, value, where)
        elif isinstance(value, list):
            self._array(schema, value, where)
        elif isinstance(value, dict):
            self._object(schema, value, where)

    def matches(self, schema: Schema, value: Any) -> bool:
        try:
            self.run(schema, value, "body")
        except ParameterError:
            return False
        return True

    def _number(self, schema: Schema, value: float, where: str) -> None:
        if "minimum" in schema and value < schema["minimum"]:
            raise ParameterError(f"{where} must be at least {schema['minimum']}, got {value}")
        if "maximum" in schema and value > schema["maximum"]:
            raise ParameterError(f"{where} must be at most {schema['maximum']}, got {value}")
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            raise ParameterError(f"{where} must be more than {schema['exclusiveMinimum']}, "
                                 f"got {value}")
        if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
            raise ParameterError(f"{where} must be less than {schema['exclusiveMaximum']}, "
                                 f"got {value}")

    def _string(self, schema: Schema, value: str, where: str) -> None:
        if len(value) < schema.get("minLength", 0):
            if schema["minLength"] == 1:
                raise ParameterError(f"{where} must not be empty")
            raise ParameterError(f"{where} must be at least {schema['minLength']} characters "
                                 f"long, got {_found(value)}")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise ParameterError(f"{where} must be at most {schema['maxLength']} characters "
                                 f"long, got {_found(value)}")
        if "pattern" in schema and _regex(schema["pattern"]).search(value) is None:
            raise ParameterError(f"{where} must be a string matching {schema['pattern']}, "
                                 f"got {_found(value)}")

    def _array(self, schema: Schema, value: list[Any], where: str) -> None:
        if len(value) < schema.get("minItems", 0) or \
                len(value) > schema.get("maxItems", len(value)):
            low, high = schema.get("minItems", 0), schema.get("maxItems")
            count = f"{low}" if low == high else \
                f"at least {low}" if high is None else f"{low} to {high}"
            raise ParameterError(f"{where} must be {describe(schema)} ({count} items), "
                                 f"got {len(value)} item(s): {_found(value)}")
        prefix: list[Schema] = schema.get("prefixItems", [])
        for index, (item_schema, item) in enumerate(zip(prefix, value, strict=False)):
            self.run(item_schema, item, f"{where}[{index}]")
        rest = schema.get("items", True)
        if rest is False and len(value) > len(prefix):
            raise ParameterError(f"{where} must be {describe(schema)}, got {len(value)} "
                                 f"items: {_found(value)}")
        if isinstance(rest, dict) and rest:
            for index in range(len(prefix), len(value)):
                self.run(rest, value[index], f"{where}[{index}]")

    def _object(self, schema: Schema, value: dict[str, Any], where: str) -> None:
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
                self.run(properties[key], item, inner)
            elif additional is False:
                known = ", ".join(properties) or "none"
                raise ParameterError(f"{where}: unknown key {key!r}; accepted keys: {known}")
            elif isinstance(additional, dict):
                self.run(additional, item, inner)


#: Every keyword :func:`validate` enforces.
ENFORCED: Final = frozenset({
    "$ref", "anyOf", "type", "enum", "const", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "minLength", "maxLength", "pattern", "minItems", "maxItems",
    "prefixItems", "items", "required", "properties", "additionalProperties",
})

#: Every keyword :func:`validate` accepts in a schema; any other makes it fail loudly
#: (a builder that emitted one would otherwise publish a rule nothing enforces).
KEYWORDS: Final = ENFORCED | ANNOTATIONS


def validate(schema: Schema, value: Any, where: str = "body", *, refs: Refs | None = None
             ) -> None:
    """Check ``value`` against ``schema``, every keyword of :data:`ENFORCED` included.

    :raises ParameterError: naming the place (``body``, ``body: 'priority'``, ...),
        the value found and what is accepted there.
    :raises ValueError: when the schema holds a keyword outside :data:`KEYWORDS` or a
        reference ``refs`` does not resolve: a bug in the route table, not in the value.
    """
    _Check(refs or {}).run(schema, value, where)


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
