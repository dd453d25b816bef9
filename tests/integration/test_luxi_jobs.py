"""The job methods over luxi, as RAPI and other clients will use them."""

from __future__ import annotations

import time
from typing import Any

import pytest

from corral.errors import NotFoundError, ParameterError
from corral.luxi import Client
from tests.conftest import TestbedHandle

pytestmark = pytest.mark.integration

FINAL = ("success", "error", "canceled")


def _wait(client: Client, job_id: int) -> list[Any]:
    info = None
    while True:
        answer = client.call("WaitForJobChange", job_id, ["status", "opresult"], info, None, 10)
        if answer != "nochange":
            info = answer[0]
            if info[0] in FINAL:
                return info


@pytest.mark.shared_testbed
def test_forged_internal_reason_sources_are_refused(testbed: TestbedHandle) -> None:
    with Client(testbed.paths.master_socket) as client:
        for source in ("gnt:opcode:test_delay", "gnt:daemon:masterd", "gnt:user"):
            op = {"OP_ID": "OP_TEST_DELAY", "duration": 0, "reason": [[source, "x", 1]]}
            with pytest.raises(ParameterError, match="reserved for corral"):
                client.call("SubmitJob", [op])
        ok = {"OP_ID": "OP_TEST_DELAY", "duration": 0,
              "reason": [["user", "why", 1], ["gnt:client:my-tool", "go", 2]]}
        job_id = client.call("SubmitJob", [ok])
        assert _wait(client, job_id)[0] == "success"
        (per_opcode,) = client.call("QueryJobs", [job_id], ["reason"])[0]
        sources = [entry[0] for entry in per_opcode[0]]
        assert sources == ["user", "gnt:client:my-tool", "gnt:opcode:test_delay"]
        assert client.call("QueryJobs", [], ["id"])  # every job


@pytest.mark.shared_testbed
def test_bad_opcodes_name_the_parameter_and_store_nothing(testbed: TestbedHandle) -> None:
    with Client(testbed.paths.master_socket) as client:
        before = client.call("QueryJobs", None, ["id"])
        with pytest.raises(ParameterError, match=r"opcode 0: OP_TEST_DELAY: parameter 'duration'"):
            client.call("SubmitJob", [{"OP_ID": "OP_TEST_DELAY", "duration": "soon"}])
        with pytest.raises(ParameterError, match="job 1, opcode 0: unknown opcode"):
            client.call("SubmitManyJobs", [[{"OP_ID": "OP_TEST_DELAY", "duration": 0}],
                                           [{"OP_ID": "OP_NOPE"}]])
        assert client.call("QueryJobs", None, ["id"]) == before


@pytest.mark.shared_testbed
def test_unknown_job_ids(testbed: TestbedHandle) -> None:
    with Client(testbed.paths.master_socket) as client:
        assert client.call("QueryJobs", [4242], ["id", "status"]) == [None]
        with pytest.raises(NotFoundError, match="job 4242 not found"):
            client.call("WaitForJobChange", 4242, ["status"], None, None, 1)
        assert client.call("CancelJob", 4242)[0] is False
        assert client.call("ArchiveJob", 4242) is False
        with pytest.raises(ParameterError, match="invalid job id"):
            client.call("QueryJobs", ["seven"], ["id"])


@pytest.mark.shared_testbed
def test_relative_dependencies_and_failed_dependency(testbed: TestbedHandle) -> None:
    with Client(testbed.paths.master_socket) as client:
        results = client.call("SubmitManyJobs", [
            [{"OP_ID": "OP_TAGS_DEL", "kind": "cluster", "tags": ["absent"]}],
            [{"OP_ID": "OP_TEST_DELAY", "duration": 0, "depends": [[-1, ["success"]]]}],
            [{"OP_ID": "OP_TEST_DELAY", "duration": 0, "depends": [[-2, ["error"]]]}],
        ])
        ids = [job_id for ok, job_id in results if ok]
        assert len(ids) == 3
        assert _wait(client, ids[0])[0] == "error"
        status, result = _wait(client, ids[1])
        assert status == "error" and "not one of 'success'" in str(result)
        assert _wait(client, ids[2])[0] == "success"


@pytest.mark.shared_testbed
def test_wait_for_job_change_times_out_with_nochange(testbed: TestbedHandle) -> None:
    with Client(testbed.paths.master_socket) as client:
        job_id = client.call("SubmitJob", [{"OP_ID": "OP_TEST_DELAY", "duration": 3}])
        info = None
        while info is None or info[0] != "running":
            answer = client.call("WaitForJobChange", job_id, ["status"], info, None, 5)
            info = answer[0] if answer != "nochange" else info
        started = time.monotonic()
        assert client.call("WaitForJobChange", job_id, ["status"], info, None, 0.3) == "nochange"
        assert time.monotonic() - started >= 0.25
        assert _wait(client, job_id)[0] == "success"


def test_reject_filter_and_max_running_jobs_from_the_cluster(testbed: TestbedHandle) -> None:
    with Client(testbed.paths.master_socket) as client:
        uuid = client.call("ReplaceFilter", None, 0,
                           [["opcode", ["=", "OP_ID", "OP_TAGS_SET"]]], "REJECT", [])
        # Rejected jobs get ids and end canceled at once, naming the rule (seed 000).
        tag = {"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": ["x"]}
        rejected = [client.call("SubmitJob", [tag])]
        many = client.call("SubmitManyJobs", [[tag], [tag]])
        assert [ok for ok, _ in many] == [True, True], many
        rejected += [job for _, job in many]
        why = f"Job canceled by filter rule {uuid}"
        assert client.call("QueryJobs", rejected, ["status", "opresult"]) == [
            ["canceled", [why]]] * 3
        assert client.call("QueryClusterInfo")["tags"] == []
        client.call("DeleteFilter", uuid)
        assert client.call("QueryFilters", None, ["uuid"]) == []
        job = client.call("SubmitJob", [{"OP_ID": "OP_CLUSTER_SET_PARAMS",
                                         "max_running_jobs": 1}])
        assert _wait(client, job)[0] == "success"
        ids = [client.call("SubmitJob", [{"OP_ID": "OP_TEST_DELAY", "duration": 0.5}])
               for _ in range(3)]
        time.sleep(0.2)
        statuses = [row[0] for row in client.call("QueryJobs", ids, ["status"])]
        assert statuses.count("running") == 1 and statuses.count("queued") == 2, statuses
        for job_id in ids:
            assert _wait(client, job_id)[0] == "success"


@pytest.mark.shared_testbed
@pytest.mark.parametrize(("method", "args", "message"), [
    ("QueryJobs", [["seven"], ["id"]],
     "QueryJobs: argument 'job_ids'[0]: invalid job id 'seven': expected a non-negative "
     "integer"),
    ("QueryJobs", [None, ["id", 3]],
     "QueryJobs: argument 'fields'[1]: expected a string, got 3 (int)"),
    ("WaitForJobChange", [1, ["status"], "x", None, 1],
     "WaitForJobChange: argument 'prev_job_info': expected a list or null, got 'x' (str)"),
    ("CancelJob", [1, "yes"],
     "CancelJob: argument 'kill': expected true or false, got 'yes' (str)"),
    ("CancelJob", [1, False, 3], "CancelJob takes (job_id[, kill]), got 3 argument(s)"),
    ("SubmitManyJobs", [["not a job"]],
     "SubmitManyJobs: argument 'jobs'[0]: expected a list, got 'not a job' (str)"),
    ("SubmitJob", [[]],
     "SubmitJob: argument 'ops': invalid job []: expected a non-empty list of opcodes"),
    ("QueryTags", [3, "node1.testbed"],
     "QueryTags: argument 'kind': expected a string, got 3 (int)"),
    ("QueryConfigValues", [[3]],
     "QueryConfigValues: argument 'fields'[0]: expected a string, got 3 (int)"),
    ("ReplaceFilter", [None, True, [], "ACCEPT", []],
     "ReplaceFilter: argument 'priority': invalid filter priority True: expected a "
     "non-negative integer"),
    ("DeleteFilter", [5], "DeleteFilter: argument 'uuid': expected a string, got 5 (int)"),
    ("ChangeJobPriority", [1, 40],
     "ChangeJobPriority: argument 'priority': invalid priority 40: expected an integer from "
     "-20 (highest) to 19 (lowest)"),
])
def test_malformed_arguments_are_refused_naming_the_method_and_argument(
        testbed: TestbedHandle, method: str, args: list[Any], message: str) -> None:
    with Client(testbed.paths.master_socket) as client:
        before = client.call("QueryJobs", None, ["id"])
        with pytest.raises(ParameterError) as caught:
            client.call(method, *args)
        assert type(caught.value) is ParameterError
        assert caught.value.message == message
        assert client.call("QueryJobs", None, ["id"]) == before
