"""RAPI v2 from the outside: existing clients, a fuzzer and the access rules.

Each test starts a 3-node testbed (the two Python client sessions share one), whose
``corral-rapi`` runs with ``--require-authentication``, and talks to it over HTTPS on
loopback, trusting only the cluster CA:

* Ganeti's own Python client (Debian's ``ganeti-3.0``, run under the system python3)
  goes through a whole administrator's session (``rapi_session.py``);
* ``curl`` makes the calls shell scripts make, with the CA, a user and JSON bodies,
  and meets the error answers scripts rely on (404, 401, 415, 400);
* Ganeti's htools (``hscan``, Debian's ``ganeti-htools-3.0``) load the cluster
  through RAPI as ``hbal -m`` and ``hspace -m`` do;
* gentleman, the other Python client (PyPI, installed by ``make rapi-clients``), goes
  through an administrator's session too (``gentleman_session.py``), on the testbed of
  Ganeti's client session;
* schemathesis fuzzes every operation of ``/openapi.json`` (valid and invalid
  input, on names that do not exist and then on real objects) and checks that
  nothing answers 5xx and that every error body has Ganeti's shape
  ``{"code", "message", "explain"}``; path values fuzzers rarely hit (control
  characters, non-UTF-8 bytes, numbers past 64 bits) are sent on purpose;
* an access matrix sends every documented operation as anonymous, bad password,
  read-only user and write user, with the outcome Ganeti's RAPI defines for each.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from corral.utils.process import running_pid
from tests.conftest import TestbedHandle
from tests.integration import gentleman_session

pytestmark = pytest.mark.integration

SYSTEM_PYTHON = "/usr/bin/python3"
GANETI_LIB = Path("/usr/share/ganeti/3.0")
SESSION_SCRIPT = Path(__file__).with_name("rapi_session.py")
ERROR_KEYS = {"code", "message", "explain"}
NODES = ["node1.testbed", "node2.testbed", "node3.testbed"]


@dataclass
class Rapi:
    """Where a testbed's RAPI is and how to log in."""

    url: str
    user: str
    password: str
    cafile: Path

    def session(self, auth: tuple[str, str] | None = None) -> requests.Session:
        """A keep-alive HTTPS session trusting only the cluster CA."""
        session = requests.Session()
        # Neither REQUESTS_CA_BUNDLE nor a proxy from the environment: loopback, our CA.
        session.trust_env = False
        session.verify = str(self.cafile)
        session.auth = auth
        session.headers["Accept"] = "application/json"
        return session


def rapi_of(testbed: TestbedHandle) -> Rapi:
    """The testbed's RAPI as ``testbed.json`` records it."""
    conf = testbed.state.get("rapi") or {}
    assert conf.get("url"), f"testbed.json records no RAPI URL: {conf!r}"
    return Rapi(url=str(conf["url"]).rstrip("/"), user=str(conf["user"]),
                password=str(conf["password"]), cafile=testbed.paths.rapi_cert)


def error_shape_problem(response: requests.Response) -> str | None:
    """Why an error response's body is not ``{"code", "message", "explain"}``, or None."""
    try:
        body = response.json()
    except ValueError:
        return f"body is not JSON: {response.text[:200]!r}"
    if not isinstance(body, dict):
        return f"body is not an object: {body!r:.200}"
    missing = ERROR_KEYS - set(body)
    if missing:
        return f"body lacks {sorted(missing)}: {body!r:.200}"
    if body["code"] != response.status_code:
        return f"body code {body['code']!r} differs from the status {response.status_code}"
    if not isinstance(body["message"], str):
        return f"message is not a string: {body['message']!r:.200}"
    return None


# -- (a) Ganeti's own client ---------------------------------------------------------


def _ganeti_client_missing() -> str | None:
    """Why Ganeti's client cannot run here (None when it can): it is found where
    rapi_session.py looks, ganeti-3.0's directory first, then the system path."""
    if not Path(SYSTEM_PYTHON).exists():
        return f"{SYSTEM_PYTHON} is missing"
    probe = subprocess.run(
        [SYSTEM_PYTHON, "-c", f"import sys; sys.path.insert(0, {str(GANETI_LIB)!r});"
         " import pycurl, simplejson, ganeti.rapi.client"],
        capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return (f"{SYSTEM_PYTHON} cannot import Ganeti's RAPI client (Debian ganeti-3.0"
                f" puts it in {GANETI_LIB}; 'make sysdeps'): {probe.stderr.strip()}")
    return None


@pytest.fixture
def clients_testbed(shared_testbed: TestbedHandle) -> TestbedHandle:
    """The module's shared testbed for the two Python client sessions (each cleans up
    after itself), with the event-loop check every test of a shared testbed gets."""
    return shared_testbed


def test_ganeti_rapi_client_session(clients_testbed: TestbedHandle, tmp_path: Path) -> None:
    """A whole admin session through ganeti.rapi.client.GanetiRapiClient."""
    testbed = clients_testbed
    reason = _ganeti_client_missing()
    if reason:
        print(f"skipping: {reason}")
        pytest.skip(reason)
    rapi = rapi_of(testbed)
    password_file = tmp_path / "rapi-password"
    password_file.write_text(rapi.password + "\n")
    password_file.chmod(0o600)
    proc = subprocess.run(
        [SYSTEM_PYTHON, str(SESSION_SCRIPT), "--url", rapi.url, "--user", rapi.user,
         "--password-file", str(password_file), "--cafile", str(rapi.cafile)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, (
        f"rapi_session.py exited {proc.returncode}\nstderr:\n{proc.stderr}\n"
        f"report so far:\n{proc.stdout}")
    report: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    wrong = [f"{what}: got {got!r}, expected {want}" for what, got, want, ok in
             session_expectations(report, testbed.state["cluster_name"]) if not ok]
    assert not wrong, "the session saw what Ganeti's RAPI would not answer:\n" + "\n".join(wrong)


def test_gentleman_session(clients_testbed: TestbedHandle) -> None:
    """An admin session through gentleman (PyPI), which sends query arguments corral
    does not take and polls a job a REJECT filter canceled at submission."""
    reason = gentleman_session.missing()
    if reason:
        print(f"skipping: {reason}")
        pytest.skip(reason)
    url = urlsplit(rapi_of(clients_testbed).url)
    rapi = rapi_of(clients_testbed)
    assert url.hostname and url.port
    seen = gentleman_session.run(url.hostname, url.port, rapi.user, rapi.password,
                                 "node2.testbed")
    assert (seen["version"], seen["cluster"], seen["nodes"]) == (
        2, clients_testbed.state["cluster_name"], NODES), seen
    assert "instance-create-reqv1" in seen["features"]
    assert any(os.split("+")[0] == "corral-ext4" for os in seen["os"]), seen["os"]
    assert [seen["created"], seen["after_start"], seen["after_stop"]] == [
        "ADMIN_down", "running", "ADMIN_down"], seen
    assert seen["maxmem"] == 256 and seen["tags"] == ["gent:a", "gent:b"], seen
    assert seen["rejected"] == {
        "status": "canceled", "rule": seen["rejected"]["rule"],
        "opresult": [f"Job canceled by filter rule {seen['rejected']['rule']}"]}, seen
    assert seen["tags_after_reject"] == ["gent:a", "gent:b"], seen
    assert seen["cancel_finished"][0] is False and seen["jobs_listed"], seen
    assert seen["listed_after_remove"] is False, seen


def session_expectations(report: dict[str, Any], cluster: str
                         ) -> list[tuple[str, Any, str, bool]]:
    """(what, what the session saw, what Ganeti's RAPI answers, whether they agree) for
    every point of the session's report, so that one run shows every difference."""
    life, filters, tags = report["instance"], report["filters"], report["cluster_tags"]
    created, console = life["created"], life.get("console", {})
    jobs = report["jobs"]
    checks: list[tuple[str, Any, str, bool]] = []

    def eq(what: str, got: Any, want: Any) -> None:
        checks.append((what, got, repr(want), got == want))

    def holds(what: str, got: Any, want: str, ok: bool) -> None:
        checks.append((what, got, want, ok))

    eq("GET /version", report["version"], 2)
    holds("GET /2/features", report["features"], "to contain instance-create-reqv1",
          "instance-create-reqv1" in report["features"])
    eq("/2/info name", report["info"]["name"], cluster)
    eq("/2/info master", report["info"]["master"], "node1.testbed")
    holds("/2/info enabled_hypervisors", report["info"]["enabled_hypervisors"],
          "to contain fake", "fake" in report["info"]["enabled_hypervisors"])
    holds("GET /2/os", report["os"], "to list corral-ext4",
          any(name.split("+")[0] == "corral-ext4" for name in report["os"]))
    eq("GET /2/nodes", report["nodes"], NODES)
    eq("GET /2/nodes/node1.testbed name", report["master_node"]["name"], "node1.testbed")
    eq("GET /2/nodes/node1.testbed/role", report["master_role"], "master")
    eq("GET /2/groups/default node_cnt", report["group"]["node_cnt"], 3)
    eq("GET /2/groups/default node_list", sorted(report["group"]["node_list"] or []), NODES)
    eq("GET /2/instances/<unknown> status", report["unknown_instance_status"], 404)

    eq("created name", created["name"], "rapi1.testbed")
    eq("created pnode", created["pnode"], life["pnode"])
    eq("created disk_template", created["disk_template"], "file")
    eq("created disk.sizes", created["disk.sizes"], [64])
    eq("created os", created["os"], "corral-ext4+default")
    eq("created status (start=False)", created["status"], "ADMIN_down")
    eq("created beparams.maxmem", created["beparams"]["maxmem"], 128)
    eq("status after startup", life["after_start"], "running")
    eq("console instance", console.get("instance"), "rapi1.testbed")
    holds("console kind", console.get("kind"),
          "one of Ganeti's constants.CONS_ALL (msg, ssh, vnc, spice); fake gives msg",
          console.get("kind") in ("msg", "ssh", "vnc", "spice"))
    eq("status after reboot", life["after_reboot"], "running")
    eq("status after shutdown", life["after_stop"], "ADMIN_down")
    eq("status after reinstall (no_startup)", life["after_reinstall"], "ADMIN_down")
    eq("beparams.maxmem after modify", life["beparams_after_modify"]["maxmem"], 256)
    eq("beparams.minmem after modify", life["beparams_after_modify"]["minmem"], 256)
    eq("name after rename", life["renamed_to"], "rapi2.testbed")
    eq("GET old name after rename", life["old_name_status"], 404)
    eq("instance tags", life["tags"],
       {"after_add": ["tier:front", "web"], "after_delete": ["tier:front"]})
    eq("PUT /2/query/instance with a filter", life["query"],
       [[[0, "rapi2.testbed"], [0, "ADMIN_down"], [0, life["pnode"]]]])
    eq("removed", life["removed"], True)
    eq("GET after remove", life["after_remove_status"], 404)

    eq("create with an unknown pnode: refused at submission", report["refused_create"],
       {"code": 400, "names_pnode": True})
    failed = report["failed_job"]
    eq("startup of an unknown instance: status, opstatus",
       [failed["status"], failed["opstatus"]], ["error", ["error"]])
    error = (failed["opresult"] or [None])[0]
    holds("its opresult[0]", error,
          "[\"OpPrereqError\", [message, \"unknown_entity\"]] (the client's ECODE_NOENT)",
          isinstance(error, list) and len(error) == 2 and error[0] == "OpPrereqError"
          and isinstance(error[1], list) and error[1][1:2] == ["unknown_entity"])

    eq("group life", report["group_life"], {"created": "last_resort",
                                            "modified": "unallocable", "renamed": True,
                                            "tags": ["zone:a"], "removed": True})
    eq("node tags", report["node_tags"], {"after_add": ["rack:7"], "after_delete": []})
    holds("DELETE /2/jobs/<finished>", report["cancel_finished"], "[False, message]",
          isinstance(report["cancel_finished"], list) and report["cancel_finished"][:1] == [False])
    ours = {"rapi-session", "owner:admin"}
    holds("cluster tags after add", tags["after_add"], f"to contain {sorted(ours)}",
          ours <= set(tags["after_add"]))
    holds("cluster tags after delete", tags["after_delete"], "none of ours",
          not ours & set(tags["after_delete"]))

    eq("filter as added", filters["added"], {
        "uuid": filters["uuid"], "priority": 10, "action": "REJECT",
        "predicates": [["opcode", ["=", "OP_ID", "OP_TEST_DELAY"]]]})
    eq("filter listed (plain, bulk)", [filters["listed"], filters["listed_bulk"]], [True, True])
    # Ganeti stores the library's ["gnt:client", "", ts] as given, then ["luxid", "", ts];
    # corral keeps it under RAPI's own source and appends its RAPI entry.
    eq("filter trail as added", filters["added_trail"],
       [["user", "session maintenance"], ["gnt:client:rapi-client", ""],
        ["gnt:client:rapi:filters", ""], ["gnt:library:rlib2:filters", ""]])
    eq("filter as replaced", filters["replaced"],
       {"uuid": filters["uuid"], "priority": 20, "action": "ACCEPT"})
    holds("filters after delete", filters["after_delete"], "without the filter",
          filters["uuid"] not in filters["after_delete"])
    eq("GET deleted filter", filters["deleted_status"], 404)
    rejected = report["rejected"]
    eq("job rejected by a filter at submission", rejected["job"], {
        "status": "canceled", "opstatus": ["canceled"],
        "opresult": [f"Job canceled by filter rule {rejected['uuid']}"]})
    holds("cluster tags after the rejected job", rejected["tags"], "without 'rejected'",
          "rejected" not in rejected["tags"])
    eq("GET /2/info?no-remember=1 (ignored)", report["unknown_argument_info_name"], cluster)

    holds("jobs followed", sorted(jobs), "some", bool(jobs))
    holds("job statuses", {k: v["status"] for k, v in jobs.items()}, "all success",
          all(job["status"] == "success" for job in jobs.values()))
    holds("GET /2/jobs/<id> keys", report["job_keys"], "id, status, ops, opstatus, opresult",
          {"id", "status", "ops", "opstatus", "opresult"} <= set(report["job_keys"]))
    eq("PUT /2/query/node names", report["query_node_names"], NODES)
    eq("PUT /2/query/node with a filter", report["query_master_only"], ["node1.testbed"])
    eq("GET /2/query/node/fields?fields=name,role", report["query_fields"], ["name", "role"])
    return checks


# -- (b) curl, as shell scripts use the RAPI -----------------------------------------


@dataclass
class Curl:
    """curl with the cluster CA; credentials from a config file, never on the command line."""

    rapi: Rapi
    directory: Path
    calls: int = 0
    log: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.config = self.directory / "curlrc"
        self.config.write_text(f'user = "{self.rapi.user}:{self.rapi.password}"\n')
        self.config.chmod(0o600)

    def __call__(self, method: str, path: str, body: Any = None, *, auth: bool = True,
                 content_type: str = "application/json", raw: str | None = None
                 ) -> tuple[int, dict[str, str], Any]:
        """One request; return (status, lower-cased headers, decoded JSON body or text)."""
        self.calls += 1
        headers_file = self.directory / f"headers-{self.calls}"
        argv = ["curl", "-sS", "--noproxy", "*", "--max-time", "60",
                "--cacert", str(self.rapi.cafile),
                "-X", method, "-D", str(headers_file), "-w", "\n%{http_code}",
                "-H", "Accept: application/json"]
        if auth:
            argv += ["-K", str(self.config)]
        data = raw if raw is not None else (None if body is None else json.dumps(body))
        if data is not None:
            argv += ["-H", f"Content-Type: {content_type}", "--data-binary", data]
        argv.append(self.rapi.url + path)
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=90)
        assert proc.returncode == 0, f"curl {method} {path} failed: {proc.stderr}"
        text, _, status = proc.stdout.rpartition("\n")
        headers: dict[str, str] = {}
        for line in headers_file.read_text().splitlines()[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        try:
            decoded: Any = json.loads(text)
        except ValueError:
            decoded = text
        self.log.append(f"{method} {path} -> {status}")
        return int(status), headers, decoded

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        """A request that must answer 200; its decoded body."""
        status, _, answer = self(method, path, body)
        assert status == 200, f"{method} {path}: HTTP {status}: {answer!r}"
        return answer

    def wait_job(self, job_id: Any, timeout: float = 120.0) -> dict[str, Any]:
        """Poll /2/jobs/ID until the job ends, as a shell loop would; it must succeed."""
        assert str(job_id).isdigit(), f"expected a job id, got {job_id!r}"
        deadline = time.monotonic() + timeout
        while True:
            job: dict[str, Any] = self.ok("GET", f"/2/jobs/{job_id}")
            if job["status"] in ("success", "error", "canceled"):
                break
            assert time.monotonic() < deadline, f"job {job_id} still {job['status']}"
            time.sleep(0.2)
        assert job["status"] == "success", f"job {job_id}: {job}"
        return job


def test_curl_client(testbed: TestbedHandle, tmp_path: Path) -> None:
    """What a shell script does with curl: read, create, tag, query, remove; errors."""
    if shutil.which("curl") is None:
        print("skipping: curl is not installed")
        pytest.skip("curl is not installed")
    curl = Curl(rapi_of(testbed), tmp_path)

    assert curl.ok("GET", "/version") == 2
    info = curl.ok("GET", "/2/info")
    assert info["name"] == testbed.state["cluster_name"]
    nodes = curl.ok("GET", "/2/nodes?bulk=1")
    assert sorted(n["name"] for n in nodes) == NODES
    assert all(n["uri"] == f"/2/nodes/{n['id']}" for n in curl.ok("GET", "/2/nodes"))

    name = "curl1.testbed"
    job_id = curl.ok("POST", "/2/instances", {
        "__version__": 1, "mode": "create", "name": name, "disk_template": "diskless",
        "disks": [], "nics": [{}], "os": "corral-ext4+default", "pnode": "node3.testbed",
        "no_install": True, "start": False, "name_check": False, "ip_check": False,
        "beparams": {"maxmem": 64, "minmem": 64},
    })
    curl.wait_job(job_id)
    job_id = curl.ok("PUT", f"/2/instances/{name}/tags?tag=db&tag=env:test&reason=ticket-42")
    job = curl.wait_job(job_id)
    trail = job["ops"][0]["reason"]
    assert any(entry[1] == "ticket-42" for entry in trail), trail
    assert sorted(curl.ok("GET", f"/2/instances/{name}/tags")) == ["db", "env:test"]
    inst = curl.ok("GET", f"/2/instances/{name}")
    assert (inst["name"], inst["pnode"], inst["disk_template"]) == (
        name, "node3.testbed", "diskless")
    assert sorted(inst["tags"]) == ["db", "env:test"]
    bulk = curl.ok("GET", "/2/instances?bulk=1")
    assert [i["name"] for i in bulk] == [name]
    answer = curl.ok("PUT", "/2/query/instance", {
        "fields": ["name", "disk_template"], "qfilter": ["=", "name", name]})
    assert answer["data"] == [[[0, name], [0, "diskless"]]]
    jobs = curl.ok("GET", "/2/jobs")
    assert {int(j["id"]) for j in jobs} >= {int(job_id)}

    # Errors, in the shape every client formats.
    status, headers, body = curl("GET", "/2/instances/no-such-instance.testbed")
    assert status == 404 and set(body) >= ERROR_KEYS and body["code"] == 404, body
    assert headers.get("content-type", "").startswith("application/json"), headers
    status, headers, body = curl("GET", "/2/info", auth=False)
    assert status == 401, (status, body)
    assert headers.get("www-authenticate", "").lower().startswith("basic realm="), headers
    status, _, body = curl("POST", "/2/instances", content_type="text/plain", raw="{}")
    assert status == 415 and isinstance(body, dict) and set(body) >= ERROR_KEYS, (status, body)
    status, _, body = curl("POST", "/2/instances", raw="{not json")
    assert status == 400 and isinstance(body, dict) and set(body) >= ERROR_KEYS, (status, body)

    job_id = curl.ok("DELETE", f"/2/instances/{name}")
    curl.wait_job(job_id)
    assert curl.ok("GET", "/2/instances") == []
    status, _, body = curl("GET", f"/2/instances/{name}")
    assert status == 404, (status, body)


# -- htools: hscan reads the cluster through RAPI, as hbal -m and hspace -m do ----------

HSCAN = Path("/usr/lib/ganeti/3.0/usr/bin/hscan")


def test_htools_hscan(testbed: TestbedHandle, tmp_path: Path) -> None:
    """Ganeti's htools (Haskell, libcurl) load groups, nodes, instances and cluster info
    over RAPI and write them in their text format; hbal and hspace load the same way."""
    if not HSCAN.exists():
        print(f"skipping: {HSCAN} is missing (Debian package ganeti-htools-3.0)")
        pytest.skip(f"{HSCAN} is missing (Debian package ganeti-htools-3.0)")
    rapi = rapi_of(testbed)
    curl = Curl(rapi, tmp_path)
    name = "htools1.testbed"
    curl.wait_job(curl.ok("POST", "/2/instances", {
        "__version__": 1, "mode": "create", "name": name, "disk_template": "file",
        "disks": [{"size": 64}], "nics": [{}], "os": "corral-ext4+default",
        "pnode": "node2.testbed", "name_check": False, "ip_check": False,
        "beparams": {"maxmem": 128, "minmem": 128, "vcpus": 1}}))
    # htools take credentials only in the URL, and check no certificate.
    host = rapi.url.removeprefix("https://")
    url = f"https://{rapi.user}:{rapi.password}@{host}"
    out = tmp_path / "hscan"
    out.mkdir()
    proc = subprocess.run([str(HSCAN), "-p", "-d", str(out), url], capture_output=True,
                          text=True, timeout=120)
    shown = (proc.stdout + proc.stderr).replace(rapi.password, "PASSWORD")
    assert proc.returncode == 0 and "failed to load data" not in shown, shown
    [data_file] = out.glob("*.data")
    data = data_file.read_text()
    data_file.unlink()  # named after the URL, password included
    for expected in [*NODES, name, "default"]:
        assert expected in data, f"{expected} not in hscan's data:\n{data}"
    summary = next(line for line in proc.stdout.splitlines() if host in line)
    assert summary.split()[1:3] == ["3", "1"], summary.replace(rapi.password, "PASSWORD")


# -- the fields of bulk answers --------------------------------------------------------

#: The keys Ganeti's RAPI documents for each item of a bulk listing (and of the single
#: object), which scripts index directly.
COMMON_KEYS = ["ctime", "mtime", "uuid", "serial_no", "tags"]
BULK_KEYS = {
    "/2/instances?bulk=1": [
        "name", "admin_state", "os", "pnode", "snodes", "disk_template", "nic.ips",
        "nic.macs", "nic.modes", "nic.uuids", "nic.names", "nic.links", "nic.networks",
        "nic.networks.names", "nic.bridges", "network_port", "disk.sizes", "disk.spindles",
        "disk_usage", "disk.uuids", "disk.names", "beparams", "hvparams", "oper_state",
        "oper_ram", "oper_vcpus", "status", "custom_hvparams", "custom_beparams",
        "custom_nicparams", *COMMON_KEYS],
    "/2/nodes?bulk=1": [
        "name", "offline", "master_candidate", "drained", "dtotal", "dfree", "sptotal",
        "spfree", "mtotal", "mnode", "mfree", "pinst_cnt", "sinst_cnt", "ctotal", "cnos",
        "cnodes", "csockets", "pip", "sip", "role", "pinst_list", "sinst_list",
        "master_capable", "vm_capable", "ndparams", "group.uuid", *COMMON_KEYS],
    "/2/groups?bulk=1": [
        "alloc_policy", "name", "node_cnt", "node_list", "ipolicy", "custom_ipolicy",
        "diskparams", "custom_diskparams", "ndparams", "custom_ndparams", *COMMON_KEYS],
    "/2/jobs?bulk=1": [
        "id", "ops", "status", "summary", "opstatus", "received_ts", "start_ts", "end_ts"],
    "/2/filters?bulk=1": [
        "watermark", "priority", "predicates", "action", "reason_trail", "uuid"],
}


def test_bulk_fields(testbed: TestbedHandle) -> None:
    """Each bulk listing carries every key Ganeti's RAPI documents for its items."""
    rapi = rapi_of(testbed)
    missing: list[str] = []
    with rapi.session((rapi.user, rapi.password)) as session:
        def call(method: str, path: str, body: Any = None) -> Any:
            response = session.request(method, rapi.url + path, json=body, timeout=60)
            assert response.status_code == 200, (method, path, response.text[:300])
            return response.json()

        job_id = call("POST", "/2/instances", {
            "__version__": 1, "mode": "create", "name": "fields1.testbed",
            "disk_template": "diskless", "disks": [], "nics": [{}], "os": "corral-ext4+default",
            "pnode": "node2.testbed", "no_install": True, "start": False,
            "name_check": False, "ip_check": False})
        deadline = time.monotonic() + 60
        while call("GET", f"/2/jobs/{job_id}")["status"] not in ("success", "error"):
            assert time.monotonic() < deadline, f"job {job_id} hangs"
            time.sleep(0.1)
        call("POST", "/2/filters", {"priority": 5, "predicates": [], "action": "ACCEPT"})
        for path, keys in BULK_KEYS.items():
            items = call("GET", path)
            assert items, f"{path} is empty"
            absent = [k for k in keys if k not in items[0]]
            if absent:
                missing.append(f"{path}: items lack {absent}")
        job = call("GET", f"/2/jobs/{job_id}")
        absent = [k for k in [*BULK_KEYS["/2/jobs?bulk=1"], "oplog", "opresult"]
                  if k not in job]
        if absent:
            missing.append(f"/2/jobs/{job_id}: lacks {absent}")
    assert not missing, "\n".join(missing)


# -- the OpenAPI document ------------------------------------------------------------


def load_openapi(rapi: Rapi) -> dict[str, Any]:
    """``/openapi.json`` as the write user fetches it."""
    with rapi.session((rapi.user, rapi.password)) as session:
        response = session.get(rapi.url + "/openapi.json", timeout=30)
    assert response.status_code == 200, (response.status_code, response.text[:300])
    document: dict[str, Any] = response.json()
    assert document.get("openapi", "").startswith("3."), document.get("openapi")
    assert document.get("paths"), "the OpenAPI document has no paths"
    return document


HTTP_METHODS = ("get", "put", "post", "delete", "patch")


def documented_operations(document: dict[str, Any]) -> list[tuple[str, str]]:
    """(METHOD, path template) of every operation in the document."""
    return sorted((method.upper(), path) for path, item in document["paths"].items()
                  for method in item if method in HTTP_METHODS)


# -- (c) schemathesis ----------------------------------------------------------------

#: Operations the fuzzer leaves alone, and why. The fuzzer sends valid requests too,
#: as the write user, so it must not take the testbed itself apart: cluster-wide
#: parameters (could disable the enabled hypervisor or disk templates), node roles,
#: power cycling and evacuation (could offline or drain the nodes every later request
#: needs), job filters (a generated REJECT or PAUSE rule would hold every later job,
#: so the rest of the run would test only that rule); and the job-change wait, which
#: blocks by design until its timeout. Ganeti's own client covers filters and waits.
FUZZ_EXCLUDED = (
    ("PUT", r"^/2/modify$"),
    ("PUT", r"^/2/nodes/\{[^}]+\}/role$"),
    ("POST", r"^/2/nodes/\{[^}]+\}/(powercycle|evacuate|migrate|modify)$"),
    ("POST", r"^/2/filters$"),
    ("PUT", r"^/2/filters/\{[^}]+\}$"),
    ("GET", r"^/2/jobs/\{[^}]+\}/wait$"),
)
FUZZ_EXAMPLES = 12


def _fuzz_excluded(method: str, path: str) -> bool:
    return any(m == method and re.match(p, path) for m, p in FUZZ_EXCLUDED)


def ganeti_defined_5xx(response: requests.Response) -> bool:
    """The one 5xx Ganeti's RAPI defines for a well-formed request: 503 for the console
    of an instance that is not running (rlib2's console resource raises
    HttpServiceUnavailable, and GanetiRapiClient.GetInstanceConsole callers expect it)."""
    request = response.request
    return (response.status_code == 503 and request.method == "GET"
            and re.search(r"^/2/instances/[^/]+/console$",
                          urlsplit(request.url or "").path) is not None)


@dataclass
class FuzzLog:
    """What the fuzzer saw: bad answers and a count per status class."""

    problems: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def record(self, response: requests.Response, mode: str) -> None:
        """Count the answer; keep it if it is a 5xx or an error in the wrong shape."""
        status = response.status_code
        bucket = f"{status // 100}xx"
        self.counts[bucket] = self.counts.get(bucket, 0) + 1
        where = (f"{response.request.method} {response.request.url} ({mode},"
                 f" body {str(response.request.body)[:120]!r})")
        if status >= 500 and not ganeti_defined_5xx(response):
            self.problems.append(f"{where}: HTTP {status}: {response.text[:300]!r}")
        elif status >= 400:
            shape = error_shape_problem(response)
            if shape:
                self.problems.append(f"{where}: HTTP {status}: {shape}")


def fuzz(operation: Any, mode: Any, sender: Sender,
         path_parameters: dict[str, str] | None = None) -> None:
    """Generate FUZZ_EXAMPLES requests for one operation (with ``path_parameters`` fixed,
    if given) and hand each to ``sender``, which sends them in the order made (no
    shrinking: every bad answer is kept as it came)."""
    from hypothesis import HealthCheck, Phase, given, settings

    strategy = operation.as_strategy(generation_mode=mode, path_parameters=path_parameters)
    label = f"{mode}{' on real objects' if path_parameters else ''}"

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None, derandomize=True,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def exercise(case: Any) -> None:
        sender.send(case, label)

    exercise()


class Sender:
    """Sends generated requests one at a time, in the order they were handed over, from
    a thread of its own: Hypothesis makes the next cases (CPU in this process) while the
    daemons answer the previous ones, instead of one waiting for the other. The answers
    go to ``log``; leaving the ``with`` block waits for the last one."""

    def __init__(self, session: requests.Session, base_url: str, log: FuzzLog) -> None:
        self.session = session
        self.base_url = base_url
        self.log = log
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fuzz-sender")
        self._queued: list[Future[None]] = []

    def send(self, case: Any, mode: str) -> None:
        """Queue ``case``; it is sent after every case queued before it."""
        self._queued.append(self._pool.submit(self._call, case, mode))

    def _call(self, case: Any, mode: str) -> None:
        try:
            # verify: schemathesis passes its own (True) per request, over the session's.
            response = case.call(base_url=self.base_url, session=self.session, timeout=60,
                                 verify=self.session.verify)
        except requests.RequestException as err:
            self.log.problems.append(f"{case.method} {case.formatted_path} ({mode}): no"
                                     f" answer: {err}")
            return
        self.log.record(response, mode)

    def __enter__(self) -> Sender:
        return self

    def __exit__(self, *exc: object) -> None:
        """Wait until every queued case was sent; an unexpected error in sending one is
        raised here."""
        self._pool.shutdown(wait=True)
        for future in self._queued:
            future.result()


def real_objects(rapi: Rapi, session: requests.Session) -> dict[str, str]:
    """Path parameter values naming objects that exist: an instance made for the fuzzer,
    a node, the default group, a finished job, an ACCEPT-everything filter."""
    def submit(method: str, path: str, body: Any) -> Any:
        response = session.request(method, rapi.url + path, json=body, timeout=60)
        assert response.status_code == 200, (method, path, response.text[:300])
        return response.json()

    job_id = submit("POST", "/2/instances", {
        "__version__": 1, "mode": "create", "name": "fuzz1.testbed",
        "disk_template": "diskless", "disks": [], "nics": [{}], "os": "corral-ext4+default",
        "pnode": "node2.testbed", "no_install": True, "start": False,
        "name_check": False, "ip_check": False})
    deadline = time.monotonic() + 60
    while submit("GET", f"/2/jobs/{job_id}", None)["status"] not in ("success", "error"):
        assert time.monotonic() < deadline, f"creating fuzz1.testbed: job {job_id} hangs"
        time.sleep(0.1)
    uuid = submit("POST", "/2/filters", {"priority": 999, "predicates": [],
                                         "action": "ACCEPT"})
    return {"instance_name": "fuzz1.testbed", "node_name": "node2.testbed",
            "group_name": "default", "job_id": str(job_id), "filter_uuid": str(uuid),
            "resource": "instance", "disk_index": "0"}


def test_schemathesis_openapi(testbed: TestbedHandle) -> None:
    """Every operation, valid and invalid input, on names that exist and names that do
    not: no 5xx, error bodies in Ganeti's shape."""
    import schemathesis
    from schemathesis import GenerationMode
    from schemathesis.core.result import Ok

    rapi = rapi_of(testbed)
    schema = schemathesis.openapi.from_dict(load_openapi(rapi))
    log = FuzzLog()
    fuzzed, skipped = [], []
    bound: list[tuple[Any, dict[str, str]]] = []
    invalid: list[str] = []
    modes = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    with rapi.session((rapi.user, rapi.password)) as session, \
            Sender(session, rapi.url, log) as sender:
        real = real_objects(rapi, session)
        for result in schema.get_all_operations():
            if not isinstance(result, Ok):
                invalid.append(str(result.err()))
                continue
            operation = result.ok()
            label = f"{operation.method.upper()} {operation.path}"
            if _fuzz_excluded(operation.method.upper(), operation.path):
                skipped.append(label)
                continue
            fuzzed.append(label)
            for mode in modes:
                fuzz(operation, mode, sender)
            names = {k: v for k, v in real.items() if f"{{{k}}}" in operation.path}
            if names:
                bound.append((operation, names))
        # On real objects, the operations that remove or rename them come last.
        bound.sort(key=lambda item: (item[0].method.upper() == "DELETE"
                                     or item[0].path.endswith("/rename"), item[0].path))
        for operation, names in bound:
            for mode in modes:
                fuzz(operation, mode, sender, names)
    print(f"schemathesis: {len(fuzzed)} operations fuzzed ({len(bound)} also on real"
          f" objects), statuses {log.counts}; not fuzzed: {skipped}")
    assert not invalid, f"operations schemathesis cannot read: {invalid}"
    assert len(fuzzed) >= 20, f"only {fuzzed} were fuzzed"
    assert not log.problems, (f"{len(log.problems)} bad answers, the first ones:\n"
                              + "\n".join(line[:400] for line in log.problems[:40]))


#: Path values that fuzzers find only by luck: control characters, bytes that are not
#: UTF-8, numbers beyond 64 bits, a long name. Already percent-encoded.
ODD_PATH_VALUES = ("a%0Ab", "%0A", "x%00y", "%FF%FE", "%E2%98%83", "..%2F..",
                   "99999999999999999999999", "-1", "n" * 1000)


def test_odd_path_values(testbed: TestbedHandle) -> None:
    """Every operation with path parameters, odd values, as the write user: never 5xx,
    errors in Ganeti's shape; a real name with a newline after it names nothing."""
    rapi = rapi_of(testbed)
    operations = [(m, p) for m, p in documented_operations(load_openapi(rapi)) if "{" in p]
    problems: list[str] = []
    with rapi.session((rapi.user, rapi.password)) as session:
        for method, template in operations:
            for value in ODD_PATH_VALUES:
                path = re.sub(r"\{[^}]+\}", value, template)
                body: dict[str, Any] | None = None if method in ("GET", "DELETE") else {}
                response = session.request(method, rapi.url + path, json=body, timeout=60)
                if response.status_code >= 500:
                    problems.append(f"{method} {path[:120]}: HTTP {response.status_code}:"
                                    f" {response.text[:200]!r}")
                elif response.status_code >= 400:
                    shape = error_shape_problem(response)
                    if shape:
                        problems.append(f"{method} {path[:120]}: HTTP {response.status_code}:"
                                        f" {shape}")
        for path in ("/2/nodes/node1.testbed%0A", "/2/groups/default%0A",
                     "/2/nodes/node1.testbed%0A/tags"):
            response = session.get(rapi.url + path, timeout=60)
            if response.status_code != 404:
                problems.append(f"GET {path}: expected 404 (no such name), got"
                                f" {response.status_code}: {response.text[:120]!r}")
    assert len(operations) >= 20, operations
    assert not problems, f"{len(problems)} bad answers:\n" + "\n".join(problems)


# -- (d) access matrix ---------------------------------------------------------------

READER = ("reader", "read-only-secret")

#: Ganeti's exceptions to "GET needs no option, PUT/POST/DELETE need write": the
#: job-change wait and node storage listing need write even to read; queries
#: (PUT /2/query/...) need only read.
WRITE_ONLY_GETS = (r"^/2/jobs/\{[^}]+\}/wait$", r"^/2/nodes/\{[^}]+\}/storage$")
READ_PUTS = (r"^/2/query/\{[^}]+\}$",)


def reader_allowed(method: str, path: str) -> bool:
    """Whether a user with only the ``read`` option may use this operation."""
    if method == "GET":
        return not any(re.match(p, path) for p in WRITE_ONLY_GETS)
    return method == "PUT" and any(re.match(p, path) for p in READ_PUTS)


def concrete_path(template: str) -> str:
    """The template with harmless values: names that do not exist (so that a write
    user's request changes nothing), a real query resource, job 1."""
    def value(match: re.Match[str]) -> str:
        name = match.group(1).lower()
        if template.startswith("/2/query/"):
            return "node"
        if "job" in name:
            return "1"
        if "uuid" in name or "filter" in name:
            return "00000000-0000-4000-8000-000000000000"
        if "disk" in name:
            return "0"
        return f"no-such-{re.sub(r'[^a-z]', '', name) or 'thing'}.testbed"
    return re.sub(r"\{([^}]+)\}", value, template)


def add_reader(testbed: TestbedHandle, rapi: Rapi) -> None:
    """Append a read-only user to the RAPI users file and make the daemon reload it."""
    users = testbed.paths.rapi_users
    mode = users.stat().st_mode & 0o777
    users.chmod(mode | 0o200)
    with users.open("a") as handle:
        handle.write(f"{READER[0]} {READER[1]} read\n")
    users.chmod(mode)
    pid = running_pid(testbed.paths.pid_file("rapi"))
    assert pid is not None, f"no live rapi daemon holds {testbed.paths.pid_file('rapi')}"
    os.kill(pid, signal.SIGHUP)
    deadline = time.monotonic() + 15
    with rapi.session(READER) as session:
        while True:
            status = session.get(rapi.url + "/2/info", timeout=30).status_code
            if status == 200:
                return
            assert time.monotonic() < deadline, (
                f"after SIGHUP to rapi (pid {pid}) the new read-only user still gets {status}")
            time.sleep(0.1)


@pytest.fixture
def matrix_sessions(testbed: TestbedHandle) -> Iterator[dict[str, requests.Session]]:
    """One keep-alive session per role."""
    rapi = rapi_of(testbed)
    add_reader(testbed, rapi)
    sessions = {
        "anonymous": rapi.session(None),
        "bad-password": rapi.session((rapi.user, rapi.password + "-wrong")),
        "unknown-user": rapi.session(("nobody", rapi.password)),
        "read-only": rapi.session(READER),
        "write": rapi.session((rapi.user, rapi.password)),
    }
    try:
        yield sessions
    finally:
        for session in sessions.values():
            session.close()


def matrix_problem(role: str, method: str, template: str, served: bool,
                   response: requests.Response) -> str | None:
    """What is wrong with ``response`` to ``role``'s request, or None. An operation the
    server documents as not served may answer 501 once the caller is let in."""
    status = response.status_code
    if role in ("anonymous", "bad-password", "unknown-user"):
        if status != 401:
            return f"expected 401, got {status}: {response.text[:200]!r}"
        challenge = response.headers.get("WWW-Authenticate", "")
        if not challenge.lower().startswith("basic realm="):
            return f"401 without a Basic WWW-Authenticate challenge: {challenge!r}"
    elif role == "read-only" and not reader_allowed(method, template):
        if status != 403:
            return f"expected 403 for a read-only user, got {status}: {response.text[:200]!r}"
    elif status in (401, 403):
        return f"expected access, got {status}: {response.text[:200]!r}"
    elif not served and status != 501:
        return f"documented as not served, expected 501, got {status}"
    elif status >= 500 and served:
        return f"HTTP {status}: {response.text[:200]!r}"
    return error_shape_problem(response) if status >= 400 else None


def test_access_matrix(testbed: TestbedHandle,
                       matrix_sessions: dict[str, requests.Session]) -> None:
    """Every documented operation (served or listed as not served) x {anonymous, bad
    password, unknown user, read-only, write}: 401 with a Basic challenge, 403, or
    access; never 5xx for a served operation; errors in Ganeti's shape."""
    rapi = rapi_of(testbed)
    document = load_openapi(rapi)
    operations = [(m, p, True) for m, p in documented_operations(document)]
    operations += [(str(o["method"]).upper(), str(o["path"]), False)
                   for o in document.get("x-corral-not-served", [])]
    problems: list[str] = []
    seen: dict[str, dict[int, int]] = {role: {} for role in matrix_sessions}
    for method, template, served in operations:
        path = concrete_path(template)
        for role, session in matrix_sessions.items():
            body: dict[str, Any] | None = None if method in ("GET", "DELETE") else {}
            response = session.request(method, rapi.url + path, json=body, timeout=60)
            seen[role][response.status_code] = seen[role].get(response.status_code, 0) + 1
            problem = matrix_problem(role, method, template, served, response)
            if problem:
                problems.append(f"{role:12} {method:6} {path}: {problem}")
    print(f"access matrix over {len(operations)} operations: {seen}")
    assert len(operations) >= 20, f"the OpenAPI document lists only {operations}"
    assert not problems, f"{len(problems)} wrong answers:\n" + "\n".join(problems)
