"""Following a job: the one helper the gnt-* commands and RAPI share."""

from __future__ import annotations

import pytest

from corral.cli import gnt_job
from corral.errors import NotFoundError, OpExecError
from corral.jobs import FINAL_STATUSES
from corral.jobs.follow import JobFollower, job_results
from corral.jobs.model import PENDING_STATUSES, STATUSES
from corral.opcodes import FINAL_JOB_STATUSES


def _entry(serial: int, message: str) -> list[object]:
    return [serial, [1700000000, 0], "message", message]


def test_each_log_entry_is_handed_out_once_until_the_job_ends() -> None:
    follower = JobFollower(7)
    assert follower.request(10.0) == [7, ["status"], None, None, 10.0]
    assert follower.update([["running"], [_entry(1, "a"), _entry(2, "b")]]) == [
        _entry(1, "a"), _entry(2, "b")]
    assert not follower.finished and follower.status == "running"
    # The next request asks only for what is newer than what was seen.
    assert follower.request(10.0) == [7, ["status"], ["running"], 2, 10.0]
    assert follower.update("nochange") is None
    assert follower.request(10.0)[2:4] == [["running"], 2]
    assert follower.update([["success"], [_entry(3, "done")]]) == [_entry(3, "done")]
    assert follower.finished and follower.request(1.0)[3] == 3


def test_a_job_that_disappears_is_not_found() -> None:
    with pytest.raises(NotFoundError, match="job 7 not found"):
        JobFollower(7).update(None)
    with pytest.raises(NotFoundError, match="job 7 not found"):
        job_results(7, [None])


def test_results_of_an_ended_job() -> None:
    assert job_results(3, [["success", ["success", "success"], [1, {"a": 2}]]]) == [
        1, {"a": 2}]
    with pytest.raises(OpExecError, match="disk full"):
        job_results(3, [["error", ["success", "error"], [None, "disk full"]]])


def test_one_set_of_final_statuses() -> None:
    assert FINAL_STATUSES == frozenset(FINAL_JOB_STATUSES) == {"canceled", "success", "error"}
    assert {"queued", "waiting", "canceling"} == PENDING_STATUSES
    assert FINAL_STATUSES | PENDING_STATUSES | {"running"} == set(STATUSES)
    # gnt-job list's --finished and --pending select these very sets.
    selections = gnt_job._STATUS_SELECTIONS
    assert selections["finished"][0] is FINAL_STATUSES
    assert selections["pending"][0] is PENDING_STATUSES
