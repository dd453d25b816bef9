"""Loading a configuration read-only (confd's view of the store or replica): the file
is never changed, reads are consistent while a writer commits, errors name the file."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from corral.config import ConfigStore
from corral.config.readonly import load_readonly
from corral.errors import ConfigStoreError, InternalError
from tests.unit.config_helpers import new_store, snapshot


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_reads_what_the_store_holds_without_writing(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    store = new_store(path)
    store.close()
    before = _digest(path)
    loaded = load_readonly(path)
    assert _digest(path) == before
    with ConfigStore.open(path) as reopened:
        assert snapshot(loaded) == snapshot(reopened)


def test_works_on_a_file_it_may_only_read(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    new_store(path).close()
    os.chmod(path, 0o400)
    try:
        assert load_readonly(path).master_name == "node1"
    finally:
        os.chmod(path, 0o600)


def test_sees_commits_of_a_live_writer(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    store = new_store(path)
    try:
        assert load_readonly(path).serial == store.serial
        with store.transaction() as txn:
            cluster = txn.get("cluster", store.cluster.uuid)
            cluster.tags = ["changed"]
            txn.update(cluster)
        loaded = load_readonly(path)
        assert loaded.serial == store.serial
        assert loaded.cluster.tags == ["changed"]
    finally:
        store.close()


def test_the_snapshot_refuses_changes(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    new_store(path).close()
    loaded = load_readonly(path)
    with pytest.raises(InternalError):
        loaded.transaction()


def test_an_old_store_is_upgraded_in_memory_only(tmp_path: Path) -> None:
    path = tmp_path / "config.db"
    new_store(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = 0 WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    before = _digest(path)
    loaded = load_readonly(path)
    assert loaded.master_name == "node1"
    assert _digest(path) == before


def test_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigStoreError, match=r"missing\.db"):
        load_readonly(tmp_path / "missing.db")
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not sqlite" * 10)
    with pytest.raises(ConfigStoreError, match=r"garbage\.db"):
        load_readonly(garbage)
    newer = tmp_path / "newer.db"
    new_store(tmp_path / "base.db").close()
    shutil.copy(tmp_path / "base.db", newer)
    conn = sqlite3.connect(newer)
    conn.execute("UPDATE meta SET value = 99 WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(ConfigStoreError, match="newer"):
        load_readonly(newer)
