"""gnt-node and gnt-group against a 3-node testbed: node daemons on 127.0.1.1-3, nodes 2
and 3 joined by token when the testbed came up."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from corral.paths import Paths
from tests.conftest import TestbedHandle

pytestmark = pytest.mark.integration

NODES = ["node1.testbed", "node2.testbed", "node3.testbed"]


def _rows(testbed: TestbedHandle, tool: str, fields: str, *names: str) -> list[list[str]]:
    out = testbed.run(tool, "list", "--no-headers", "--separator", "|", "--units", "m",
                      "-o", fields, *names).stdout
    return [line.split("|") for line in out.splitlines()]


def _roles(testbed: TestbedHandle) -> dict[str, str]:
    return dict((name, role) for name, role in _rows(testbed, "gnt-node", "name,role"))


def _new_token(root: Path, old: str | None, timeout: float = 30.0) -> str:
    """The join token a node daemon writes after leaving the cluster."""
    path = Paths(root).join_token
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            token = path.read_text().strip()
        except FileNotFoundError:
            token = ""
        if token and token != old:
            return token
        time.sleep(0.05)
    raise AssertionError(f"no new join token at {path} within {timeout} s")


@pytest.mark.shared_testbed
def test_nodes_are_listed_with_roles_and_live_data(testbed: TestbedHandle) -> None:
    rows = _rows(testbed, "gnt-node", "name,role,pip,sip,group,master_candidate,offline")
    assert rows == [
        [f"node{i}.testbed", "M" if i == 1 else "C", f"127.0.1.{i}", f"127.0.1.{i}",
         "default", "Y", "N"]
        for i in (1, 2, 3)
    ]
    header = testbed.run("gnt-node", "list").stdout.splitlines()[0]
    assert header.split() == ["Node", "DTotal", "DFree", "MTotal", "MNode", "MFree", "Pinst",
                              "Sinst"]
    for name, mtotal, mfree, ctotal, dtotal, dfree in _rows(
            testbed, "gnt-node", "name,mtotal,mfree,ctotal,dtotal,dfree"):
        assert name in NODES
        assert int(mtotal) > 0 and 0 <= int(mfree) <= int(mtotal)
        assert int(ctotal) >= 1
        assert int(dtotal) > 0 and 0 <= int(dfree) <= int(dtotal)
    fields = testbed.run("gnt-node", "list-fields").stdout
    for name in ("mfree", "dtotal", "pinst_cnt", "role", "group.uuid", "ndp/ssh_port"):
        assert f"\n{name} " in fields


@pytest.mark.shared_testbed
def test_info_accepts_names_and_uuids(testbed: TestbedHandle) -> None:
    ((uuid,),) = _rows(testbed, "gnt-node", "uuid", "node2.testbed")
    out = testbed.run("gnt-node", "info", uuid).stdout
    lines = out.splitlines()
    assert lines[0] == "- Node name: node2.testbed"
    assert "  primary ip: 127.0.1.2" in lines
    assert "  master candidate: True" in lines
    assert "    ssh_port: default (22)" in lines
    proc = testbed.run("gnt-node", "info", "nosuch.testbed", check=False)
    assert proc.returncode == 1 and "nosuch.testbed not found" in proc.stderr
    proc = testbed.run("gnt-node", "list", "-o", "name,nosuch", check=False)
    assert proc.returncode == 14


def test_offline_drained_and_master_rules(testbed: TestbedHandle) -> None:
    out = testbed.run("gnt-node", "modify", "--offline", "yes", "node3.testbed").stdout
    assert out.splitlines() == ["Modified node node3.testbed", " - master_candidate -> False",
                                " - offline -> True"]
    assert _roles(testbed)["node3.testbed"] == "O"
    (row,) = _rows(testbed, "gnt-node", "name,mfree", "node3.testbed")
    assert row == ["node3.testbed", "*"]  # offline: not asked
    out = testbed.run("gnt-node", "modify", "--offline", "no", "--force",
                      "node3.testbed").stdout
    assert " - offline -> False" in out and " - master_candidate -> True" in out
    assert _roles(testbed)["node3.testbed"] == "C"

    testbed.run("gnt-node", "modify", "-D", "yes", "node2.testbed")
    assert _roles(testbed)["node2.testbed"] == "D"
    testbed.run("gnt-node", "modify", "-D", "no", "node2.testbed")
    assert _roles(testbed)["node2.testbed"] == "C"

    proc = testbed.run("gnt-node", "modify", "-O", "yes", "node1.testbed", check=False)
    assert proc.returncode == 1 and "master" in proc.stderr
    proc = testbed.run("gnt-node", "remove", "node1.testbed", check=False)
    assert proc.returncode == 1 and "master-failover" in proc.stderr
    assert _roles(testbed)["node1.testbed"] == "M"


def test_candidate_pool_is_kept(testbed: TestbedHandle) -> None:
    testbed.run("gnt-cluster", "modify", "-C", "2")
    testbed.run("gnt-node", "modify", "-C", "no", "node3.testbed")
    assert _roles(testbed) == {"node1.testbed": "M", "node2.testbed": "C",
                               "node3.testbed": "R"}
    proc = testbed.run("gnt-node", "modify", "-C", "no", "node2.testbed", check=False)
    assert proc.returncode == 1 and "--auto-promote" in proc.stderr
    testbed.run("gnt-node", "modify", "-C", "no", "--auto-promote", "node2.testbed")
    assert _roles(testbed) == {"node1.testbed": "M", "node2.testbed": "R",
                               "node3.testbed": "C"}


def test_remove_and_rejoin_by_token(testbed: TestbedHandle) -> None:
    root = Path(testbed.state["nodes"][2]["root"])
    token_file = Paths(root).join_token
    old = token_file.read_text().strip() if token_file.exists() else None
    testbed.run("gnt-node", "add-tags", "node3.testbed", "rack:a", "role:spare")
    assert testbed.run("gnt-node", "list-tags", "node3.testbed").stdout == "rack:a\nrole:spare\n"
    testbed.run("gnt-node", "remove-tags", "node3.testbed", "rack:a")
    assert testbed.run("gnt-node", "list-tags", "node3.testbed").stdout == "role:spare\n"

    testbed.run("gnt-node", "remove", "node3.testbed")
    assert [r[0] for r in _rows(testbed, "gnt-node", "name")] == NODES[:2]
    token = _new_token(root, old)

    proc = testbed.run("gnt-node", "add", "node3.testbed", "--primary-ip", "127.0.1.3",
                       "--token", "not-the-token", check=False)
    assert proc.returncode != 0
    assert "node3.testbed" in proc.stderr and "token" in proc.stderr
    assert [r[0] for r in _rows(testbed, "gnt-node", "name")] == NODES[:2]

    proc = testbed.run("gnt-node", "add", "node3.testbed", "--primary-ip", "127.0.1.3",
                       "--token", token)
    assert "node3.testbed" in proc.stdout
    assert _roles(testbed)["node3.testbed"] == "C"
    (row,) = _rows(testbed, "gnt-node", "name,mtotal", "node3.testbed")
    assert int(row[1]) > 0  # it answers over mutual TLS again


def test_groups(testbed: TestbedHandle) -> None:
    lines = testbed.run("gnt-group", "list").stdout.splitlines()
    assert lines[0].split() == ["Group", "Nodes", "Instances", "AllocPolicy", "NDParams"]
    assert lines[1].split()[:4] == ["default", "3", "0", "preferred"]

    testbed.run("gnt-group", "add", "rack2", "--alloc-policy", "last_resort",
                "--node-parameters", "ssh_port=2222")
    testbed.run("gnt-group", "assign-nodes", "rack2", "node3.testbed")
    assert _rows(testbed, "gnt-node", "name,group", "node3.testbed") == [
        ["node3.testbed", "rack2"]]
    assert _rows(testbed, "gnt-group", "name,node_cnt,node_list,alloc_policy") == [
        ["default", "2", "node1.testbed,node2.testbed", "preferred"],
        ["rack2", "1", "node3.testbed", "last_resort"],
    ]
    info = testbed.run("gnt-group", "info", "rack2").stdout.splitlines()
    assert info[0] == "- Node group: rack2" and "    ssh_port: 2222" in info
    assert "    ssh_port: default (2222)" in testbed.run("gnt-node", "info",
                                                      "node3.testbed").stdout

    out = testbed.run("gnt-group", "modify", "--alloc-policy", "unallocable", "rack2").stdout
    assert out.splitlines() == ["Modified node group rack2", " - alloc_policy -> unallocable"]
    testbed.run("gnt-group", "add-tags", "rack2", "room:1")
    assert testbed.run("gnt-group", "list-tags", "rack2").stdout == "room:1\n"
    testbed.run("gnt-group", "rename", "rack2", "rack3")

    # Names are answered in the order given (a short name finds its node); an unknown
    # one fails the list with Ganeti's error; tags are searched cluster-wide.
    assert _rows(testbed, "gnt-group", "name", "rack3", "default") == [["rack3"], ["default"]]
    assert _rows(testbed, "gnt-node", "name", "node3", "node1.testbed") == [
        ["node3.testbed"], ["node1.testbed"]]
    for tool, noun in (("gnt-node", "Node"), ("gnt-group", "NodeGroup"),
                       ("gnt-instance", "Instance")):
        proc = testbed.run(tool, "list", "nosuch", check=False)
        assert (proc.returncode, proc.stdout) == (1, ""), (tool, proc)
        assert f"{noun} name nosuch not found" in proc.stderr, (tool, proc.stderr)
    found = testbed.run("gnt-cluster", "search-tags", "^room")
    assert found.stdout == "/nodegroup/rack3 room:1\n"
    assert testbed.run("gnt-cluster", "search-tags", "nothing", check=False).returncode == 1

    proc = testbed.run("gnt-group", "remove", "rack3", check=False)
    assert proc.returncode == 1 and "still has nodes: node3.testbed" in proc.stderr
    proc = testbed.run("gnt-group", "add", "default", check=False)
    assert proc.returncode == 1 and "already exists" in proc.stderr
    testbed.run("gnt-group", "assign-nodes", "default", "node3.testbed")
    testbed.run("gnt-group", "remove", "rack3")
    assert _rows(testbed, "gnt-group", "name,node_cnt") == [["default", "3"]]
    proc = testbed.run("gnt-group", "remove", "default", check=False)
    assert proc.returncode == 1 and "last group" in proc.stderr
    assert "\nnode_cnt " in testbed.run("gnt-group", "list-fields").stdout
