"""Loading a configuration without writing to it: for readers such as confd.

:meth:`corral.config.ConfigStore.open` may write (it upgrades older stores in place
and switches the file to WAL mode), which a reader of another daemon's file must
never do, and which an unprivileged reader cannot. :func:`load_readonly` opens the
file with SQLite's ``mode=ro``, reads the serial and every row inside one read
transaction (so both belong to the same commit even while the writer commits),
upgrades older formats in memory only, checks the invariants and returns a
:class:`~corral.config.ConfigStore` whose file is already closed: every read works,
a transaction raises.
"""

from __future__ import annotations

from pathlib import Path

from corral.config.storage import Database
from corral.config.store import ConfigStore, _gc_paused, build_model, check_schema_version

__all__ = ["load_readonly"]


def load_readonly(path: Path) -> ConfigStore:
    """A detached, read-only snapshot of the store at ``path``.

    Raises :class:`ConfigStoreError` naming the file if it is missing, unreadable,
    corrupt, inconsistent or written by a newer corral. The file is never modified.
    """
    path = Path(path)
    with _gc_paused():
        db = Database.open(path, read_only=True)
        try:
            with db.read_transaction():
                check_schema_version(path, db.schema_version())
                serial = db.serial()
                rows = db.rows()
            model, _upgraded = build_model(path, rows)
        except BaseException:
            db.close()
            raise
    store = ConfigStore(path, db, model, serial)
    store.close()
    return store
