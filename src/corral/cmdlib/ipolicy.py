"""Instance policies as the logical units apply them: the effective policy of a group,
what an instance breaks, and the checks at creation, modification and policy changes.

The policy arithmetic itself is :mod:`corral.objects.ipolicy`; this module brings the
configuration to it (filled backend parameters, an instance's disks and group).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from corral.cmdlib.instance_query import filled_beparams
from corral.errors import OpPrereqError
from corral.objects import fill_params
from corral.objects.ipolicy import group_policy, instance_violations

if TYPE_CHECKING:
    from corral.config import ConfigStore
    from corral.objects import Disk, Instance, NodeGroup

__all__ = [
    "check_allocation",
    "check_instance_fits",
    "group_ipolicy",
    "instance_disk_view",
    "stored_instance_violations",
    "warn_new_violations",
]


def group_ipolicy(store: ConfigStore, group: NodeGroup,
                  custom: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The effective policy of ``group`` (its own keys, or ``custom`` instead, filled
    from the cluster's)."""
    return group_policy(store.cluster.ipolicy, group.ipolicy if custom is None else custom)


def instance_disk_view(store: ConfigStore, instance: Instance) -> tuple[list[int], list[str]]:
    """An instance's disk sizes (MiB) and each disk's template."""
    sizes: list[int] = []
    templates: list[str] = []
    for uuid in instance.disks:
        disk = store.find("disk", uuid)
        if disk is not None:
            sizes.append(disk.size)
            templates.append(disk.dev_type)
    return sizes, templates


def stored_instance_violations(store: ConfigStore, instance: Instance,
                               policy: Mapping[str, Any]) -> list[str]:
    """What an existing instance breaks in ``policy`` (maximum memory, its CPUs, disks,
    NICs and spindle use, as Ganeti checks them)."""
    sizes, templates = instance_disk_view(store, instance)
    return instance_violations(policy, filled_beparams(store, instance), sizes, templates,
                               len(instance.nics))


def check_instance_fits(store: ConfigStore, group: NodeGroup, beparams: Mapping[str, Any],
                        disks: Sequence[Disk], nic_count: int, *,
                        memories: Sequence[str] = ("maxmem",), ignore: bool = False,
                        feedback: Callable[[str], None] | None = None) -> None:
    """Refuse an instance (its own backend parameters, disks and NIC count) that breaks
    the policy of ``group``, checked with each memory setting of ``memories``; see
    :func:`check_allocation` for ``ignore``."""
    filled = fill_params(store.cluster.beparams.get("default", {}), group.beparams, beparams)
    policy = group_ipolicy(store, group)
    sizes = [disk.size for disk in disks]
    templates = [disk.dev_type for disk in disks]
    check_allocation(group, [problem for key in memories
                             for problem in instance_violations(
                                 policy, filled, sizes, templates, nic_count, memory_key=key)],
                     ignore=ignore, feedback=feedback)


def check_allocation(group: NodeGroup, problems: Iterable[str], *, ignore: bool,
                     feedback: Callable[[str], None] | None = None) -> None:
    """Refuse an instance that breaks its group's policy, in Ganeti's words, unless
    ``ignore`` (``--ignore-ipolicy``): then the violations only go to the job log."""
    found = list(dict.fromkeys(problems))  # once each, in order
    if not found:
        return
    message = (f"Instance allocation to group {group.uuid} ({group.name}) violates policy: "
               f"{', '.join(found)}")
    if not ignore:
        if any(problem.startswith("Disk template ") for problem in found):
            # Enabling a template does not allow it (Ganeti's rule): say what does.
            message += ("\nallow the template in the instance policy too: gnt-cluster "
                        "modify --ipolicy-disk-templates (or gnt-group modify for a "
                        "group's own policy)")
        raise OpPrereqError(message, ecode="wrong_input")
    if feedback is not None:
        feedback(f" - WARNING: {message}; going ahead as --ignore-ipolicy asks")


def warn_new_violations(store: ConfigStore, changes: Sequence[tuple[NodeGroup, Mapping[str, Any],
                                                                     Mapping[str, Any]]],
                        feedback: Callable[[str], None]) -> list[str]:
    """After a policy change: warn about the instances that break the new effective
    policy of their group but did not break the old one (Ganeti's warning); ``changes``
    holds ``(group, old effective policy, new effective policy)``. Returns their names."""
    by_group: dict[str, list[Instance]] = {}
    node_group = {node.uuid: node.group for node in store.all("node")}
    for inst in store.all("instance"):
        group_uuid = node_group.get(inst.primary_node)
        if group_uuid is not None:
            by_group.setdefault(group_uuid, []).append(inst)
    names: set[str] = set()
    for group, old, new in changes:
        for inst in by_group.get(group.uuid, ()):
            if (stored_instance_violations(store, inst, new)
                    and not stored_instance_violations(store, inst, old)):
                names.add(inst.name)
    if names:
        feedback(" - WARNING: After the ipolicy change the following instances violate them: "
                 + ", ".join(sorted(names)))
    return sorted(names)
