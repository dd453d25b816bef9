"""Loading a configuration without writing to it: for readers such as confd.

:meth:`corral.config.ConfigStore.open` may write (it upgrades older stores in place
and switches the file to WAL mode), which a reader of another daemon's file must
never do, and which an unprivileged reader cannot. :func:`load_readonly` opens the
file with SQLite's ``mode=ro``, reads the serial and every row inside one read
transaction (so both belong to the same commit even while the writer commits),
upgrades older formats in memory only (a reader that may not create SQLite's WAL
files reads a store that nobody has open as an immutable file, and again should a
writer open it meanwhile), checks the invariants and returns a
:class:`~corral.config.ConfigStore` whose file is already closed: every read works,
a transaction raises.
"""

from __future__ import annotations

from pathlib import Path

from corral.config.storage import Database
from corral.config.store import ConfigStore, build_model, check_schema_version
from corral.errors import ConfigStoreError
from corral.utils.gcpause import collector_paused

__all__ = ["load_readonly"]

#: Reads of a file no writer had open, should a writer open it meanwhile.
_ATTEMPTS = 3


def load_readonly(path: Path) -> ConfigStore:
    """A detached, read-only snapshot of the store at ``path``.

    Raises :class:`ConfigStoreError` naming the file if it is missing, unreadable,
    corrupt, inconsistent or written by a newer corral. The file is never modified.
    """
    path = Path(path)
    for attempt in range(_ATTEMPTS):
        with collector_paused():
            db = Database.open(path, read_only=True)
            try:
                with db.read_transaction():
                    check_schema_version(path, db.schema_version())
                    serial = db.serial()
                    rows = db.rows()
                if not db.unchanged_since_open():
                    db.close()  # a writer opened the file while it was read as it was
                    if attempt + 1 < _ATTEMPTS:
                        continue
                    raise ConfigStoreError(f"configuration store {path}: it kept changing "
                                           f"while read ({_ATTEMPTS} attempts)")
                model, _upgraded = build_model(path, rows)
            except BaseException:
                db.close()
                raise
        break
    store = ConfigStore(path, db, model, serial)
    store.close()
    return store
