"""Allocation on a real testbed: instance policies (options, info, RAPI, a refused
create), ``-I`` with the built-in allocator and Ganeti's ``hail`` as a plugin, the
default allocator list tried in turn, dry-run, broken plugins (missing, slow,
garbage), node evacuation and migration, change-group, multi-allocation through RAPI
and ``gnt-debug iallocator``.

Every test shares the module's testbed and leaves it as it found it: its instances
removed, cluster settings and node groups put back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TestbedHandle
from tests.integration.test_rapi import Rapi

pytestmark = [pytest.mark.integration, pytest.mark.shared_testbed]

HAIL = Path("/usr/lib/ganeti/iallocators/hail")
OS = "corral-ext4+default"


def _plugin_dir(testbed: TestbedHandle, directory: str = "/srv/corral/iallocators") -> Path:
    path = testbed.paths.node_path(directory)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _plugin(testbed: TestbedHandle, name: str, body: str) -> None:
    """A plugin script in the master's default search path."""
    script = _plugin_dir(testbed) / name
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)


def _answer(node: str) -> str:
    return f'echo \'{{"success": true, "info": "picked", "result": ["{node}"]}}\'\n'


@pytest.fixture
def hail(testbed: TestbedHandle) -> Iterator[None]:
    """Ganeti's hail where the master looks for plugins (its root's Ganeti directory),
    without its global N+1 capacity check (the testbed's nodes hold running instances
    that htools would have to fit twice over)."""
    if not HAIL.exists():
        pytest.skip("Ganeti's hail is not installed (make sysdeps installs "
                    "ganeti-htools-3.0)")
    link = _plugin_dir(testbed, "/usr/lib/ganeti/iallocators") / "hail"
    if not link.exists():
        link.symlink_to(HAIL)
    testbed.run("gnt-cluster", "modify", "--default-iallocator-params", "no-capacity-checks")
    try:
        yield
    finally:
        testbed.run("gnt-cluster", "modify", "--default-iallocator-params", "-no-capacity-checks")


def _instances(testbed: TestbedHandle) -> dict[str, str]:
    out = testbed.run("gnt-instance", "list", "--no-headers", "-o", "name,pnode").stdout
    return dict(line.split() for line in out.splitlines())


def _remove(testbed: TestbedHandle, *names: str) -> None:
    for name in names:
        testbed.run("gnt-instance", "remove", "-f", name, check=False)


def _add(testbed: TestbedHandle, name: str, *args: str, check: bool = True) -> Any:
    return testbed.run("gnt-instance", "add", "-t", "diskless", "--no-nics", "--no-install",
                       "-o", OS, *args, name, check=check)


def _rapi(testbed: TestbedHandle) -> Rapi:
    state = testbed.state["rapi"]
    return Rapi(state["url"], state["ca"], "admin", state["password"])


# -- instance policies -------------------------------------------------------------


def test_ipolicy_options_info_rapi_and_a_refused_create(testbed: TestbedHandle) -> None:
    before = testbed.info()["ipolicy"]
    try:
        testbed.run("gnt-cluster", "modify", "--ipolicy-vcpu-ratio", "2.5",
                    "--ipolicy-std-specs", "memory-size=256")
        testbed.run("gnt-group", "modify", "--ipolicy-bounds-specs",
                    "min:cpu-count=1,disk-count=1,disk-size=1,memory-size=64,nic-count=0,"
                    "spindle-use=0/max:cpu-count=2,disk-count=2,disk-size=1G,memory-size=1G,"
                    "nic-count=2,spindle-use=2", "default")
        info = testbed.run("gnt-cluster", "info").stdout
        assert "  vcpu-ratio: 2.5\n" in info and "    memory-size: 256\n" in info
        group = testbed.run("gnt-group", "info", "default").stdout
        assert "          memory-size: 64\n" in group and "    vcpu-ratio: default (2.5)" in group
        api = _rapi(testbed)
        assert api.ok("GET", "/2/info")["ipolicy"]["vcpu-ratio"] == 2.5
        (row,) = api.ok("GET", "/2/groups?bulk=1")
        assert row["custom_ipolicy"]["minmax"][0]["max"]["cpu-count"] == 2
        assert row["ipolicy"]["vcpu-ratio"] == 2.5 and row["ipolicy"]["std"]["memory-size"] == 256

        refused = _add(testbed, "big.testbed", "-n", "node1.testbed", "-B", "vcpus=4",
                       check=False)
        assert refused.returncode == 1
        assert refused.stderr.splitlines()[:3] == [
            "Failure: prerequisites not met for this operation:",
            "error type: wrong_input, error details:",
            f"Instance allocation to group {row['uuid']} (default) violates policy: cpu-count "
            "value 4 is not in range [1, 2]"]
        assert "big.testbed" not in _instances(testbed)
        _add(testbed, "big.testbed", "-n", "node1.testbed", "-B", "vcpus=4", "--ignore-ipolicy")
        modify = testbed.run("gnt-instance", "modify", "-B", "vcpus=3", "big.testbed",
                             check=False)
        assert "violates policy: cpu-count value 3 is not in range [1, 2]" in modify.stderr
        bad = testbed.run("gnt-cluster", "modify", "--ipolicy-disk-templates", "file,plain",
                          check=False)
        assert bad.returncode == 1
        assert ("The following disk templates are allowed by the ipolicy, but not enabled on "
                "the cluster: plain") in bad.stderr
    finally:
        _remove(testbed, "big.testbed")
        testbed.run("gnt-group", "modify", "--ipolicy-bounds-specs", "default", "default")
        testbed.run("gnt-cluster", "modify", "--ipolicy-vcpu-ratio", str(before["vcpu-ratio"]),
                    "--ipolicy-std-specs", f"memory-size={before['std']['memory-size']}")
    assert testbed.info()["ipolicy"] == before


# -- choosing a node ----------------------------------------------------------------


def test_add_with_the_builtin_allocator_and_with_hail(testbed: TestbedHandle, hail: None
                                                      ) -> None:
    try:
        out = _add(testbed, "viahail.testbed", "-I", "hail").stdout
        node = _instances(testbed)["viahail.testbed"]
        assert f"Selected nodes for instance viahail.testbed via iallocator hail: {node}" in out
        out = testbed.run("gnt-instance", "add", "-t", "sharedfile", "--disk", "0:size=8M",
                          "--no-nics", "--no-install", "-o", OS, "-I", "corral",
                          "viacorral.testbed").stdout
        assert "via iallocator corral: node" in out
        assert _instances(testbed)["viacorral.testbed"].startswith("node")
        # without -n or -I: the cluster's default allocators, a new cluster's being corral
        assert testbed.info()["default_iallocator"] == "corral"
        out = _add(testbed, "viadefault.testbed").stdout
        assert "Selected nodes for instance viadefault.testbed via iallocator corral" in out
    finally:
        _remove(testbed, "viahail.testbed", "viacorral.testbed", "viadefault.testbed")


def test_the_default_allocators_are_tried_in_turn(testbed: TestbedHandle) -> None:
    _plugin(testbed, "ialloc-garbage", "echo 'this is not JSON'\n")
    _plugin(testbed, "ialloc-pick", _answer("node2.testbed"))
    default = testbed.info()["default_iallocator"]
    testbed.run("gnt-cluster", "modify", "-I", "ialloc-garbage,ialloc-pick")
    try:
        out = _add(testbed, "default.testbed").stdout
        assert "iallocator 'ialloc-garbage' gave no solution: Can't parse iallocator results" in out
        assert "via iallocator ialloc-pick: node2.testbed" in out
        assert _instances(testbed)["default.testbed"] == "node2.testbed"
        # -I . is the list too
        dry = _add(testbed, "dry.testbed", "-I", ".", "--dry-run").stdout
        assert "via iallocator ialloc-pick: node2.testbed" in dry
        assert "dry.testbed" not in _instances(testbed)
    finally:
        _remove(testbed, "default.testbed")
        testbed.run("gnt-cluster", "modify", "-I", default)


@pytest.mark.parametrize(("name", "script", "lines"), [
    ("ialloc-nosuch", None, [
        "Failure: command execution error:",
        "Failure while running the iallocator script: iallocator module 'ialloc-nosuch' not "
        "found in the search path",
        "searched: /usr/local/lib/ganeti/iallocators, /usr/lib/ganeti/iallocators, "
        "/srv/corral/iallocators"]),
    ("ialloc-garbage2", "echo '[1, 2]'\n", [
        "Failure: command execution error:", "Can't parse iallocator results: not a dict",
        "iallocator 'ialloc-garbage2' answered: '[1, 2]'"]),
    ("ialloc-none", 'echo \'{"success": false, "info": "FailMem: 3, FailDisk: 0", '
                    '"result": []}\'\n', [
        "Failure: prerequisites not met for this operation:",
        "error type: insufficient_resources, error details:",
        "Can't compute nodes using iallocator 'ialloc-none': FailMem: 3, FailDisk: 0"]),
    ("ialloc-crash", "echo oops >&2; exit 2\n", [
        "Failure: command execution error:",
        "Failure while running the iallocator script: iallocator module 'ialloc-crash' "
        "failed: exited with exit code 2, output 'oops'"]),
])
def test_a_broken_plugin_fails_the_job_naming_it(testbed: TestbedHandle, name: str,
                                                  script: str | None, lines: list[str]) -> None:
    if script is not None:
        _plugin(testbed, name, script)
    proc = _add(testbed, "broken.testbed", "-I", name, check=False)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == lines
    assert "broken.testbed" not in _instances(testbed)


def test_a_slow_plugin_is_stopped_at_the_timeout(testbed: TestbedHandle) -> None:
    marker = _plugin_dir(testbed) / "slow-finished"
    _plugin(testbed, "ialloc-slow", f"sleep 20\ntouch {marker}\n")
    testbed.run("gnt-cluster", "modify", "--iallocator-timeout", "1")
    try:
        proc = _add(testbed, "slow.testbed", "-I", "ialloc-slow", check=False)
    finally:
        testbed.run("gnt-cluster", "modify", "--iallocator-timeout", "300")
    assert proc.returncode == 1
    assert ("iallocator module 'ialloc-slow' did not answer within 1 seconds; it was stopped"
            in proc.stderr)
    assert "slow.testbed" not in _instances(testbed) and not marker.exists()


# -- moving instances ---------------------------------------------------------------


def test_node_evacuate_and_node_migrate_with_hail(testbed: TestbedHandle, hail: None) -> None:
    try:
        testbed.run("gnt-instance", "add", "-t", "sharedfile", "--disk", "0:size=8M",
                    "--no-nics", "-o", OS, "-n", "node2.testbed", "ev1.testbed")
        _add(testbed, "ev2.testbed", "-n", "node2.testbed")
        out = testbed.run("gnt-node", "evacuate", "-f", "-I", "hail", "node2.testbed").stdout
        assert "Evacuating instances from node 'node2.testbed': ev1.testbed, ev2.testbed" in out
        assert "Instances to be moved: ev1.testbed (to node" in out
        assert out.rstrip().endswith("All instances evacuated successfully.")
        placed = _instances(testbed)
        assert placed["ev1.testbed"] != "node2.testbed"
        assert placed["ev2.testbed"] != "node2.testbed"
        assert testbed.run("gnt-node", "evacuate", "-f", "node2.testbed").stderr == \
            "No instances to evacuate on node(s) node2.testbed, exiting.\n"

        source = placed["ev1.testbed"]
        out = testbed.run("gnt-node", "migrate", "-f", "-I", "hail", source).stdout
        assert "Selected nodes for instance ev1.testbed via iallocator" in out
        assert out.rstrip().endswith("All instances migrated successfully.")
        assert _instances(testbed)["ev1.testbed"] != source
        status = testbed.run("gnt-instance", "list", "--no-headers", "-o", "status",
                             "ev1.testbed").stdout.strip()
        assert status == "running"
    finally:
        _remove(testbed, "ev1.testbed", "ev2.testbed")


def test_change_group_with_hail(testbed: TestbedHandle, hail: None) -> None:
    testbed.run("gnt-group", "add", "rack2")
    try:
        testbed.run("gnt-group", "assign-nodes", "rack2", "node2.testbed", "node3.testbed")
        _add(testbed, "mover.testbed", "-n", "node1.testbed")
        out = testbed.run("gnt-instance", "change-group", "--to", "rack2", "-I", "hail",
                          "mover.testbed").stdout
        assert "Iallocator returned 1 job(s) for changing group of instance 'mover.testbed'" \
            in out
        assert out.rstrip().endswith("Instance 'mover.testbed' changed group successfully.")
        assert _instances(testbed)["mover.testbed"] in ("node2.testbed", "node3.testbed")
        same = testbed.run("gnt-instance", "change-group", "--to", "rack2", "mover.testbed",
                           check=False)
        assert same.returncode == 1 and "they are used by the instance" in same.stderr
    finally:
        _remove(testbed, "mover.testbed")
        testbed.run("gnt-group", "assign-nodes", "default", "node2.testbed", "node3.testbed")
        testbed.run("gnt-group", "remove", "rack2")


def test_multi_alloc_through_rapi(testbed: TestbedHandle) -> None:
    _plugin(testbed, "ialloc-multi", 'echo \'{"success": true, "info": "", "result": '
                                     '[[["multi1.testbed", ["node3.testbed"]]], '
                                     '["multi2.testbed"]]}\'\n')
    api = _rapi(testbed)
    one = {"disk_template": "diskless", "disks": [], "nics": [], "os": OS, "no_install": True}
    body = {"iallocator": "ialloc-multi", "instances": [
        {**one, "name": "multi1.testbed"}, {**one, "name": "multi2.testbed"}]}
    try:
        dry = api.wait(api.ok("POST", "/2/instances-multi-alloc?dry-run=1", body))
        assert dry["status"] == "success"
        assert dry["opresult"][0]["nodes"] == {"multi1.testbed": ["node3.testbed"]}
        assert "multi1.testbed" not in _instances(testbed)
        job = api.wait(api.ok("POST", "/2/instances-multi-alloc", body))
        result = job["opresult"][0]
        assert (result["allocatable"], result["failed"]) == (["multi1.testbed"],
                                                             ["multi2.testbed"])
        ((ok, created),) = result["jobs"]
        assert ok is True and api.wait(created)["status"] == "success"
        assert _instances(testbed)["multi1.testbed"] == "node3.testbed"
        status, answer, _ = api.request("POST", "/2/instances-multi-alloc", {})
        assert status == 400 and "missing required 'instances'" in answer["message"]
    finally:
        _remove(testbed, "multi1.testbed", "multi2.testbed")


def test_gnt_debug_iallocator(testbed: TestbedHandle) -> None:
    out = testbed.run("gnt-debug", "iallocator", "--dir", "in", "-m", "allocate", "--memory",
                      "256", "--disks", "1G", "-t", "file", "-o", OS, "probe").stdout
    data = json.loads(out)
    assert data["request"]["type"] == "allocate" and data["request"]["memory"] == 256
    assert sorted(data["nodes"]) == ["node1.testbed", "node2.testbed", "node3.testbed"]
    _plugin(testbed, "ialloc-echo", 'cat "$1" | head -c 0; echo raw-answer\n')
    out = testbed.run("gnt-debug", "iallocator", "--dir", "out", "-I", "ialloc-echo", "-m",
                      "allocate", "-t", "file", "-o", OS, "probe").stdout
    assert out == "raw-answer\n\n"


def test_plugins_run_with_the_masters_environment_only(testbed: TestbedHandle) -> None:
    """A plugin gets the input file and the parameters as Ganeti passes them."""
    seen = _plugin_dir(testbed) / "args-seen"
    _plugin(testbed, "ialloc-args", f'echo "$#:$2" > {seen}\n' + _answer("node1.testbed"))
    testbed.run("gnt-cluster", "modify", "--default-iallocator-params", "max-cpu=4")
    try:
        _add(testbed, "args.testbed", "-I", "ialloc-args", "--dry-run")
    finally:
        testbed.run("gnt-cluster", "modify", "--default-iallocator-params", "-max-cpu")
    assert seen.read_text() == "2:--max-cpu=4\n"
    assert os.access(_plugin_dir(testbed) / "ialloc-args", os.X_OK)


# -- placement constraints (docs/placement.md, "The cluster in the engine") -----------


def _out(testbed: TestbedHandle, *args: str) -> str:
    return str(testbed.run(*args).stdout)


def test_placement_aggregates_traits_and_member_of(testbed: TestbedHandle) -> None:
    """node1 in agg1, node2 in agg2, node3 in neither with trait CUSTOM_SSD: each
    constraint leaves one node, which the built-in allocator takes; a node named with
    -n that breaks one is refused naming it."""
    run = testbed.run
    made: list[str] = []
    try:
        uuid1 = _out(testbed, "gnt-cluster", "add-aggregate", "agg1").strip().splitlines()[-1]
        run("gnt-cluster", "add-aggregate", "agg2")
        run("gnt-node", "modify", "--aggregates", "+agg1", "node1.testbed")
        run("gnt-node", "modify", "--aggregates", "agg2", "node2.testbed")
        run("gnt-node", "modify", "--traits", "+CUSTOM_SSD", "node3.testbed")
        listed = _out(testbed, "gnt-cluster", "list-aggregates", "--no-headers",
                      "--separator", "|").splitlines()
        assert listed[0] == f"agg1|{uuid1}|node1.testbed"
        assert listed[1].startswith("agg2|") and listed[1].endswith("|node2.testbed")
        nodes = _out(testbed, "gnt-node", "list", "--no-headers", "--separator", "|", "-o",
                     "name,aggregates,traits")
        assert nodes.splitlines() == ["node1.testbed|agg1|", "node2.testbed|agg2|",
                                      "node3.testbed||CUSTOM_SSD"]
        assert "  traits: CUSTOM_SSD\n" in _out(testbed, "gnt-node", "info", "node3.testbed")

        for name, args, node in [
            ("pl-none.testbed", ("--member-of", "!in:agg1,agg2"), "node3.testbed"),
            ("pl-agg2.testbed", ("--member-of", "agg2"), "node2.testbed"),
            ("pl-ssd.testbed", ("--required-trait", "CUSTOM_SSD", "--member-of", "default"),
             "node3.testbed"),
            ("pl-uuid.testbed", ("--member-of", uuid1, "--forbidden-trait", "CUSTOM_SSD"),
             "node1.testbed"),
        ]:
            made.append(name)
            out = _add(testbed, name, *args).stdout
            assert f"via iallocator corral: {node}" in out
            assert _instances(testbed)[name] == node

        # RAPI: the create body's member_of, the node fields, the aggregates in /2/info
        api = _rapi(testbed)
        made.append("pl-rapi.testbed")
        job = api.wait(api.ok("POST", "/2/instances", {
            "__version__": 1, "mode": "create", "name": "pl-rapi.testbed",
            "disk_template": "diskless", "disks": [], "nics": [], "os": OS,
            "no_install": True, "member_of": ["!agg1", "!agg2"],
            "forbidden_traits": ["CUSTOM_SSD"]}))
        assert job["status"] == "error" and "no node meets the placement constraints" in \
            str(job["opresult"])
        job = api.wait(api.ok("POST", "/2/nodes/node3.testbed/modify",
                              {"traits": ["-CUSTOM_SSD"]}))
        assert job["status"] == "success"
        job = api.wait(api.ok("POST", "/2/instances", {
            "__version__": 1, "mode": "create", "name": "pl-rapi.testbed",
            "disk_template": "diskless", "disks": [], "nics": [], "os": OS,
            "no_install": True, "member_of": ["!agg1", "!agg2"],
            "forbidden_traits": ["CUSTOM_SSD"]}))
        assert job["status"] == "success" and _instances(testbed)["pl-rapi.testbed"] == \
            "node3.testbed"
        assert api.ok("GET", "/2/info")["aggregates"]["agg1"] == uuid1
        rows = api.ok("GET", "/2/query/node?fields=name,aggregates,traits")["data"]
        assert [[v for _s, v in row] for row in rows] == [
            ["node1.testbed", ["agg1"], []], ["node2.testbed", ["agg2"], []],
            ["node3.testbed", [], []]]

        refused = _add(testbed, "pl-no.testbed", "--member-of", "agg1", "--required-trait",
                       "CUSTOM_SSD", check=False)
        assert refused.returncode == 1
        assert ("no node meets the placement constraints of instance pl-no.testbed "
                "(member_of agg1, required trait CUSTOM_SSD)") in refused.stderr
        refused = _add(testbed, "pl-no.testbed", "-n", "node1.testbed", "--member-of",
                       "!in:agg1,agg2", check=False)
        assert refused.returncode == 1
        assert ("node node1.testbed does not meet the placement constraints of instance "
                "pl-no.testbed: it is in aggregate agg1, which member_of !in:agg1,agg2 "
                "forbids") in refused.stderr
        refused = _add(testbed, "pl-no.testbed", "--member-of", "nosuch", check=False)
        assert refused.returncode != 0 and "unknown aggregate 'nosuch'" in refused.stderr
        refused = _add(testbed, "pl-no.testbed", "--required-trait", "ssd", check=False)
        assert refused.returncode != 0 and "invalid required trait 'ssd'" in refused.stderr
        assert "pl-no.testbed" not in _instances(testbed)
        busy = run("gnt-cluster", "remove-aggregate", "agg1", check=False)
        assert busy.returncode == 1 and "aggregate agg1 still has nodes: node1.testbed" in \
            busy.stderr
    finally:
        _remove(testbed, *made)
        for node in ("node1.testbed", "node2.testbed", "node3.testbed"):
            run("gnt-node", "modify", "--aggregates", "", "--traits", "", node, check=False)
        for agg in ("agg1", "agg2"):
            run("gnt-cluster", "remove-aggregate", agg, check=False)
    assert _out(testbed, "gnt-cluster", "list-aggregates", "--no-headers") == ""


def test_an_instance_keeps_its_placement_constraints(testbed: TestbedHandle) -> None:
    """An instance created with --member-of '!keepA' (node1 in keepA) is never moved
    into keepA: failover and evacuation with an allocator avoid node1, -n node1 is
    refused; modify, info, list and RAPI show and change the constraints; verify reports
    the instance once its node joins the aggregate."""
    run = testbed.run
    name = "pl-keep.testbed"
    try:
        run("gnt-cluster", "add-aggregate", "keepA")
        run("gnt-node", "modify", "--aggregates", "+keepA", "node1.testbed")
        _add(testbed, name, "-n", "node2.testbed", "--member-of", "!keepA")
        out = _out(testbed, "gnt-instance", "failover", "-f", name)
        assert f"Selected nodes for instance {name} via iallocator corral: node3.testbed" in out
        refused = run("gnt-instance", "failover", "-f", "-n", "node1.testbed", name,
                      check=False)
        assert refused.returncode == 1
        assert (f"node node1.testbed does not meet the placement constraints of instance "
                f"{name}: it is in aggregate keepA, which member_of !keepA forbids"
                ) in refused.stderr
        out = _out(testbed, "gnt-node", "evacuate", "-f", "node3.testbed")
        assert f"Instances to be moved: {name} (to node2.testbed)" in out
        assert _instances(testbed)[name] == "node2.testbed"

        assert "Placement constraints: member_of !keepA\n" in _out(
            testbed, "gnt-instance", "info", "--static", name)
        refused = run("gnt-instance", "modify", "--member-of", "keepA", name, check=False)
        assert refused.returncode == 1 and (
            f"cannot give instance {name} these placement constraints (member_of keepA): "
            "its primary node node2.testbed does not meet them: it is not in aggregate "
            "keepA") in refused.stderr
        out = _out(testbed, "gnt-instance", "modify", "--member-of", "",
                   "--forbidden-trait", "CUSTOM_X", name)
        assert " - placement -> forbidden trait CUSTOM_X\n" in out
        assert _out(testbed, "gnt-instance", "list", "--no-headers", "--separator", "|",
                    "-o", "name,member_of,forbidden_traits", name) == f"{name}|[]|CUSTOM_X\n"

        api = _rapi(testbed)
        job = api.wait(api.ok("PUT", f"/2/instances/{name}/modify",
                              {"member_of": ["!keepA"], "forbidden_traits": []}))
        assert job["status"] == "success", job
        shown = api.ok("GET", f"/2/instances/{name}")
        uuid = testbed.info()["aggregates"]["keepA"]
        assert (shown["member_of"], shown["member_of.uuid"], shown["required_traits"],
                shown["forbidden_traits"]) == (["!keepA"], [f"!{uuid}"], [], [])

        run("gnt-node", "modify", "--aggregates", "+keepA", "node2.testbed")
        verify = run("gnt-cluster", "verify", "--error-codes", check=False)
        assert verify.returncode == 1
        assert (f"ERROR:EINSTANCEUNSUITABLENODE:instance:{name}:instance lives on node "
                "node2.testbed, which does not meet its placement constraints: it is in "
                "aggregate keepA, which member_of !keepA forbids") in verify.stdout
    finally:
        _remove(testbed, name)
        for node in ("node1.testbed", "node2.testbed"):
            run("gnt-node", "modify", "--aggregates", "", node, check=False)
        run("gnt-cluster", "remove-aggregate", "keepA", check=False)
