"""The RAPI schema helpers: body validation messages and opcode body schemas."""

from __future__ import annotations

from typing import Any

import pytest

from corral.errors import ParameterError
from corral.rapi.schema import (
    any_of,
    array,
    boolean,
    describe,
    integer,
    nullable,
    obj,
    opcode_schema,
    string,
    validate,
)
from corral.rapi.shapes import FILTER_BODY, REINSTALL_BODY, WAIT_BODY

RULE = obj({"priority": integer(minimum=0), "action": any_of(string(enum=("ACCEPT",)),
                                                               array(integer())),
            "tags": array(string()), "note": nullable(string(min_length=1)),
            "on": boolean()}, required=("priority",), additional=False)


@pytest.mark.parametrize("value", [
    {"priority": 0}, {"priority": 3, "action": "ACCEPT", "tags": ["a"], "note": None},
    {"priority": 1, "action": [1, 2], "on": False, "note": "x"},
])
def test_valid_values_pass(value: Any) -> None:
    validate(RULE, value)


@pytest.mark.parametrize(("value", "message"), [
    ([], "body must be an object with keys priority, action, tags, note, on, got []"),
    ({}, "body: missing 'priority'"),
    ({"priority": "1"}, "body: 'priority' must be an integer, got '1' (str)"),
    ({"priority": True}, "body: 'priority' must be an integer, got True (bool)"),
    ({"priority": -1}, "body: 'priority' must be at least 0, got -1"),
    ({"priority": 0, "action": "DROP"},
     "body: 'action' must be one of 'ACCEPT' or a list of integers, got 'DROP' (str)"),
    ({"priority": 0, "tags": ["a", 2]}, "body: 'tags'[1] must be a string, got 2 (int)"),
    ({"priority": 0, "note": ""}, "body: 'note' must be a string or null"),
    ({"priority": 0, "colour": "red"},
     "body: unknown key 'colour'; accepted keys: priority, action, tags, note, on"),
])
def test_invalid_values_say_where_and_what_is_accepted(value: Any, message: str) -> None:
    with pytest.raises(ParameterError) as caught:
        validate(RULE, value)
    assert message in caught.value.message


def test_describe() -> None:
    assert describe(string(enum=("a", "b"))) == "one of 'a', 'b'"
    assert describe(array(obj())) == "a list of objects"
    assert describe({}) == "any value"


def test_request_shapes() -> None:
    validate(FILTER_BODY, {"priority": 0, "predicates": [["jobid", [">", "id", 1]]],
                           "action": ["RATE_LIMIT", 2], "reason": []})
    validate(WAIT_BODY, {"fields": ["status"], "previous_job_info": None,
                         "previous_log_serial": 3})
    validate(REINSTALL_BODY, {"os": "corral-ext4", "start": False, "osparams": None})
    with pytest.raises(ParameterError, match="'start' must be true or false"):
        validate(REINSTALL_BODY, {"start": "no"})


def test_opcode_schema_fixed_renamed_and_extra() -> None:
    schema = opcode_schema("OP_GROUP_ADD", fixed=("dry_run",), rename={"name": "group_name"},
                           extra={"x-note": string()})
    props = schema["properties"]
    assert "name" in props and "group_name" not in props
    assert "dry_run" not in props and "reason" not in props and "OP_ID" not in props
    assert "depends" in props and "x-note" in props
    assert schema["required"] == ["name"]
    assert schema["additionalProperties"] is False
    only = opcode_schema("OP_TEST_DELAY", only=("depends",))
    assert set(only["properties"]) == {"depends"} and "required" not in only
