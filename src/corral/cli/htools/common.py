"""What several htools print: node and instance lists, saved states, groups."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from corral.allocator.model import Cluster, Node
from corral.allocator.textformat import serialize
from corral.allocator.textout import print_instances, print_nodes
from corral.cli.htools.options import fail

__all__ = ["maybe_print_instances", "maybe_print_nodes", "maybe_save", "select_group"]


def maybe_save(path: str | None, ext: str, what: str, cluster: Cluster) -> None:
    """``-S FILE``: write the cluster's state to ``FILE.ext``."""
    if path is None:
        return
    target = f"{path}.{ext}"
    try:
        with open(target, "w", encoding="utf-8") as handle:
            handle.write(serialize(cluster))
    except OSError as err:
        fail(f"cannot write {target}: {err.strerror or err}")
    sys.stderr.write(f"The cluster state {what} has been written to file '{target}'\n")


def maybe_print_nodes(fields: Sequence[str] | None, what: str,
                      nodes: Sequence[Node]) -> None:
    """``-p``: the node list on standard error."""
    if fields is None:
        return
    sys.stderr.write(f"\n{what} status:\n{print_nodes(nodes, fields)}\n")


def maybe_print_instances(show: bool, what: str, cluster: Cluster,
                          node_idxs: Sequence[int] | None = None) -> None:
    """``--print-instances``: the instance list on standard error."""
    if not show:
        return
    chosen = set(node_idxs) if node_idxs is not None else None
    insts = [i for i in cluster.instances if chosen is None or i.pnode in chosen]
    sys.stderr.write(f"\n{what} instance map:\n{print_instances(cluster, insts)}")


def select_group(cluster: Cluster, name: str | None) -> int | None:
    """The group ``-G`` names (or the only one with nodes); exits as hbal does when
    there are several and none is named, or the name is unknown. None: the named group
    has no nodes."""
    in_use = cluster.groups_in_use()
    if name is None:
        if len(in_use) > 1:
            sys.stderr.write("Found multiple node groups:\n"
                             + "".join(f"  {cluster.groups[g].name}\n" for g in in_use))
            fail("Aborting.")
        if not in_use:
            fail("No groups found by splitCluster?!")
        return in_use[0]
    group = cluster.group_by_name(name)
    if group is None:
        sys.stderr.write(f"Node group {name} not found. Node group list is:\n"
                         + "".join(f"  {g.name}\n" for g in cluster.groups))
        fail("Aborting.")
    return group.idx if group.idx in in_use else None
