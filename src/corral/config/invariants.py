"""The checks a commit must pass, looking only at the objects it changes.

:func:`check` takes the current model and the changes of one commit (keyed by
UUID) and raises on the first broken invariant:

* every object has the class of its kind, a UUID, and a name where its kind needs one;
* UUIDs are unique across all kinds; there is exactly one cluster object;
* names (node groups, nodes, instances, named disks), NIC IPs and MACs, and node
  addresses (primary and secondary IPs, among nodes) are unique,
  and a disk belongs to at most one instance (:class:`~corral.config.relations.Claim`);
* references point at existing objects of the right kind, and nothing still
  referenced is removed (:class:`~corral.config.relations.Reference`): a network
  stays while a NIC is on it or a node group is connected to it;
* a NIC on a network has an address of the network's subnet that the network does
  not reserve externally (an address is reserved once);
* a node is only in the cluster's named aggregates, each named once (a name that
  goes must have no node left in it).

Every lookup goes through the model's indexes, so the cost is proportional to the
changed objects (and, for a removal, to the objects that referred to it).
Duplicate names and UUIDs raise :class:`AlreadyExistsError`, everything else
:class:`ConfigurationError`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from corral.config.model import Change, Model
from corral.config.relations import (
    LABELS,
    NAMED_KINDS,
    Claim,
    claims,
    describe,
    name_of,
    references,
    sort_key,
)
from corral.errors import AlreadyExistsError, ConfigurationError
from corral.objects import KINDS, Cluster, ConfigObject, Instance, Network, Node

__all__ = ["check"]


def check(model: Model, changes: Mapping[str, Change]) -> None:
    """Raise if applying ``changes`` to ``model`` would break an invariant."""
    for uuid, change in changes.items():
        _check_shape(model, uuid, change)
    _check_single_cluster(model, changes)
    _check_claims(model, changes)
    _check_removals(model, changes)
    _check_references(model, changes)
    _check_network_addresses(model, changes)
    _check_aggregates(model, changes)


def _check_shape(model: Model, uuid: str, change: Change) -> None:
    new = change.new
    if new is None:
        if change.kind == "cluster":
            raise ConfigurationError("the cluster object cannot be removed")
        return
    expected = KINDS[change.kind]
    if type(new) is not expected:
        raise ConfigurationError(
            f"{describe(change.kind, new)}: is a {type(new).__name__}, not a {expected.__name__}"
        )
    if not uuid or new.uuid != uuid:
        raise ConfigurationError(f"{describe(change.kind, new)}: has no valid uuid ({uuid!r})")
    if change.kind in NAMED_KINDS and not name_of(new):
        raise ConfigurationError(f"{LABELS[change.kind]} {uuid}: the name must not be empty")
    if change.old is None and uuid in model.kind_of:
        other = model.get_any(uuid)
        assert other is not None
        raise AlreadyExistsError(
            f"cannot add {describe(change.kind, new)}: uuid {uuid} is already used by "
            f"{describe(model.kind_of[uuid], other)}"
        )


def _check_single_cluster(model: Model, changes: Mapping[str, Change]) -> None:
    clusters = {u: c for u, c in model.objects["cluster"].items() if u not in changes}
    for uuid, change in changes.items():
        if change.kind == "cluster" and change.new is not None:
            clusters[uuid] = change.new
    if not clusters:
        raise ConfigurationError("the configuration has no cluster object")
    if len(clusters) > 1:
        names = ", ".join(sorted(describe("cluster", c) for c in clusters.values()))
        raise AlreadyExistsError(f"there can be only one cluster object, not several ({names})")


def _current(model: Model, changes: Mapping[str, Change], uuid: str) -> tuple[str, ConfigObject]:
    """Kind and object for ``uuid`` as the commit leaves it (must exist)."""
    change = changes.get(uuid)
    if change is not None and change.new is not None:
        return change.kind, change.new
    obj = model.get_any(uuid)
    assert obj is not None
    return model.kind_of[uuid], obj


def _clash(
    kind: str, obj: ConfigObject, claim: Claim, other_uuid: str, other_kind: str,
    other: ConfigObject, other_claim: Claim | None,
) -> Exception:
    if claim.is_name:
        return AlreadyExistsError(
            f"{LABELS[kind]} '{claim.key}' already exists (uuid {other_uuid})"
        )
    if other_uuid == obj.uuid and other_claim is not None:
        return ConfigurationError(
            f"{describe(kind, obj)}: {claim.what} is also its {other_claim.what}"
        )
    return ConfigurationError(
        f"{describe(kind, obj)}: {claim.what} is already used by {describe(other_kind, other)}"
    )


def _check_claims(model: Model, changes: Mapping[str, Change]) -> None:
    taken: dict[tuple[str, str], tuple[str, Claim]] = {}
    for uuid, change in changes.items():
        if change.new is None:
            continue
        for claim in claims(change.kind, change.new):
            previous = taken.get(claim.slot)
            if previous is not None:
                other_uuid, other_claim = previous
                other_kind, other = _current(model, changes, other_uuid)
                raise _clash(
                    change.kind, change.new, claim, other_uuid, other_kind, other, other_claim
                )
            taken[claim.slot] = (uuid, claim)
    for slot, (uuid, claim) in taken.items():
        owner = model.claims.get(slot)
        if owner is None or owner == uuid or owner in changes:
            # An owner that is part of this commit released the slot or, if it
            # still holds it, was caught above.
            continue
        kind, obj = _current(model, changes, uuid)
        owner_kind, owner_obj = _current(model, changes, owner)
        raise _clash(kind, obj, claim, owner, owner_kind, owner_obj, None)


def _check_removals(model: Model, changes: Mapping[str, Change]) -> None:
    for uuid, change in changes.items():
        if change.new is not None or change.old is None:
            continue
        # Holders changed by this commit are judged by _check_references.
        blocking = [h for h in model.referrers.get(uuid, ()) if h not in changes]
        if not blocking:
            continue
        # Name the first blocker by name, so that the message is stable.
        first = min(blocking, key=lambda h: sort_key(_current(model, changes, h)[1]))
        holder_kind, holder = _current(model, changes, first)
        field = next(r.field for r in references(holder) if r.uuid == uuid)
        others = len(blocking) - 1
        more = (
            f" (and {others} other object{'s do' if others > 1 else ' does'} too)"
            if others else ""
        )
        raise ConfigurationError(
            f"cannot remove {describe(change.kind, change.old)}: "
            f"{describe(holder_kind, holder)} still refers to it as its {field}{more}"
        )


def _check_references(model: Model, changes: Mapping[str, Change]) -> None:
    for change in changes.values():
        if change.new is None:
            continue
        for ref in references(change.new):
            target_change = changes.get(ref.uuid)
            if target_change is not None:
                target_kind, target = target_change.kind, target_change.new
            else:
                target_kind = model.kind_of.get(ref.uuid, "")
                target = model.get_any(ref.uuid)
            label = LABELS[ref.kind]
            where = f"{describe(change.kind, change.new)}: its {ref.field} {ref.uuid!r}"
            if target is None:
                gone = "is being removed" if target_change is not None else "does not exist"
                raise ConfigurationError(f"{where} {gone} (expected the uuid of a {label})")
            if target_kind != ref.kind:
                raise ConfigurationError(
                    f"{where} is {describe(target_kind, target)}, not a {label}"
                )


def _network_at(model: Model, changes: Mapping[str, Change], uuid: str) -> Network | None:
    change = changes.get(uuid)
    found = change.new if change is not None else model.get_any(uuid)
    return found if isinstance(found, Network) else None


def _check_network_addresses(model: Model, changes: Mapping[str, Change]) -> None:
    """NICs on a network use addresses of its subnet that it does not reserve."""
    instances: dict[str, Instance] = {}
    for uuid, change in changes.items():
        if isinstance(change.new, Instance):
            instances[uuid] = change.new
        elif isinstance(change.new, Network):
            for holder in model.referrers.get(uuid, ()):
                if holder not in changes:
                    obj = model.get_any(holder)
                    if isinstance(obj, Instance):
                        instances[holder] = obj
    for inst in instances.values():
        for index, nic in enumerate(inst.nics):
            if not nic.network:
                continue
            net = _network_at(model, changes, nic.network)
            if net is None:
                continue  # _check_references reported it
            where = f"{describe('instance', inst)}: NIC {index}"
            if not nic.ip:
                continue
            if not _in_subnet(nic.ip, net.network):
                raise ConfigurationError(
                    f"{where} IP {nic.ip} is not in network '{net.name}' ({net.network})")
            if nic.ip in net.ext_reservations:
                raise ConfigurationError(
                    f"{where} IP {nic.ip} is externally reserved in network '{net.name}'")


def _in_subnet(address: str, subnet: str) -> bool:
    try:
        return ipaddress.ip_address(address) in ipaddress.ip_network(subnet)
    except ValueError:
        return False


def _check_aggregates(model: Model, changes: Mapping[str, Change]) -> None:
    """Nodes are in named aggregates only; a name leaves no node behind. Costs a pass
    over the nodes only when a commit takes a named aggregate away."""
    cluster_change = next((c for c in changes.values() if c.kind == "cluster"), None)
    nodes = [c.new for c in changes.values() if isinstance(c.new, Node) and c.new.aggregates]
    if cluster_change is None and not nodes:
        return
    cluster = (cluster_change.new if cluster_change is not None
               else next(iter(model.objects["cluster"].values()), None))
    if not isinstance(cluster, Cluster):
        return  # _check_single_cluster reported it
    names = {uuid: name for name, uuid in cluster.aggregates.items()}
    if len(names) != len(cluster.aggregates):
        raise ConfigurationError(f"{describe('cluster', cluster)}: two aggregate names "
                                 "share one aggregate UUID")
    for node in nodes:
        unknown = sorted(set(node.aggregates) - names.keys())
        if unknown:
            raise ConfigurationError(f"{describe('node', node)}: its aggregate(s) "
                                     f"{', '.join(unknown)} are not named by the cluster")
    old = cluster_change.old if cluster_change is not None else None
    if not isinstance(old, Cluster):
        return
    gone = {uuid: name for name, uuid in old.aggregates.items() if uuid not in names}
    if not gone:
        return
    for uuid, obj in model.objects["node"].items():
        if uuid in changes or not isinstance(obj, Node):
            continue
        left = sorted(gone[a] for a in obj.aggregates if a in gone)
        if left:
            raise ConfigurationError(
                f"cannot remove aggregate {left[0]}: {describe('node', obj)} is still in it")
