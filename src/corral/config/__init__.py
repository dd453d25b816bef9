"""The configuration store (engine layer).

The whole cluster configuration lives in memory as msgspec Structs and is persisted
in SQLite (WAL) as one row per object plus the cluster serial. Changes go through
transactions that check the invariants (unique names, UUIDs, IPs and MACs; existing
references) and bump the serials; a commit costs O(objects changed).

    store = ConfigStore.open(paths.config_db)
    node = store.get("node", "node1")              # shared: read, never mutate
    with store.transaction() as txn:
        instance = txn.get("instance", "web1")     # a private copy
        instance.admin_state = "up"
        txn.update(instance)                       # committed at the end of the block
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from corral.config.readonly import load_readonly
    from corral.config.replica import Replica
    from corral.config.storage import Row
    from corral.config.store import CommitListener, ConfigStore
    from corral.config.transaction import Transaction

__all__ = ["CommitListener", "ConfigStore", "Replica", "Row", "Transaction", "load_readonly"]

# Names load on first use: reading a few rows (corral.config.storage) needs no model.
__getattr__, __dir__ = lazy_exports(__name__, {
    "load_readonly": "readonly",
    "Replica": "replica",
    "Row": "storage",
    "CommitListener": "store",
    "ConfigStore": "store",
    "Transaction": "transaction",
})
