"""The luxi methods' argument types: positional on the wire, with clear refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral import serializer
from corral.errors import ParameterError
from corral.luxi import AsyncClient, LuxiServer, Request
from corral.luxi.calls import (
    CALLS,
    CancelJob,
    QueryJobs,
    WaitForJobChange,
    decode_args,
    encode_args,
    signature,
)
from corral.luxi.protocol import encode_request


def test_a_struct_encodes_to_the_positional_args_ganeti_clients_send() -> None:
    args = WaitForJobChange(7, ["status"], None, 3, 10.0)
    frame = encode_request("WaitForJobChange", encode_args(args))
    assert serializer.loads(frame[:-1])["args"] == [7, ["status"], None, 3, 10.0]
    assert decode_args("WaitForJobChange", WaitForJobChange, encode_args(args)) == args
    assert encode_args(CancelJob("12")) == ["12", False]


@pytest.mark.parametrize(("name", "text"), [
    ("CancelJob", "(job_id[, kill])"), ("QueryClusterInfo", "()"),
    ("Query", "(what, fields, qfilter)"),
])
def test_signatures(name: str, text: str) -> None:
    assert signature(CALLS[name]) == text


@pytest.mark.parametrize(("args", "expected"), [
    ([None, ["id"]], QueryJobs(None, ["id"])),
    ([[1, "2"], []], QueryJobs([1, "2"], [])),
])
def test_job_ids_may_be_integers_or_digit_strings(args: list[Any], expected: QueryJobs) -> None:
    assert decode_args("QueryJobs", QueryJobs, args) == expected


@pytest.mark.parametrize(("args", "message"), [
    ([], "CancelJob takes (job_id[, kill]), got 0 argument(s)"),
    ([-1], "CancelJob: argument 'job_id': invalid job id -1: expected a non-negative integer"),
    (["1x"], "CancelJob: argument 'job_id': invalid job id '1x'"),
    ([True], "CancelJob: argument 'job_id': invalid job id True: expected a non-negative"),
    ([1, 1], "CancelJob: argument 'kill': expected true or false, got 1 (int)"),
])
def test_refusals_name_method_argument_and_what_is_accepted(
        args: list[Any], message: str) -> None:
    with pytest.raises(ParameterError) as caught:
        decode_args("CancelJob", CancelJob, args)
    assert message in caught.value.message


def test_every_master_method_has_its_argument_type() -> None:
    from corral.masterd.methods import MasterMethods

    methods = MasterMethods(state=None)  # type: ignore[arg-type]
    assert set(methods._methods) == set(CALLS)


async def test_clients_send_a_struct_as_its_method_and_positional_args(tmp_path: Path) -> None:
    async def echo(request: Request) -> Any:
        return [request.method, request.args]

    server = LuxiServer(tmp_path / "s.sock", echo)
    await server.start()
    client = AsyncClient(tmp_path / "s.sock")
    try:
        assert await client.send(CancelJob(4, kill=True)) == ["CancelJob", [4, True]]
        assert await client.send(QueryJobs(None, ["id"])) == ["QueryJobs", [None, ["id"]]]
    finally:
        await client.close()
        await server.stop()
