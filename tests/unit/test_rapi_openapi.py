"""The OpenAPI document is generated from the route table and describes it exactly."""

from __future__ import annotations

import json
from typing import Any

import pytest

from corral.rapi.openapi import ERROR_STATUSES
from corral.rapi.routes import ROUTES, document
from corral.rapi.spec import NotServed

jsonschema_rs = pytest.importorskip("jsonschema_rs")

METHOD_NAMES = ("get", "put", "post", "delete")


def _schemas(node: Any) -> list[dict[str, Any]]:
    """Every schema object in the document (under "schema" keys)."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "schema" and isinstance(value, dict):
                found.append(value)
            found.extend(_schemas(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(_schemas(item))
    return found


def test_document_is_openapi_3_1_json() -> None:
    doc = document()
    assert doc["openapi"] == "3.1.0"
    assert json.loads(json.dumps(doc)) == doc
    assert doc["components"]["securitySchemes"]["basic"] == {"type": "http", "scheme": "basic"}


def test_paths_and_methods_are_exactly_the_served_ones() -> None:
    doc = document()
    served = {(route.path, method.lower()) for route in ROUTES for method in route.served}
    documented = {(path, method) for path, item in doc["paths"].items()
                  for method in item if method in METHOD_NAMES}
    assert documented == served
    not_served = {(e["path"], e["method"]) for e in doc["x-corral-not-served"]}
    assert not_served == {(route.path, method) for route in ROUTES
                          for method, op in route.methods.items() if isinstance(op, NotServed)}
    assert all(e["reason"] for e in doc["x-corral-not-served"])


def test_operations_carry_the_table_entries() -> None:
    doc = document()
    ids = []
    for route in ROUTES:
        for method, op in route.served.items():
            entry = doc["paths"][route.path][method.lower()]
            ids.append(entry["operationId"])
            assert entry["summary"] == op.summary
            assert entry["x-corral-access"] == op.access
            assert [p["name"] for p in entry["parameters"]] == [a.name for a in op.args]
            assert ("requestBody" in entry) == (op.body is not None)
            if op.body is not None:
                body = entry["requestBody"]
                assert body["required"] == op.body.required
                assert body["content"]["application/json"]["schema"] == op.body.schema
            assert entry["responses"]["200"]["content"]["application/json"]["schema"] \
                == op.response
            assert set(ERROR_STATUSES) <= set(entry["responses"])
            security = entry["security"]
            assert ({} in security) == (op.access == "public")
        if route.served:
            path_params = doc["paths"][route.path].get("parameters", [])
            assert [p["name"] for p in path_params] == list(route.params)
            assert all(p["in"] == "path" and p["required"] for p in path_params)
    assert len(ids) == len(set(ids)), "operationIds are unique"


def test_query_argument_kinds() -> None:
    doc = document()
    tags = {p["name"]: p for p in doc["paths"]["/2/tags"]["put"]["parameters"]}
    assert tags["tag"]["schema"] == {"type": "array", "items": {"type": "string"}}
    assert tags["tag"]["explode"] is True and tags["tag"]["required"] is True
    assert tags["dry-run"]["schema"]["type"] == "integer"
    reboot = {p["name"]: p for p in
              doc["paths"]["/2/instances/{instance_name}/reboot"]["post"]["parameters"]}
    assert reboot["type"]["schema"]["enum"] == ["soft", "hard", "full"]
    assert reboot["type"]["schema"]["default"] == "hard"


def test_every_schema_is_valid_json_schema() -> None:
    doc = document()
    schemas = _schemas(doc) + list(doc["components"]["schemas"].values())
    assert len(schemas) > 100
    for schema in schemas:
        if "$ref" in schema:
            continue
        assert jsonschema_rs.meta.is_valid(schema), schema
        jsonschema_rs.validator_for(schema)  # compiles (patterns included)


def test_error_schema_accepts_error_bodies() -> None:
    error = document()["components"]["schemas"]["Error"]
    validator = jsonschema_rs.validator_for(error)
    assert validator.is_valid({"code": 404, "message": "no such thing", "explain": "x"})
    assert not validator.is_valid({"message": "no code"})


def test_opcode_body_schemas_accept_what_clients_send() -> None:
    paths = document()["paths"]
    create = jsonschema_rs.validator_for(
        paths["/2/instances"]["post"]["requestBody"]["content"]["application/json"]["schema"])
    assert create.is_valid({"__version__": 1, "name": "web1", "mode": "create",
                            "disk_template": "file", "disks": [{"size": 64}], "nics": [],
                            "os": "corral-ext4", "pnode": "node1"})
    assert not create.is_valid({"__version__": 1, "name": "web1", "os_type": "x"})
    assert not create.is_valid({"name": "web1"})
    modify = jsonschema_rs.validator_for(
        paths["/2/instances/{instance_name}/modify"]["put"]["requestBody"]["content"]
        ["application/json"]["schema"])
    assert modify.is_valid({"custom_beparams": {"vcpus": 2}})
    assert not modify.is_valid({"beparams": {"vcpus": 2}})
