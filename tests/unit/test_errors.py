"""Errors across the wire: corral's own form and Ganeti's opcode-result form."""

from __future__ import annotations

from typing import Any

import pytest

from corral.errors import (
    AlreadyExistsError,
    CorralError,
    HypervisorError,
    NotFoundError,
    OpExecError,
    OpPrereqError,
    OsNotFoundError,
    OsScriptError,
    ParameterError,
    UnknownFieldError,
    from_ganeti,
    from_wire,
    to_ganeti,
    to_wire,
)


@pytest.mark.parametrize(("err", "encoded"), [
    (NotFoundError("no web1"), ["OpPrereqError", ["no web1", "unknown_entity"]]),
    (ParameterError("bad"), ["OpPrereqError", ["bad", "wrong_input"]]),
    (UnknownFieldError("x"), ["OpPrereqError", ["x", "wrong_input"]]),
    (AlreadyExistsError("taken"), ["OpPrereqError", ["taken", "already_exists"]]),
    (OpPrereqError("running"), ["OpPrereqError", ["running", "wrong_state"]]),
    (OsNotFoundError("no os"), ["OpPrereqError", ["no os", "unknown_entity"]]),
    (OsScriptError("create failed"), ["OpExecError", ["create failed"]]),
    (HypervisorError("qemu died"), ["HypervisorError", ["qemu died"]]),
    (OpExecError("boom"), ["OpExecError", ["boom"]]),
    (ValueError("a bug"), ["OpExecError", ["a bug"]]),
])
def test_opcode_errors_are_encoded_as_ganeti_does(err: BaseException,
                                                  encoded: list[Any]) -> None:
    assert to_ganeti(err) == encoded


def test_ganeti_encoded_errors_come_back_as_corral_classes() -> None:
    back = from_ganeti(to_ganeti(NotFoundError("no web1")))
    assert type(back) is NotFoundError and back.message == "no web1"
    assert type(from_ganeti(to_ganeti(ParameterError("bad")))) is ParameterError
    assert type(from_ganeti(["OpExecError", ["x"]])) is OpExecError
    # Jobs stored with corral's own class names still decode.
    assert type(from_ganeti(["AlreadyExistsError", ["taken"]])) is AlreadyExistsError
    # Ganeti codes corral has no class for, and unknown names.
    assert type(from_ganeti(["OpPrereqError", ["full", "insufficient_resources"]])) \
        is OpPrereqError
    assert type(from_ganeti(["SomethingElse", ["?"]])) is OpExecError
    assert from_ganeti("not an error") is None and from_ganeti(["OpExecError", []]) is None


def test_wire_form_keeps_the_class() -> None:
    err = from_wire(to_wire(NotFoundError("gone")))
    assert type(err) is NotFoundError and err.message == "gone"
    assert type(from_wire({"code": "nonsense", "message": "m"})) is CorralError


def test_a_bad_tag_keeps_ganetis_heading_through_a_job_result() -> None:
    from corral.cmdlib.tags import check_tag
    from corral.errors import TagError, failure_text, from_ganeti, to_ganeti

    with pytest.raises(TagError) as caught:
        check_tag("bad tag!")
    encoded = to_ganeti(caught.value)
    assert encoded[0] == "TagError"  # the class name Ganeti's job results use
    back = from_ganeti(encoded)
    assert isinstance(back, TagError)
    lines = failure_text(back).splitlines()
    assert lines[:2] == ["Failure: invalid tag(s) given:", "Tag contains invalid characters"]
