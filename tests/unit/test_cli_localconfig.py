"""What a command reads from this node's own configuration: the master and the
candidates to ask, from the rows, or from the full model when a row is not as the
reader expects (a store written by an older corral)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from corral.cli.localconfig import read_local_config
from corral.errors import ConfigStoreError
from corral.paths import Paths
from tests.startup_probe import probe
from tests.unit.confd_helpers import build_config

# node1 is the master, node2 and node4 candidates, node3 and node5 not
CANDIDATES = ["192.0.2.1", "192.0.2.2", "192.0.2.4"]


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    paths = Paths(tmp_path / "root")
    paths.ensure_dirs()
    build_config(tmp_path / "seed.db").close()
    return paths


def test_the_master_store_names_the_master_and_candidates(paths: Paths, tmp_path: Path) -> None:
    shutil.copy(tmp_path / "seed.db", paths.config_db)
    found = read_local_config(paths)
    assert found is not None and found.path == paths.config_db
    assert found.master == "node1"
    assert sorted(found.candidates) == CANDIDATES


def test_a_candidate_reads_its_replica_and_a_plain_node_has_nothing(
        paths: Paths, tmp_path: Path) -> None:
    assert read_local_config(paths) is None
    shutil.copy(tmp_path / "seed.db", paths.config_replica)
    found = read_local_config(paths)
    assert found is not None and found.path == paths.config_replica
    assert (found.master, sorted(found.candidates)) == ("node1", CANDIDATES)


def test_a_row_without_a_field_is_read_through_the_model(paths: Paths, tmp_path: Path) -> None:
    # node3 was stored without master_candidate (as an older corral might): the model's
    # default (a candidate) applies, which the plain rows cannot know
    shutil.copy(tmp_path / "seed.db", paths.config_db)
    conn = sqlite3.connect(paths.config_db)
    with conn:
        for uuid, text in conn.execute("SELECT uuid, json FROM objects WHERE kind = 'node'"):
            data = json.loads(text)
            if data["name"] == "node3":
                del data["master_candidate"]
                conn.execute("UPDATE objects SET json = ? WHERE uuid = ?",
                             (json.dumps(data), uuid))
    conn.close()
    found = read_local_config(paths)
    assert found is not None and found.master == "node1"
    assert sorted(found.candidates) == sorted([*CANDIDATES, "192.0.2.3"])


def test_a_corrupt_file_is_an_error_naming_it(paths: Paths) -> None:
    paths.config_db.write_bytes(b"not a database" * 100)
    with pytest.raises(ConfigStoreError, match=r"config\.db"):
        read_local_config(paths)


def test_confd_query_finds_the_candidates_without_the_configuration_model(
        paths: Paths, tmp_path: Path) -> None:
    # the whole tool, as a process: it reads the rows (config.storage), never loads the
    # store and its object model (this node has no confd key, so it stops right after)
    shutil.copy(tmp_path / "seed.db", paths.config_db)
    found = probe("corral.cli.confd_query:main", [["ping", "--timeout", "0.1"]],
                  env={**os.environ, "CORRAL_ROOT": str(paths.root)})
    assert found.exits == [1]
    assert "corral.config.storage" in found.modules
    assert "corral.config.store" not in found.modules


def test_a_store_of_a_newer_corral_is_refused_as_the_master_refuses_it(
        paths: Paths, tmp_path: Path) -> None:
    shutil.copy(tmp_path / "seed.db", paths.config_db)
    conn = sqlite3.connect(paths.config_db)
    with conn:
        conn.execute("UPDATE meta SET value = 99 WHERE key = 'schema_version'")
    conn.close()
    with pytest.raises(ConfigStoreError, match="upgrade corral"):
        read_local_config(paths)
