"""What each kind of configuration object claims and refers to.

Two facts about an object drive both the in-memory indexes and the invariant
checks, so they are computed in one place:

* a :class:`Claim` is a value the object holds that no other object may hold at the
  same time (an instance name, a NIC's MAC, the ownership of a disk);
* a :class:`Reference` is the UUID of another object that must exist while this
  one does (a node's group, an instance's primary node and disks).

Both are derived from the one object alone, which is what keeps a commit's cost
proportional to the objects it changes.
"""

from __future__ import annotations

from typing import NamedTuple

from corral.errors import ParameterError
from corral.objects import KINDS, Cluster, ConfigObject, Disk, Instance, Node, NodeGroup

__all__ = [
    "LABELS",
    "NAMED_KINDS",
    "Claim",
    "Reference",
    "check_kind",
    "claims",
    "describe",
    "name_namespace",
    "name_of",
    "references",
    "sort_key",
]

#: How messages call each kind.
LABELS: dict[str, str] = {
    "cluster": "cluster",
    "nodegroup": "node group",
    "node": "node",
    "disk": "disk",
    "instance": "instance",
    "network": "network",
    "filter": "filter",
    "placement_provider": "placement resource provider",
    "placement_consumer": "placement consumer",
    "placement_name": "placement custom name",
}

#: Kinds whose ``name`` is required, non-empty and unique; ``get`` accepts it as key.
NAMED_KINDS: frozenset[str] = frozenset({"cluster", "nodegroup", "node", "instance", "network"})


class Claim(NamedTuple):
    """A value only one object may hold: ``(namespace, key)`` is the unique part."""

    namespace: str
    key: str
    #: What the value is, for messages ("NIC 0 MAC aa:00:00:00:00:01").
    what: str
    #: A name clash is "already exists"; other clashes break an invariant.
    is_name: bool = False

    @property
    def slot(self) -> tuple[str, str]:
        """The index key."""
        return (self.namespace, self.key)


class Reference(NamedTuple):
    """A UUID of an object of ``kind`` that must exist."""

    #: Which field refers, for messages ("primary node", "disk 0").
    field: str
    kind: str
    uuid: str


def check_kind(kind: str) -> None:
    """Raise :class:`ParameterError` unless ``kind`` is a configuration kind."""
    if kind not in KINDS:
        raise ParameterError(f"unknown configuration kind {kind!r}; known: {', '.join(KINDS)}")


def name_namespace(kind: str) -> str:
    """The claim namespace of names of ``kind``."""
    return f"{kind} name"


def name_of(obj: ConfigObject) -> str | None:
    """The object's name, or None for kinds without one (filters, unnamed disks)."""
    name = getattr(obj, "name", None)
    return name if isinstance(name, str) else None


def describe(kind: str, obj: ConfigObject) -> str:
    """``instance 'web1'``, or ``filter <uuid>`` for objects without a name."""
    name = name_of(obj)
    label = LABELS.get(kind, kind)
    return f"{label} '{name}'" if name else f"{label} {obj.uuid}"


def sort_key(obj: ConfigObject) -> tuple[str, str]:
    """Order of :meth:`ConfigStore.all`: by name, by UUID when there is none."""
    name = name_of(obj)
    return (name if name is not None else obj.uuid, obj.uuid)


def claims(kind: str, obj: ConfigObject) -> list[Claim]:
    """Everything ``obj`` holds exclusively."""
    result: list[Claim] = []
    if kind in NAMED_KINDS or (kind == "disk" and name_of(obj) is not None):
        name = name_of(obj) or ""
        result.append(Claim(name_namespace(kind), name, f"name '{name}'", is_name=True))
    if isinstance(obj, Node):
        # Node addresses are unique among nodes (as in Ganeti), apart from NIC IPs.
        result.append(Claim("node ip", obj.primary_ip, f"primary IP {obj.primary_ip}"))
        if obj.secondary_ip and obj.secondary_ip != obj.primary_ip:
            result.append(
                Claim("node ip", obj.secondary_ip, f"secondary IP {obj.secondary_ip}")
            )
    if isinstance(obj, Instance):
        for index, nic in enumerate(obj.nics):
            if nic.ip:
                result.append(Claim("ip", nic.ip, f"NIC {index} IP {nic.ip}"))
            if nic.mac:
                mac = nic.mac.lower()
                result.append(Claim("mac", mac, f"NIC {index} MAC {mac}"))
        for index, disk in enumerate(obj.disks):
            result.append(Claim("disk owner", disk, f"disk {index} ({disk})"))
    return result


def references(obj: ConfigObject) -> list[Reference]:
    """The objects ``obj`` needs, by UUID."""
    if isinstance(obj, Node):
        return [Reference("group", "nodegroup", obj.group)]
    if isinstance(obj, Instance):
        refs = [Reference("primary node", "node", obj.primary_node)]
        refs.extend(Reference(f"disk {i}", "disk", d) for i, d in enumerate(obj.disks))
        refs.extend(Reference(f"NIC {i} network", "network", n.network)
                    for i, n in enumerate(obj.nics) if n.network)
        return refs
    if isinstance(obj, NodeGroup):
        return [Reference("connected network", "network", n) for n in sorted(obj.networks)]
    if isinstance(obj, Disk):
        return [Reference(f"node {i}", "node", n) for i, n in enumerate(obj.nodes)]
    if isinstance(obj, Cluster):
        return [Reference("master node", "node", obj.master_node)]
    return []
