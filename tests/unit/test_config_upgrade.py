"""Opening stores: upgrading older formats in place, refusing unreadable ones."""

from __future__ import annotations

import json
import os
import sqlite3
import uuid as uuidlib
from pathlib import Path
from typing import Any

import pytest

from corral import CONFIG_SCHEMA_VERSION
from corral.config import ConfigStore
from corral.errors import ConfigStoreError
from corral.objects import NIC, Instance, Network
from tests.unit.config_helpers import check_invariants, new_store, snapshot

OldRow = tuple[str, str | None, dict[str, Any] | str]


def _write_old_store(path: Path, rows: list[OldRow], meta: dict[str, Any] | None = None) -> None:
    """A store as an older corral wrote it: no meta table unless ``meta`` is given."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE objects (kind TEXT, uuid TEXT, serial INTEGER, json TEXT)")
        for kind, uuid, data in rows:
            text = data if isinstance(data, str) else json.dumps(data)
            conn.execute("INSERT INTO objects VALUES (?, ?, 1, ?)", (kind, uuid, text))
        if meta is not None:
            conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value)")
            conn.executemany("INSERT INTO meta VALUES (?, ?)", meta.items())
        conn.commit()
    finally:
        conn.close()


def _raw(path: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _ganeti20_rows() -> list[OldRow]:
    """Objects without uuids that refer to each other by name."""
    return [
        ("cluster", None, {"name": "old.example.com", "master_node": "node1"}),
        ("nodegroup", "", {"name": "default"}),
        ("node", None, {"name": "node1", "primary_ip": "192.0.2.1", "group": "default"}),
        ("node", None, {"name": "node2", "primary_ip": "192.0.2.2"}),
        ("disk", None, {"name": "disk0", "nodes": ["node1"], "size": 1024}),
        ("instance", None, {
            "name": "web1", "primary_node": "node1", "disks": ["disk0"], "admin_up": True,
            "nics": [{"mac": "aa:00:00:00:00:01", "ip": "10.0.0.1"}],
        }),
        ("instance", None, {
            "name": "web2", "primary_node": "node2",
            "disks": [{"size": 512, "dev_type": "file", "iv_name": "disk/0"}],
        }),
    ]


def _is_uuid(text: str) -> bool:
    try:
        uuidlib.UUID(text)
    except ValueError:
        return False
    return True


def test_old_store_is_upgraded_and_persisted(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    _write_old_store(path, _ganeti20_rows())
    store = ConfigStore.open(path)
    try:
        check_invariants(store)
        for kind in ("cluster", "nodegroup", "node", "disk", "instance"):
            assert all(_is_uuid(obj.uuid) for obj in store.all(kind))
        group = store.get("nodegroup", "default")
        node1, node2 = store.get("node", "node1"), store.get("node", "node2")
        disk0 = store.get("disk", "disk0")
        web1, web2 = store.get("instance", "web1"), store.get("instance", "web2")
        assert store.cluster.master_node == node1.uuid
        assert node1.group == group.uuid
        assert node2.group == group.uuid  # nodes without a group join the first one
        assert disk0.nodes == [node1.uuid]
        assert web1.primary_node == node1.uuid
        assert web1.disks == [disk0.uuid]
        assert web1.admin_state == "up"
        assert web1.hvparams == {} and web1.tags == []  # missing fields got defaults
        assert _is_uuid(web1.nics[0].uuid)
        # The inline disk became a disk object on the instance's node.
        (inline_uuid,) = web2.disks
        inline = store.get("disk", inline_uuid)
        assert (inline.size, inline.dev_type, inline.nodes) == (512, "file", [node2.uuid])
        assert store.count("disk") == 2
        assert store.serial == 1
        before = snapshot(store)
    finally:
        store.close()
    # Persisted: the same uuids come back, and nothing is upgraded twice.
    meta = dict(_raw(path, "SELECT key, value FROM meta"))
    assert meta == {"schema_version": CONFIG_SCHEMA_VERSION, "serial": 1}
    for uuid, serial, text in _raw(path, "SELECT uuid, serial, json FROM objects"):
        data = json.loads(text)
        assert data["uuid"] == uuid and data["serial_no"] == serial
        assert "ctime" in data and "tags" in data
    with ConfigStore.open(path) as reopened:
        assert snapshot(reopened) == before


def test_a_store_from_before_placement_aggregates_loads_with_none(tmp_path: Path) -> None:
    """Clusters, nodes and instances written before named aggregates, node traits and
    kept placement constraints existed load with none, and get the fields written
    back."""
    path = tmp_path / "config.db"
    _write_old_store(path, _ganeti20_rows())
    with ConfigStore.open(path) as store:
        assert store.cluster.aggregates == {}
        assert [(n.aggregates, n.traits) for n in store.all("node")] == [([], [])] * 2
        assert [(i.member_of, i.required_traits, i.forbidden_traits)
                for i in store.all("instance")] == [([], [], [])] * 2
    for kind, text in _raw(path, "SELECT kind, json FROM objects"):
        data = json.loads(text)
        if kind == "node":
            assert (data["aggregates"], data["traits"]) == ([], [])
        elif kind == "instance":
            assert (data["member_of"], data["required_traits"],
                    data["forbidden_traits"]) == ([], [], [])
        elif kind == "cluster":
            assert data["aggregates"] == {}


def test_global_hv_parameters_are_dropped_from_instances(tmp_path: Path) -> None:
    """Design 2.1: the upgrade removes global hypervisor parameters an instance holds
    (an older store, or one from before the parameter became global), and writes the
    cleaned instance back; other parameters and the cluster's values stay."""
    path = tmp_path / "config.db"
    rows = _ganeti20_rows()
    rows[0][2]["hvparams"] = {"fake": {"migration_mode": "non-live"}}  # type: ignore[index]
    rows[5][2]["hvparams"] = {  # type: ignore[index]
        "migration_mode": "non-live", "migration_port": 9000, "migration_bandwidth": 5,
        "kernel_path": "/boot/vmlinuz-web1"}
    _write_old_store(path, rows)
    with ConfigStore.open(path) as store:
        assert store.get("instance", "web1").hvparams == {"kernel_path": "/boot/vmlinuz-web1"}
        assert store.cluster.hvparams["fake"] == {"migration_mode": "non-live"}
    (text,) = [t for (t,) in _raw(path, "SELECT json FROM objects WHERE kind = 'instance'")
               if json.loads(t)["name"] == "web1"]
    assert json.loads(text)["hvparams"] == {"kernel_path": "/boot/vmlinuz-web1"}


def test_nodes_without_any_group_get_a_default_group(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    _write_old_store(path, [
        ("cluster", "c", {"name": "c.example.com", "master_node": "node1"}),
        ("node", "n1", {"name": "node1", "primary_ip": "192.0.2.1"}),
    ])
    with ConfigStore.open(path) as store:
        (group,) = store.all("nodegroup")
        assert group.name == "default"
        assert store.get("node", "n1").group == group.uuid
        assert store.cluster.master_node == "n1"


def test_uuid_column_is_used_when_json_lacks_one(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    store = new_store(path)
    node_uuid = store.get("node", "node1").uuid
    store.close()
    conn = sqlite3.connect(path)
    data = json.loads(conn.execute("SELECT json FROM objects WHERE uuid = ?",
                                   (node_uuid,)).fetchone()[0])
    del data["uuid"], data["tags"], data["ndparams"]
    conn.execute("UPDATE objects SET json = ? WHERE uuid = ?", (json.dumps(data), node_uuid))
    conn.commit()
    conn.close()
    with ConfigStore.open(path) as store:
        node = store.get("node", "node1")
        assert node.uuid == node_uuid and node.tags == [] and node.ndparams == {}
        assert store.serial == 2  # the rewrite is a change of its own
        before = snapshot(store)
    (text,) = _raw(path, f"SELECT json FROM objects WHERE uuid = '{node_uuid}'")[0]
    assert json.loads(text)["uuid"] == node_uuid
    with ConfigStore.open(path) as store:
        assert snapshot(store) == before  # nothing left to upgrade


def test_row_keyed_by_empty_uuid_is_rekeyed(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    new_store(path).close()
    conn = sqlite3.connect(path)
    group = json.dumps({"name": "rack2"})
    conn.execute("INSERT INTO objects VALUES ('nodegroup', '', 1, ?)", (group,))
    conn.commit()
    conn.close()
    with ConfigStore.open(path) as store:
        rack2 = store.get("nodegroup", "rack2")
        assert _is_uuid(rack2.uuid)
        before = snapshot(store)
    assert _raw(path, "SELECT count(*) FROM objects WHERE uuid = ''") == [(0,)]
    with ConfigStore.open(path) as store:
        assert snapshot(store) == before


def test_current_store_opens_without_writing(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    new_store(path).close()
    content = path.read_bytes()
    with ConfigStore.open(path) as store:
        assert store.serial == 1
    assert path.read_bytes() == content


def test_older_schema_version_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    _write_old_store(path, _ganeti20_rows(), meta={"serial": 7})
    with ConfigStore.open(path) as store:
        assert store.serial == 8
    assert dict(_raw(path, "SELECT key, value FROM meta"))["schema_version"] == (
        CONFIG_SCHEMA_VERSION
    )


# -- refused stores ------------------------------------------------------------------

def _open_error(path: Path) -> str:
    with pytest.raises(ConfigStoreError) as info:
        ConfigStore.open(path)
    message = str(info.value)
    assert str(path) in message
    return message


def test_newer_schema_is_refused_naming_file_and_versions(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    new_store(path).close()
    newer = CONFIG_SCHEMA_VERSION + 1
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (newer,))
    conn.commit()
    conn.close()
    content = path.read_bytes()
    message = _open_error(path)
    assert f"schema version {newer}" in message
    assert f"version {CONFIG_SCHEMA_VERSION}" in message
    assert path.read_bytes() == content


def test_garbage_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    path.write_bytes(b"this is not a database, it is a shopping list\n" * 100)
    assert "not a SQLite database" in _open_error(path)


def test_empty_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    path.write_bytes(b"")
    assert "empty" in _open_error(path)


def test_truncated_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    store = new_store(path)
    with store.transaction() as txn:
        node = store.get("node", "node1").uuid
        for index in range(300):
            txn.add(Instance(name=f"vm{index}", primary_node=node,
                             nics=[NIC(mac=f"aa:00:00:00:{index >> 8:02x}:{index & 255:02x}")]))
    store.close()
    size = path.stat().st_size
    assert size > 16 * 4096
    with open(path, "r+b") as handle:
        handle.truncate(size // 2)
    _open_error(path)


def test_missing_file_is_refused(tmp_path: Path) -> None:
    assert "No such file" in _open_error(tmp_path / "nothing.db")


def test_directory_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    path.mkdir()
    assert "directory" in _open_error(path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read files without permission")
def test_unreadable_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    new_store(path).close()
    path.chmod(0)
    try:
        assert "Permission denied" in _open_error(path)
    finally:
        path.chmod(0o600)


@pytest.mark.parametrize(
    ("row", "fragment"),
    [
        (("node", "n9", "{not json"), "node row n9: the JSON does not decode"),
        (("node", "n9", "[1, 2]"), "node row n9: expected a JSON object"),
        (("vm", "v1", "{}"), "unknown kind 'vm'"),
        (("node", "n9", {"name": "node9", "primary_ip": 5, "group": "default"}),
         "node 'node9' (n9): Expected `str`, got `int` - at `$.primary_ip`"),
        (("instance", "i9", {"primary_node": "node1"}), "Object missing required field `name`"),
        (("instance", "i9", {"name": "web9", "primary_node": "nowhere"}),
         "inconsistent: instance 'web9': its primary node 'nowhere' does not exist"),
        (("instance", "i9", {"name": "node1", "primary_node": "node1",
                             "nics": [{"mac": "aa:00:00:00:00:01"}, {"mac": "aa:00:00:00:00:01"}]}),
         "inconsistent: instance 'node1': NIC 1 MAC aa:00:00:00:00:01 is also its NIC 0 MAC"),
    ],
)
def test_bad_rows_are_refused(tmp_path: Path, row: OldRow, fragment: str) -> None:
    path = tmp_path / "config.db"
    rows = [
        ("cluster", "c", {"name": "c.example.com", "master_node": "node1"}),
        ("nodegroup", "g", {"name": "default"}),
        ("node", "n1", {"name": "node1", "primary_ip": "192.0.2.1", "group": "g"}),
        row,
    ]
    _write_old_store(path, rows, meta={"schema_version": CONFIG_SCHEMA_VERSION, "serial": 3})
    content = path.read_bytes()
    message = _open_error(path)
    assert fragment in message, message
    assert path.read_bytes() == content


def test_store_without_cluster_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    _write_old_store(path, [("nodegroup", "g", {"name": "default"})])
    assert "no cluster object" in _open_error(path)


def test_sqlite_file_of_another_program_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE recipes (name TEXT)")
    conn.commit()
    conn.close()
    assert "not a corral configuration" in _open_error(path)


def test_bad_meta_value_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    _write_old_store(path, _ganeti20_rows(), meta={"schema_version": "one", "serial": 1})
    assert "'schema_version' is 'one'" in _open_error(path)


def test_a_store_from_before_networks_opens_and_takes_one(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    _write_old_store(path, [
        ("cluster", "c", {"name": "c.example.com", "master_node": "n1"}),
        ("nodegroup", "g", {"name": "default", "alloc_policy": "preferred"}),
        ("node", "n1", {"name": "node1", "primary_ip": "192.0.2.1", "group": "g"}),
        ("instance", "i", {"name": "web1", "primary_node": "n1",
                           "nics": [{"mac": "aa:00:00:00:00:01", "ip": "10.0.0.1"}]}),
    ])
    with ConfigStore.open(path) as store:
        assert store.get("nodegroup", "g").networks == {}
        assert store.all("network") == []
        assert store.get("instance", "i").nics[0].network is None
        with store.transaction() as txn:
            txn.add(Network(name="lan", network="10.0.0.0/24"))
        check_invariants(store)
    with ConfigStore.open(path) as store:
        assert store.get("network", "lan").network == "10.0.0.0/24"
