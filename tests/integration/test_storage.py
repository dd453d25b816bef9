"""Storage units, disk status, verify-disks and repairs on the shared 3-node testbed
(file disks, the fake hypervisor), through gnt-node, gnt-cluster, gnt-instance and RAPI.

The expected lines are Ganeti 3.0's, recorded on the reference cluster: the storage
columns, ``No changes to perform, exiting.``, the refusals of ``modify-storage`` and
``repair-storage``, verify-disks' ``Submitted jobs``/``Waiting for job`` lines and its
report of missing volumes, replace-disks' ``strange layout`` refusal. LVM and
adopted block devices need root and loop devices: tests/system/test_storage_*.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.paths import Paths
from tests.conftest import TestbedHandle
from tests.integration.test_filter_seed import _rapi

pytestmark = [pytest.mark.integration, pytest.mark.shared_testbed]

NODES = ("node1.testbed", "node2.testbed", "node3.testbed")
STORAGE_DIR = "/srv/corral/file-storage"


def node_paths(testbed: TestbedHandle, index: int) -> Paths:
    return Paths(Path(testbed.state["nodes"][index - 1]["root"]))


@pytest.fixture(autouse=True)
def _no_lvm_on_the_nodes(testbed: TestbedHandle) -> None:
    """Each node's LVM sees no device: the machine's own volume groups (and other test
    runs') stay out of these tests."""
    for index in range(1, len(NODES) + 1):
        conf = node_paths(testbed, index).node_path("/etc/lvm/lvm.conf")
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text('devices { global_filter = [ "r|.*|" ] }\n')


@pytest.fixture
def instance(testbed: TestbedHandle, request: pytest.FixtureRequest) -> Iterator[str]:
    """A running file instance on node1 (one 8 MiB disk), removed afterwards."""
    name = f"st-{request.node.name.split('[')[0][-20:].replace('_', '-')}.testbed"
    testbed.run("gnt-instance", "add", "-t", "file", "--no-install", "-o", "corral-ext4+default",
                "-n", NODES[0], "--disk", "0:size=8M", "--no-nics", name)
    testbed.run("gnt-instance", "startup", name)
    try:
        yield name
    finally:
        testbed.run("gnt-instance", "remove", "-f", name, check=False)


def disk_file(testbed: TestbedHandle, name: str, index: int) -> Path:
    """Where the instance's first disk file is on node ``index``."""
    return node_paths(testbed, index).node_path(cluster_disk_path(testbed, name))


def cluster_disk_path(testbed: TestbedHandle, name: str) -> str:
    """The cluster-wide path of the instance's first disk file."""
    info = json.loads(testbed.run("gnt-instance", "info", "--json", name).stdout)
    return str(info[name]["disks"][0]["logical_id"][1])


def test_list_storage_shows_the_file_storage_of_every_node(testbed: TestbedHandle) -> None:
    out = testbed.run("gnt-node", "list-storage").stdout.splitlines()
    assert re.split(r"\s+", out[0]) == ["Node", "Type", "Name", "Size", "Used", "Free",
                                       "Allocatable"]
    rows = [re.split(r"\s+", line) for line in out[1:]]
    assert [row[:3] for row in rows] == [[node, "file", STORAGE_DIR] for node in NODES]
    assert all(row[6] == "Y" and row[3].endswith(("G", "T", "M")) for row in rows)
    sep = testbed.run("gnt-node", "list-storage", "-t", "file", "--no-headers",
                      "--separator=|", "-o", "name,node,size,allocatable", NODES[1]).stdout
    name, node, size, allocatable = sep.strip().split("|")
    assert (name, node, allocatable) == (STORAGE_DIR, NODES[1], "Y") and size.isdigit()


@pytest.mark.parametrize(("args", "message"), [
    (["list-storage", "-t", "lvm-vg"],
     "No disk template of storage type 'lvm-vg' is enabled in this cluster. Enabled disk "
     "templates are: file,sharedfile,diskless"),
    (["list-storage", "-t", "lvm-pv"],
     "No disk template of storage type 'lvm-vg' is enabled in this cluster."),
    (["list-storage", "-o", "name,bogus"], "Unknown output fields selected: bogus"),
    (["list-storage", "-t", "file", "nosuchnode"], "Node 'nosuchnode' not known"),
    (["modify-storage", "--allocatable=no", NODES[0], "lvm-vg", "xenvg"],
     "Storage units of type 'lvm-vg' can not be modified"),
    (["modify-storage", "--allocatable=no", NODES[0], "file", STORAGE_DIR],
     "Storage units of type 'file' can not be modified"),
    (["modify-storage", "--allocatable=no", NODES[0], "bogus", "x"],
     "Unknown storage type: bogus"),
    (["repair-storage", NODES[0], "lvm-pv", "/dev/sdz"],
     "Storage units of type 'lvm-pv' can not be repaired"),
    (["repair-storage", NODES[0], "file", STORAGE_DIR],
     "Storage units of type 'file' can not be repaired"),
    (["volumes", "-o", "name,bogus"], "Unknown output fields selected: bogus"),
])
def test_storage_refusals_in_ganetis_words(testbed: TestbedHandle, args: list[str],
                                          message: str) -> None:
    proc = testbed.run("gnt-node", *args, check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith("Failure: prerequisites not met for this operation:\n")
    assert message in proc.stderr


def test_modify_storage_without_changes_does_nothing(testbed: TestbedHandle) -> None:
    proc = testbed.run("gnt-node", "modify-storage", NODES[0], "lvm-pv", "/dev/sdz")
    assert proc.returncode == 0 and proc.stderr == "No changes to perform, exiting.\n"
    proc = testbed.run("gnt-node", "modify-storage", NODES[0], "lvm-pv", check=False)
    assert proc.returncode == 1
    assert proc.stderr == "Error: Command modify-storage expects 3 argument(s)\n"


def test_volumes_on_nodes_without_lvm(testbed: TestbedHandle) -> None:
    out = testbed.run("gnt-node", "volumes").stdout
    assert re.split(r"\s+", out.strip()) == ["Node", "PhysDev", "VG", "Name", "Size",
                                             "Instance"]


def test_verify_disks_reports_a_lost_disk_and_recreate_makes_it_again(
        testbed: TestbedHandle, instance: str) -> None:
    clean = testbed.run("gnt-cluster", "verify-disks")
    lines = clean.stdout.splitlines()
    assert re.fullmatch(r"Submitted jobs \d+", lines[0])
    assert re.fullmatch(r"Waiting for job \d+ \.\.\.", lines[1])
    assert lines[2:] == ["No disks need to be activated."]
    info = testbed.run("gnt-instance", "info", instance).stdout
    path = disk_file(testbed, instance, 1)
    cluster_path = cluster_disk_path(testbed, instance)
    assert f"on primary: {path} (N/A:N/A)" in info

    path.unlink()  # behind corral's back
    lost = testbed.run("gnt-cluster", "verify-disks", check=False)
    assert lost.returncode == 1
    assert lost.stdout.splitlines()[2:] == [
        f"Instance {instance} has missing logical volumes:",
        f"\t{NODES[0]} {cluster_path}",
        "You need to replace or recreate disks for all the above instances if this message "
        "persists after fixing broken nodes."]
    status = testbed.run("gnt-instance", "disk-status", "--no-headers", "--separator=|",
                         instance).stdout
    assert status == f"disk/0|{NODES[0]}|missing|-\n"
    assert "on primary" not in testbed.run("gnt-instance", "info", instance).stdout
    repair = testbed.run("gnt-instance", "repair-disks", instance, check=False)
    assert repair.returncode == 1
    assert (f"disk/0 on node {NODES[0]} is missing and disk template file keeps no other "
            f"copy of it: its data is lost; 'gnt-instance recreate-disks --disk=0 "
            f"{instance}' makes it again, empty") in repair.stderr

    up = testbed.run("gnt-instance", "recreate-disks", instance, check=False)
    assert up.returncode == 1
    assert f"Instance '{instance}' is marked to be up, cannot recreate disks" in up.stderr
    testbed.run("gnt-instance", "shutdown", instance)
    testbed.run("gnt-instance", "recreate-disks", "--disk=0", instance)
    assert path.stat().st_size == 8 * 1024 * 1024
    again = testbed.run("gnt-instance", "recreate-disks", instance, check=False)
    assert again.returncode == 1 and "exists on node" in again.stderr
    testbed.run("gnt-instance", "startup", instance)
    assert testbed.run("gnt-cluster", "verify-disks").stdout.endswith(
        "No disks need to be activated.\n")
    assert testbed.run("gnt-instance", "repair-disks", instance).returncode == 0


def test_recreate_disks_on_another_node(testbed: TestbedHandle, instance: str) -> None:
    old = disk_file(testbed, instance, 1)
    testbed.run("gnt-instance", "shutdown", instance)
    refused = testbed.run("gnt-instance", "recreate-disks", "-n", f"{NODES[1]}:{NODES[2]}",
                          instance, check=False)
    assert refused.returncode == 1
    assert "currently has 1 nodes, but 2 replacement nodes were specified" in refused.stderr
    moved = testbed.run("gnt-instance", "recreate-disks", "-n", NODES[1], instance)
    assert ("WARNING: Changing the instance's nodes, you will have to remove any disks left "
            "on the older nodes manually") in moved.stdout
    new = disk_file(testbed, instance, 2)
    assert new.stat().st_size == 8 * 1024 * 1024 and old.exists()
    rows = testbed.run("gnt-instance", "list", "--no-headers", "--separator=|", "-o",
                       "pnode", instance).stdout
    assert rows.strip() == NODES[1]
    testbed.run("gnt-instance", "startup", instance)
    assert testbed.run("gnt-instance", "disk-status", "--no-headers", "--separator=|",
                       instance).stdout == f"disk/0|{NODES[1]}|ok|{new}\n"
    old.unlink()


def test_replace_disks_needs_a_mirror(testbed: TestbedHandle, instance: str) -> None:
    proc = testbed.run("gnt-instance", "replace-disks", "-p", instance, check=False)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[:3] == [
        "Failure: prerequisites not met for this operation:",
        "error type: internal_error, error details:",
        "The instance has a strange layout, expected one secondary but found 0"]
    none = testbed.run("gnt-instance", "replace-disks", instance, check=False)
    assert none.returncode == 1
    assert "One and only one of the -p, -s, -a, -n and -I options must be passed" in \
        none.stderr


def test_activate_disks_waits_for_sync(testbed: TestbedHandle, instance: str) -> None:
    out = testbed.run("gnt-instance", "activate-disks", "--wait-for-sync", instance).stdout
    lines = out.splitlines()
    assert lines[0].endswith(f" - INFO: Waiting for instance {instance} to sync disks")
    assert lines[1].endswith(f" - INFO: Instance {instance}'s disks are in sync")
    assert lines[2] == f"{NODES[0]}:disk/0:{disk_file(testbed, instance, 1)}"


# -- RAPI ------------------------------------------------------------------------------


def rapi(testbed: TestbedHandle, method: str, path: str, body: Any = None
         ) -> tuple[int, Any]:
    """One RAPI request as the testbed's admin; status and decoded body."""
    status, answer, _headers = _rapi(testbed).request(method, path, body)
    return status, answer


def job_result(testbed: TestbedHandle, job_id: int) -> tuple[str, Any]:
    """Wait for a job submitted through RAPI: its status and first opcode's result."""
    job = _rapi(testbed).wait(job_id)  # type: ignore[arg-type]
    return job["status"], job["opresult"][0]


def test_rapi_storage_resources(testbed: TestbedHandle) -> None:
    node = NODES[0]
    status, body = rapi(testbed, "GET", f"/2/nodes/{node}/storage?storage_type=lvm-vg")
    assert status == 400 and body["message"].startswith(
        "Missing the required 'output_fields' parameter")
    status, job_id = rapi(testbed, "GET", f"/2/nodes/{node}/storage?storage_type=file"
                                          "&output_fields=name,node,type,allocatable")
    assert status == 200
    assert job_result(testbed, job_id) == ("success", [[STORAGE_DIR, node, "file", True]])
    status, body = rapi(testbed, "PUT", f"/2/nodes/{node}/storage/modify?storage_type=lvm-pv")
    assert status == 400 and body["message"].startswith("Missing the required 'name'")
    status, body = rapi(testbed, "PUT", f"/2/nodes/{node}/storage/modify?storage_type="
                                        "lvm-pv&name=/dev/sdz&allocatable=x")
    assert status == 400 and body["message"].startswith(
        "Invalid value for the 'allocatable' parameter")
    status, job_id = rapi(testbed, "PUT", f"/2/nodes/{node}/storage/repair?storage_type="
                                          "lvm-pv&name=/dev/sdz")
    assert status == 200
    state, result = job_result(testbed, job_id)
    assert state == "error"
    assert result == ["OpPrereqError", ["Storage units of type 'lvm-pv' can not be "
                                        "repaired", "wrong_input"]]
    status, body = rapi(testbed, "PUT", f"/2/nodes/{node}/storage/repair?name=x")
    assert status == 400 and "storage_type" in body["message"]


def test_rapi_instance_disk_operations(testbed: TestbedHandle, instance: str) -> None:
    base = f"/2/instances/{instance}"
    status, job_id = rapi(testbed, "GET", f"{base}/disk-status")
    assert status == 200
    state, entries = job_result(testbed, job_id)
    assert state == "success"
    assert [(e["index"], e["node"], e["status"]) for e in entries] == [(0, NODES[0], "ok")]
    status, body = rapi(testbed, "POST", f"{base}/recreate-disks", {"bogus": 1})
    assert status == 400 and "bogus" in body["message"]
    status, body = rapi(testbed, "POST", f"{base}/replace-disks")
    assert status == 400 and "mode" in body["message"]
    status, job_id = rapi(testbed, "POST", f"{base}/replace-disks?mode=replace_on_primary")
    assert status == 200
    state, result = job_result(testbed, job_id)
    assert state == "error" and result[1][0].startswith(
        "The instance has a strange layout, expected one secondary but found 0")
    status, job_id = rapi(testbed, "POST", f"{base}/repair-disks")
    assert status == 200 and job_result(testbed, job_id) == ("success", [])
    status, job_id = rapi(testbed, "GET", f"{base}/info")
    state, info = job_result(testbed, job_id)
    pstatus = info[instance]["disks"][0]["pstatus"]
    assert pstatus[0] == str(disk_file(testbed, instance, 1)) and pstatus[5:] == [False, 1]


def test_a_new_file_storage_dir_is_made_on_every_node(testbed: TestbedHandle) -> None:
    new = f"{STORAGE_DIR}/pool2"
    testbed.run("gnt-cluster", "modify", "--file-storage-dir", new)
    try:
        for index in range(1, len(NODES) + 1):
            assert node_paths(testbed, index).node_path(new).is_dir()
        rows = testbed.run("gnt-node", "list-storage", "--no-headers", "--separator=|",
                           "-o", "node,name").stdout.split()
        assert rows == [f"{node}|{new}" for node in NODES]
    finally:
        testbed.run("gnt-cluster", "modify", "--file-storage-dir", STORAGE_DIR)


def test_the_status_column_of_storage_units(testbed: TestbedHandle) -> None:
    node_paths(testbed, 1).node_path(STORAGE_DIR).mkdir(parents=True, exist_ok=True)
    out = testbed.run("gnt-node", "list-storage", "-t", "file", "-o", "node,status",
                      NODES[0]).stdout.splitlines()
    assert [re.split(r"\s+", line.strip()) for line in out] == [["Node", "Status"],
                                                               [NODES[0], "ok"]]
