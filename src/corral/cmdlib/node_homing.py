"""Single- and dual-homed clusters: whether nodes have a secondary IP of their own.

A cluster is *single-homed* when its master has no secondary IP distinct from its
primary one (replication and migration traffic share the primary network), and
*dual-homed* otherwise. As in Ganeti, every node must be like the master: a node
is added with a secondary IP exactly when the master has one, and a node's
secondary IP changes only within that rule, except on the master itself with
``force`` (that is how a whole cluster changes from one kind to the other).
"""

from __future__ import annotations

from collections.abc import Callable

from corral.errors import OpPrereqError, ParameterError
from corral.objects import Node

__all__ = ["check_new_node_homing", "check_secondary_change", "is_dual_homed"]


def is_dual_homed(node: Node) -> bool:
    """Whether ``node`` has a secondary IP distinct from its primary one."""
    return bool(node.secondary_ip) and node.secondary_ip != node.primary_ip


def check_new_node_homing(master: Node, name: str, primary: str, secondary: str | None
                          ) -> None:
    """Refuse a new node whose kind (single/dual-homed) differs from the master's."""
    master_dual = is_dual_homed(master)
    new_dual = secondary is not None and secondary != primary
    if master_dual and not new_dual:
        raise OpPrereqError(
            f"the cluster uses a separate secondary network (master {master.name} has "
            f"secondary IP {master.secondary_ip}); give node {name} one with -s")
    if new_dual and not master_dual:
        raise OpPrereqError(
            f"the cluster has no separate secondary network; add node {name} "
            "without a secondary IP")


def check_secondary_change(master: Node, node: Node, secondary: str, *, force: bool,
                           warn: Callable[[str], None]) -> None:
    """Refuse a secondary IP ``node`` cannot use on this kind of cluster.

    On a single-homed cluster a secondary IP other than the node's primary one would
    send its traffic to a network no other node is on; on a dual-homed cluster the
    primary IP as secondary leaves the secondary network. Both are accepted only
    for the master with ``force`` (the cluster then changes kind; ``warn`` says
    so), as in Ganeti.
    """
    single = not is_dual_homed(master)
    if single and secondary != node.primary_ip:
        if force and node.uuid == master.uuid:
            warn("Transitioning from single-homed to multi-homed cluster; all nodes will "
                 "require a secondary IP address")
            return
        raise ParameterError(
            f"cannot give node {node.name} the secondary IP {secondary}: the cluster is "
            f"single-homed (master {master.name} has no secondary IP of its own), so "
            "nodes use their primary IP only. Changing the secondary ip on a single-homed "
            "cluster requires the --force option to be passed, and the target node to be "
            "the master")
    if not single and secondary == node.primary_ip:
        if force and node.uuid == master.uuid:
            warn("Transitioning from multi-homed to single-homed cluster; secondary IP "
                 "addresses will have to be removed")
            return
        raise ParameterError(
            f"cannot set the secondary IP of node {node.name} to its primary IP "
            f"{secondary}: the cluster is multi-homed (master {master.name} has secondary "
            f"IP {master.secondary_ip}); only the master can be changed so, with --force")
