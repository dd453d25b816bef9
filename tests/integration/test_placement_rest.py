"""/placement/ over the testbed's RAPI daemon: OpenStack Placement's API served from the
master daemon's engine, with the users file's users and tokens, kept across a master
daemon restart and a master failover, and driven by osc-placement (OpenStack's client).

One shared testbed; every test removes the providers and consumers it made and puts
the users file back as it found it.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import signal
import ssl
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from corral.daemons import start
from corral.rapi.tokens import add_token
from corral.utils.process import running_pid
from tests.conftest import TestbedHandle, run_testbed

pytestmark = [pytest.mark.integration, pytest.mark.shared_testbed]

OSC = Path(__file__).resolve().parents[2] / "build" / "osc-venv" / "bin" / "openstack"
AGG = "a99a0000-0000-4000-8000-000000000001"


class Placement:
    """HTTPS requests to the testbed's /placement/, as one user (or none)."""

    def __init__(self, testbed: TestbedHandle, *, user: str | None = None,
                 password: str | None = None, token: str | None = None) -> None:
        rapi = testbed.state["rapi"]
        self.url, self.ca = rapi["url"], rapi["ca"]
        self.headers: dict[str, str] = {}
        if user is not None:
            basic = base64.b64encode(f"{user}:{password}".encode()).decode()
            self.headers["Authorization"] = f"Basic {basic}"
        if token is not None:
            self.headers["X-Auth-Token"] = token

    def request(self, method: str, path: str, body: Any = None, *, version: str = "latest",
                ) -> tuple[int, Any, http.client.HTTPMessage]:
        parts = urlsplit(self.url)
        assert parts.hostname is not None
        conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=60,
                                           context=ssl.create_default_context(cafile=self.ca))
        headers = {**self.headers, "OpenStack-API-Version": f"placement {version}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, f"/placement{path}", body=data, headers=headers)
            response = conn.getresponse()
            text = response.read()
        finally:
            conn.close()
        return response.status, json.loads(text) if text else None, response.msg

    def ok(self, method: str, path: str, body: Any = None, status: int = 200, **kw: Any,
           ) -> Any:
        got, answer, _ = self.request(method, path, body, **kw)
        assert got == status, (method, path, got, answer)
        return answer


def admin(testbed: TestbedHandle) -> Placement:
    rapi = testbed.state["rapi"]
    return Placement(testbed, user=rapi["user"], password=rapi["password"])


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


@contextlib.contextmanager
def users_file_changed(testbed: TestbedHandle) -> Iterator[Path]:
    """The master's users file, put back as it was (and re-read) afterwards."""
    path = testbed.paths.rapi_users
    saved = path.read_text()
    try:
        yield path
    finally:
        path.write_text(saved)
        reread_users(testbed)


def reread_users(testbed: TestbedHandle) -> None:
    pid = running_pid(testbed.paths.pid_file("rapi"))
    assert pid is not None
    os.kill(pid, signal.SIGHUP)


def new_provider(api: Placement, name: str) -> str:
    rp = str(uuid.uuid4())
    api.ok("POST", "/resource_providers", {"name": name, "uuid": rp})
    api.ok("PUT", f"/resource_providers/{rp}/inventories",
           {"resource_provider_generation": 0,
            "inventories": {"VCPU": {"total": 4}, "MEMORY_MB": {"total": 1024}}})
    return rp


def test_crud_conflict_versions_and_errors(testbed: TestbedHandle) -> None:
    api = admin(testbed)
    status, root, headers = api.request("GET", "/", version="1.0")
    assert status == 200 and root["versions"][0]["max_version"] == "1.39"
    rp = new_provider(api, "l-crud")
    try:
        got = api.ok("GET", f"/resource_providers/{rp}")
        assert (got["name"], got["generation"], got["root_provider_uuid"]) == ("l-crud", 1, rp)
        status, error, headers = api.request(
            "PUT", f"/resource_providers/{rp}/inventories",
            {"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 1}}})
        assert status == 409
        assert error["errors"][0]["code"] == "placement.concurrent_update"
        assert headers["openstack-request-id"] == error["errors"][0]["request_id"]
        assert headers["OpenStack-API-Version"] == "placement 1.39"
        assert headers["Vary"] == "openstack-api-version"
        status, error, headers = api.request("GET", "/resource_providers", version="1.40")
        assert status == 406 and error["errors"][0]["max_version"] == "1.39"
        status, error, _ = api.request("POST", "/resource_providers", {"uuid": rp})
        assert status == 400 and "'name' is a required property" in error["errors"][0]["detail"]
        renamed = api.ok("PUT", f"/resource_providers/{rp}", {"name": "l-crud2"})
        assert renamed["generation"] == 1  # a rename keeps it, as in Placement
        listed = api.ok("GET", "/resource_providers?name=l-crud2")["resource_providers"]
        assert [p["uuid"] for p in listed] == [rp]
    finally:
        api.ok("DELETE", f"/resource_providers/{rp}", status=204)
    assert api.request("GET", f"/resource_providers/{rp}")[0] == 404


def test_authentication_and_rights(testbed: TestbedHandle) -> None:
    assert Placement(testbed).request("GET", "/resource_providers")[0] == 401
    rapi = testbed.state["rapi"]
    wrong = Placement(testbed, user=rapi["user"], password="wrong")
    status, _body, headers = wrong.request("GET", "/resource_providers")
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
    assert Placement(testbed, token="no-such-token").request(
        "GET", "/resource_providers")[0] == 401
    with users_file_changed(testbed) as users:
        users.write_text(users.read_text() + "l-reader l-secret read\n")
        token = add_token(users, "l-reader")
        reread_users(testbed)
        reader = Placement(testbed, token=token)
        wait_until(lambda: reader.request("GET", "/resource_providers")[0] == 200,
                   "the RAPI daemon to read the new user")
        status, error, _ = reader.request("POST", "/resource_providers", {"name": "l-ro"})
        assert status == 403 and error["errors"][0]["title"] == "Forbidden"
        basic = Placement(testbed, user="l-reader", password="l-secret")
        assert basic.request("POST", "/resource_providers", {"name": "l-ro"})[0] == 403
        names = [p["name"] for p in basic.ok("GET", "/resource_providers")[
            "resource_providers"]]
        assert "l-ro" not in names


def test_state_survives_masterd_restart_and_failover(testbed: TestbedHandle) -> None:
    api = admin(testbed)
    rp = new_provider(api, "l-durable")
    consumer = str(uuid.uuid4())
    api.ok("PUT", f"/resource_providers/{rp}/aggregates",
           {"aggregates": [AGG], "resource_provider_generation": 1})
    api.ok("PUT", f"/allocations/{consumer}", {
        "allocations": {rp: {"resources": {"VCPU": 2}}}, "project_id": "p", "user_id": "u",
        "consumer_generation": None, "consumer_type": "INSTANCE"}, status=204)
    before = api.ok("GET", f"/allocations/{consumer}")
    nodes = node_uuids(testbed)
    node1 = nodes["node1.testbed"]
    wait_until(lambda: with_inventories(api, nodes), "the nodes' inventories")
    on_node = str(uuid.uuid4())
    api.ok("PUT", f"/allocations/{on_node}", {
        "allocations": {node1: {"resources": {"MEMORY_MB": 64}}}, "project_id": "p",
        "user_id": "u", "consumer_generation": None, "consumer_type": "INSTANCE"},
        status=204)

    def on_node1(placement: Placement) -> Any:
        got = placement.ok("GET", f"/allocations/{on_node}")["allocations"]
        return {rp: a["resources"] for rp, a in got.items()}

    serial = testbed.info()["config_serial"]
    paths = testbed.paths
    pid = running_pid(paths.pid_file("masterd"))
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    wait_until(lambda: running_pid(paths.pid_file("masterd")) != pid, "masterd to stop")
    start(paths, ["masterd"])
    try:
        assert api.ok("GET", f"/allocations/{consumer}") == before
        # the nodes' providers are derived again, figures and all, without a commit;
        # the outside allocation on node1 is back on top of them
        wait_until(lambda: with_inventories(api, nodes), "the nodes' inventories")
        assert on_node1(api) == {node1: {"MEMORY_MB": 64}}
        assert testbed.info()["config_serial"] == serial
        proc = run_testbed("failover", "--dir", str(testbed.dir), "--to", "2")
        assert proc.returncode == 0, proc.stderr
        testbed.reload()
        moved = admin(testbed)
        assert moved.url != api.url
        assert moved.ok("GET", f"/allocations/{consumer}") == before
        assert moved.ok("GET", f"/resource_providers/{rp}/aggregates")["aggregates"] == [AGG]
        wait_until(lambda: on_node1(moved) == {node1: {"MEMORY_MB": 64}},
                   "the allocation on node1 after the failover")
        moved.ok("DELETE", f"/allocations/{on_node}", status=204)
        moved.ok("DELETE", f"/allocations/{consumer}", status=204)
        moved.ok("DELETE", f"/resource_providers/{rp}", status=204)
    finally:
        if testbed.state["master"] != "node1.testbed":
            proc = run_testbed("failover", "--dir", str(testbed.dir), "--to", "1")
            assert proc.returncode == 0, proc.stderr
            testbed.reload()
    back = admin(testbed)
    assert back.request("GET", f"/resource_providers/{rp}")[0] == 404


def node_uuids(testbed: TestbedHandle) -> dict[str, str]:
    out = testbed.run("gnt-node", "list", "--no-headers", "-o", "name,uuid").stdout
    return dict(line.split() for line in out.splitlines())


def with_inventories(api: Placement, nodes: dict[str, str]) -> bool:
    """Whether every node's provider has VCPU and MEMORY_MB inventories."""
    for rp in nodes.values():
        status, got, _ = api.request("GET", f"/resource_providers/{rp}/inventories")
        if status != 200 or not {"VCPU", "MEMORY_MB"} <= set(got["inventories"]):
            return False
    return True


def test_the_cluster_in_placement(testbed: TestbedHandle) -> None:
    """Nodes are providers with inventories, a named aggregate shows on the node's
    provider, an instance is a consumer while it exists, a node provider's inventories
    are the cluster's (409), a custom provider is left alone."""
    api = admin(testbed)
    nodes = node_uuids(testbed)
    wait_until(lambda: with_inventories(api, nodes), "the nodes' inventories")
    listed = {p["uuid"]: p["name"] for p in api.ok(
        "GET", "/resource_providers?required=CUSTOM_CORRAL_NODE")["resource_providers"]}
    assert listed == {rp: name for name, rp in nodes.items()}
    node2 = nodes["node2.testbed"]
    custom = new_provider(api, "u-custom")
    custom_generation = api.ok("GET", f"/resource_providers/{custom}")["generation"]
    agg = ""
    try:
        agg = testbed.run("gnt-cluster", "add-aggregate", "u-agg").stdout.split()[-1]
        testbed.run("gnt-node", "modify", "--aggregates", "u-agg", "node2.testbed")
        wait_until(lambda: agg in api.ok("GET", f"/resource_providers/{node2}/aggregates")[
            "aggregates"], "the aggregate on node2's provider")
        inventories = api.ok("GET", f"/resource_providers/{node2}/inventories")
        status, error, _ = api.request(
            "PUT", f"/resource_providers/{node2}/inventories",
            {"resource_provider_generation": inventories["resource_provider_generation"],
             "inventories": {"VCPU": {"total": 64}}})
        assert status == 409, error
        assert "cluster node node2.testbed" in error["errors"][0]["detail"]
        assert "gnt-node modify --aggregates/--traits" in error["errors"][0]["detail"]
        testbed.run("gnt-instance", "add", "-t", "diskless", "--no-nics", "--no-install",
                    "-o", "corral-ext4+default", "-B", "vcpus=1,maxmem=128,minmem=128",
                    "-n", "node2.testbed", "u-inst1")
        inst = testbed.run("gnt-instance", "list", "--no-headers", "-o", "uuid",
                           "u-inst1").stdout.strip()

        def held() -> dict[str, Any]:
            got: dict[str, Any] = api.ok("GET", f"/allocations/{inst}")["allocations"]
            return {rp: a["resources"] for rp, a in got.items()}

        wait_until(lambda: held() == {node2: {"VCPU": 1, "MEMORY_MB": 128}},
                   "the instance's allocation")
        testbed.run("gnt-instance", "remove", "-f", "u-inst1")
        wait_until(lambda: held() == {}, "the instance's allocation to go")
        assert api.ok("GET", f"/resource_providers/{custom}")["generation"] \
            == custom_generation
        assert api.ok("GET", f"/resource_providers/{custom}/aggregates")["aggregates"] == []
    finally:
        testbed.run("gnt-instance", "remove", "-f", "u-inst1", check=False)
        testbed.run("gnt-node", "modify", "--aggregates", "", "node2.testbed", check=False)
        if agg:
            testbed.run("gnt-cluster", "remove-aggregate", "u-agg", check=False)
        api.ok("DELETE", f"/resource_providers/{custom}", status=204)


def test_osc_placement_with_a_token(testbed: TestbedHandle) -> None:
    if not OSC.exists():
        reason = f"osc-placement is not installed ({OSC} is missing: make placement-clients)"
        print(f"skipping: {reason}")
        pytest.skip(reason)
    api = admin(testbed)
    inside = new_provider(api, "l-osc-in")
    outside = new_provider(api, "l-osc-out")
    api.ok("PUT", f"/resource_providers/{inside}/aggregates",
           {"aggregates": [AGG], "resource_provider_generation": 1})
    with users_file_changed(testbed) as users:
        token = add_token(users, testbed.state["rapi"]["user"])
        reread_users(testbed)
        probe = Placement(testbed, token=token)
        wait_until(lambda: probe.request("GET", "/")[0] == 200
                   and probe.request("GET", "/resource_providers")[0] == 200,
                   "the RAPI daemon to read the token")
        env = {**os.environ, "OS_AUTH_TYPE": "admin_token",
               "OS_ENDPOINT": f"{api.url}/placement", "OS_TOKEN": token,
               "OS_CACERT": api.ca, "OS_PLACEMENT_API_VERSION": "1.39"}

        def osc(*args: str) -> str:
            proc = subprocess.run([str(OSC), *args, "-f", "json"], env=env,
                                  capture_output=True, text=True, timeout=120)
            assert proc.returncode == 0, proc.stderr
            return proc.stdout

        try:
            listed = {p["name"] for p in json.loads(osc("resource provider list"))}
            assert {"l-osc-in", "l-osc-out"} <= listed
            made = json.loads(osc("resource provider create", "l-osc-new"))
            assert made["name"] == "l-osc-new"
            api.ok("DELETE", f"/resource_providers/{made['uuid']}", status=204)
            found = json.loads(osc("allocation candidate list", "--resource", "VCPU=1",
                                   "--member-of", AGG))
            assert {c["resource provider"] for c in found} == {inside}
        finally:
            for rp in (inside, outside):
                api.ok("DELETE", f"/resource_providers/{rp}", status=204)
