"""Two testbed clusters side by side, sharing a cluster domain secret, so that
instances can be moved from one to the other (``move-instance``).

``DIR/source`` holds cluster ``cluster.source.testbed`` (nodes
``node<i>.source.testbed`` on ``127.0.3.<i>``), ``DIR/destination`` cluster
``cluster.destination.testbed`` (``127.0.4.<i>``): each has its own CA, RAPI
certificate, credentials and free ports (see :mod:`corral.testbed.core`). The
destination is given the source's domain secret, as an administrator does with
``gnt-cluster renew-crypto --cluster-domain-secret=FILE``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.cli.jobs import StdioReporter, poll_job
from corral.errors import CorralError, DaemonError
from corral.luxi.client import Client
from corral.paths import Paths
from corral.testbed.core import Testbed, down, load, up

__all__ = ["SIDES", "Pair", "down_pair", "load_pair", "share_domain_secret", "up_pair"]

#: The two clusters: subdirectory, domain and the loopback network of their nodes.
SIDES = {"source": ("source.testbed", "127.0.3"), "destination": ("destination.testbed",
                                                                  "127.0.4")}


@dataclass
class Pair:
    """The two testbeds of a pair."""

    source: Testbed
    destination: Testbed


def _submit(testbed: Testbed, op: dict[str, Any]) -> list[Any]:
    master = Paths(Path(testbed.master_node.root))
    with Client(master.master_socket) as client:
        job_id = int(client.call("SubmitJob", [op]))
        return poll_job(client, job_id, StdioReporter(quiet=True))


def share_domain_secret(source: Testbed, destination: Testbed) -> None:
    """Give ``destination`` the cluster domain secret of ``source``."""
    secret = Paths(Path(source.master_node.root)).cluster_domain_secret.read_text()
    target = Paths(Path(destination.master_node.root))
    handed = target.root / "source-domain-secret"
    handed.write_text(secret)
    try:
        _submit(destination, {
            "OP_ID": "OP_CLUSTER_RENEW_CRYPTO", "cluster_domain_secret_file": str(handed),
            "reason": [["gnt:client:testbed", "pair", time.time_ns()]]})
    except CorralError as err:
        raise DaemonError(f"giving {destination.cluster_name} the domain secret of "
                          f"{source.cluster_name} failed: {err}") from err
    finally:
        handed.unlink(missing_ok=True)


def up_pair(directory: Path, nodes: int = 2) -> Pair:
    """Create and start both clusters in ``directory`` with one domain secret."""
    started: dict[str, Testbed] = {}
    try:
        for side, (domain, network) in SIDES.items():
            started[side] = up(directory / side, nodes, domain=domain,
                               addresses=[f"{network}.{i}" for i in range(1, nodes + 1)])
        share_domain_secret(started["source"], started["destination"])
    except BaseException:
        for side in started:
            down(directory / side)
        raise
    return Pair(started["source"], started["destination"])


def load_pair(directory: Path) -> Pair | None:
    """The pair recorded in ``directory``, or ``None``."""
    source, destination = load(directory / "source"), load(directory / "destination")
    if source is None or destination is None:
        return None
    return Pair(source, destination)


def down_pair(directory: Path) -> list[str]:
    """Stop both clusters' processes; what was stopped."""
    return [*down(directory / "source"), *down(directory / "destination")]
