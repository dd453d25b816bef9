"""Configuration replication to the master candidates on the 3-node testbed: every
commit reaches the candidates' replicas, and a candidate that was down while the
master committed 100 times catches up when it comes back."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from corral import daemons
from corral.luxi import Client
from corral.paths import Paths
from tests.conftest import TestbedHandle


def _node_paths(testbed: TestbedHandle, index: int) -> Paths:
    return Paths(Path(testbed.state["nodes"][index - 1]["root"]))


def _query(db: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(f"{db.absolute().as_uri()}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _serial(db: Path) -> int | None:
    if not db.exists():
        return None
    [(value,)] = _query(db, "SELECT value FROM meta WHERE key = 'serial'")
    assert isinstance(value, int)
    return value


def _wait_for(db: Path, serial: int, timeout: float = 30.0) -> int | None:
    """The replica's serial once it reaches ``serial`` (or what it is at the deadline)."""
    deadline = time.monotonic() + timeout
    current = _serial(db)
    while current != serial and time.monotonic() < deadline:
        time.sleep(0.05)
        current = _serial(db)
    return current


def _finished_statuses(client: Client, ids: list[int], timeout: float = 120.0) -> list[str]:
    """The statuses of jobs ``ids`` once all are final (or whatever they are when
    ``timeout`` seconds have passed)."""
    deadline = time.monotonic() + timeout
    while True:
        statuses: list[str] = [row[0] for row in client.call("QueryJobs", ids, ["status"])]
        if all(s in ("success", "error", "canceled") for s in statuses):
            return statuses
        if time.monotonic() >= deadline:
            return statuses
        time.sleep(0.2)


def _cluster_tags(db: Path) -> list[str]:
    [(data,)] = _query(db, "SELECT json FROM objects WHERE kind = 'cluster'")
    tags: list[str] = json.loads(str(data))["tags"]
    return sorted(tags)


def test_candidates_follow_every_commit(testbed: TestbedHandle) -> None:
    master_db = testbed.paths.config_db
    testbed.run("gnt-instance", "add", "-t", "diskless", "--no-install", "--no-start", "-n",
                "node2.testbed", "rep1.testbed")
    serial = _serial(master_db)
    for index in (2, 3):
        replica = _node_paths(testbed, index).config_replica
        assert _wait_for(replica, serial or 0) == serial
        names = [row[0] for row in _query(
            replica, "SELECT json_extract(json, '$.name') FROM objects WHERE kind = 'instance'")]
        assert names == ["rep1.testbed"]
    # The master keeps its own configuration; it has no replica.
    assert not testbed.paths.config_replica.exists()
    # A removal travels as a delete.
    testbed.run("gnt-instance", "remove", "-f", "rep1.testbed")
    serial = _serial(master_db)
    replica = _node_paths(testbed, 3).config_replica
    assert _wait_for(replica, serial or 0) == serial
    assert _query(replica, "SELECT count(*) FROM objects WHERE kind = 'instance'") == [(0,)]


def test_candidate_down_during_100_commits_catches_up(testbed: TestbedHandle) -> None:
    node3 = _node_paths(testbed, 3)
    master_db = testbed.paths.config_db
    assert _wait_for(node3.config_replica, _serial(master_db) or 0) == _serial(master_db)
    daemons.stop(node3)
    ops = [[{"OP_ID": "OP_TAGS_SET", "kind": "cluster", "name": "", "tags": [f"t{i}"]}]
           for i in range(100)]
    with Client(testbed.paths.master_socket) as client:
        submitted = client.call("SubmitManyJobs", ops)
        ids = [job_id for ok, job_id in submitted if ok]
        assert len(ids) == 100
        assert _finished_statuses(client, ids) == ["success"] * 100
    serial = _serial(master_db)
    # node2 kept up all along; node3 is behind while its daemon is down.
    assert _wait_for(_node_paths(testbed, 2).config_replica, serial or 0) == serial
    assert (_serial(node3.config_replica) or 0) < (serial or 0)
    daemons.start(node3)
    assert _wait_for(node3.config_replica, serial or 0, timeout=60) == serial
    assert _cluster_tags(node3.config_replica) == sorted(f"t{i}" for i in range(100))


def test_redistribute_conf_pushes_the_ancillary_files(testbed: TestbedHandle) -> None:
    master = testbed.paths
    extra = master.node_path("/etc/corral-demo/hosts.allow")
    extra.parent.mkdir(parents=True)
    extra.write_text("sshd: 192.0.2.0/24\n")
    extra.chmod(0o640)
    listing = "# synced by redistribute-conf\n/etc/corral-demo/hosts.allow\n"
    master.user_file_list.write_text(listing)
    # A node receives a file of the list only when its own list names it.
    _node_paths(testbed, 2).user_file_list.write_text(listing)
    users = master.rapi_users.read_text() + "ops {cleartext}s3cret read\n"
    master.rapi_users.write_text(users)
    refused = testbed.run("gnt-cluster", "redistribute-conf", check=False)
    assert refused.returncode == 1 and "distributed to 1 node(s)" in refused.stdout
    assert ("node node3.testbed: procedure upload_files: this node does not accept the file "
            "'/etc/corral-demo/hosts.allow'") in refused.stdout
    assert not _node_paths(testbed, 3).node_path("/etc/corral-demo/hosts.allow").exists()
    _node_paths(testbed, 3).user_file_list.write_text(listing)
    out = testbed.run("gnt-cluster", "redistribute-conf").stdout
    assert "distributed to 2 node(s)" in out
    for index in (2, 3):
        node = _node_paths(testbed, index)
        copy = node.node_path("/etc/corral-demo/hosts.allow")
        assert copy.read_text() == "sshd: 192.0.2.0/24\n"
        assert copy.stat().st_mode & 0o777 == 0o640
        assert node.rapi_users.read_text() == users  # both are master candidates
        assert node.rapi_users.stat().st_mode & 0o777 == 0o400
        assert node.ca_cert.read_bytes() == master.ca_cert.read_bytes()
        assert _serial(node.config_replica) == _serial(master.config_db)
    # A relative path in the list is refused with the line that has it.
    master.user_file_list.write_text("etc/relative\n")
    bad = testbed.run("gnt-cluster", "redistribute-conf", check=False)
    assert bad.returncode == 1 and "line 1" in bad.stderr
