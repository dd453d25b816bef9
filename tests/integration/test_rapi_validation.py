"""corral-rapi refuses, at submission, bodies that cannot work: values of the wrong
type or shape anywhere in the body, and names of nodes, node groups or OSes that do
not exist. The answer is 400 in RAPI's error shape, its message names the field as
the client sent it and says what is accepted, and no job is created. Bodies in the
forms Ganeti's clients send still give a job that succeeds."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import TestbedHandle
from tests.integration.test_rapi import Rapi, _client

pytestmark = pytest.mark.integration

_CREATE = {"__version__": 1, "mode": "create", "name": "v1.testbed",
           "disk_template": "file", "disks": [{"size": 16}], "nics": [{}],
           "os": "corral-ext4+default", "pnode": "node2.testbed", "no_install": True,
           "start": False, "name_check": False, "ip_check": False}


def _jobs(api: Rapi) -> list[int]:
    return sorted(job["id"] for job in api.ok("GET", "/2/jobs"))


def _refused(api: Rapi, method: str, path: str, body: Any, *fragments: str) -> str:
    """``body`` is answered 400, naming every fragment, and no job is made."""
    before = _jobs(api)
    status, answer, _ = api.request(method, path, body)
    assert status == 400, (method, path, body, status, answer)
    # Ganeti's three keys, and corral's stable error code with whether a retry helps.
    assert set(answer) == {"code", "message", "explain", "error_code", "retryable"}
    assert answer["code"] == 400 and answer["retryable"] is False
    assert answer["error_code"] in {"parameter-error", "unknown-parameter", "not-found"}, answer
    for fragment in fragments:
        assert fragment in answer["message"], (fragment, answer["message"])
    assert _jobs(api) == before, f"{method} {path} made a job: {answer}"
    message: str = answer["message"]
    return message


def test_wrong_types_and_shapes_are_refused_naming_the_field(testbed: TestbedHandle) -> None:
    api = _client(testbed)
    instance = "/2/instances/v1.testbed"
    api.run("POST", "/2/instances", _CREATE)

    # Instance creation: every free-form part of the body.
    for change, fragments in (
        ({"disks": [{"size": "abc"}]}, ("'disks[0].size'", "'abc'", "10G")),
        ({"disks": [{"size": 16}, {"size": 1.5}]}, ("'disks[1].size'", "integer (MiB)")),
        ({"disks": [{"size": 16, "mode": "rx"}]}, ("'disks[0].mode'", "rw, ro")),
        ({"disks": [{"size": 16, "sise": 1}]}, ("'disks[0].sise'", "accepted keys: size")),
        ({"disks": {"size": 16}}, ("'disks'", "a list")),
        ({"nics": [{"link": 7}]}, ("'nics[0].link'", "a string")),
        ({"beparams": {"vcpus": "many"}}, ("'beparams.vcpus'", "'many'")),
        ({"beparams": {"maxmem": "lots"}}, ("'beparams.maxmem'", "'lots'")),
        ({"beparams": {"cpus": 2}}, ("'beparams.cpus'", "valid ones: ", "vcpus")),
        ({"hvparams": {"acpi": "maybe"}}, ("'hvparams.acpi'", "true or false")),
        ({"os": 42}, ("'os'", "a string")),
        ({"pnode": ["node2.testbed"]}, ("'pnode'",)),
        ({"start": "no"}, ("'start'", "true or false")),
    ):
        message = _refused(api, "POST", "/2/instances", {**_CREATE, "name": "v2.testbed",
                                                          **change}, *fragments)
        assert "os_type" not in message, message

    # Every other resource taking a body.
    for method, path, body, fragments in (
        ("PUT", f"{instance}/modify", {"beparams": {"vcpus": "two"}}, ("'beparams.vcpus'",)),
        ("PUT", f"{instance}/modify", {"custom_beparams": {"vcpus": "x"}},
         ("'custom_beparams.vcpus'",)),
        ("PUT", f"{instance}/modify", {"disks": [["add", -1, {"size": "huge"}]]},
         ("'disks[0][2].size'",)),
        ("PUT", f"{instance}/modify", {"disks": [["grow", 0, {}]]},
         ("'disks[0][0]'", "add, remove, modify")),
        ("PUT", f"{instance}/modify", {"nics": [["add", -1, {"mac": 5}]]},
         ("'nics[0][2].mac'",)),
        ("PUT", f"{instance}/migrate", {"mode": "fast"}, ("'mode'", "live")),
        ("PUT", f"{instance}/failover", {"shutdown_timeout": "soon"}, ("'shutdown_timeout'",)),
        ("POST", f"{instance}/reinstall", {"os": 7}, ("'os'",)),
        ("PUT", f"{instance}/rename", {"new_name": 5}, ("'new_name'",)),
        ("POST", f"{instance}/disk/0/grow", {"amount": "1G"}, ("'amount'", "an integer")),
        ("POST", "/2/nodes/node2.testbed/modify", {"ndparams": {"ssh_port": "ssh"}},
         ("'ndparams.ssh_port'",)),
        ("PUT", "/2/nodes/node2.testbed/role", "boss", ("regular",)),
        ("POST", "/2/groups", {"name": "g1", "ndparams": {"spindle_count": "x"}},
         ("'ndparams.spindle_count'",)),
        ("POST", "/2/groups", {"name": "g1", "diskparams": {"drbd8": {}}},
         ("'diskparams.drbd8'", "disk template")),
        ("PUT", "/2/groups/default/modify", {"custom_ndparams": {"ovs": "perhaps"}},
         ("'custom_ndparams.ovs'",)),
        ("PUT", "/2/groups/default/assign-nodes", {"nodes": "node2.testbed"}, ("'nodes'",)),
        ("PUT", "/2/modify", {"beparams": {"vcpus": []}}, ("'beparams.vcpus'",)),
        ("PUT", "/2/modify", {"hvparams": {"xen-pvm": {}}}, ("'hvparams.xen-pvm'",)),
        ("PUT", "/2/modify", {"max_running_jobs": "10"}, ("'max_running_jobs'",)),
        ("POST", "/2/filters", {"priority": "high"}, ("'priority'",)),
    ):
        _refused(api, method, path, body, *fragments)

    # Bodies in the forms Ganeti's clients send still make jobs that succeed.
    _ganeti_forms_work(api)


def test_unknown_nodes_groups_and_oses_are_refused(testbed: TestbedHandle) -> None:
    api = _client(testbed)
    api.run("POST", "/2/instances", _CREATE)
    instance = "/2/instances/v1.testbed"
    for method, path, body, fragments in (
        ("POST", "/2/instances", {**_CREATE, "name": "v2.testbed", "pnode": "nosuchnode"},
         ("'pnode'", "'nosuchnode'", "node1.testbed")),
        ("POST", "/2/instances", {**_CREATE, "name": "v2.testbed", "os": "nosuchos"},
         ("'os'", "'nosuchos'", "corral-ext4")),
        ("POST", "/2/instances", {**_CREATE, "name": "v2.testbed", "group_name": "nogroup"},
         ("'group_name'", "'nogroup'", "default")),
        ("POST", f"{instance}/reinstall", {"os": "nosuchos"}, ("'os'", "'nosuchos'")),
        ("PUT", f"{instance}/modify", {"os_name": "nosuchos"}, ("'os_name'", "'nosuchos'")),
        ("PUT", f"{instance}/modify", {"pnode": "nosuchnode"}, ("'pnode'", "'nosuchnode'")),
        ("PUT", f"{instance}/migrate", {"target_node": "nosuchnode"}, ("'target_node'",)),
        ("PUT", f"{instance}/failover", {"target_node": "nosuchnode"}, ("'target_node'",)),
        ("PUT", "/2/groups/default/assign-nodes", {"nodes": ["node2.testbed", "nosuch"]},
         ("'nodes'", "'nosuch'")),
    ):
        _refused(api, method, path, body, *fragments)


def _ganeti_forms_work(api: Rapi) -> None:
    """Good bodies, in every form Ganeti's RAPI accepts, give jobs that succeed."""
    nodes = {n["name"]: n["uuid"] for n in api.ok("GET", "/2/nodes?bulk=1")}
    # Sizes as integers (Ganeti's client), as digit strings and with units (Ganeti's
    # luxi reads both); Ganeti's older "memory" backend parameter; numbers as strings
    # in beparams, as Ganeti accepts them; the node by UUID.
    api.run("POST", "/2/instances", {
        **_CREATE, "name": "v3.testbed", "disk_template": "sharedfile",
        # routed: a bridged NIC needs its bridge on the failover target, which no
        # testbed node has
        "nics": [{"mode": "routed", "ip": "192.0.2.30"}],
        "disks": [{"size": 16}, {"size": "32"}, {"size": "1G", "mode": "ro"}],
        "beparams": {"memory": 256, "vcpus": "2"}, "pnode": nodes["node3.testbed"]})
    inst = api.ok("GET", "/2/instances/v3.testbed")
    assert inst["disk.sizes"] == [16, 32, 1024] and inst["pnode"] == "node3.testbed"
    api.run("PUT", "/2/instances/v3.testbed/modify", {
        "beparams": {"vcpus": 1}, "disks": [["add", -1, {"size": "8M"}]]})
    api.run("POST", "/2/instances/v3.testbed/reinstall", {"os": "corral-ext4+default",
                                                          "start": False})
    api.run("PUT", "/2/instances/v3.testbed/failover",
            {"target_node": "node2.testbed", "ignore_consistency": False})
    api.run("POST", "/2/groups", {"name": "g1", "ndparams": {"ssh_port": 2222}})
    api.run("PUT", "/2/groups/g1/assign-nodes", {"nodes": [nodes["node3.testbed"]]})
    api.run("POST", "/2/nodes/node3.testbed/modify", {"ndparams": {"spindle_count": 2}})
    api.run("PUT", "/2/modify", {"beparams": {"vcpus": 1}})
