"""The reason trail reaches the node (seed 001): every operation that changes an
instance's status leaves the trail, with the node daemon's own entry, in the
instance's reason file on its primary node, and a status record beside it; an
instance that is removed or leaves the node is forgotten there.

The logical units run against node daemons in this process (the real noded
procedures over the fake hypervisor), so the files are the ones a node writes."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.noded import instance_status
from corral.paths import Paths
from tests.unit.instance_change_helpers import Cluster as MoveCluster
from tests.unit.instance_helpers import Cluster, open_cluster


@pytest.fixture
def cl(tmp_path: Path) -> Iterator[Cluster]:
    yield from open_cluster(tmp_path)


def _reason_file(paths: Paths, name: str) -> Path:
    return paths.run_dir / "instance-reason" / name


def _trail(paths: Paths, name: str) -> list[list[Any]]:
    text = _reason_file(paths, name).read_text()
    assert text.endswith("]\n")  # Ganeti's file: JSON and a newline
    data: list[list[Any]] = json.loads(text)
    return data


def test_status_changes_write_the_trail_with_the_noded_entry(cl: Cluster) -> None:
    node1 = cl.rpc.nodes.paths("node1")
    cl.create(reason=[["user", "new web server", 1]])
    trail = _trail(node1, "web1")
    assert [entry[:2] for entry in trail] == [["user", "new web server"],
                                              ["gnt:daemon:noded:start", ""]]
    assert trail[-1][2] > 10**18  # nanoseconds since the epoch
    # the directory's group may read it (the monitoring daemon's, with privilege
    # separation), nobody else
    assert os.stat(_reason_file(node1, "web1")).st_mode & 0o777 == 0o640

    cl.run("OP_INSTANCE_SHUTDOWN", instance_name="web1",
           reason=[["user", "Cleanup of unused instances", 2],
                   ["gnt:client:gnt-instance", "stop", 3]])
    assert [entry[:2] for entry in _trail(node1, "web1")] == [
        ["user", "Cleanup of unused instances"], ["gnt:client:gnt-instance", "stop"],
        ["gnt:daemon:noded:shutdown", ""]]
    record = instance_status.read_records(node1)["web1"]
    assert record["admin_state"] == "down"
    assert record["uuid"] == cl.store.get("instance", "web1").uuid

    cl.run("OP_INSTANCE_REBOOT", instance_name="web1", reboot_type="hard",
           reason=[["user", "kernel update", 4]])
    assert [entry[0] for entry in _trail(node1, "web1")][-1] == "gnt:daemon:noded:start"
    cl.run("OP_INSTANCE_REBOOT", instance_name="web1", reboot_type="soft",
           reason=[["user", "again", 5]])
    assert [entry[:2] for entry in _trail(node1, "web1")] == [
        ["user", "again"], ["gnt:daemon:noded:reboot", ""]]
    assert instance_status.read_records(node1)["web1"]["admin_state"] == "up"
    # The collector reads the same trail back.
    assert instance_status.read_reason(node1, "web1") == _trail(node1, "web1")


def test_a_query_leaves_the_last_status_change_alone(cl: Cluster) -> None:
    node1 = cl.rpc.nodes.paths("node1")
    cl.create(reason=[["user", "created", 1]])
    before = _reason_file(node1, "web1").read_bytes()
    cl.run("OP_INSTANCE_QUERY_DATA", instances=["web1"], reason=[["user", "look", 2]])
    assert _reason_file(node1, "web1").read_bytes() == before


def test_removal_forgets_the_instance_and_rename_moves_its_files(cl: Cluster) -> None:
    node1 = cl.rpc.nodes.paths("node1")
    cl.create(name="web1")
    cl.run("OP_INSTANCE_SHUTDOWN", instance_name="web1", reason=[["user", "stop", 1]])
    cl.run("OP_INSTANCE_RENAME", instance_name="web1", new_name="web2")
    assert not _reason_file(node1, "web1").exists()
    assert [entry[0] for entry in _trail(node1, "web2")] == ["user",
                                                             "gnt:daemon:noded:shutdown"]
    assert list(instance_status.read_records(node1)) == ["web2"]
    cl.run("OP_INSTANCE_REMOVE", instance_name="web2")
    assert not _reason_file(node1, "web2").exists()
    assert instance_status.read_records(node1) == {}


def test_the_node_an_instance_leaves_forgets_it(tmp_path: Path) -> None:
    cl = MoveCluster(tmp_path)
    cl.add_instance("shared", template="sharedfile", up=True)
    cl.run("OP_INSTANCE_STARTUP", instance_name="shared", reason=[["user", "go", 1]])
    node1, node2, node3 = (cl.rpc.nodes.paths(n) for n in ("node1", "node2", "node3"))
    assert "shared" in instance_status.read_records(node1)

    # A live migration changes no status: the target keeps the last change's trail
    # (the configuration's: the startup of a running instance records its reason).
    cl.run("OP_INSTANCE_MIGRATE", instance_name="shared", target_node="node2")
    assert instance_status.read_records(node1) == {}
    assert [entry[:2] for entry in _trail(node2, "shared")] == [
        ["user", "go"], ["gnt:daemon:noded:migrate", ""]]

    cl.run("OP_INSTANCE_FAILOVER", instance_name="shared", target_node="node3",
           reason=[["user", "rack 2 down", 2]])
    assert instance_status.read_records(node2) == {}
    assert [entry[:2] for entry in _trail(node3, "shared")] == [
        ["user", "rack 2 down"], ["gnt:daemon:noded:start", ""]]


@pytest.mark.parametrize("name", ["", "../etc", ".hidden", "a/b"])
def test_names_that_would_leave_the_directory_are_refused(tmp_path: Path, name: str) -> None:
    paths = Paths(tmp_path)
    assert instance_status.read_reason(paths, name) == []
