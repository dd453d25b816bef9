"""What this node's own configuration says about the master and its candidates.

``corral-confd-query`` asks the master candidates, and a command run on a node that
is not the master says which node is; both learn the candidates from the
configuration this node holds (the store on the master, the replica on a
candidate). Loading that configuration as the master does (every object decoded,
upgraded and checked) costs a command 40 ms; these few fields are read straight from
the rows instead, and only a store this reading does not understand (one written by
an older corral, which the master has not yet upgraded) is loaded in full.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.paths import Paths

__all__ = ["LocalConfig", "read_local_config"]


@dataclass(frozen=True)
class LocalConfig:
    """The master and the candidates in one configuration file."""

    #: The file read.
    path: Path
    #: The master node's name; None when the file holds no cluster.
    master: str | None
    #: The primary IPs of the master candidates and of the master.
    candidates: list[str]


def read_local_config(paths: Paths) -> LocalConfig | None:
    """This node's configuration's master and candidates; None when it has none.

    :raises ConfigStoreError: the file is there but cannot be read.
    """
    path = paths.local_config()
    if not path.exists():
        return None
    return _read_rows(path) or _load_model(path)


def _read_rows(path: Path) -> LocalConfig | None:
    """The fields from the stored rows; None when they are not as expected (also a
    store of another schema version: the model's loading upgrades or refuses it)."""
    from corral import CONFIG_SCHEMA_VERSION
    from corral.config.storage import Database

    db = Database.open(path, read_only=True)
    try:
        with db.read_transaction():
            if db.schema_version() != CONFIG_SCHEMA_VERSION:
                return None
            rows = db.rows()
    finally:
        db.close()
    try:
        objects = [(row.kind, json.loads(row.json)) for row in rows
                   if row.kind in ("cluster", "node")]
        clusters = [data for kind, data in objects if kind == "cluster"]
        nodes = [data for kind, data in objects if kind == "node"]
        master_ref = clusters[0]["master_node"] if clusters else None
        return _found(path, master_ref, [(n["uuid"], n["name"], n["primary_ip"],
                                          n["master_candidate"]) for n in nodes])
    except (ValueError, TypeError, KeyError, IndexError):
        return None


def _load_model(path: Path) -> LocalConfig | None:
    """The fields from the configuration loaded as the master loads it."""
    from corral.config.readonly import load_readonly

    store = load_readonly(path)
    master = store.cluster.master_node if store.all("cluster") else None
    return _found(path, master, [(n.uuid, n.name, n.primary_ip, n.master_candidate)
                                 for n in store.all("node")])


def _found(path: Path, master_ref: Any, nodes: list[tuple[Any, Any, Any, Any]]
           ) -> LocalConfig | None:
    """A :class:`LocalConfig`, or None when a value has the wrong type."""
    if master_ref is not None and not isinstance(master_ref, str):
        return None
    if not all(isinstance(v, str) for node in nodes for v in node[:3]) or not all(
            isinstance(node[3], bool) for node in nodes):
        return None
    # the cluster names its master by UUID (by name in stores from before UUIDs)
    master = next((name for uuid, name, _, _ in nodes if master_ref in (uuid, name)), None)
    return LocalConfig(path, master, [ip for uuid, name, ip, candidate in nodes
                                      if candidate or master_ref in (uuid, name)])
