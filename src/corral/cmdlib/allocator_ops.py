"""Logical units that ask an allocator and act on its answer with jobs of their own:
node evacuation and migration, changing an instance's node group, creating several
instances at once, and ``OP_TEST_ALLOCATOR`` (``gnt-debug iallocator``).

As in Ganeti, the units that move instances do not move them themselves: each
instance gets a job (failover, migration or creation) submitted to the queue, and the
unit's result is ``{"jobs": [[True, job id] | [False, why], ...]}``. The jobs carry
the unit's priority, its reason trail (their own entries follow) and the comment
``Submitted by OP_...``. With ``dry_run`` the unit answers what it would do and
submits nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from corral.cmdlib.aggregates import (
    by_constraints,
    describe_constraints,
    instance_constraints,
    unsuitable_nodes,
)
from corral.cmdlib.allocation import allocator_names, gather_live, run_allocators
from corral.cmdlib.base import LockRequest, LogicalUnit
from corral.cmdlib.common import expand_group, expand_instance, expand_node
from corral.cmdlib.instance_create import request_for_create
from corral.errors import (
    AlreadyExistsError,
    NotFoundError,
    OpExecError,
    OpPrereqError,
    ParameterError,
)
from corral.iallocator import (
    ClusterView,
    allocate_request,
    build_input,
    change_group_request,
    multi_allocate_request,
    node_evacuate_request,
    relocate_request,
)
from corral.locking import ALL_SET, LockLevel
from corral.objects import Instance, Node
from corral.opcodes import OpCode, op_from_dict
from corral.opcodes.alloc_ops import (
    OpInstanceChangeGroup,
    OpInstanceMultiAlloc,
    OpNodeEvacuate,
    OpNodeMigrate,
    OpTestAllocator,
)
from corral.opcodes.instance_change_ops import OpInstanceMigrate
from corral.opcodes.instance_ops import OpInstanceCreate

__all__ = [
    "UNITS",
    "LUInstanceChangeGroup",
    "LUInstanceMultiAlloc",
    "LUNodeEvacuate",
    "LUNodeMigrate",
    "LUTestAllocator",
    "node_instances",
    "submit_jobs",
]


# -- shared steps ----------------------------------------------------------------------


async def submit_jobs(lu: LogicalUnit[Any], jobs: Sequence[Sequence[OpCode]]) -> list[list[Any]]:
    """Submit ``jobs`` for ``lu``: each opcode gets the unit's priority and debug level
    (unless it has its own), the unit's reason trail after its own entries, and the
    comment ``Submitted by OP_...`` (Ganeti's); ``[[success, id or why], ...]``."""
    src = lu.op
    prepared = [[msgspec.structs.replace(
        op, priority=op.priority or src.priority, debug_level=src.debug_level,
        reason=[*op.reason, *src.reason], comment=op.comment or f"Submitted by {src.OP_ID}")
        for op in job] for job in jobs]
    if not prepared:
        return []
    return [[ok, value] for ok, value in await lu.master.submit_jobs(prepared)]


def node_instances(lu: LogicalUnit[Any], node: Node) -> tuple[list[Instance], list[Instance]]:
    """The instances with ``node`` as primary node, and those with it as secondary."""
    store = lu.master.store
    primaries: list[Instance] = []
    secondaries: list[Instance] = []
    for inst in store.all("instance"):
        if inst.primary_node == node.uuid:
            primaries.append(inst)
        elif any(node.uuid in disk.nodes for disk in
                 (store.get("disk", uuid) for uuid in inst.disks)):
            secondaries.append(inst)
    return primaries, secondaries


def _jobs_from_answer(lu: LogicalUnit[Any], allocator: str, result: Any, *,
                      use_nodes: bool) -> list[list[OpCode]]:
    """The jobs of a ``node-evacuate`` or ``change-group`` answer (Ganeti's handling:
    instances it could not place fail the unit; the moves go to the job log)."""
    moved, failed, jobs = result
    if failed:
        reasons = ", ".join(f"{name} ({why})" for name, why in failed)
        lu.feedback(f" - WARNING: Unable to evacuate instances {reasons}")
        raise OpExecError(f"Unable to evacuate instances {reasons}")
    if moved:
        lu.feedback(" - INFO: Instances to be moved: " + ", ".join(
            f"{name} (to {', '.join(nodes) if use_nodes else group})"
            for name, group, nodes in moved))
    loaded: list[list[OpCode]] = []
    for job in jobs:
        ops: list[OpCode] = []
        for op in job:
            try:
                ops.append(op_from_dict(op, where=f"iallocator '{allocator}' job"))
            except ParameterError as err:
                raise OpExecError(f"iallocator '{allocator}' returned a job corral cannot "
                                  f"run: {err.message}") from None
        loaded.append(ops)
    return loaded


def _require_allocator(lu: LogicalUnit[Any], iallocator: str | None, node: str | None) -> None:
    """Ganeti's rule for units that take an allocator or a node: not both, and without
    either the cluster needs a default allocator."""
    if iallocator and node:
        raise ParameterError("Do not specify both, iallocator and node")
    if not node and not iallocator and not lu.master.store.cluster.default_iallocators:
        raise ParameterError("No iallocator or node given and no cluster-wide default "
                             "iallocator found; please specify either an iallocator or a "
                             "node, or set a cluster-wide default iallocator")


# -- node evacuation and migration -----------------------------------------------------


def _evacuation_failure(why: str) -> Callable[[str, str], str]:
    """How a node evacuation words an allocator's failure, ``why`` appended."""
    return lambda name, info: (f"Can't compute node evacuation using iallocator '{name}': "
                               f"{info}{why}")


class LUNodeEvacuate(LogicalUnit[OpNodeEvacuate]):
    """``OP_NODE_EVACUATE``: an allocator plans where a node's instances go; one job per
    instance carries the plan out.

    ``primary-only`` and ``secondary-only`` are Ganeti's requests; ``all`` (which
    Ganeti 3.0 refuses) asks for the primary instances and then for the secondary
    ones, in two requests, and submits both plans.
    """

    OP_ID = "OP_NODE_EVACUATE"

    def check_arguments(self) -> None:
        """An allocator or a new secondary node, not both."""
        _require_allocator(self, self.op.iallocator, self.op.remote_node)

    def expand_names(self) -> None:
        """The node, the new secondary node, the node's group members."""
        op, store = self.op, self.master.store
        node = expand_node(store, op.node_uuid or op.node_name)
        op.node_name, op.node_uuid = node.name, node.uuid
        if op.remote_node or op.remote_node_uuid:
            remote = expand_node(store, op.remote_node_uuid or op.remote_node or "")
            op.remote_node, op.remote_node_uuid = remote.name, remote.uuid
            if remote.uuid == node.uuid:
                raise ParameterError("Can not use evacuated node as a new secondary node")
            if op.mode != "secondary-only":
                raise ParameterError("Without the use of an iallocator only secondary "
                                     "instances can be evacuated")
        else:
            self.allocators = allocator_names(self.master, op.iallocator)
        self.primaries, self.secondaries = node_instances(self, node)

    def _moving(self) -> list[Instance]:
        mode = self.op.mode
        return ((self.primaries if mode != "secondary-only" else [])
                + (self.secondaries if mode != "primary-only" else []))

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The instances to move, the node's group and its members, all shared (the
        jobs take what they change)."""
        store = self.master.store
        node = store.get("node", self.op.node_uuid or "")
        group = store.get("nodegroup", node.group)
        members = sorted(n.name for n in store.all("node") if n.group == group.uuid)
        if self.op.remote_node:
            members = sorted({node.name, self.op.remote_node})
        return {LockLevel.INSTANCE: LockRequest(sorted(i.name for i in self._moving()),
                                                shared=True),
                LockLevel.NODEGROUP: LockRequest([group.name], shared=True),
                LockLevel.NODE: LockRequest(members, shared=True)}

    def check_prereq(self) -> None:
        """The instances are still those of the node."""
        node = self.master.store.get("node", self.op.node_uuid or "")
        before = sorted(i.name for i in self._moving())
        self.primaries, self.secondaries = node_instances(self, node)
        names = sorted(i.name for i in self._moving())
        if names != before:
            raise OpExecError(f"Instances on node '{node.name}' changed since locks were "
                              f"acquired, current instances are '{', '.join(names)}', used to "
                              f"be '{', '.join(before)}'; retry the operation")
        if names:
            self.feedback(f" - INFO: Evacuating instances from node '{node.name}': "
                          f"{', '.join(names)}")
        else:
            self.feedback(f" - INFO: No instances to evacuate from node '{node.name}'")
        if self.op.remote_node and self.secondaries:
            raise OpPrereqError(
                f"cannot give the secondary instances of node {node.name} a new secondary "
                f"node: corral has no mirrored disk template (DRBD); use an allocator (-I)")

    async def execute(self) -> dict[str, Any]:
        """Ask the allocator (once per kind of instance), then submit the moves."""
        op = self.op
        jobs: list[list[OpCode]] = []
        plan: dict[str, Any] = {"moved": [], "failed": []}
        extra = {"ignore-soft-errors": None} if op.ignore_soft_errors else {}
        store = self.master.store
        source = store.get("node", op.node_uuid or "").name
        for mode, instances in (("primary-only", self.primaries),
                                ("secondary-only", self.secondaries)):
            if not instances or op.mode not in (mode, "all"):
                continue
            # one request per set of placement constraints, each seeing the nodes
            # that set forbids as drained (the protocol has no per-instance node list)
            for constraints, batch in by_constraints(instances):
                avoid = [n for n in unsuitable_nodes(store, constraints) if n != source]
                why = (f" (nodes {', '.join(avoid)} break the placement constraints of "
                       f"instance(s) {', '.join(i.name for i in batch)}: "
                       f"{describe_constraints(store, constraints)})" if avoid else "")
                name, answer = await run_allocators(
                    self, self.allocators,
                    node_evacuate_request(sorted(i.name for i in batch), mode),
                    extra_params=extra, unsuitable=avoid,
                    failure=_evacuation_failure(why))
                plan["moved"] += answer.result[0]
                plan["failed"] += answer.result[1]
                jobs += _jobs_from_answer(self, name, answer.result, use_nodes=True)
        if op.dry_run:
            return {"jobs": [], **plan}
        return {"jobs": await submit_jobs(self, jobs)}


class LUNodeMigrate(LogicalUnit[OpNodeMigrate]):
    """``OP_NODE_MIGRATE``: one migration job per primary instance of the node, each to
    the target node or where its allocator says (Ganeti's)."""

    OP_ID = "OP_NODE_MIGRATE"

    def check_arguments(self) -> None:
        """``live`` and ``mode`` exclude each other."""
        if self.op.live is not None and self.op.mode is not None:
            raise ParameterError("Only one of the --non-live and --migration-mode options can "
                                 "be passed")

    def expand_names(self) -> None:
        """The node and the target node."""
        op, store = self.op, self.master.store
        node = expand_node(store, op.node_uuid or op.node_name)
        op.node_name, op.node_uuid = node.name, node.uuid
        if op.target_node or op.target_node_uuid:
            target = expand_node(store, op.target_node_uuid or op.target_node or "")
            op.target_node, op.target_node_uuid = target.name, target.uuid

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The node, shared."""
        return {LockLevel.NODE: LockRequest([self.op.node_name], shared=True)}

    async def execute(self) -> dict[str, Any]:
        """A migration job per primary instance."""
        op = self.op
        node = self.master.store.get("node", op.node_uuid or "")
        primaries, _secondaries = node_instances(self, node)
        jobs: list[list[OpCode]] = [[OpInstanceMigrate(
            instance_name=inst.name, mode=op.mode, live=op.live, iallocator=op.iallocator,
            target_node=op.target_node, allow_runtime_changes=op.allow_runtime_changes,
            ignore_ipolicy=op.ignore_ipolicy)] for inst in primaries]
        if op.dry_run:
            return {"jobs": [], "instances": [inst.name for inst in primaries]}
        return {"jobs": await submit_jobs(self, jobs)}


# -- changing group ----------------------------------------------------------------------


class LUInstanceChangeGroup(LogicalUnit[OpInstanceChangeGroup]):
    """``OP_INSTANCE_CHANGE_GROUP``: an allocator plans the move of an instance to
    another node group; the plan's jobs carry it out."""

    OP_ID = "OP_INSTANCE_CHANGE_GROUP"

    def expand_names(self) -> None:
        """The instance, the target groups, the allocators."""
        op, store = self.op, self.master.store
        inst = expand_instance(store, op.instance_uuid or op.instance_name)
        op.instance_name, op.instance_uuid = inst.name, inst.uuid
        self.targets = ([expand_group(store, g) for g in op.target_groups]
                        if op.target_groups else None)
        self.allocators = allocator_names(self.master, op.iallocator)

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The instance and the groups, shared."""
        groups = (sorted({g.name for g in self.targets} | {g.name for g in self._own()})
                  if self.targets else ALL_SET)
        return {LockLevel.INSTANCE: LockRequest([self.op.instance_name], shared=True),
                LockLevel.NODEGROUP: LockRequest(groups, shared=True)}

    def _own(self) -> list[Any]:
        """The groups of the instance's nodes."""
        store = self.master.store
        inst = store.get("instance", self.op.instance_uuid or "")
        nodes = {inst.primary_node} | {n for uuid in inst.disks
                                       for n in store.get("disk", uuid).nodes}
        return [store.get("nodegroup", store.get("node", n).group) for n in sorted(nodes)]

    def check_prereq(self) -> None:
        """Targets other than the instance's own groups (Ganeti's checks)."""
        store = self.master.store
        own = {g.uuid: g for g in self._own()}
        if self.targets is not None:
            targets = {g.uuid: g for g in self.targets}
        else:
            targets = {g.uuid: g for g in store.all("nodegroup") if g.uuid not in own}
        conflicting = sorted(set(targets) & set(own))
        if conflicting:
            raise OpPrereqError(f"Can't use group(s) '{', '.join(conflicting)}' as targets, "
                                f"they are used by the instance '{self.op.instance_name}'",
                                ecode="wrong_input")
        if not targets:
            raise OpPrereqError("There are no possible target groups", ecode="wrong_input")
        self.target_uuids = sorted(targets)

    async def execute(self) -> dict[str, Any]:
        """Ask the allocator, then submit its jobs."""
        op, store = self.op, self.master.store
        constraints = instance_constraints(store.get("instance", op.instance_uuid or ""))
        avoid = unsuitable_nodes(store, constraints)
        why = (f" (nodes {', '.join(avoid)} break its placement constraints: "
               f"{describe_constraints(store, constraints)})" if avoid else "")
        name, answer = await run_allocators(
            self, self.allocators,
            change_group_request([op.instance_name], self.target_uuids),
            unsuitable=avoid,
            failure=lambda name, info: (
                f"Can't compute solution for changing group of instance "
                f"'{op.instance_name}' using iallocator '{name}': {info}{why}"))
        jobs = _jobs_from_answer(self, name, answer.result, use_nodes=False)
        self.feedback(f" - INFO: Iallocator returned {len(jobs)} job(s) for changing group of "
                      f"instance '{op.instance_name}'")
        if op.dry_run:
            return {"jobs": [], "moved": answer.result[0]}
        return {"jobs": await submit_jobs(self, jobs)}


# -- several instances at once -----------------------------------------------------------


def _create_op(data: Any, index: int) -> OpInstanceCreate:
    if not isinstance(data, dict):
        raise ParameterError(f"instances[{index}]: expected the parameters of "
                             f"OP_INSTANCE_CREATE, got {data!r}")
    op = op_from_dict({**data, "OP_ID": "OP_INSTANCE_CREATE"}, where=f"instances[{index}]")
    assert isinstance(op, OpInstanceCreate)
    return op


class LUInstanceMultiAlloc(LogicalUnit[OpInstanceMultiAlloc]):
    """``OP_INSTANCE_MULTI_ALLOC``: one allocator request places every instance; each
    that fits is created in a job of its own."""

    OP_ID = "OP_INSTANCE_MULTI_ALLOC"

    def check_arguments(self) -> None:
        """Each instance is a valid create; all or none name their nodes (Ganeti's)."""
        self.creates = [_create_op(data, i) for i, data in enumerate(self.op.instances)]
        if any(op.iallocator for op in self.creates):
            raise ParameterError("iallocator are not allowed to be set on instance objects")
        with_nodes = [bool(op.pnode or op.pnode_uuid) for op in self.creates]
        if any(with_nodes) and not all(with_nodes):
            raise ParameterError("There are instance objects providing pnode/snode while "
                                 "others do not")
        self.placed = bool(with_nodes) and all(with_nodes)
        constrained = [op.instance_name for op in self.creates
                       if op.member_of or op.required_traits or op.forbidden_traits]
        if constrained and not self.placed:
            # a multi-allocate request has no per-instance node list to carry them
            raise ParameterError(
                "placement constraints (member_of, required_traits, forbidden_traits) are "
                "not supported when an allocator places several instances at once "
                f"({', '.join(constrained)}); create those instances one by one, or give "
                "each its node (pnode), where the constraints are checked")
        if not self.placed and not self.op.iallocator and \
                not self.master.store.cluster.default_iallocators:
            raise ParameterError(
                "No iallocator or nodes on the instances given and no cluster-wide default "
                "iallocator found; please specify either an iallocator or nodes on the "
                "instances or set a cluster-wide default iallocator")
        names = [op.instance_name for op in self.creates]
        dups = sorted({name for name in names if names.count(name) > 1})
        if dups:
            raise ParameterError(f"There are duplicate instance names: {', '.join(dups)}")

    def expand_names(self) -> None:
        """The instances' nodes, or the allocators."""
        store = self.master.store
        self.allocators = [] if self.placed else allocator_names(self.master,
                                                                 self.op.iallocator)
        for op in self.creates:
            if op.pnode or op.pnode_uuid:
                node = expand_node(store, op.pnode_uuid or op.pnode or "")
                op.pnode, op.pnode_uuid = node.name, node.uuid

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """Every node (or the named ones), shared."""
        nodes = (sorted({op.pnode or "" for op in self.creates}) if self.placed else ALL_SET)
        return {LockLevel.NODE: LockRequest(nodes, shared=True),
                LockLevel.NODE_RES: LockRequest(nodes, shared=True)}

    def check_prereq(self) -> None:
        """The names are free."""
        store = self.master.store
        for op in self.creates:
            if store.find("instance", op.instance_name) is not None:
                raise AlreadyExistsError(f"instance {op.instance_name!r} already exists")

    async def execute(self) -> dict[str, Any]:
        """Ask the allocator, then submit a create job per placed instance."""
        store = self.master.store
        if self.placed:
            allocatable = [(op.instance_name, [op.pnode or ""]) for op in self.creates]
            failed: list[str] = []
        else:
            request = multi_allocate_request([request_for_create(store, op)
                                              for op in self.creates])
            _name, answer = await run_allocators(
                self, self.allocators, request,
                failure=lambda name, info: f"Can't compute nodes using iallocator '{name}': "
                                           f"{info}")
            allocatable = [(name, list(nodes)) for name, nodes in answer.result[0]]
            failed = list(answer.result[1])
            known = {op.instance_name for op in self.creates}
            unknown = sorted({name for name, _n in allocatable} - known)
            if unknown:
                raise OpExecError(f"the allocator placed instances it was not asked about: "
                                  f"{', '.join(unknown)}")
        result: dict[str, Any] = {"allocatable": [name for name, _n in allocatable],
                                  "failed": failed}
        if self.op.dry_run:
            return {**result, "jobs": [], "nodes": {name: nodes for name, nodes in allocatable}}
        by_name = {op.instance_name: op for op in self.creates}
        jobs: list[list[OpCode]] = []
        for name, nodes in allocatable:
            node = store.find("node", nodes[0])
            if node is None:
                raise NotFoundError(f"Node '{nodes[0]}' not known (the allocator placed "
                                    f"instance {name} there)")
            jobs.append([msgspec.structs.replace(by_name[name], pnode=node.name,
                                                 pnode_uuid=node.uuid, iallocator=None)])
        return {**result, "jobs": await submit_jobs(self, jobs)}


# -- gnt-debug iallocator ----------------------------------------------------------------


class LUTestAllocator(LogicalUnit[OpTestAllocator]):
    """``OP_TEST_ALLOCATOR``: the input an allocator would get (``in``) or its raw
    answer (``out``), for one request built from the opcode (Ganeti's checks)."""

    OP_ID = "OP_TEST_ALLOCATOR"
    USES_BGL = False

    def check_prereq(self) -> None:
        """Each mode's needs; ``out`` needs an allocator name."""
        op, store = self.op, self.master.store
        if op.mode in ("allocate", "multi-allocate"):
            existing = store.find("instance", op.name)
            if existing is not None:
                raise OpPrereqError(f"Instance '{existing.name}' already in the cluster",
                                    ecode="already_exists")
            for row in op.disks or []:
                size = row.get("size") if isinstance(row, dict) else None
                if (not isinstance(size, int) or isinstance(size, bool)
                        or row.get("mode") not in ("rw", "ro")):
                    raise ParameterError("Invalid contents of the 'disks' parameter")
            if op.hypervisor is None:
                op.hypervisor = store.cluster.default_hypervisor
        elif op.mode == "relocate":
            self.instance = expand_instance(store, op.name)
            op.name = self.instance.name
        elif op.mode in ("change-group", "node-evacuate"):
            if not op.instances:
                raise ParameterError("Missing instances")
            op.instances = [expand_instance(store, name).name for name in op.instances]
        else:
            raise ParameterError(f"Invalid test allocator mode '{op.mode}'")
        if op.direction == "out" and not op.iallocator:
            raise ParameterError("Missing allocator name")

    def _request(self) -> dict[str, Any]:
        op, store = self.op, self.master.store

        def alloc(name: str) -> dict[str, Any]:
            return allocate_request(
                name=name, disk_template=op.disk_template or "", disks=op.disks or [],
                nics=op.nics or [], vcpus=op.vcpus or 0, memory=op.memory or 0,
                spindle_use=op.spindle_use, os=op.os or "", tags=op.tags,
                hypervisor=op.hypervisor or "", group_name=op.group_name)

        if op.mode == "allocate":
            return alloc(op.name)
        if op.mode == "multi-allocate":
            return multi_allocate_request([alloc(f"{op.name}{i}") for i in range(op.count)])
        if op.mode == "relocate":
            inst = self.instance
            others = sorted({n for uuid in inst.disks for n in store.get("disk", uuid).nodes}
                            - {inst.primary_node})
            source = others or [inst.primary_node]
            return relocate_request(store, inst, [store.get("node", n).name for n in source])
        if op.mode == "change-group":
            return change_group_request(op.instances or [], op.target_groups or [])
        return node_evacuate_request(op.instances or [], op.evac_mode or "all")

    async def execute(self) -> str:
        """The input's text, or the allocator's answer's."""
        op, store = self.op, self.master.store
        request = self._request()
        cluster = store.cluster
        template = (request.get("disk_template")
                    or (cluster.enabled_disk_templates or ["diskless"])[0])
        hypervisor = (op.hypervisor if op.mode == "allocate" else None) or \
            (self.instance.hypervisor if op.mode == "relocate" else cluster.default_hypervisor)
        live = await gather_live(self.master, hypervisor=hypervisor, disk_template=template)
        data = await asyncio.to_thread(build_input, ClusterView.of(store), live, request,
                                       disk_template=template)
        if op.direction == "in":
            text: bytes = await asyncio.to_thread(msgspec.json.encode, data)
            return text.decode()
        assert op.iallocator is not None
        return await self.master.iallocators.run(
            op.iallocator, data, search_path=cluster.iallocator_search_path,
            params=cluster.default_iallocator_params, timeout=cluster.iallocator_timeout)


#: The logical units of this area.
UNITS: tuple[type[LogicalUnit[Any]], ...] = (
    LUNodeEvacuate, LUNodeMigrate, LUInstanceChangeGroup, LUInstanceMultiAlloc,
    LUTestAllocator,
)
