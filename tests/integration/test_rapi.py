"""corral-rapi on a real testbed: HTTPS with the cluster CA, authentication, Ganeti's
protocol details, jobs, filters, queries, tags and an instance's life cycle; and the
daemon dropping its privileges after reading its files."""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
import ssl
import sys
import uuid as uuid_module
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest

from corral import daemons
from corral.rapi.daemon import settings_file
from corral.utils.process import running_pid, start_daemon, stop_daemon
from tests.conftest import TestbedHandle, free_port, run_tool

pytestmark = pytest.mark.integration

FINAL = ("success", "error", "canceled")


class Rapi:
    """A RAPI client on one kept-alive HTTPS (or HTTP) connection."""

    def __init__(self, url: str, ca: str | None, user: str | None = None,
                 password: str | None = None) -> None:
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        if parts.scheme == "https":
            context = ssl.create_default_context(cafile=ca)
            self.conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                parts.hostname, parts.port, context=context, timeout=60)
        else:
            self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        self.auth = None
        if user is not None:
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            self.auth = f"Basic {token}"

    def request(self, method: str, path: str, body: Any = None, *,
                headers: dict[str, str] | None = None,
                raw: bytes | None = None) -> tuple[int, Any, http.client.HTTPMessage]:
        sent = {"Content-Type": "application/json", **(headers or {})}
        if self.auth:
            sent["Authorization"] = self.auth
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        self.conn.request(method, path, body=data, headers=sent)
        response = self.conn.getresponse()
        text = response.read()
        assert response.getheader("Content-Type") == "application/json", text
        return response.status, json.loads(text), response.msg

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, answer, _ = self.request(method, path, body)
        assert status == 200, (method, path, status, answer)
        return answer

    def wait(self, job_id: str) -> dict[str, Any]:
        """Follow a job through /wait until it ends; its /2/jobs/[id] record."""
        assert isinstance(job_id, int) and job_id >= 0, job_id  # a JSON number, as Ganeti 3.0
        info: list[Any] | None = None
        serial: int | None = None
        while info is None or info[0] not in FINAL:
            answer = self.ok("GET", f"/2/jobs/{job_id}/wait", {
                "fields": ["status"], "previous_job_info": info, "previous_log_serial": serial})
            if answer is not None:
                info = answer["job_info"]
                for entry in answer["log_entries"]:
                    serial = max(serial or 0, entry[0])
        job: dict[str, Any] = self.ok("GET", f"/2/jobs/{job_id}")
        return job

    def run(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        """Submit a job through RAPI and wait for its success."""
        job = self.wait(self.ok(method, path, body))
        assert job["status"] == "success", job
        return job


def _client(testbed: TestbedHandle, *, user: str | None = "admin",
            password: str | None = None) -> Rapi:
    state = testbed.state["rapi"]
    if user == "admin" and password is None:
        password = state["password"]
    return Rapi(state["url"], state["ca"], user, password)


def test_protocol_authentication_jobs_filters_queries_and_tags(testbed: TestbedHandle) -> None:
    state = testbed.state["rapi"]
    assert state["url"] == f"https://127.0.1.1:{testbed.state['ports']['rapi']}"
    api = _client(testbed)

    # Plain resources over HTTPS verified with the cluster CA, on one kept-alive connection.
    assert api.ok("GET", "/version") == 2
    sock = api.conn.sock
    info = api.ok("GET", "/2/info")
    assert (info["name"], info["master"]) == ("cluster.testbed", "node1.testbed")
    assert "instance-create-reqv1" in api.ok("GET", "/2/features")
    assert api.ok("GET", "/") is None and api.ok("GET", "/2") is None
    assert api.conn.sock is sock, "the connection was kept alive"
    assert api.ok("GET", "/openapi.json")["paths"]["/2/info"]["get"]["x-corral-access"] == \
        "public"

    # Authentication: the testbed requires it for everything.
    for anonymous in (_client(testbed, user=None), _client(testbed, password="wrong")):
        status, body, headers = anonymous.request("GET", "/2/info")
        assert status == 401 and headers["WWW-Authenticate"] == 'Basic realm="Ganeti Remote API"'
        assert set(body) == {"code", "message", "explain", "error_code", "retryable"}
        assert (body["code"], body["error_code"], body["retryable"]) == (401, "unauthorized", False)

    # A read-only user added to the users file takes effect on SIGHUP.
    users_file = testbed.paths.rapi_users
    users_file.write_text(users_file.read_text() + "viewer viewerpw read\n")
    pid = running_pid(testbed.paths.pid_file("rapi"))
    assert pid is not None
    viewer = _client(testbed, user="viewer", password="viewerpw")
    os.kill(pid, signal.SIGHUP)
    status = 401
    while status == 401:  # until the daemon has handled the signal
        status, body, _ = viewer.request("GET", "/2/query/node?fields=name")
    assert status == 200 and [row[0][1] for row in body["data"]] == \
        ["node1.testbed", "node2.testbed", "node3.testbed"]
    status, body, headers = viewer.request("PUT", "/2/tags?tag=x")
    assert status == 403 and "'write' option" in body["message"]
    assert "WWW-Authenticate" not in headers
    assert viewer.request("GET", "/2/jobs/1/wait", {"fields": ["status"]})[0] == 403

    # Protocol errors: media type, methods, paths, arguments.
    status, body, _ = api.request("PUT", "/2/tags?tag=x", raw=b"tag=x",
                                  headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 415 and "application/json" in body["message"]
    status, body, headers = api.request("DELETE", "/2/info")
    assert status == 501 and headers["Allow"] == "GET"
    status, body, headers = api.request("POST", "/2/nodes/node2.testbed/powercycle")
    assert status == 501 and "not served by corral yet" in body["message"]
    status, body, _ = api.request("GET", "/2/nodes/nope.testbed")
    assert status == 404 and "'nope.testbed' not found" in body["message"]
    assert api.request("GET", "/2/no/such/resource")[0] == 404
    status, body, _ = api.request("GET", "/2/instances?bulk=true")
    assert status == 400 and "Invalid value for the 'bulk' parameter" in body["message"]
    status, body, headers = api.request("GET", "/2/instances?bulk=1&no-remember=1")
    assert status == 200 and headers["X-Corral-Ignored-Arguments"] == "no-remember"

    # Writes answer the job id as a bare JSON string; reason= lands in the opcode's trail.
    job_id = api.ok("PUT", f"/2/tags?tag=prod&tag=web&reason={quote('ticket 42')}")
    assert isinstance(job_id, int) and job_id >= 0
    job = api.wait(job_id)
    assert job["status"] == "success" and job["summary"] == ["TAGS_SET"]
    trail = [entry[:2] for entry in job["ops"][0]["reason"]]
    assert trail == [["user", "ticket 42"], ["gnt:client:rapi:tags", ""],
                     ["gnt:library:rlib2:tags", ""],
                     ["gnt:opcode:tags_set", f"job={job_id};index=0"]]
    assert sorted(api.ok("GET", "/2/tags")) == ["prod", "web"]
    api.run("DELETE", "/2/tags?tag=web")
    assert api.ok("GET", "/2/tags") == ["prod"]
    resync = api.run("PUT", "/2/redistribute-config")
    assert resync["summary"] == ["CLUSTER_REDIST_CONF"]
    jobs = api.ok("GET", "/2/jobs")
    assert {"id": int(job_id), "uri": f"/2/jobs/{job_id}"} in jobs
    assert int(job_id) in [j["id"] for j in api.ok("GET", "/2/jobs?bulk=1")]
    assert api.ok("DELETE", f"/2/jobs/{job_id}")[0] is False, "a finished job is not canceled"
    assert api.request("GET", "/2/jobs/999999")[0] == 404

    # Nodes by name or UUID; tags of a node named by its UUID; the generic query.
    nodes = {n["name"]: n for n in api.ok("GET", "/2/nodes?bulk=1")}
    node2 = nodes["node2.testbed"]
    assert api.ok("GET", f"/2/nodes/{node2['uuid']}")["name"] == "node2.testbed"
    assert api.ok("GET", "/2/nodes/node1.testbed/role") == "master"
    api.run("PUT", f"/2/nodes/{node2['uuid']}/tags?tag=rack1")
    assert api.ok("GET", "/2/nodes/node2.testbed/tags") == ["rack1"]
    answer = api.ok("PUT", "/2/query/node", {
        "fields": ["name", "tags"], "qfilter": ["=[]", "tags", "rack1"]})
    assert answer["data"] == [[[0, "node2.testbed"], [0, ["rack1"]]]]
    assert [f["name"] for f in answer["fields"]] == ["name", "tags"]
    status, body, _ = api.request("PUT", "/2/query/node", {
        "fields": ["name"], "qfilter": ["=", "no_such_field", 1]})
    assert status == 400 and "no_such_field" in body["message"]
    fields = api.ok("GET", "/2/query/instance/fields?fields=name,status")["fields"]
    assert [f["name"] for f in fields] == ["name", "status"]

    # Node groups: add, assign a node by UUID, rename by UUID, remove.
    api.run("POST", "/2/groups", {"name": "rack2", "alloc_policy": "preferred"})
    group = api.ok("GET", "/2/groups/rack2")
    assert set(group["ipolicy"]["disk-templates"]) == {"file", "sharedfile", "diskless"}
    api.run("PUT", "/2/groups/rack2/assign-nodes", {"nodes": [nodes["node3.testbed"]["uuid"]]})
    assert api.ok("GET", f"/2/groups/{group['uuid']}")["node_list"] == ["node3.testbed"]
    api.run("PUT", f"/2/groups/{group['uuid']}/rename", {"new_name": "rack3"})
    assert api.ok("GET", "/2/groups") == [{"name": "default", "uri": "/2/groups/default"},
                                          {"name": "rack3", "uri": "/2/groups/rack3"}]

    # Job filter rules (seed 000): PUT creates or replaces, GET, DELETE.
    rule = str(uuid_module.uuid4())
    assert api.ok("PUT", f"/2/filters/{rule}", {
        "priority": 5, "predicates": [["jobid", [">", "id", "watermark"]]],
        "action": "CONTINUE", "reason": [["user", "maintenance", 1]]}) == rule
    got = api.ok("GET", f"/2/filters/{rule}")
    assert (got["uuid"], got["priority"], got["action"]) == (rule, 5, "CONTINUE")
    assert [e[:2] for e in got["reason_trail"]] == [["user", "maintenance"],
                                                     ["gnt:client:rapi:filters_uuid", ""],
                                                     ["gnt:library:rlib2:filters_uuid", ""]]
    assert api.ok("PUT", f"/2/filters/{rule}", {"priority": 1, "action": "ACCEPT"}) == rule
    assert api.ok("GET", "/2/filters?bulk=1")[0]["action"] == "ACCEPT"
    status, body, _ = api.request("PUT", f"/2/filters/{rule}", {"action": "DROP"})
    assert status == 400 and "DROP" in body["message"]
    assert api.ok("GET", f"/2/filters/{rule}")["action"] == "ACCEPT", "nothing half-written"
    assert api.ok("DELETE", f"/2/filters/{rule}") is None
    assert api.ok("GET", "/2/filters") == []
    assert api.request("GET", f"/2/filters/{rule}")[0] == 404


def test_instance_life_cycle(testbed: TestbedHandle) -> None:
    api = _client(testbed)
    create = {"__version__": 1, "mode": "create", "name": "web1.testbed",
              "disk_template": "file", "disks": [{"size": 64}], "nics": [],
              "os": "corral-ext4+default", "pnode": "node2.testbed", "beparams": {"maxmem": 256}}

    # Bad bodies are refused before anything is queued, saying what is accepted.
    jobs = api.ok("GET", "/2/jobs")
    status, body, _ = api.request("POST", "/2/instances", {**create, "colour": "red"})
    assert status == 400 and "unknown parameter colour" in body["message"]
    status, body, _ = api.request("POST", "/2/instances",
                                  {k: v for k, v in create.items() if k != "__version__"})
    assert status == 400 and "__version__" in body["message"]
    assert api.ok("GET", "/2/jobs") == jobs

    job = api.run("POST", f"/2/instances?reason={quote('new web server')}", create)
    assert job["ops"][0]["reason"][0][:2] == ["user", "new web server"]
    inst = api.ok("GET", "/2/instances/web1.testbed")
    assert (inst["status"], inst["os"], inst["pnode"], inst["disk_template"]) == \
        ("running", "corral-ext4+default", "node2.testbed", "file")
    assert inst["disk.sizes"] == [64]
    assert inst["beparams"]["maxmem"] == inst["beparams"]["memory"] == 256
    uuid = inst["uuid"]
    assert api.ok("GET", f"/2/instances/{uuid}")["name"] == "web1.testbed"
    assert api.ok("GET", "/2/instances") == [{"id": "web1.testbed",
                                              "uri": "/2/instances/web1.testbed"}]
    console = api.ok("GET", f"/2/instances/{uuid}/console")
    assert console["instance"] == "web1.testbed"
    details = api.wait(api.ok("GET", "/2/instances/web1.testbed/info?static=1"))
    assert "web1.testbed" in details["opresult"][0]

    # Stop, rename and change it by UUID, start it again.
    api.run("PUT", f"/2/instances/{uuid}/shutdown", {"timeout": 10})
    assert api.ok("GET", f"/2/instances/{uuid}")["status"] == "ADMIN_down"
    status, body, _ = api.request("GET", f"/2/instances/{uuid}/console")
    assert status == 503 and "not running" in body["message"]
    api.run("PUT", f"/2/instances/{uuid}/rename", {"new_name": "web2.testbed"})
    assert api.request("GET", "/2/instances/web1.testbed")[0] == 404
    api.run("PUT", "/2/instances/web2.testbed/modify", {"custom_beparams": {"vcpus": 2}})
    changed = api.ok("GET", f"/2/instances/{uuid}")
    assert (changed["name"], changed["beparams"]["vcpus"]) == ("web2.testbed", 2)
    api.run("PUT", "/2/instances/web2.testbed/startup")
    assert api.ok("GET", "/2/instances/web2.testbed")["status"] == "running"
    api.run("POST", "/2/instances/web2.testbed/reboot?type=soft")
    api.run("PUT", f"/2/instances/{uuid}/tags?tag=frontend")
    assert api.ok("GET", "/2/instances/web2.testbed/tags") == ["frontend"]

    # A job that fails reports the error in the job; the instance is unchanged.
    failed = api.wait(api.ok("PUT", "/2/instances/web2.testbed/rename",
                             {"new_name": "web3.testbed"}))
    assert failed["status"] == "error" and "web2.testbed" in json.dumps(failed["opresult"])
    assert api.ok("GET", f"/2/instances/{uuid}")["name"] == "web2.testbed"

    api.run("DELETE", f"/2/instances/{uuid}")
    assert api.ok("GET", "/2/instances") == []
    assert api.request("GET", f"/2/instances/{uuid}")[0] == 404


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping privileges needs root")
def test_daemon_drops_privileges_after_reading_its_files(tmp_path: Path) -> None:
    env = {**os.environ, "CORRAL_ROOT": str(tmp_path)}
    run_tool(["gnt-cluster", "init", "--master-name", "m.test", "--primary-ip", "127.0.9.1",
              "c.test", "--no-start"], env)
    data = tmp_path / "var/lib/corral"
    password = (data / "rapi/admin-password").read_text().strip()
    assert (data / "rapi-key.pem").stat().st_mode & 0o077 == 0
    pid_file = tmp_path / "run/corral/rapi.pid"
    port = free_port("127.0.9.1")
    try:
        pid = start_daemon("corral-rapi", [
            sys.executable, "-m", "corral.rapi", "--bind", "127.0.9.1", "--port", str(port),
            "--user", "nobody", "--group", "nogroup"],
            log_file=tmp_path / "rapi.out", env=env)
        status = Path(f"/proc/{pid}/status").read_text()
        uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
        gids = next(line for line in status.splitlines() if line.startswith("Gid:")).split()[1:]
        assert set(uids) == {"65534"} and set(gids) == {"65534"}, status
        # The key (root's, mode 0400) and the users file were read before the switch.
        api = Rapi(f"https://127.0.9.1:{port}", str(data / "rapi.pem"), "admin", password)
        assert "instance-create-reqv1" in api.ok("GET", "/2/features")
        assert api.request("PUT", "/2/tags?tag=x", headers={})[0] == 502
        status_code, body, _ = api.request("GET", "/2/info")
        assert status_code == 502 and "cannot reach the master daemon" in body["message"]
        anonymous = Rapi(f"https://127.0.9.1:{port}", str(data / "rapi.pem"))
        assert anonymous.request("PUT", "/2/tags?tag=x")[0] == 401
    finally:
        stop_daemon(pid_file)
    # Plain HTTP only when asked for.
    port = free_port("127.0.9.1")
    try:
        start_daemon("corral-rapi", [
            sys.executable, "-m", "corral.rapi", "--bind", "127.0.9.1", "--port", str(port),
            "--no-ssl"], log_file=tmp_path / "rapi.out", env=env)
        assert Rapi(f"http://127.0.9.1:{port}", None).ok("GET", "/version") == 2
    finally:
        stop_daemon(pid_file)
    assert running_pid(pid_file) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping privileges needs root")
def test_unprivileged_rapi_reaches_the_master(testbed: TestbedHandle) -> None:
    """RAPI running as nobody:nogroup talks to the master daemon, whose socket then
    belongs to that group (mode 0660)."""
    paths = testbed.paths
    # On a real node /run/corral is reachable; pytest's temporary directories are
    # root's only (0700): let others through them (not read them) for this test.
    opened = [d for d in paths.run_dir.parents if d.stat().st_mode & 0o001 == 0]
    modes = {d: d.stat().st_mode & 0o7777 for d in opened}
    try:
        for directory, mode in modes.items():
            directory.chmod(mode | 0o001)
        _run_unprivileged(testbed)
    finally:
        for directory, mode in modes.items():
            directory.chmod(mode)


def _run_unprivileged(testbed: TestbedHandle) -> None:
    paths = testbed.paths
    settings = json.loads(settings_file(paths).read_text())
    settings_file(paths).write_text(json.dumps({**settings, "user": "nobody",
                                                "group": "nogroup"}))
    for name in ("rapi", "masterd"):
        stop_daemon(paths.pid_file(name))
    daemons.start(paths)
    pid = running_pid(paths.pid_file("rapi"))
    assert pid is not None
    status = Path(f"/proc/{pid}/status").read_text()
    uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
    assert set(uids) == {"65534"}, status
    socket_stat = paths.master_socket.stat()
    assert socket_stat.st_gid == 65534 and socket_stat.st_mode & 0o777 == 0o660
    api = _client(testbed)
    assert api.ok("GET", "/2/info")["name"] == "cluster.testbed"
    api.run("PUT", "/2/tags?tag=unprivileged")
    assert "unprivileged" in api.ok("GET", "/2/tags")
