"""Commit transactions to a configuration store until killed (crash test helper).

Run by ``test_config_crash.py`` as ``python crash_writer.py STORE``. Every commit
adds one instance ``crash<N>`` and records ``N`` in the cluster's OS parameters, so
the two must always agree in whatever the file holds. Prints ``ready`` once the
store is open.
"""

from __future__ import annotations

import sys
from pathlib import Path

from corral.config import ConfigStore
from corral.objects import NIC, Instance

#: Where the cluster records how many instances the writer has committed.
MARKER = "crash-test"


def mac_and_ip(count: int) -> tuple[str, str]:
    """Unique NIC addresses for instance number ``count``."""
    return (
        f"aa:00:00:{count >> 16 & 0xFF:02x}:{count >> 8 & 0xFF:02x}:{count & 0xFF:02x}",
        f"10.{count >> 16 & 0xFF}.{count >> 8 & 0xFF}.{count & 0xFF}",
    )


def main(path: str) -> None:
    """Open the store and commit forever."""
    store = ConfigStore.open(Path(path))
    node = store.cluster.master_node
    count = store.count("instance")
    print("ready", flush=True)
    while True:
        count += 1
        mac, ip = mac_and_ip(count)
        with store.transaction() as txn:
            txn.add(Instance(name=f"crash{count}", primary_node=node,
                             nics=[NIC(mac=mac, ip=ip)]))
            cluster = txn.cluster()
            cluster.osparams = {**cluster.osparams, MARKER: {"instances": count}}
            txn.update(cluster)


if __name__ == "__main__":
    main(sys.argv[1])
