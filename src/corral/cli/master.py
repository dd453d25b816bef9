"""Which node is the master, as this node can tell without the master daemon.

Only the master node runs the master daemon, so a gnt-* command run on another node
cannot connect to it. Rather than a socket error, such a command says which node
the master is and to run the command there, as Ganeti's tools do; and ``gnt-cluster
getmaster`` answers on every node. This node finds the master, in this order:

1. confd, asked on the master candidates this node knows (those of its
   configuration or replica, and the master named in its membership): the answer
   with the highest configuration serial wins, so a replica left behind on a node
   that stopped being a candidate cannot mislead;
2. its own configuration or replica, when confd does not answer;
3. the master its membership file names (what it was told when it joined).

None of this runs on the master's normal path: :func:`corral.cli.common.get_client`
calls :func:`explain_unreachable` only when connecting to the master daemon failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corral.errors import CorralError, NotMasterError, OpPrereqError
from corral.paths import Paths

__all__ = [
    "NOT_A_CLUSTER",
    "MasterLocation",
    "explain_unreachable",
    "locate_master",
    "not_master_message",
]

#: Ganeti's words for a machine in no cluster (``runtime.GetClient``).
NOT_A_CLUSTER = "Cluster not initialized or this machine is not part of a cluster"

#: How long to wait for confd's answers (seconds); only on the non-master path.
CONFD_TIMEOUT = 1.0


def not_master_message(master: str) -> str:
    """Ganeti's words for a command that must run on the master (``runtime.GetClient``)."""
    return f"This is not the master node, please connect to node '{master}' and rerun the command"


@dataclass(frozen=True)
class MasterLocation:
    """What this node knows about the master."""

    #: The master node's name; None when this node is in no cluster.
    master: str | None
    #: This node's own name (from its membership); None when unknown.
    myself: str | None
    #: Where ``master`` came from: "confd", "configuration", "membership" or "".
    source: str

    @property
    def elsewhere(self) -> bool:
        """Whether the master is known to be another node than this one."""
        return self.master is not None and self.myself is not None and self.master != self.myself


def _membership(paths: Paths) -> dict[str, Any]:
    from corral import serializer  # msgspec: only when JSON is read or written

    try:
        data = serializer.loads(paths.node_membership.read_bytes())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _local_config(paths: Paths) -> tuple[str | None, list[str]]:
    """The master and the candidates' (and master's) addresses in this node's
    configuration or replica; (None, []) when there is none or it cannot be read."""
    from corral.cli.localconfig import read_local_config

    try:
        found = read_local_config(paths)
    except CorralError:
        return None, []
    if found is None or found.master is None:
        return None, []
    return found.master, found.candidates


def _ask_confd(paths: Paths, servers: list[str]) -> str | None:
    """The master's name by confd's newest answer, or None."""
    from corral.confd.client import query_sync
    from corral.confd.protocol import QueryType, Status
    from corral.confd.settings import read_settings

    if not servers:
        return None
    try:
        key = paths.confd_hmac_key.read_bytes()
        port = read_settings(paths).port
        result = query_sync(key, servers, QueryType.CLUSTER_MASTER, port=port,
                            timeout=CONFD_TIMEOUT)
    except (OSError, CorralError):
        return None
    best = result.best
    if best is None or best.status != Status.OK or not isinstance(best.answer, str):
        return None
    return best.answer


def locate_master(paths: Paths) -> MasterLocation:
    """Find the master from this node (see the module's docstring for the order)."""
    membership = _membership(paths)
    myself = membership.get("node_name")
    myself = myself if isinstance(myself, str) else None
    local_master, addresses = _local_config(paths)
    servers = list(dict.fromkeys([*addresses, *[
        ip for ip in [membership.get("master_ip")] if isinstance(ip, str)]]))
    answer = _ask_confd(paths, servers)
    if answer is not None:
        return MasterLocation(answer, myself, "confd")
    if local_master is not None:
        return MasterLocation(local_master, myself, "configuration")
    named = membership.get("master_name")
    if isinstance(named, str):
        return MasterLocation(named, myself, "membership")
    return MasterLocation(None, myself, "")


def explain_unreachable(paths: Paths, err: CorralError) -> CorralError:
    """The error to show when this node's master daemon cannot be reached: that this
    machine is in no cluster, that the master is another node (named), or ``err``
    itself when this node is the master and its daemon is down."""
    where = locate_master(paths)
    if where.master is None:
        return OpPrereqError(NOT_A_CLUSTER, ecode="wrong_input")
    if where.elsewhere:
        return NotMasterError(not_master_message(where.master))
    return err
