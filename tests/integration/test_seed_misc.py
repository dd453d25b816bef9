"""Seed fidelity on the 3-node testbed (issue 22, items 6 and 9), driven through the
command line and RAPI: global hypervisor parameters (design 2.1), the reason of an
instance's last status change (seed 001), the user-id pool on every node (design
2.1) and the uuid of a new instance or node reported by add (design 2.1)."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from corral import daemons
from corral.utils.process import stop_daemon
from tests.conftest import TestbedHandle
from tests.integration.test_instances import list_instances, node_paths
from tests.integration.test_node_group_cli import _new_token, _roles
from tests.integration.test_rapi import _client

pytestmark = pytest.mark.integration

_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def _info(testbed: TestbedHandle, name: str) -> dict[str, Any]:
    """``gnt-instance info --json`` of one instance."""
    result: dict[str, Any] = json.loads(
        testbed.run("gnt-instance", "info", "--json", name).stdout)[name]
    return result


def _last_reasons(testbed: TestbedHandle, name: str) -> list[str]:
    """The ``user`` texts of the instance's last status-change reason trail."""
    return [entry[1] for entry in _info(testbed, name)["last_reason"] if entry[0] == "user"]


def _store_instance_hvparams(testbed: TestbedHandle, name: str, hvparams: dict[str, Any]
                             ) -> None:
    """Write ``hvparams`` into the instance's row of the stopped master's store, as an
    older corral (or one from before a parameter became global) left it."""
    db = sqlite3.connect(testbed.paths.config_db)
    try:
        rows = db.execute("SELECT uuid, json FROM objects WHERE kind = 'instance'").fetchall()
        (uuid, text), = [(u, t) for u, t in rows if json.loads(t)["name"] == name]
        data = json.loads(text)
        data["hvparams"] = hvparams
        db.execute("UPDATE objects SET json = ? WHERE uuid = ?", (json.dumps(data), uuid))
        db.commit()
    finally:
        db.close()


def _stored_instance_hvparams(testbed: TestbedHandle, name: str) -> dict[str, Any]:
    db = sqlite3.connect(testbed.paths.config_db)
    try:
        rows = db.execute("SELECT json FROM objects WHERE kind = 'instance'").fetchall()
    finally:
        db.close()
    (data,) = [json.loads(t) for (t,) in rows if json.loads(t)["name"] == name]
    hvparams: dict[str, Any] = data["hvparams"]
    return hvparams


def test_global_hv_params_reason_of_status_changes_and_uuid_of_new_instances(
        testbed: TestbedHandle) -> None:
    name = "web1.testbed"
    # -- the uuid of a new instance: reported by add (CLI) ...
    proc = testbed.run("gnt-instance", "add", "-t", "diskless", "--no-install", "-n",
                       "node1.testbed", name)
    [[uuid]] = list_instances(testbed, "uuid")
    assert f"Added instance {name} with UUID {uuid}" in proc.stdout + proc.stderr

    # ... and in the job log RAPI clients read (the result stays Ganeti's node list).
    api = _client(testbed)
    job = api.run("POST", "/2/instances", {
        "__version__": 1, "mode": "create", "name": "web2.testbed",
        "disk_template": "diskless", "disks": [], "nics": [], "no_install": True,
        "pnode": "node2.testbed"})
    uuid2 = api.ok("GET", "/2/instances/web2.testbed")["uuid"]
    assert job["opresult"] == [["node2.testbed"]]
    messages = [entry[3] for entry in job["oplog"][0]]
    assert f"Added instance web2.testbed with UUID {uuid2}" in messages

    # -- a global hypervisor parameter cannot be set per instance (Ganeti refuses too).
    for args in (["add", "-t", "diskless", "--no-install", "-n", "node1.testbed",
                  "-H", "fake:migration_mode=non-live", "web3.testbed"],
                 ["modify", "-H", "migration_mode=non-live", name]):
        refused = testbed.run("gnt-instance", *args, check=False)
        assert refused.returncode != 0
        assert "migration_mode" in refused.stderr and "global" in refused.stderr
    # Through RAPI it is refused before a job is queued, saying why.
    for method, path, body in (
            ("POST", "/2/instances", {
                "__version__": 1, "mode": "create", "name": "web3.testbed",
                "disk_template": "diskless", "disks": [], "nics": [], "no_install": True,
                "pnode": "node1.testbed", "hvparams": {"migration_mode": "non-live"}}),
            ("PUT", f"/2/instances/{name}/modify",
             {"hvparams": {"migration_port": 9000}})):
        status, answer, _ = api.request(method, path, body)
        assert status == 400, answer
        assert "global" in answer["message"] and "gnt-cluster modify" in answer["message"]
    assert [r[0] for r in list_instances(testbed, "name")] == [name, "web2.testbed"]

    # -- the reason of the last status change: a modify does not replace it.
    testbed.run("gnt-instance", "startup", "--reason", "A: back to work", name)
    testbed.run("gnt-instance", "modify", "-B", "vcpus=2", "--reason", "B: more cpu", name)
    assert _last_reasons(testbed, name) == ["A: back to work"]
    assert "A: back to work" in testbed.run("gnt-instance", "info", name).stdout
    testbed.run("gnt-instance", "shutdown", "--reason", "C: maintenance", name)
    assert _last_reasons(testbed, name) == ["C: maintenance"]
    testbed.run("gnt-instance", "modify", "-B", "vcpus=1", "--reason", "D: fewer", name)
    assert _last_reasons(testbed, name) == ["C: maintenance"]
    # a start not remembered as the wanted state still is a status change
    testbed.run("gnt-instance", "startup", "--no-remember", "--reason", "E: a look", name)
    assert _last_reasons(testbed, name) == ["E: a look"]
    testbed.run("gnt-instance", "shutdown", "--no-remember", "--reason", "F: done", name)
    assert _last_reasons(testbed, name) == ["F: done"]

    # -- an older store holding a global parameter per instance: the master's upgrade
    # drops it when it opens the store (design 2.1), and the cluster value applies.
    paths = testbed.paths
    assert stop_daemon(paths.pid_file("masterd")) is not None
    _store_instance_hvparams(testbed, name, {"migration_mode": "non-live"})
    daemons.start(paths, only=["masterd"])
    info = _info(testbed, name)
    assert "migration_mode" not in info["hv_instance"]
    assert _stored_instance_hvparams(testbed, name) == {}
    cluster_mode = testbed.info()["hvparams"]["fake"]["migration_mode"]
    assert cluster_mode == "live"


def test_uid_pool_reaches_every_node_and_node_add_reports_the_uuid(
        testbed: TestbedHandle) -> None:
    testbed.run("gnt-cluster", "modify", "-C", "2")
    testbed.run("gnt-node", "modify", "-C", "no", "node3.testbed")
    assert _roles(testbed)["node3.testbed"] == "R"

    def pools() -> list[str]:
        return [node_paths(testbed, i).uid_pool.read_text() for i in (1, 2, 3)]

    testbed.run("gnt-cluster", "modify", "--uid-pool", "4000-4009,5000")
    assert pools() == ["4000-4009\n5000\n"] * 3
    testbed.run("gnt-cluster", "modify", "--add-uids", "6000-6001")
    assert pools() == ["4000-4009\n5000\n6000-6001\n"] * 3
    testbed.run("gnt-cluster", "modify", "--remove-uids", "5000")
    assert pools() == ["4000-4009\n6000-6001\n"] * 3

    # A node added later gets it as well, and add reports the node's uuid.
    root = Path(testbed.state["nodes"][2]["root"])
    old_token = node_paths(testbed, 3).join_token
    old = old_token.read_text().strip() if old_token.exists() else None
    testbed.run("gnt-node", "remove", "node3.testbed")
    assert not node_paths(testbed, 3).uid_pool.exists()  # it left the cluster
    token = _new_token(root, old)
    proc = testbed.run("gnt-node", "add", "node3.testbed", "--primary-ip", "127.0.1.3",
                       "--token", token)
    uuid = testbed.run("gnt-node", "list", "--no-headers", "-o", "uuid",
                       "node3.testbed").stdout.strip()
    assert re.fullmatch(_UUID, uuid)
    assert f"node node3.testbed with UUID {uuid}" in proc.stdout + proc.stderr
    assert _roles(testbed)["node3.testbed"] == "R"
    assert pools() == ["4000-4009\n6000-6001\n"] * 3

    # A pool emptied is an empty file everywhere (Ganeti's ssconf_uid_pool is too).
    testbed.run("gnt-cluster", "modify", "--uid-pool", "")
    assert pools() == [""] * 3

    # redistribute-conf sends it again to a node that lost it, and says so.
    testbed.run("gnt-cluster", "modify", "--uid-pool", "7000")
    node_paths(testbed, 3).uid_pool.unlink()
    job = _client(testbed).run("PUT", "/2/redistribute-config")
    assert "uid_pool" in job["opresult"][0]["files"]
    assert pools() == ["7000\n"] * 3
