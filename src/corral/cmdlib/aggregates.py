"""Placement aggregates and traits in the cluster: named aggregates
(``gnt-cluster add-aggregate``/``remove-aggregate``), a node's aggregates and traits
(``gnt-node modify --aggregates/--traits``), and the placement constraints of a new
instance (``gnt-instance add --member-of/--required-trait/--forbidden-trait``).

Node groups are aggregates too (their UUID); ``member_of`` may name one by its name
when no named aggregate has that name. The constraints are checked with the
placement engine (:mod:`corral.placement.cluster`, :mod:`corral.placement.constraints`)
on a store built for the query from the configuration and the nodes' live data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from corral.cmdlib.base import LogicalUnit
from corral.errors import AlreadyExistsError, NotFoundError, OpPrereqError, ParameterError
from corral.iallocator import ClusterView, NodeLive, reported_storage
from corral.objects import new_uuid
from corral.opcodes.placement_ops import OpClusterAddAggregate, OpClusterRemoveAggregate
from corral.placement.cluster import NodeResources, cluster_store, instance_resources
from corral.placement.constraints import (
    Constraints,
    allowed_nodes,
    check_aggregate_name,
    check_traits,
    resolve_member_of,
    value_text,
    violations,
)
from corral.placement.query import is_uuid_like

if TYPE_CHECKING:
    from corral.config import ConfigStore
    from corral.objects import Cluster, Instance, Node
    from corral.opcodes.instance_ops import OpInstanceCreate

__all__ = ["UNITS", "LUClusterAddAggregate", "LUClusterRemoveAggregate", "aggregate_label",
           "apply_list_change", "by_constraints", "changed_constraints", "constraints_of",
           "describe_constraints", "instance_constraints", "known_aggregates", "node_filter",
           "node_resources", "node_violations", "refuse_unmet", "resolve_constraints",
           "unsuitable_nodes"]


def known_aggregates(store: ConfigStore) -> dict[str, str]:
    """Aggregate names ``member_of`` may use -> UUID: the named aggregates, then the
    node groups' names (a named aggregate wins over a group of the same name)."""
    names = {group.name: group.uuid for group in store.all("nodegroup")}
    names.update(store.cluster.aggregates)
    return names


def aggregate_label(store: ConfigStore) -> Callable[[str], str]:
    """A function naming an aggregate UUID for people: its name, ``group NAME``, or
    the UUID itself."""
    names = {uuid: name for name, uuid in store.cluster.aggregates.items()}
    groups = {group.uuid: f"group {group.name}" for group in store.all("nodegroup")}
    return lambda uuid: names.get(uuid) or groups.get(uuid) or uuid


def apply_list_change(current: Sequence[str], spec: Sequence[str],
                      resolve: Callable[[str], str], what: str) -> list[str]:
    """The new value of a list setting: ``spec`` holds either the items to have
    exactly or ``+ITEM``/``-ITEM`` changes; ``resolve`` checks an item (and may map
    it, e.g. a name to a UUID). Sorted.

    :raises ParameterError: the two forms are mixed, or ``resolve`` refuses an item.
    """
    signed = [item for item in spec if item[:1] in ("+", "-")]
    if signed and len(signed) != len(spec):
        raise ParameterError(
            f"{what}: give either the whole list (A,B) or changes (+A,-B), not both; got "
            f"{','.join(spec)}")
    if not signed:
        return sorted({resolve(item) for item in spec if item})
    result = set(current)
    for item in spec:
        value = resolve(item[1:])
        if item[0] == "+":
            result.add(value)
        else:
            result.discard(value)
    return sorted(result)


def constraints_of(store: ConfigStore, op: OpInstanceCreate) -> Constraints:
    """The placement constraints of a create opcode, names resolved and checked.

    :raises ParameterError: a malformed value, an unknown aggregate name, an invalid
        trait, or a trait both required and forbidden.
    """
    return resolve_constraints(store, op.member_of, op.required_traits, op.forbidden_traits)


def resolve_constraints(store: ConfigStore, member_of: Sequence[str],
                        required_traits: Sequence[str], forbidden_traits: Sequence[str]
                        ) -> Constraints:
    """Constraints as given by a user (aggregates by name or UUID), resolved and
    checked (see :func:`constraints_of`)."""
    required = check_traits(required_traits, "required trait")
    forbidden = check_traits(forbidden_traits, "forbidden trait")
    both = sorted(set(required) & set(forbidden))
    if both:
        raise ParameterError(f"trait(s) {', '.join(both)} are both required and forbidden")
    return Constraints(resolve_member_of(member_of, known_aggregates(store)),
                       tuple(required), tuple(forbidden))


def changed_constraints(store: ConfigStore, instance: Instance, node: Node,
                        member_of: Sequence[str] | None,
                        required_traits: Sequence[str] | None,
                        forbidden_traits: Sequence[str] | None) -> Constraints | None:
    """The instance's constraints with the given kinds replaced (``None``: kept), or
    None when nothing is given (``gnt-instance modify``).

    :raises ParameterError: a value is malformed (see :func:`resolve_constraints`);
    :raises OpPrereqError: ``node`` (its primary node, the new one if that changes
        too) breaks the new constraints, or the kept ones when none are given,
        naming each broken one.
    """
    if member_of is None and required_traits is None and forbidden_traits is None:
        refuse_unmet(store, node, instance_constraints(instance), instance.name)
        return None
    current = instance_constraints(instance)
    # kept values are UUIDs already; resolving them again checks nothing new
    new = resolve_constraints(
        store, current.member_of if member_of is None else member_of,
        current.required_traits if required_traits is None else required_traits,
        current.forbidden_traits if forbidden_traits is None else forbidden_traits)
    broken = node_violations(store, node, new)
    if broken:
        raise OpPrereqError(
            f"cannot give instance {instance.name} these placement constraints "
            f"({describe_constraints(store, new)}): its primary node {node.name} "
            f"does not meet them: {'; '.join(broken)}; move the instance first "
            "(gnt-instance migrate/failover/move -n NODE)", ecode="wrong_state")
    return new


def instance_constraints(instance: Instance) -> Constraints:
    """The placement constraints an instance keeps (aggregates as UUIDs)."""
    return Constraints(tuple(instance.member_of), tuple(instance.required_traits),
                       tuple(instance.forbidden_traits))


def by_constraints(instances: Sequence[Instance]
                   ) -> list[tuple[Constraints, list[Instance]]]:
    """``instances`` grouped by the placement constraints they keep, in the order each
    set first appears (instances without constraints form one group too)."""
    groups: dict[Constraints, list[Instance]] = {}
    for inst in instances:
        groups.setdefault(instance_constraints(inst), []).append(inst)
    return list(groups.items())


def node_violations(store: ConfigStore, node: Node, constraints: Constraints) -> list[str]:
    """Why ``node`` breaks ``constraints``, one sentence each (empty: it meets them)."""
    if not constraints:
        return []
    return violations({node.group, *node.aggregates}, set(node.traits), constraints,
                      aggregate_label(store))


def unsuitable_nodes(store: ConfigStore, constraints: Constraints) -> list[str]:
    """Names of the nodes that break ``constraints`` (by their aggregates and traits,
    whatever room they have), sorted; none without constraints."""
    if not constraints:
        return []
    label = aggregate_label(store)
    return sorted(node.name for node in store.all("node")
                  if violations({node.group, *node.aggregates}, set(node.traits),
                                constraints, label))


def describe_constraints(store: ConfigStore, constraints: Constraints) -> str:
    """The constraints for people: ``member_of !in:A,B, required trait T, ...``."""
    label = aggregate_label(store)
    parts = [f"member_of {value_text(v, label)}" for v in constraints.member_of]
    parts += [f"required trait {t}" for t in constraints.required_traits]
    parts += [f"forbidden trait {t}" for t in constraints.forbidden_traits]
    return ", ".join(parts)


def refuse_unmet(store: ConfigStore, node: Node, constraints: Constraints,
                 instance_name: str) -> None:
    """Refuse ``node`` as the primary node when it breaks a constraint.

    :raises OpPrereqError: naming each broken constraint (aggregate or trait).
    """
    broken = node_violations(store, node, constraints)
    if broken:
        raise OpPrereqError(
            f"node {node.name} does not meet the placement constraints of instance "
            f"{instance_name}: {'; '.join(broken)}", ecode="wrong_input")


def node_resources(cluster: Cluster, live: Mapping[str, NodeLive], disk_template: str
                   ) -> dict[str, NodeResources]:
    """The placement view of the nodes' live data (:func:`corral.cmdlib.allocation.
    gather_live`): CPUs, memory and the size of ``disk_template``'s storage, by node
    name; nodes that did not answer are left out."""
    storage = reported_storage(cluster, disk_template)
    return {name: NodeResources.from_node_info(
                answer.info, storage.space(answer.info)[0] if storage is not None else 0)
            for name, answer in live.items() if answer.info is not None}


def node_filter(store: ConfigStore, constraints: Constraints, *, vcpus: int, memory: int,
                disk_mb: int, disk_template: str, describe: Callable[[str], str]
                ) -> Callable[[Mapping[str, NodeLive]], list[str]]:
    """What :func:`corral.cmdlib.allocation.run_allocators` calls with the nodes' live
    data: the names of the nodes the placement engine allows for an instance of that
    size under ``constraints`` (its allocation-candidates query on the cluster now).

    ``describe(names)`` words the error when no node is left. The configuration is
    read now, on the event loop; the returned function may run in a worker thread.
    """
    view = ClusterView.of(store)
    storage = reported_storage(view.cluster, disk_template)

    def allowed(live: Mapping[str, NodeLive]) -> list[str]:
        placement = cluster_store(view, node_resources(view.cluster, live, disk_template))
        # space a template's storage does not report is not placement's to judge
        wanted = instance_resources(vcpus, memory, disk_mb if storage is not None else 0)
        uuids = allowed_nodes(placement, wanted, constraints)
        names = {node.uuid: node.name for node in view.nodes}
        chosen = [names[uuid] for uuid in uuids if uuid in names and names[uuid] in live]
        if not chosen:
            raise OpPrereqError(describe(", ".join(sorted(live))),
                                ecode="insufficient_resources")
        return chosen

    return allowed


class LUClusterAddAggregate(LogicalUnit[OpClusterAddAggregate]):
    """``OP_CLUSTER_ADD_AGGREGATE``: name a placement aggregate."""

    OP_ID = "OP_CLUSTER_ADD_AGGREGATE"
    REQ_BGL = True

    def check_arguments(self) -> None:
        """A valid name; a UUID if one is given."""
        check_aggregate_name(self.op.aggregate_name)
        given = self.op.aggregate_uuid
        if given is not None and not is_uuid_like(given):
            raise ParameterError(f"invalid aggregate UUID {given!r}: expected a UUID such as "
                                 f"{new_uuid()}")

    def check_prereq(self) -> None:
        """Name and UUID unused (a node group's name or UUID counts as used)."""
        store = self.master.store
        name, given = self.op.aggregate_name, self.op.aggregate_uuid
        aggregates = store.cluster.aggregates
        if name in aggregates:
            raise AlreadyExistsError(f"aggregate {name!r} already exists "
                                     f"(UUID {aggregates[name]})")
        group = store.find("nodegroup", name)
        if group is not None:
            raise AlreadyExistsError(f"{name!r} is the name of a node group, which is an "
                                     "aggregate already; choose another name")
        if given is not None:
            given = given.lower()
            taken = next((n for n, u in aggregates.items() if u == given), None)
            if taken is not None or store.find("nodegroup", given) is not None:
                raise AlreadyExistsError(f"aggregate UUID {given} is already named "
                                         f"{taken or 'by a node group'}")
        self._uuid = given or new_uuid()

    async def execute(self) -> str:
        """Record the name; the aggregate's UUID."""
        if self.op.dry_run:
            return self._uuid
        async with self.master.store.transaction() as txn:
            cluster = txn.cluster()
            cluster.aggregates = {**cluster.aggregates, self.op.aggregate_name: self._uuid}
            txn.update(cluster)
        self.feedback(f"Added aggregate {self.op.aggregate_name} ({self._uuid})")
        return self._uuid


class LUClusterRemoveAggregate(LogicalUnit[OpClusterRemoveAggregate]):
    """``OP_CLUSTER_REMOVE_AGGREGATE``: forget a named aggregate no node is in."""

    OP_ID = "OP_CLUSTER_REMOVE_AGGREGATE"
    REQ_BGL = True

    def check_prereq(self) -> None:
        """The aggregate exists and is empty."""
        store = self.master.store
        name = self.op.aggregate_name
        uuid = store.cluster.aggregates.get(name)
        if uuid is None:
            known = ", ".join(sorted(store.cluster.aggregates)) or "none"
            raise NotFoundError(f"aggregate {name!r} does not exist (aggregates: {known})")
        members = sorted(n.name for n in store.all("node") if uuid in n.aggregates)
        if members:
            raise OpPrereqError(
                f"aggregate {name} still has nodes: {', '.join(members)}; take them out "
                f"first (gnt-node modify --aggregates -{name} NODE)", ecode="wrong_state")

    async def execute(self) -> None:
        """Drop the name."""
        if self.op.dry_run:
            return None
        async with self.master.store.transaction() as txn:
            cluster = txn.cluster()
            cluster.aggregates = {k: v for k, v in cluster.aggregates.items()
                                  if k != self.op.aggregate_name}
            txn.update(cluster)
        self.feedback(f"Removed aggregate {self.op.aggregate_name}")
        return None


#: The logical units of this area.
UNITS: tuple[type[LogicalUnit[Any]], ...] = (LUClusterAddAggregate, LUClusterRemoveAggregate)
