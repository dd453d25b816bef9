"""The RAPI server without daemons: dispatch, errors, bodies, query arguments and the
opcodes handlers submit, against a fake master daemon."""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from corral import serializer
from corral.errors import (
    CorralError,
    JobQueueDrainedError,
    MasterUnreachableError,
    NotFoundError,
    ParameterError,
)
from corral.opcodes import op_from_dict
from corral.rapi.auth import Users
from corral.rapi.handlers.jobs import JOB_FIELDS_BULK
from corral.rapi.server import build_app

WRITER = "Basic " + base64.b64encode(b"admin:pw").decode()
READER = "Basic " + base64.b64encode(b"viewer:pw").decode()
JSON = {"Content-Type": "application/json"}


class FakeMaster:
    """Answers luxi calls from a table; records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.answers: dict[str, Any] = {"SubmitJob": 42, "QueryJobs": [],
                                        "Query": {"fields": [], "data": []}}

    async def call(self, method: str, *args: Any) -> Any:
        self.calls.append((method, args))
        answer = self.answers.get(method)
        if isinstance(answer, CorralError):
            raise answer
        if callable(answer):
            return answer(*args)
        return answer

    def submitted(self) -> list[dict[str, Any]]:
        """The opcodes of the last submitted job."""
        jobs = [args[0] for method, args in self.calls if method == "SubmitJob"]
        assert jobs, f"no job submitted; calls: {self.calls}"
        return list(jobs[-1])


@pytest.fixture
def master() -> FakeMaster:
    return FakeMaster()


async def _client(tmp_path: Path, master: FakeMaster, require_auth: bool) -> TestClient:
    users_file = tmp_path / "users"
    users_file.write_text("admin pw write\nviewer pw read\n")
    users = Users(users_file)
    users.load()
    app = build_app(luxi=master, users=users, require_auth=require_auth)  # type: ignore[arg-type]
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


@pytest.fixture
async def client(tmp_path: Path, master: FakeMaster) -> AsyncIterator[TestClient]:
    client = await _client(tmp_path, master, require_auth=False)
    yield client
    await client.close()


async def call(client: TestClient, method: str, path: str, *, body: Any = None,
               auth: str | None = WRITER, headers: dict[str, str] | None = None,
               raw: bytes | None = None) -> tuple[int, Any, Any]:
    all_headers = dict(JSON)
    if auth:
        all_headers["Authorization"] = auth
    all_headers.update(headers or {})
    data = raw if raw is not None else (None if body is None else serializer.dumps(body))
    async with client.request(method, path, data=data, headers=all_headers) as resp:
        assert resp.content_type == "application/json", await resp.text()
        return resp.status, serializer.loads(await resp.read()), resp.headers


async def test_plain_resources(client: TestClient) -> None:
    assert (await call(client, "GET", "/version", auth=None))[:2] == (200, 2)
    assert (await call(client, "GET", "/", auth=None))[:2] == (200, None)
    assert (await call(client, "GET", "/2", auth=None))[:2] == (200, None)
    status, features, _ = await call(client, "GET", "/2/features", auth=None)
    assert status == 200 and "instance-create-reqv1" in features
    status, doc, _ = await call(client, "GET", "/openapi.json", auth=None)
    assert status == 200 and doc["openapi"].startswith("3.")


async def test_info_adds_ganeti_aliases(client: TestClient, master: FakeMaster) -> None:
    master.answers["QueryClusterInfo"] = {
        "name": "c", "volume_group_name": "xenvg", "enabled_disk_templates": ["file"],
        "beparams": {"default": {"vcpus": 2, "maxmem": 512}}}
    status, info, headers = await call(client, "GET", "/2/info")
    assert status == 200 and info["vg_name"] == info["volume_group_name"] == "xenvg"
    assert headers["Server"].startswith("corral-rapi/")


async def test_errors_have_ganeti_shape(client: TestClient) -> None:
    status, body, _ = await call(client, "GET", "/2/nowhere")
    assert status == 404
    assert {"code", "message", "explain"} <= set(body) and body["code"] == 404
    assert "/2/nowhere" in body["message"]


async def test_unknown_and_unserved_methods_are_501_with_allow(client: TestClient) -> None:
    status, body, headers = await call(client, "POST", "/2/info")
    assert status == 501 and headers["Allow"] == "GET"
    assert "supported: GET" in body["message"]
    status, body, headers = await call(client, "PATCH", "/2/tags")
    assert status == 501 and headers["Allow"] == "GET, PUT, DELETE"
    status, body, headers = await call(client, "POST", "/2/nodes/n1/powercycle")
    assert status == 501 and headers["Allow"] == ""
    assert ("not served by corral yet" in body["message"]
            and "OP_NODE_POWERCYCLE" in body["message"])


async def test_bodies_must_be_json(client: TestClient, master: FakeMaster) -> None:
    status, body, _ = await call(client, "PUT", "/2/modify", raw=b"x=1",
                                 headers={"Content-Type": "text/plain"})
    assert status == 415 and "application/json" in body["message"]
    status, body, _ = await call(client, "PUT", "/2/modify", raw=b"{not json")
    assert status == 400 and "not valid JSON" in body["message"]
    status, body, _ = await call(client, "PUT", "/2/modify", body=[1, 2])
    assert status == 400 and "JSON object" in body["message"]
    # A media type parameter is fine.
    status, _, _ = await call(client, "PUT", "/2/modify", body={"candidate_pool_size": 3},
                              headers={"Content-Type": "application/json; charset=utf-8"})
    assert status == 200
    assert not [c for c in master.calls if c[0] != "SubmitJob"]


async def test_operations_without_a_body_ignore_one(client: TestClient,
                                                   master: FakeMaster) -> None:
    # As Ganeti does; the header says what was ignored.
    master.answers["QueryClusterInfo"] = {"name": "c"}
    status, body, headers = await call(client, "GET", "/2/info", body={"x": 1, "a": 2})
    assert status == 200 and body["name"] == "c"
    assert headers["X-Corral-Ignored-Body"] == "a, x"
    status, _, headers = await call(client, "GET", "/2/info", body=[1])
    assert status == 200 and headers["X-Corral-Ignored-Body"] == "(list)"
    # An empty object is what some clients send anyway: nothing to report.
    status, _, headers = await call(client, "DELETE", "/2/jobs/3", body={})
    assert status == 200 and "X-Corral-Ignored-Body" not in headers


async def test_query_arguments_are_declared_and_typed(client: TestClient, master: FakeMaster,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    # Unknown arguments are ignored, as Ganeti ignores them; the header names each once.
    master.answers["QueryClusterInfo"] = {"name": "c"}
    with caplog.at_level(logging.DEBUG, logger="corral.rapi.request"):
        status, _, headers = await call(client, "GET", "/2/info?verbose=1&zz=2&verbose=3")
    assert status == 200 and headers["X-Corral-Ignored-Arguments"] == "verbose, zz"
    assert "ignoring the unknown query argument 'verbose'" in caplog.text
    # Names a header cannot carry as they are come percent-encoded (commas too).
    status, _, headers = await call(client, "GET", "/2/info?a%0Ab=1&%C3%A9=2&x,y=3&p%25=4")
    assert status == 200
    assert headers["X-Corral-Ignored-Arguments"] == "a%0Ab, %C3%A9, x%2Cy, p%25"
    status, _, headers = await call(client, "GET", "/2/info?reason=x")
    assert status == 200 and "X-Corral-Ignored-Arguments" not in headers
    # ... also on a refusal of something else, so a developer sees what was dropped.
    status, _, headers = await call(client, "GET", "/2/query/node?no-remember=1")
    assert status == 400 and headers["X-Corral-Ignored-Arguments"] == "no-remember"
    # Known arguments with bad values are refused with Ganeti's first words.
    status, body, _ = await call(client, "GET", "/2/jobs?bulk=yes")
    assert status == 400 and "Invalid value for the 'bulk' parameter" in body["message"]
    assert "0 for false" in body["message"] and "'yes'" in body["message"]
    status, body, _ = await call(client, "POST", "/2/instances/i1/reboot?type=gentle")
    assert status == 400 and "soft, hard, full" in body["message"]
    status, body, _ = await call(client, "GET", "/2/query/node")
    assert status == 400 and "missing the query argument 'fields'" in body["message"]
    # Blank values count as absent, and any integer is a flag, as in Ganeti.
    assert (await call(client, "GET", "/2/jobs?bulk="))[0] == 200
    assert (await call(client, "GET", "/2/jobs?bulk=2"))[0] == 200
    assert master.calls[-1] == ("QueryJobs", (None, list(JOB_FIELDS_BULK)))


async def test_write_answers_the_job_id_as_a_json_number(client: TestClient,
                                                    master: FakeMaster) -> None:
    status, body, _ = await call(client, "PUT", "/2/instances/web1/startup?force=1&dry-run=1")
    assert (status, body) == (200, 42)
    (op,) = master.submitted()
    assert op["OP_ID"] == "OP_INSTANCE_STARTUP"
    assert (op["instance_name"], op["force"], op["dry_run"], op["no_remember"]) == \
        ("web1", True, True, False)
    op_from_dict(op)  # what was sent is a valid opcode


async def test_reason_trail(client: TestClient, master: FakeMaster) -> None:
    await call(client, "PUT", "/2/instances/web1/shutdown?reason=maintenance%20window",
               body={"timeout": 5})
    (op,) = master.submitted()
    sources = [entry[:2] for entry in op["reason"]]
    assert sources == [["user", "maintenance window"],
                       ["gnt:client:rapi:instances_name_shutdown", ""],
                       ["gnt:library:rlib2:instances_name_shutdown", ""]]
    assert all(isinstance(entry[2], int) for entry in op["reason"])
    assert op["timeout"] == 5
    await call(client, "PUT", "/2/instances/web1/startup")
    (op,) = master.submitted()
    assert [entry[0] for entry in op["reason"]] == [
        "gnt:client:rapi:instances_name_startup", "gnt:library:rlib2:instances_name_startup"]


async def test_body_may_not_set_what_the_url_sets(client: TestClient,
                                                  master: FakeMaster) -> None:
    status, body, _ = await call(client, "PUT", "/2/instances/web1/rename",
                                 body={"instance_name": "x", "new_name": "y"})
    assert status == 400 and "'instance_name'" in body["message"]
    status, body, _ = await call(client, "PUT", "/2/instances/web1/rename",
                                 body={"new_name": "y", "reason": []})
    assert status == 400 and "'reason'" in body["message"]
    status, body, _ = await call(client, "PUT", "/2/instances/web1/modify",
                                 body={"beparams": {}, "custom_beparams": {}})
    assert status == 400 and "give only one" in body["message"]
    status, body, _ = await call(client, "PUT", "/2/instances/web1/rename",
                                 body={"new_name": "y", "colour": "red"})
    assert status == 400 and "unknown parameter" in body["message"] and "colour" in body["message"]
    assert not [c for c in master.calls if c[0] == "SubmitJob"], "nothing half-written"


async def test_startup_body_takes_only_depends(client: TestClient, master: FakeMaster) -> None:
    # Ganeti ignores the body of startup; corral uses its depends and ignores the rest.
    status, _, headers = await call(client, "PUT", "/2/instances/web1/startup",
                                    body={"hvparams": {"x": 1}, "force": True,
                                          "depends": [[7, ["success"]]]})
    assert status == 200 and headers["X-Corral-Ignored-Body"] == "force, hvparams"
    (op,) = master.submitted()
    assert op["depends"] == [[7, ["success"]]] and op["force"] is False
    assert "hvparams" not in op
    # depends itself is still checked.
    status, body, _ = await call(client, "PUT", "/2/instances/web1/startup",
                                 body={"depends": [["x", ["success"]]]})
    assert status == 400 and "depends" in body["message"]


async def test_instance_create_v1(client: TestClient, master: FakeMaster) -> None:
    body = {"__version__": 1, "name": "web1", "os": "corral-ext4", "mode": "create",
            "disk_template": "file", "disks": [{"size": 64}], "nics": [],
            "pnode": "node1", "depends": [[3, ["success"]]]}
    status, job, _ = await call(client, "POST", "/2/instances?dry-run=1", body=body)
    assert (status, job) == (200, 42)
    (op,) = master.submitted()
    assert op["OP_ID"] == "OP_INSTANCE_CREATE" and op["instance_name"] == "web1"
    assert op["os_type"] == "corral-ext4" and op["dry_run"] is True
    assert op["depends"] == [[3, ["success"]]]
    assert "__version__" not in op and "name" not in op and "os" not in op
    for version, text in ((None, "Instance creation request version 0 is no longer "
                                 "supported"), (2, "Unsupported request data version 2"),
                          ("1", "Unsupported request data version 1"),
                          (True, "Unsupported request data version True")):
        bad = {k: v for k, v in body.items() if k != "__version__"}
        if version is not None:
            bad["__version__"] = version
        status, err, _ = await call(client, "POST", "/2/instances", body=bad)
        assert status == 400 and text in err["message"]


async def test_tags_come_from_repeated_arguments(client: TestClient, master: FakeMaster) -> None:
    status, _, _ = await call(client, "PUT", "/2/nodes/n1/tags?tag=a&tag=b%20c&dry-run=1",
                              body=["a", "b c"])
    assert status == 200
    (op,) = master.submitted()
    assert (op["OP_ID"], op["kind"], op["name"], op["tags"], op["dry_run"]) == \
        ("OP_TAGS_SET", "node", "n1", ["a", "b c"], True)
    await call(client, "DELETE", "/2/tags?tag=x")
    (op,) = master.submitted()
    assert (op["OP_ID"], op["kind"], op["name"], op["tags"]) == ("OP_TAGS_DEL", "cluster",
                                                                 None, ["x"])
    status, body, _ = await call(client, "PUT", "/2/groups/default/tags")
    assert status == 400 and "'tag'" in body["message"]
    master.answers["QueryTags"] = ["t1"]
    assert (await call(client, "GET", "/2/instances/i1/tags"))[1] == ["t1"]
    assert master.calls[-1] == ("QueryTags", ("instance", "i1"))


async def test_node_role(client: TestClient, master: FakeMaster) -> None:
    master.answers["Query"] = {"fields": [], "data": [[[0, "C"]]]}
    assert (await call(client, "GET", "/2/nodes/n2/role"))[1] == "master-candidate"
    status, _, _ = await call(client, "PUT", "/2/nodes/n2/role?auto-promote=1", body="drained")
    assert status == 200
    (op,) = master.submitted()
    assert (op["master_candidate"], op["offline"], op["drained"], op["auto_promote"]) == \
        (None, None, True, True)
    status, body, _ = await call(client, "PUT", "/2/nodes/n2/role", body="boss")
    assert status == 400 and "'regular'" in body["message"]
    status, body, _ = await call(client, "PUT", "/2/nodes/n2/role")
    assert status == 400 and "needs a JSON body" in body["message"]


async def test_items_by_name_or_uuid(client: TestClient, master: FakeMaster) -> None:
    master.answers["Query"] = {"fields": [], "data": []}
    status, body, _ = await call(client, "GET", "/2/instances/6f4e5c1a")
    assert status == 404 and "'6f4e5c1a' not found" in body["message"]
    method, (what, _fields, qfilter) = master.calls[-1]
    assert (method, what) == ("Query", "instance")
    assert qfilter == ["|", ["=", "name", "6f4e5c1a"], ["=", "uuid", "6f4e5c1a"]]


async def test_jobs(client: TestClient, master: FakeMaster) -> None:
    master.answers["QueryJobs"] = lambda ids, fields: [None] if ids else [[2], [1]]
    status, body, _ = await call(client, "GET", "/2/jobs")
    assert body == [{"id": 1, "uri": "/2/jobs/1"}, {"id": 2, "uri": "/2/jobs/2"}]
    status, body, _ = await call(client, "GET", "/2/jobs/9")
    assert status == 404 and "job 9 not found" in body["message"]
    assert (await call(client, "GET", f"/2/jobs/{2**64}"))[0] == 404
    master.answers["WaitForJobChange"] = "nochange"
    status, body, _ = await call(client, "GET", "/2/jobs/1/wait", body={"fields": ["status"]})
    assert (status, body) == (200, None)
    master.answers["WaitForJobChange"] = [["running"], [[1, [0, 0], "message", "hi"]]]
    status, body, _ = await call(client, "GET", "/2/jobs/1/wait",
                                 body={"fields": ["status"], "previous_job_info": None,
                                       "previous_log_serial": None})
    assert body == {"job_info": ["running"], "log_entries": [[1, [0, 0], "message", "hi"]]}
    status, body, _ = await call(client, "GET", "/2/jobs/1/wait", body={"fields": "status"})
    assert status == 400 and "'fields' must be a list of strings" in body["message"]
    status, body, _ = await call(client, "GET", "/2/jobs/1/wait")
    assert status == 400 and "needs a JSON body" in body["message"]


async def test_filters(client: TestClient, master: FakeMaster) -> None:
    master.answers["ReplaceFilter"] = "6f4e5c1a-0b7d-4a55-9f3e-1f9a8b7c6d5e"
    status, body, _ = await call(client, "POST", "/2/filters?reason=why", body={
        "priority": 1, "predicates": [], "action": "PAUSE",
        "reason": [["gnt:client", "", 1], ["user", "ticket 1", 2]]})
    assert (status, body) == (200, "6f4e5c1a-0b7d-4a55-9f3e-1f9a8b7c6d5e")
    method, (uuid, priority, predicates, action, trail) = master.calls[-1]
    assert (method, uuid, priority, predicates, action) == ("ReplaceFilter", None, 1, [], "PAUSE")
    # The client library's entry is kept in place, under RAPI's stand-in source.
    assert trail[:2] == [["gnt:client:rapi-client", "", 1], ["user", "ticket 1", 2]]
    assert [entry[:2] for entry in trail[2:]] == [["user", "why"], ["gnt:client:rapi:filters", ""],
                                                  ["gnt:library:rlib2:filters", ""]]
    calls = len(master.calls)
    for entry in (["gnt:client:rapi", "filters", 3], ["gnt:opcode:test_delay", "", 3],
                  ["gnt:client", "not empty", 3], ["gnt:", "", 3]):
        status, body, _ = await call(client, "PUT",
                                     "/2/filters/6f4e5c1a-0b7d-4a55-9f3e-1f9a8b7c6d5e",
                                     body={"reason": [["user", "ok", 1], entry]})
        assert status == 400, (entry, body)
        assert f"reason trail entry 1 {entry!r}" in body["message"]
        assert "'user'" in body["message"] and "['gnt:client', ''" in body["message"]
    assert len(master.calls) == calls, "a refused trail never reaches the master"
    status, body, _ = await call(client, "PUT", "/2/filters/6f4e5c1a-0b7d-4a55-9f3e-1f9a8b7c6d5e",
                                 body={"priority": "high"})
    assert status == 400 and "'priority' must be an integer" in body["message"]
    status, body, _ = await call(client, "PUT", "/2/filters/6f4e5c1a-0b7d-4a55-9f3e-1f9a8b7c6d5e",
                                 body={"action": "PAUSE", "watermark": 3})
    assert status == 400 and "unknown key 'watermark'" in body["message"]


async def test_corral_errors_keep_their_status(client: TestClient, master: FakeMaster) -> None:
    for error, status in ((NotFoundError("no such instance"), 404),
                          (ParameterError("bad"), 400),
                          (JobQueueDrainedError("the queue is drained"), 503),
                          (MasterUnreachableError("cannot reach the master daemon"), 502)):
        master.answers["SubmitJob"] = error
        got, body, _ = await call(client, "PUT", "/2/instances/web1/startup")
        assert (got, body["message"], body["code"]) == (status, error.message, status)
        assert (body["error_code"], body["retryable"]) == (error.code, error.retryable)


async def test_error_bodies_carry_a_stable_code_and_whether_to_retry(
        client: TestClient, master: FakeMaster) -> None:
    expected = {NotFoundError("no such instance"): ("not-found", False),
                ParameterError("bad"): ("parameter-error", False),
                JobQueueDrainedError("the queue is drained"): ("queue-drained", True),
                MasterUnreachableError("no master daemon"): ("master-unreachable", True)}
    for error, (code, retryable) in expected.items():
        master.answers["SubmitJob"] = error
        _, body, _ = await call(client, "PUT", "/2/instances/web1/startup")
        assert (body["error_code"], body["retryable"]) == (code, retryable)
    # Refusals at the HTTP level have their own codes.
    _, body, _ = await call(client, "GET", "/2/nowhere")
    assert (body["code"], body["error_code"], body["retryable"]) == (404, "not-found", False)
    _, body, _ = await call(client, "POST", "/2/info")
    assert (body["code"], body["error_code"], body["retryable"]) == (
        501, "not-implemented", False)


async def test_unexpected_failures_are_500_and_logged(client: TestClient, master: FakeMaster,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    def boom(*_args: Any) -> None:
        raise RuntimeError("kaput")

    master.answers["QueryClusterInfo"] = boom
    status, body, _ = await call(client, "GET", "/2/info")
    assert status == 500 and body["code"] == 500
    # The client learns it was a bug and where to look, not the exception's text.
    assert "kaput" not in serializer.dumps(body).decode()
    assert "RuntimeError" not in serializer.dumps(body).decode()
    assert (body["error_code"], body["retryable"]) == ("internal-error", False)
    incident = re.search(r"incident ([0-9a-f]{8})", body["message"])
    assert incident is not None
    (logged,) = [r for r in caplog.records if incident.group(1) in r.getMessage()]
    assert "GET /2/info" in logged.getMessage() and logged.exc_info is not None
    assert "RuntimeError: kaput" in caplog.text  # the traceback stays in the log


async def test_access_rules_end_to_end(tmp_path: Path, master: FakeMaster) -> None:
    client = await _client(tmp_path, master, require_auth=True)
    try:
        status, _, headers = await call(client, "GET", "/version", auth=None)
        assert status == 401 and headers["WWW-Authenticate"] == 'Basic realm="Ganeti Remote API"'
        assert (await call(client, "GET", "/version", auth=READER))[0] == 200
        status, body, _ = await call(client, "PUT", "/2/instances/w/startup", auth=READER)
        assert status == 403 and "'write' option" in body["message"]
        status, _, headers = await call(client, "PUT", "/2/instances/w/startup",
                                        auth=WRITER.replace("YWRt", "eWRt"))
        assert status == 401 and "WWW-Authenticate" in headers
        # 404 and 501 for a method the resource lacks come before authentication, as
        # in Ganeti; a method corral does not serve yet is authorised first.
        assert (await call(client, "GET", "/2/nope", auth=None))[0] == 404
        assert (await call(client, "PATCH", "/2/info", auth=None))[0] == 501
        assert (await call(client, "POST", "/2/nodes/n1/powercycle", auth=None))[0] == 401
        assert (await call(client, "POST", "/2/nodes/n1/powercycle", auth=READER))[0] == 403
        assert (await call(client, "POST", "/2/nodes/n1/powercycle"))[0] == 501
        assert (await call(client, "GET", "/2/nodes/n1/x%0A", auth=None))[0] == 404
        master.answers["Query"] = {"fields": [], "data": []}
        assert (await call(client, "GET", "/2/query/node?fields=name", auth=READER))[0] == 200
    finally:
        await client.close()


async def test_every_served_job_operation_builds_a_valid_opcode(client: TestClient,
                                                                master: FakeMaster) -> None:
    master.answers["Query"] = {"fields": [], "data": [[[0, True]]]}
    master.answers["WaitForJobChange"] = [["success"], []]
    master.answers["QueryJobs"] = [["success", ["success"], [{"kind": "ssh"}]]]
    requests = [
        ("PUT", "/2/modify", {"candidate_pool_size": 3}),
        ("PUT", "/2/redistribute-config", None),
        ("POST", "/2/nodes/n1/modify", {"offline": True}),
        ("POST", "/2/groups?dry-run=1", {"name": "g2", "alloc_policy": "preferred"}),
        ("DELETE", "/2/groups/g2", None),
        ("PUT", "/2/groups/g2/modify", {"custom_ndparams": {"spindle_count": 2}}),
        ("PUT", "/2/groups/g2/rename", {"new_name": "g3"}),
        ("PUT", "/2/groups/g2/assign-nodes?force=1", {"nodes": ["n1"]}),
        ("DELETE", "/2/instances/web1", {"shutdown_timeout": 10}),
        ("GET", "/2/instances/web1/info?static=1", None),
        ("POST", "/2/instances/web1/reboot?type=soft", None),
        ("POST", "/2/instances/web1/reinstall", {"os": "corral-ext4", "start": False}),
        ("POST", "/2/instances/web1/reinstall?os=corral-ext4&nostartup=1", None),
        ("PUT", "/2/instances/web1/migrate", {"mode": "live"}),
        ("PUT", "/2/instances/web1/failover", {"target_node": "n2"}),
        ("PUT", "/2/instances/web1/activate-disks?ignore_size=1", None),
        ("PUT", "/2/instances/web1/deactivate-disks?force=1", None),
        ("POST", "/2/instances/web1/disk/0/grow", {"amount": 128}),
    ]
    jobs = {}
    for method, path, body in requests:
        master.calls.clear()
        status, answer, _ = await call(client, method, path, body=body)
        assert (status, answer) == (200, 42), (method, path, answer)
        for op in master.submitted():
            op_from_dict(op)
        jobs[method, path] = [op["OP_ID"] for op in master.submitted()]
    # Reinstalling stops, reinstalls and (unless told not to) starts, in one job.
    for path in ("/2/instances/web1/reinstall",
                 "/2/instances/web1/reinstall?os=corral-ext4&nostartup=1"):
        assert jobs["POST", path] == ["OP_INSTANCE_SHUTDOWN", "OP_INSTANCE_REINSTALL"]
    status, console, _ = await call(client, "GET", "/2/instances/web1/console")
    assert (status, console) == (200, {"kind": "ssh"})


async def test_a_body_that_never_arrives_is_refused_with_408(
        tmp_path: Path, master: FakeMaster) -> None:
    """A client that sends its headers and then its body a byte at a time is answered
    408 with ``Connection: close`` once the body timeout has passed (aiohttp then
    discards what else comes for its lingering time and closes); others are served
    meanwhile."""
    import asyncio

    users_file = tmp_path / "users"
    users_file.write_text("admin pw write\n")
    users = Users(users_file)
    users.load()
    app = build_app(luxi=master, users=users, require_auth=False,  # type: ignore[arg-type]
                    body_timeout=0.3)
    async with TestClient(TestServer(app)) as client:
        server = client.server
        reader, writer = await asyncio.open_connection(server.host, server.port)
        writer.write(b"PUT /2/instances/x/startup HTTP/1.1\r\nHost: x\r\n"
                     b"Authorization: " + WRITER.encode() + b"\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        await writer.drain()
        served = 0
        for _ in range(3):
            assert (await call(client, "GET", "/version", auth=None))[:2] == (200, 2)
            served += 1
            try:
                writer.write(b" ")
                await writer.drain()
            except ConnectionError:
                break
            await asyncio.sleep(0.05)
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 "), head
        assert b"Connection: close" in head, head
        length = int(re.search(rb"Content-Length: (\d+)", head)[1])  # type: ignore[index]
        assert b"did not arrive within 0.3 s" in await reader.readexactly(length)
        writer.close()
        assert served >= 1
        assert not any(method == "SubmitJob" for method, _ in master.calls)


async def test_headers_that_never_complete_are_dropped(
        tmp_path: Path, master: FakeMaster) -> None:
    """A client sending its headers a byte at a time is disconnected when the runner's
    keep-alive timeout (the daemon's ``KEEPALIVE_TIMEOUT``) has passed since it
    connected, while others are served meanwhile."""
    import asyncio

    from aiohttp import web

    users_file = tmp_path / "users"
    users_file.write_text("admin pw write\n")
    users = Users(users_file)
    users.load()
    app = build_app(luxi=master, users=users, require_auth=False)  # type: ignore[arg-type]
    runner = web.AppRunner(app, keepalive_timeout=0.3)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        served = 0
        for byte in b"GET /2/info HTTP/1.1\r\n":
            try:
                writer.write(bytes([byte]))
                await writer.drain()
            except ConnectionError:
                break
            r2, w2 = await asyncio.open_connection("127.0.0.1", port)
            w2.write(b"GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert (await r2.readline()).startswith(b"HTTP/1.1 200 ")
            w2.close()
            served += 1
            if reader.at_eof():
                break
            await asyncio.sleep(0.05)
        async with asyncio.timeout(60):  # a guard against a hang, not a measurement
            assert await reader.read() == b""  # dropped without an answer
        assert served >= 1
        writer.close()
    finally:
        await runner.cleanup()
