"""Job query fields through the qlang registry."""

from __future__ import annotations

import pytest

from corral.errors import ParameterError
from corral.jobs.fields import JOB_QUERY_FIELDS, query_jobs, query_jobs_by_id, requested_job_ids
from corral.jobs.model import JOB_FIELDS, Job, QueuedOpCode


def job(job_id: int, status: str, received: int) -> Job:
    return Job(
        id=job_id,
        ops=[QueuedOpCode(input={"OP_ID": "OP_TEST_DELAY"}, summary="TEST_DELAY(0)",
                          status=status)],  # type: ignore[arg-type]
        received_timestamp=(received, 500_000),
    )


JOBS = [job(1, "success", 100), job(2, "running", 200), job(3, "queued", 300)]


def test_every_queryjobs_field_is_a_query_field() -> None:
    assert set(JOB_QUERY_FIELDS.names()) == set(JOB_FIELDS)
    fields = JOB_QUERY_FIELDS.query_fields(["id", "received_ts", "bogus"])["fields"]
    assert [(f["name"], f["title"], f["kind"]) for f in fields] == [
        ("id", "ID", "number"), ("received_ts", "Received", "other"),
        ("bogus", "bogus", "unknown")]


def test_query_with_filter_and_values() -> None:
    result = query_jobs(JOBS, ["id", "status", "received_ts", "summary"],
                        ["|", ["=", "status", "running"], ["<", "received_ts", 150]])
    assert result["data"] == [
        [[0, 1], [0, "success"], [0, [100, 500000]], [0, ["TEST_DELAY(0)"]]],
        [[0, 2], [0, "running"], [0, [200, 500000]], [0, ["TEST_DELAY(0)"]]],
    ]


def test_unknown_requested_field_is_reported_as_unknown() -> None:
    result = query_jobs(JOBS[:1], ["id", "nosuch"], None)
    assert result["data"] == [[[0, 1], [1, None]]]


def test_jobs_by_id_in_the_order_asked_with_rows_for_unknown_ids() -> None:
    qfilter = ["|", ["==", "id", 3], ["==", "id", "99"], ["==", "id", 1], ["==", "id", 3]]
    ids = requested_job_ids(qfilter)
    assert ids == [3, 99, 1]  # strings are ids too; each id once
    result = query_jobs_by_id(ids, {j.id: j for j in JOBS}, ["id", "status", "nosuch"])
    assert result["data"] == [
        [[0, 3], [0, "queued"], [1, None]],
        [[0, 99], [3, None], [1, None]],  # no such job: its id, the rest unavailable
        [[0, 1], [0, "success"], [1, None]],
    ]
    assert [f["name"] for f in result["fields"]] == ["id", "status", "nosuch"]
    assert requested_job_ids(["|", ["==", "id", 1], ["==", "status", "error"]]) == []
    with pytest.raises(ParameterError, match="invalid job id 'abc'"):
        requested_job_ids(["==", "id", "abc"])
