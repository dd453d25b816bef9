"""A master candidate's replica of the configuration.

The master pushes every commit to the node daemons of the master candidates; each
keeps the rows in a SQLite file of the configuration store's own schema
(:attr:`corral.paths.Paths.config_replica`), so that confd answers from it and a
candidate can take over as master with :meth:`corral.config.ConfigStore.open`.

Updates come as *deltas* (the rows written and UUIDs deleted between two serials,
coalesced when the master sends several commits at once) or as a *snapshot* (every
row). A delta applies only on top of the serial it was computed from; otherwise the
replica says so and the master sends a snapshot. Each update is one SQLite
transaction: a reader sees the configuration of one serial or of the next, never a
mix.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corral import CONFIG_SCHEMA_VERSION
from corral.config.storage import Database, Row, sidecar_files
from corral.errors import ConfigStoreError

if TYPE_CHECKING:
    from corral.config.store import ConfigStore

__all__ = ["Replica", "row_args", "snapshot_args"]

log = logging.getLogger(__name__)


class Replica:
    """The configuration replica file of one node, opened for updates."""

    def __init__(self, path: Path, db: Database) -> None:
        self.path = path
        self._db = db

    @classmethod
    def open(cls, path: Path) -> Replica:
        """Open the replica at ``path``, creating an empty one (serial 0) if there is
        none; a file that is not a readable configuration is replaced by an empty one
        (the master then sends a snapshot)."""
        path = Path(path)
        if path.exists():
            try:
                db = Database.open(path)
                db.prepare_writes()
                if db.schema_version() == CONFIG_SCHEMA_VERSION:
                    return cls(path, db)
                db.close()
                log.warning("replica %s has another schema version: starting afresh", path)
            except ConfigStoreError as err:
                log.warning("replica %s is unusable (%s): starting afresh", path, err.message)
            for stale in (path, *sidecar_files(path)):
                stale.unlink(missing_ok=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        return cls(path, Database.create(path, CONFIG_SCHEMA_VERSION))

    @property
    def serial(self) -> int:
        """The serial of the configuration the replica holds (0: none yet)."""
        return self._db.serial()

    def apply(self, base: int, serial: int, upserts: Sequence[Row],
              deletes: Sequence[str]) -> bool:
        """Apply the delta from serial ``base`` to ``serial``; False (nothing written)
        when the replica is not at ``base``. A delta the replica already has (its
        serial is ``serial``) is accepted as applied."""
        current = self.serial
        if current == serial and base <= serial:
            return True
        if current != base or serial <= base:
            return False
        self._db.write(base, serial, upserts, deletes)
        return True

    def reset(self, serial: int, rows: Sequence[Row]) -> None:
        """Replace the whole content with ``rows`` at ``serial`` (a snapshot)."""
        self._db.rebuild(CONFIG_SCHEMA_VERSION, serial, rows)

    def close(self) -> None:
        """Close the file."""
        self._db.close()


def row_args(rows: Sequence[Row]) -> list[list[Any]]:
    """Rows as the ``upserts`` argument of ``config_replicate``."""
    return [[r.kind, r.uuid, r.serial, r.json.decode()] for r in rows]


def snapshot_args(store: ConfigStore) -> dict[str, Any]:
    """``config_replicate`` arguments that replace a replica with ``store``'s content."""
    return {"snapshot": True, "serial": store.serial, "upserts": row_args(store.rows())}
