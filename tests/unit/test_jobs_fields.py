"""Job query fields through the qlang registry."""

from __future__ import annotations

from corral.jobs.fields import JOB_QUERY_FIELDS, query_jobs
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
