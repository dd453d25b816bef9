"""Finishing a cluster read from any source (text file, iallocator request, luxi,
RAPI): what htools does after reading.

:func:`finish` applies the cluster's tags (exclusion tags ``htools:iextags:``,
locations ``htools:nlocation:``, desired locations ``htools:desiredlocation:``,
migration restrictions ``htools:migration:`` and ``htools:allowmigration:``), marks
excluded and split instances as not movable, strips the names' common domain for
display, places every instance on its nodes, gives nodes their group's policy,
computes N+1 reservations and each node's unaccounted memory. It returns warnings
for nodes whose reported free memory or disk does not match their instances.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from corral.allocator.model import NO_NODE, Cluster, Instance, LoadError
from corral.allocator.nodeops import build_peers, set_pri, set_sec

__all__ = [
    "ALLOW_MIGRATION_PREFIX",
    "DESIRED_LOCATION_PREFIX",
    "EXCLUSION_PREFIX",
    "LOCATION_PREFIX",
    "MIGRATION_PREFIX",
    "STANDBY_PREFIX",
    "common_suffix",
    "finish",
    "lookup_name",
    "set_node_status",
    "update_tags",
]

EXCLUSION_PREFIX = "htools:iextags:"
STANDBY_PREFIX = "htools:standby:"
MIGRATION_PREFIX = "htools:migration:"
ALLOW_MIGRATION_PREFIX = "htools:allowmigration:"
LOCATION_PREFIX = "htools:nlocation:"
DESIRED_LOCATION_PREFIX = "htools:desiredlocation:"


def lookup_name(names: Sequence[str], key: str) -> str | None:
    """The name ``key`` stands for: itself, or the one name starting with
    ``key + "."`` (a short host name); None if none or several match."""
    found: str | None = None
    partial = 0
    for name in names:
        if name == key:
            return name
        if name.startswith(key + "."):
            partial += 1
            found = name
    return found if partial == 1 else None


def _longest_domain(names: Sequence[str]) -> str:
    if not names:
        return ""
    first, rest = names[0], names[1:]
    best = ""
    for pos in range(len(first)):
        suffix = first[pos:]
        if suffix.startswith(".") and all(name.endswith(suffix) for name in rest):
            best = suffix
            break
    return best


def common_suffix(cluster: Cluster) -> str:
    """The domain (starting with a dot) that every node and instance name ends in."""
    return _longest_domain([n.name for n in cluster.nodes]
                           + [i.name for i in cluster.instances])


def _stripped(prefix: str, tags: Iterable[str]) -> list[str]:
    return [tag[len(prefix):] for tag in tags if tag.startswith(prefix)
            and len(tag) > len(prefix)]


def _tag_set(prefix: str, cluster_tags: Sequence[str], node_tags: Sequence[str]) -> set[str]:
    kinds = [tag[len(prefix):] for tag in cluster_tags if tag.startswith(prefix)]
    return {tag for kind in kinds for tag in node_tags if tag.startswith(kind + ":")}


def _recv_migration(cluster_tags: Sequence[str], node_tags: Sequence[str]) -> set[str]:
    allowed: list[tuple[str, str]] = []
    for tag in cluster_tags:
        if not tag.startswith(ALLOW_MIGRATION_PREFIX):
            continue
        rest = tag[len(ALLOW_MIGRATION_PREFIX):]
        pos = rest.find("::")
        if pos < 0 or "::" in rest[pos + 2:]:
            continue
        allowed.append((rest[:pos], rest[pos + 2:]))
    own = _tag_set(MIGRATION_PREFIX, cluster_tags, node_tags)
    result = set()
    for tag in own:
        result.add(tag)
        result.update(src for src, dst in allowed if dst == tag)
    return result


def update_tags(cluster: Cluster, inst: Instance,
                exclusion_tags: Sequence[str] = ()) -> None:
    """Set an instance's exclusion and desired-location tags from the cluster's tags
    (and ``exclusion_tags`` prefixes given by the user)."""
    ctags = cluster.tags
    ex_prefixes = [*exclusion_tags, *_stripped(EXCLUSION_PREFIX, ctags)]
    dsrd_prefixes = _stripped(DESIRED_LOCATION_PREFIX, ctags)
    inst.excl_tags = tuple(tag for tag in inst.tags
                           if any(tag.startswith(p) for p in ex_prefixes))
    inst.dsrd_loc_tags = frozenset(tag for tag in inst.tags
                                   if any(tag.startswith(p) for p in dsrd_prefixes))


def finish(cluster: Cluster, *, exclusion_tags: Sequence[str] = (),
           selected: Sequence[str] = (), excluded: Sequence[str] = (),
           util: dict[str, tuple[float, float, float, float]] | None = None,
           static_kvm_memory: int = 0) -> list[str]:
    """Prepare a freshly read cluster for the algorithms (see the module text).

    ``exclusion_tags`` are tag prefixes given by the user (``--exclusion-tags``, with
    the colon added); ``selected``/``excluded`` instance names restrict which
    instances may move; ``util`` gives instances' dynamic utilisation;
    ``static_kvm_memory`` replaces the reserved memory of kvm nodes (hail's and
    hbal's ``--static-kvm-node-memory``; 0 keeps what the nodes report). Returns
    warnings about nodes whose data do not add up."""
    ctags = cluster.tags
    names = [inst.name for inst in cluster.instances]
    unknown = [key for key in [*selected, *excluded] if lookup_name(names, key) is None]
    if unknown:
        raise LoadError("Unknown instance(s): " + ", ".join(unknown))
    sel = {lookup_name(names, key) for key in selected}
    exc = {lookup_name(names, key) for key in excluded}
    for inst in cluster.instances:
        if util and inst.name in util:
            inst.util = util[inst.name]
    suffix = common_suffix(cluster)
    for inst in cluster.instances:
        inst.alias = inst.name[:len(inst.name) - len(suffix)] if suffix else inst.name
        update_tags(cluster, inst, exclusion_tags)
        if inst.name in exc or (sel and inst.name not in sel):
            inst.movable = False
    for node in cluster.nodes:
        node.loc_tags = frozenset(_tag_set(LOCATION_PREFIX, ctags, node.tags))
        node.alias = node.name[:len(node.name) - len(suffix)] if suffix else node.name
    for inst in cluster.instances:
        if inst.snode != NO_NODE:
            inst.location_score = len(cluster.nodes[inst.pnode].loc_tags
                                      & cluster.nodes[inst.snode].loc_tags)
        else:
            inst.location_score = 0
    for inst in cluster.instances:
        set_pri(cluster.nodes[inst.pnode], inst)
        if inst.snode != NO_NODE:
            set_sec(cluster.nodes[inst.snode], inst)
    for node in cluster.nodes:
        build_peers(node, cluster.instances)
        node.set_policy(cluster.groups[node.group].ipolicy)
        node.mig_tags = frozenset(_tag_set(MIGRATION_PREFIX, ctags, node.tags))
        node.rmig_tags = frozenset(_recv_migration(ctags, node.tags))
    for inst in cluster.instances:
        if cluster.instance_group(inst) is None:
            inst.movable = False
    return _update_missing(cluster, static_kvm_memory)


def _update_missing(cluster: Cluster, static_kvm_memory: int) -> list[str]:
    warnings = []
    for node in cluster.nodes:
        if static_kvm_memory > 0 and node.hypervisor == "kvm":
            node.n_mem = static_kvm_memory
        node.i_mem = sum(cluster.instances[idx].mem for idx in node.p_list
                         if cluster.instances[idx].uses_memory)
        node.x_mem = node.missing_mem
        delta_dsk = int(node.t_dsk) - node.f_dsk - sum(
            cluster.instances[idx].dsk for idx in node.p_list + node.s_list)
        if node.x_mem > 512 or delta_dsk > 1024:
            warnings.append(f"node {node.name} is missing {node.x_mem} MB ram "
                            f"and {delta_dsk // 1024} GB disk")
    return warnings


def set_node_status(cluster: Cluster, *, offline: Sequence[str] = (),
                    max_cpu: float | None = None, min_disk: float = 0.0) -> None:
    """Apply the command line's node options: nodes to treat as offline (``-O``),
    the CPU over-commit ratio (``--max-cpu``), the free disk to keep (``--min-disk``)."""
    names = [node.name for node in cluster.nodes]
    wrong = [key for key in offline if lookup_name(names, key) is None]
    if wrong:
        raise LoadError("wrong node name(s) set as offline: " + ", ".join(wrong))
    off = {lookup_name(names, key) for key in offline}
    for node in cluster.nodes:
        if node.name in off:
            node.offline = True
        node.set_min_disk(min_disk)
        if max_cpu is not None:
            node.set_max_cpu(max_cpu)
