"""Node group operations: add, remove, rename, assign nodes, change parameters; the
``group`` query resource.

A group's parameters (allocation policy, node parameters, disk parameters, instance
policy) override the cluster's for its members; its ``ipolicy`` holds only what it
overrides (:mod:`corral.objects.ipolicy`). corral keeps no static hypervisor or disk
state: Ganeti's ``hv_state`` and ``disk_state`` are accepted only when empty. Moving
nodes between groups needs no ``force``, since corral has no disk template whose
disks span two nodes of different groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from corral.cmdlib.base import LockRequest, LogicalUnit, MasterContext, QueryResource
from corral.cmdlib.common import expand_group, expand_node
from corral.cmdlib.disk_layout import check_access_in_use
from corral.cmdlib.ipolicy import group_ipolicy, warn_new_violations
from corral.cmdlib.node import check_unsupported_state, nd_param_fields, validated_ndparams
from corral.cmdlib.query import named_lookup
from corral.errors import (
    AlreadyExistsError,
    NotFoundError,
    OpPrereqError,
    ParameterError,
    UnknownParameterError,
)
from corral.locking import LockLevel
from corral.objects import NodeGroup, fill_params
from corral.objects.ipolicy import disk_templates_not_enabled, group_policy, updated_policy
from corral.objects.params import DISK_PARAMS, DISK_TEMPLATES, update_params, validate_params
from corral.opcodes.node_ops import (
    OpGroupAdd,
    OpGroupAssignNodes,
    OpGroupRemove,
    OpGroupRename,
    OpGroupSetParams,
)
from corral.qlang import FieldRegistry, pick_items

if TYPE_CHECKING:
    from corral.config import ConfigStore
    from corral.objects import Cluster

__all__ = [
    "GROUP_FIELDS",
    "UNITS",
    "GroupQueryData",
    "LUGroupAdd",
    "LUGroupAssignNodes",
    "LUGroupRemove",
    "LUGroupRename",
    "LUGroupSetParams",
    "query_resources",
    "validated_diskparams",
]


def validated_diskparams(values: dict[str, dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """Disk parameters per template, checked and coerced (``None`` values remove an
    override); an unknown template or parameter is refused."""
    checked: dict[str, dict[str, Any]] = {}
    for template, params in (values or {}).items():
        if template not in DISK_PARAMS:
            raise UnknownParameterError(
                f"unknown disk template '{template}' in disk parameters; valid ones: "
                f"{', '.join(DISK_TEMPLATES)}")
        checked[template] = validate_params(f"{template} disk", DISK_PARAMS[template], params)
    return checked


def _apply_diskparams(current: dict[str, dict[str, Any]], changes: dict[str, dict[str, Any]]
                      ) -> dict[str, dict[str, Any]]:
    result = {template: dict(values) for template, values in current.items()}
    for template, values in changes.items():
        merged = update_params(result.get(template, {}), values)
        if merged:
            result[template] = merged
        else:
            result.pop(template, None)
    return result


class _OneGroup(LogicalUnit[Any]):
    """An LU about one existing group, locked exclusively."""

    def expand_names(self) -> None:
        """The group by name or UUID."""
        group = expand_group(self.master.store, self.op.group_name)
        self._uuid, self._name = group.uuid, group.name

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The group, exclusively."""
        return {LockLevel.NODEGROUP: LockRequest([self._name])}

    def _group(self) -> NodeGroup:
        group = self.master.store.find("nodegroup", self._uuid)
        if group is None:
            raise NotFoundError(
                f"node group {self._name} was removed while waiting for its lock")
        return group


class LUGroupAdd(LogicalUnit[OpGroupAdd]):
    """``OP_GROUP_ADD``: a new, empty node group."""

    OP_ID = "OP_GROUP_ADD"

    def check_arguments(self) -> None:
        """Parameters must be valid; Ganeti-only ones empty."""
        op = self.op
        check_unsupported_state(hv_state=op.hv_state, disk_state=op.disk_state)
        self._ndparams = update_params({}, validated_ndparams(op.ndparams))
        self._diskparams = _apply_diskparams({}, validated_diskparams(op.diskparams))
        self._ipolicy = updated_policy({}, op.ipolicy or {}, group=True)

    def check_prereq(self) -> None:
        """The name must be new; the policy may allow enabled disk templates only."""
        existing = self.master.store.find("nodegroup", self.op.group_name)
        if existing is not None:
            raise AlreadyExistsError(f"Desired group name '{existing.name}' already exists as "
                                     f"a node group (UUID: {existing.uuid})")
        cluster = self.master.store.cluster
        disk_templates_not_enabled(group_policy(cluster.ipolicy, self._ipolicy),
                                   cluster.enabled_disk_templates)

    async def execute(self) -> None:
        """Record the group and add its lock."""
        if self.op.dry_run:
            return None
        group = NodeGroup(
            name=self.op.group_name, alloc_policy=self.op.alloc_policy or "preferred",
            ndparams=self._ndparams, diskparams=self._diskparams, ipolicy=self._ipolicy,
        )
        async with self.master.store.transaction() as txn:
            txn.add(group)
        await self.master.locks.add(LockLevel.NODEGROUP, group.name, owner=self.owner,
                                    acquired=True)
        self.feedback(f"Added node group {group.name} ({group.uuid})")
        return None


class LUGroupRemove(_OneGroup):
    """``OP_GROUP_REMOVE``: remove an empty group that is not the last one."""

    OP_ID = "OP_GROUP_REMOVE"
    op: OpGroupRemove

    def check_prereq(self) -> None:
        """No nodes in it; another group remains."""
        store = self.master.store
        group = self._group()
        if store.count("nodegroup") <= 1:
            raise OpPrereqError(
                f"node group {group.name} is the cluster's last group and cannot be removed")
        members = sorted(n.name for n in store.all("node") if n.group == group.uuid)
        if members:
            raise OpPrereqError(
                f"node group {group.name} still has nodes: {', '.join(members)}; move them "
                "to another group first (gnt-group assign-nodes)")

    async def execute(self) -> None:
        """Remove it from the configuration and drop its lock."""
        if self.op.dry_run:
            return None
        async with self.master.store.transaction() as txn:
            txn.remove("nodegroup", self._uuid)
        await self.master.locks.remove(LockLevel.NODEGROUP, self._name, owner=self.owner)
        self.feedback(f"Removed node group {self._name}")
        return None


class LUGroupRename(_OneGroup):
    """``OP_GROUP_RENAME``: give a group a new (unused) name; returns it."""

    OP_ID = "OP_GROUP_RENAME"
    op: OpGroupRename

    def check_prereq(self) -> None:
        """The new name must be free."""
        self._group()
        other = self.master.store.find("nodegroup", self.op.new_name)
        if other is not None and other.uuid != self._uuid:
            raise AlreadyExistsError(
                f"cannot rename node group {self._name} to {self.op.new_name}: a group "
                "of that name exists")

    async def execute(self) -> str:
        """Rename it and move its lock to the new name."""
        new_name = self.op.new_name
        if self.op.dry_run or new_name == self._name:
            return new_name
        async with self.master.store.transaction() as txn:
            group = txn.get("nodegroup", self._uuid)
            group.name = new_name
            txn.update(group)
        await self.master.locks.remove(LockLevel.NODEGROUP, self._name, owner=self.owner)
        await self.master.locks.add(LockLevel.NODEGROUP, new_name, owner=self.owner,
                                    acquired=True)
        self.feedback(f"Renamed node group {self._name} to {new_name}")
        return new_name


class LUGroupAssignNodes(LogicalUnit[OpGroupAssignNodes]):
    """``OP_GROUP_ASSIGN_NODES``: move nodes into a group."""

    OP_ID = "OP_GROUP_ASSIGN_NODES"

    def expand_names(self) -> None:
        """The group and the nodes (names or UUIDs)."""
        store = self.master.store
        group = expand_group(store, self.op.group_name)
        self._uuid, self._name = group.uuid, group.name
        keys = self.op.node_uuids or self.op.nodes
        if not keys:
            raise ParameterError("no nodes to assign: name at least one node")
        nodes = {n.uuid: n for n in (expand_node(store, key) for key in keys)}
        self._nodes = sorted(nodes.values(), key=lambda n: n.name)
        self._groups = sorted({self._name} | {
            g.name for g in (store.find("nodegroup", n.group) for n in self._nodes)
            if g is not None})

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The target group, the nodes' current groups and the nodes."""
        return {LockLevel.NODEGROUP: LockRequest(list(self._groups)),
                LockLevel.NODE: LockRequest([n.name for n in self._nodes])}

    def check_prereq(self) -> None:
        """The group and nodes still exist and the nodes are still where they were."""
        store = self.master.store
        if store.find("nodegroup", self._uuid) is None:
            raise NotFoundError(
                f"node group {self._name} was removed while waiting for its lock")
        before = {n.uuid: n.group for n in self._nodes}
        for node in self._nodes:
            now = store.find("node", node.uuid)
            if now is None:
                raise NotFoundError(f"node {node.name} was removed while waiting for its lock")
            if now.group != before[node.uuid]:
                raise OpPrereqError(
                    f"node {node.name} changed group while waiting for locks; retry")

    async def execute(self) -> None:
        """Change the nodes' group."""
        moving = [n for n in self._nodes if n.group != self._uuid]
        if self.op.dry_run or not moving:
            return None
        async with self.master.store.transaction() as txn:
            for node in moving:
                record = txn.get("node", node.uuid)
                record.group = self._uuid
                txn.update(record)
        self.feedback(f"Assigned to node group {self._name}: "
                      f"{', '.join(n.name for n in moving)}")
        return None


class LUGroupSetParams(_OneGroup):
    """``OP_GROUP_SET_PARAMS``: allocation policy, node and disk parameters."""

    OP_ID = "OP_GROUP_SET_PARAMS"
    op: OpGroupSetParams

    def check_arguments(self) -> None:
        """Something to change; everything valid."""
        op = self.op
        check_unsupported_state(hv_state=op.hv_state, disk_state=op.disk_state)
        if (op.alloc_policy is None and op.ndparams is None and not op.diskparams
                and not op.ipolicy):
            raise ParameterError("nothing to change: give at least one of alloc_policy, "
                                 "ndparams, diskparams, ipolicy")
        self._ndparams = validated_ndparams(op.ndparams) if op.ndparams is not None else None
        self._diskparams = validated_diskparams(op.diskparams) if op.diskparams else None

    def check_prereq(self) -> None:
        """The group still exists; a new policy allows enabled disk templates only, and
        the instances it newly refuses are named in a warning (Ganeti's)."""
        group = self._group()
        self._ipolicy: dict[str, Any] | None = None
        if self.op.ipolicy:
            store = self.master.store
            self._ipolicy = updated_policy(group.ipolicy, self.op.ipolicy, group=True)
            new = group_ipolicy(store, group, self._ipolicy)
            disk_templates_not_enabled(new, store.cluster.enabled_disk_templates)
            warn_new_violations(store, [(group, group_ipolicy(store, group), new)],
                                self.feedback)

    async def execute(self) -> list[list[str]] | None:
        """Apply and return ``[[parameter, new value], ...]`` (Ganeti's shape; a new
        policy adds no entry, as in Ganeti)."""
        if self.op.dry_run:
            return None
        result: list[list[str]] = []
        async with self.master.store.transaction() as txn:
            group = txn.get("nodegroup", self._uuid)
            if self._ipolicy is not None:
                group.ipolicy = self._ipolicy
            if self._ndparams is not None:
                group.ndparams = update_params(group.ndparams, self._ndparams)
                result.append(["ndparams", str(group.ndparams)])
            if self.op.alloc_policy is not None:
                group.alloc_policy = self.op.alloc_policy
                result.append(["alloc_policy", self.op.alloc_policy])
            if self._diskparams is not None:
                group.diskparams = _apply_diskparams(group.diskparams, self._diskparams)
                check_access_in_use(self.master.store, self.master.store.cluster.diskparams,
                                    group)
                result.append(["diskparams", str(group.diskparams)])
            txn.update(group)
        return result


#: The logical units of this area.
UNITS: tuple[type[LogicalUnit[Any]], ...] = (
    LUGroupAdd, LUGroupRemove, LUGroupRename, LUGroupAssignNodes, LUGroupSetParams,
)


# -- query -----------------------------------------------------------------------------


@dataclass
class GroupQueryData:
    """The configuration around groups: members and primary instances per group."""

    cluster: Cluster
    nodes: dict[str, list[str]]
    instances: dict[str, list[str]]

    @classmethod
    def build(cls, store: ConfigStore) -> GroupQueryData:
        """From one configuration snapshot."""
        nodes: dict[str, list[str]] = {}
        node_group: dict[str, str] = {}
        for node in store.all("node"):
            nodes.setdefault(node.group, []).append(node.name)
            node_group[node.uuid] = node.group
        instances: dict[str, list[str]] = {}
        for inst in store.all("instance"):
            group = node_group.get(inst.primary_node)
            if group is not None:
                instances.setdefault(group, []).append(inst.name)
        return cls(cluster=store.cluster, nodes=nodes, instances=instances)

    def ndparams(self, group: NodeGroup) -> dict[str, Any]:
        """Node parameters: cluster ← group."""
        return fill_params(self.cluster.ndparams, group.ndparams)

    def diskparams(self, group: NodeGroup) -> dict[str, dict[str, Any]]:
        """Disk parameters per template: cluster ← group."""
        templates = set(self.cluster.diskparams) | set(group.diskparams)
        return {t: fill_params(self.cluster.diskparams.get(t, {}), group.diskparams.get(t))
                for t in sorted(templates)}


def _build_fields() -> FieldRegistry[GroupQueryData, NodeGroup]:
    reg: FieldRegistry[GroupQueryData, NodeGroup] = FieldRegistry("group")
    add = reg.add
    add("alloc_policy", "AllocPolicy", "text", "Allocation policy for group",
        lambda _c, g: g.alloc_policy)
    add("name", "Group", "text", "Group name", lambda _c, g: g.name)
    add("serial_no", "SerialNo", "number",
        "Group object serial number, incremented on each modification",
        lambda _c, g: g.serial_no)
    add("uuid", "UUID", "text", "Group UUID", lambda _c, g: g.uuid)
    add("node_cnt", "Nodes", "number", "Number of nodes",
        lambda c, g: len(c.nodes.get(g.uuid, ())))
    add("node_list", "NodeList", "other", "List of nodes",
        lambda c, g: sorted(c.nodes.get(g.uuid, ())))
    add("pinst_cnt", "Instances", "number", "Number of primary instances",
        lambda c, g: len(c.instances.get(g.uuid, ())))
    add("pinst_list", "InstanceList", "other", "List of primary instances",
        lambda c, g: sorted(c.instances.get(g.uuid, ())))
    add("tags", "Tags", "other", "Tags", lambda _c, g: sorted(g.tags))
    add("custom_ndparams", "CustomNDParams", "other", "Custom node parameters",
        lambda _c, g: dict(g.ndparams))
    add("ndparams", "NDParams", "other", "Node parameters", lambda c, g: c.ndparams(g))
    add("diskparams", "DiskParameters", "other", "Disk parameters (merged)",
        lambda c, g: c.diskparams(g))
    add("custom_diskparams", "CustomDiskParameters", "other", "Custom disk parameters",
        lambda _c, g: {t: dict(v) for t, v in g.diskparams.items()})
    add("ipolicy", "InstancePolicy", "other",
        "Instance policy: the group's own settings, the cluster's for the others",
        lambda c, g: group_policy(c.cluster.ipolicy, g.ipolicy))
    add("custom_ipolicy", "CustomInstancePolicy", "other",
        "The instance policy settings the group overrides", lambda _c, g: dict(g.ipolicy))
    nd_param_fields(reg, lambda c, g: c.ndparams(g))
    add("ctime", "CTime", "timestamp", "Creation timestamp", lambda _c, g: g.ctime)
    add("mtime", "MTime", "timestamp", "Modification timestamp", lambda _c, g: g.mtime)
    return reg


#: The fields of the ``group`` resource (``gnt-group list``, ``/2/groups?bulk=1``).
GROUP_FIELDS = _build_fields()


def query_resources(ctx: MasterContext) -> dict[str, QueryResource]:
    """The query resources this area answers (``OP_QUERY`` / luxi ``Query``)."""

    async def query(fields: list[str], qfilter: Any) -> dict[str, Any]:
        store = ctx.store
        groups, qfilter = pick_items(store.all("nodegroup"), qfilter,
                                     lambda group: group.name,
                                     named_lookup(store, "nodegroup"))
        return GROUP_FIELDS.query(groups, fields, qfilter, GroupQueryData.build(store))

    return {"group": QueryResource(query=query, query_fields=GROUP_FIELDS.query_fields)}
