"""Every rule the published RAPI document states is a rule the server enforces.

The schemas come from the route table as /openapi.json publishes them. For every
schema in it, values aimed at each of its keywords (a string off the pattern, a list
one item too long, a number past the bound ...) are checked by corral's validator and
by an independent JSON Schema implementation; the two must agree on every value.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import jsonschema_rs
import pytest

from corral.errors import ParameterError
from corral.rapi.routes import document
from corral.rapi.schema import KEYWORDS, Schema, validate

DOC = document()
REFS = {f"#/components/schemas/{name}": schema
        for name, schema in DOC["components"]["schemas"].items()}

#: Values any schema is tried with; integral floats are left out on purpose (see the
#: module docstring of corral.rapi.schema: ``1.0`` is not an integer there).
POOL: list[Any] = [
    None, True, False, 0, -1, 1, 7, 2**40, 0.5, -2.5, "", "x", "abc", "12", "x!",
    "A-b.c_9", "12a", "٣", "00000000-0000-0000-0000-00000000000a", "not a uuid", [], [1],
    ["a"], [1, []], [1, ["success"]], [1, ["nope"]], [1, ["success"], 3], ["a", "b", "c"],
    {}, {"x": 1}, {"name": "n"},
]


def _subschemas(schema: Any, where: str) -> Iterator[tuple[str, Schema]]:
    if not isinstance(schema, dict):
        return
    yield where, schema
    for name, sub in schema.get("properties", {}).items():
        yield from _subschemas(sub, f"{where}.{name}")
    for index, sub in enumerate(schema.get("anyOf", []) + schema.get("prefixItems", [])):
        yield from _subschemas(sub, f"{where}[{index}]")
    for key in ("items", "additionalProperties"):
        yield from _subschemas(schema.get(key), f"{where}.{key}")


def _published(node: Any = DOC, where: str = "") -> Iterator[tuple[str, Schema]]:
    """Every schema in the document (and each schema inside it), with its place."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "schema" or (where.endswith("/schemas") and isinstance(value, dict)):
                yield from _subschemas(value, f"{where}/{key}")
            else:
                yield from _published(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _published(value, f"{where}/{index}")


def _distinct() -> dict[str, tuple[str, Schema]]:
    found: dict[str, tuple[str, Schema]] = {}
    for where, schema in _published():
        found.setdefault(json.dumps(schema, sort_keys=True), (where, schema))
    return found


SCHEMAS = _distinct()


def _oracle(schema: Schema) -> Any:
    return jsonschema_rs.Draft202012Validator({**schema, "components": DOC["components"]})


def _valid_sample(schema: Schema) -> Any:
    oracle = _oracle(schema)
    return next((v for v in POOL if oracle.is_valid(v)), None)


def _aimed(schema: Schema, depth: int = 0) -> Iterator[Any]:
    """Values on and around the edges each keyword of ``schema`` draws."""
    if depth > 2:
        return
    yield from schema.get("enum", [])
    if "enum" in schema:
        yield "not-listed"
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if key in schema:
            yield from (schema[key] - 1, schema[key], schema[key] + 1)
    for key in ("minLength", "maxLength"):
        if key in schema:
            yield from ("x" * n for n in range(max(schema[key] - 1, 0), schema[key] + 2))
    for sub in schema.get("anyOf", []):
        yield from _aimed(sub, depth + 1)
    prefix = schema.get("prefixItems", [])
    if prefix:
        firsts = [_valid_sample(s) for s in prefix]
        yield firsts
        yield [*firsts, *firsts]
        for index, sub in enumerate(prefix):
            for bad in itertools.islice(_aimed(sub, depth + 1), 6):
                yield [*firsts[:index], bad, *firsts[index + 1:]]
    for key in ("minItems", "maxItems"):
        if key in schema:
            yield from ([None] * n for n in range(max(schema[key] - 1, 0), schema[key] + 2))
    if isinstance(schema.get("items"), dict):
        for item in itertools.islice(_aimed(schema["items"], depth + 1), 8):
            yield [item]
    properties = schema.get("properties", {})
    base = {name: _valid_sample(properties.get(name, {})) for name in schema.get("required", [])}
    if "required" in schema:
        yield base
        yield {}
    for name, sub in properties.items():
        for item in itertools.islice(itertools.chain(POOL[:8], _aimed(sub, depth + 1)), 16):
            yield {**base, name: item}
    if "properties" in schema or "additionalProperties" in schema:
        extra = schema.get("additionalProperties")
        tries = _aimed(extra, depth + 1) if isinstance(extra, dict) else iter(POOL[:3])
        for item in itertools.islice(tries, 8):
            yield {**base, "zz-unlisted": item}


def _accepts(schema: Schema, value: Any) -> bool:
    try:
        validate(schema, value, refs=REFS)
    except ParameterError:
        return False
    return True


def test_the_document_uses_only_keywords_the_validator_knows() -> None:
    unknown = {(where, key) for where, schema in SCHEMAS.values() for key in schema
               if key not in KEYWORDS}
    assert not unknown


def test_every_published_schema_is_enforced_as_a_json_schema_validator_reads_it() -> None:
    refused_by_keyword: set[str] = set()
    disagreements = []
    for where, schema in SCHEMAS.values():
        oracle = _oracle(schema)
        for value in itertools.chain(POOL, _aimed(schema)):
            expected = oracle.is_valid(value)
            if _accepts(schema, value) != expected:
                disagreements.append((where, schema, value, expected))
            if not expected:
                refused_by_keyword.update(schema)
        assert len(disagreements) < 5, disagreements
    assert not disagreements, disagreements
    # Every enforcing keyword the document uses was met with a value it refuses.
    used = {key for _, schema in SCHEMAS.values() for key in schema} - {
        "description", "default", "title", "examples"}
    assert used <= refused_by_keyword, used - refused_by_keyword


@pytest.mark.parametrize(("schema", "value", "message"), [
    ({"type": "string", "pattern": "^[0-9]+$"}, "12a",
     "body must be a string matching ^[0-9]+$, got '12a' (str)"),
    ({"type": "string", "pattern": r"^\d+$"}, "٣", r"must be a string matching ^\d+$"),
    ({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
      "minItems": 2, "maxItems": 2, "items": False}, [1],
     "body must be a list [an integer, a string] (2 items), got 1 item(s)"),
    ({"type": "array", "prefixItems": [{"type": "integer"}], "items": False}, [1, 2],
     "body must be a list [an integer], got 2 items"),
    ({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]}, [1, 2],
     "body[1] must be a string, got 2 (int)"),
    ({"type": "integer", "exclusiveMinimum": 0}, 0, "body must be more than 0, got 0"),
    ({"type": "number", "maximum": 1}, 1.5, "body must be at most 1, got 1.5"),
    ({"enum": [1, 2]}, True, "body must be one of 1, 2, got True (bool)"),
    ({"$ref": "#/components/schemas/Error"}, {"code": 1},
     "body: missing 'message', 'explain'"),
    ({"anyOf": [{"type": "integer"}, {"type": "string"}], "enum": [1, "a"]}, "b",
     "body must be one of 1, 'a', got 'b' (str)"),
])
def test_keywords_refuse_with_where_what_and_what_is_accepted(
        schema: Schema, value: Any, message: str) -> None:
    with pytest.raises(ParameterError) as caught:
        validate(schema, value, refs=REFS)
    assert message in caught.value.message


def test_a_keyword_the_validator_does_not_know_is_a_loud_error() -> None:
    with pytest.raises(ValueError, match="uniqueItems"):
        validate({"type": "array", "uniqueItems": True}, [1, 1])
    with pytest.raises(ValueError, match="#/nowhere"):
        validate({"$ref": "#/nowhere"}, 1)
