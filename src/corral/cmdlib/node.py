"""Node operations: add (join by token), remove, change flags and parameters.

**Roles** (:mod:`corral.cmdlib.node_roles`): a new node, or one coming back online
or undrained, is promoted to master candidate while the pool is short; removing a
node promotes others to refill it; demoting a candidate that would leave the pool
short is refused unless ``auto_promote`` (another node is promoted) or ``force``
(the pool stays short) is given. The ``node`` query resource is
:mod:`corral.cmdlib.node_query`.

**Joining.** ``OP_NODE_ADD`` hands the fresh node daemon the cluster's certificates
(proved by its one-time token), checks that it then answers ``version`` with this
master's RPC version, and only then records the node. A node that joined but fails
the version check is told to leave again, so nothing is half-added.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from corral.cmdlib.aggregates import apply_list_change
from corral.cmdlib.base import LockRequest, LogicalUnit, MasterContext
from corral.cmdlib.common import expand_group, expand_node
from corral.cmdlib.config_files import send_config_files, warn_missing
from corral.cmdlib.node_homing import check_new_node_homing, check_secondary_change
from corral.cmdlib.node_query import (
    LIVE_FIELDS,
    NODE_FIELDS,
    NodeQueryData,
    nd_param_fields,
    query_resources,
)
from corral.cmdlib.node_roles import ROLE_FLAGS as _ROLE_FLAGS
from corral.cmdlib.node_roles import candidate_stats, node_role, promote_candidates
from corral.cmdlib.node_roles import is_eligible as _eligible
from corral.cmdlib.node_roles import nodes_after as _nodes_after
from corral.config.replica import snapshot_args
from corral.errors import (
    AlreadyExistsError,
    CorralError,
    JoinError,
    NodeUnreachableError,
    NotFoundError,
    OpExecError,
    OpPrereqError,
    ParameterError,
)
from corral.locking import ALL_SET, LockLevel
from corral.objects import Node, NodeGroup
from corral.objects.params import ND_PARAMS, update_params, validate_params
from corral.opcodes.node_ops import OpNodeAdd, OpNodeRemove, OpNodeSetParams
from corral.placement.constraints import check_traits
from corral.rpc.chunks import call_in_parts
from corral.rpc.protocol import RPC_VERSION, RpcResult

if TYPE_CHECKING:
    from corral.config import ConfigStore

__all__ = [
    "LIVE_FIELDS",
    "NODE_FIELDS",
    "UNITS",
    "LUNodeAdd",
    "LUNodeRemove",
    "LUNodeSetParams",
    "NodeQueryData",
    "candidate_stats",
    "check_unsupported_state",
    "default_group",
    "give_candidate_files",
    "nd_param_fields",
    "node_role",
    "promote_candidates",
    "query_resources",
    "validated_ndparams",
]

_HOSTNAME_RE = re.compile(
    r"^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$",
    re.IGNORECASE,
)



# -- shared helpers ----------------------------------------------------------------


def _check_ip(what: str, text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise ParameterError(f"invalid {what} {text!r}: not an IPv4 or IPv6 address") from None


def check_unsupported_state(**values: dict[str, Any] | None) -> None:
    """Refuse Ganeti parameters corral accepts only empty (``hv_state``,
    ``disk_state``): it keeps no static resource state."""
    for name, value in values.items():
        if value:
            raise ParameterError(
                f"parameter {name} is not supported by corral (it keeps no static "
                f"hypervisor/disk state); leave it empty"
            )


def validated_ndparams(values: dict[str, Any] | None) -> dict[str, Any]:
    """Node parameters checked and coerced; ``None``/``"default"`` values stay ``None``
    (they remove an override)."""
    return validate_params("node", ND_PARAMS, values or {})


def default_group(store: ConfigStore) -> NodeGroup:
    """The group new nodes join when none is named: the only group, else the one
    called ``default``, else the master node's group."""
    groups = store.all("nodegroup")
    if len(groups) == 1:
        return groups[0]
    named = store.find("nodegroup", "default")
    if named is not None:
        return named
    return store.get("nodegroup", store.get("node", store.cluster.master_node).group)


def _instances_on(store: ConfigStore, node: Node) -> tuple[list[str], list[str]]:
    """Names of the instances with ``node`` as primary and as secondary node."""
    primary: list[str] = []
    secondary: list[str] = []
    for inst in store.all("instance"):
        if inst.primary_node == node.uuid:
            primary.append(inst.name)
        elif any(node.uuid in store.get("disk", d).nodes for d in inst.disks
                 if store.find("disk", d) is not None):
            secondary.append(inst.name)
    return primary, secondary


async def _check_version(master: MasterContext, node: Node, what: str) -> None:
    """``node`` must answer ``version`` with this master's RPC version."""
    result = (await master.rpc.call([node], "version", {}))[node.name]
    payload = result.get(what)
    remote = payload.get("rpc_version") if isinstance(payload, dict) else None
    if remote != RPC_VERSION:
        raise OpExecError(
            f"{what}: node {node.name} speaks node RPC version {remote}, this master "
            f"speaks {RPC_VERSION}; install the same corral version on both"
        )


# -- add -------------------------------------------------------------------------


class LUNodeAdd(LogicalUnit[OpNodeAdd]):
    """``OP_NODE_ADD``: join a fresh node daemon by its token and record the node."""

    OP_ID = "OP_NODE_ADD"
    REQ_BGL = True

    def check_arguments(self) -> None:
        """Name, addresses and token must be well formed; Ganeti-only state refused."""
        op = self.op
        if not _HOSTNAME_RE.match(op.node_name):
            raise ParameterError(
                f"invalid node name {op.node_name!r}: use a host name of letters, digits, "
                "'-' and '.'"
            )
        self._name = op.node_name.lower()
        if op.primary_ip is None and not op.readd:
            raise ParameterError(
                f"the primary IP of node {self._name} is needed (--primary-ip): corral "
                "does not resolve node names"
            )
        self._primary = _check_ip("primary IP", op.primary_ip) if op.primary_ip else None
        self._secondary = (_check_ip("secondary IP", op.secondary_ip)
                           if op.secondary_ip else None)
        if not op.token:
            raise ParameterError(
                f"a join token is needed to add node {self._name} (--token): the node "
                "daemon prints it when it starts without a cluster and keeps it in its "
                "join-token file"
            )
        check_unsupported_state(hv_state=op.hv_state, disk_state=op.disk_state)
        self._ndparams = update_params({}, validated_ndparams(op.ndparams))

    def check_prereq(self) -> None:
        """New: name and addresses unused, group exists. Re-add: the node exists and is
        not the master."""
        store = self.master.store
        existing = store.find("node", self._name)
        master = store.get("node", store.cluster.master_node)
        if self.op.readd:
            if existing is None:
                raise NotFoundError(
                    f"node {self._name} is not in the cluster; add it without --readd")
            if existing.uuid == master.uuid:
                raise OpPrereqError(f"node {self._name} is the master node; it cannot be re-added")
            if self._primary and self._primary != existing.primary_ip:
                raise OpPrereqError(
                    f"node {self._name} is re-added with primary IP {self._primary} but has "
                    f"{existing.primary_ip}; remove it and add it again to change its address"
                )
            self._primary = existing.primary_ip
            self._group = store.get("nodegroup", existing.group)
            return
        if existing is not None:
            raise AlreadyExistsError(
                f"node {self._name} is already in the cluster; use --readd to re-add it")
        assert self._primary is not None
        for ip in (self._primary, self._secondary):
            if ip is None:
                continue
            for other in store.all("node"):
                if ip in (other.primary_ip, other.secondary_ip):
                    raise AlreadyExistsError(
                        f"IP address {ip} of new node {self._name} is already used by "
                        f"node {other.name}")
        check_new_node_homing(master, self._name, self._primary, self._secondary)
        self._group = (expand_group(store, self.op.group) if self.op.group
                       else default_group(store))

    def _node(self) -> Node:
        store = self.master.store
        if self.op.readd:
            existing = store.get("node", self._name)
            return msgspec.structs.replace(existing, offline=False, drained=False)
        op = self.op
        assert self._primary is not None
        return Node(
            name=self._name, primary_ip=self._primary,
            secondary_ip="" if self._secondary in (None, self._primary) else self._secondary,
            group=self._group.uuid, master_candidate=False,
            master_capable=True if op.master_capable is None else op.master_capable,
            vm_capable=True if op.vm_capable is None else op.vm_capable,
            ndparams=self._ndparams,
        )

    async def execute(self) -> None:
        """Join, check the version, record the node, add its locks, fill the pool,
        send it the files made from the configuration (the uid pool)."""
        if self.op.dry_run:
            return None
        node = self._node()
        port = self.master.store.cluster.noded_port
        self.feedback(f"Joining node {node.name} ({node.primary_ip}) to the cluster")
        assert self.op.token is not None
        joined: RpcResult = await self.master.rpc.join(node, self.op.token)
        if joined.unreachable:
            assert joined.error is not None
            raise NodeUnreachableError(
                f"cannot join node {node.name}: {joined.error.message}")
        if joined.failed:
            assert joined.error is not None
            raise JoinError(
                f"node {node.name} ({node.primary_ip}:{port}) refused to join: "
                f"{joined.error.message}; the token is wrong: give the one its node daemon "
                "printed at start (also in its join-token file)"
            )
        try:
            await _check_version(self.master, node, "checking the new node's version")
            if self._becomes_candidate(node):
                await seed_replica(self.master, node)
        except CorralError:
            await self._leave(node)
            raise
        await self._commit(node)
        if not self.op.readd:
            for level in (LockLevel.NODE, LockLevel.NODE_RES):
                await self.master.locks.add(level, node.name, owner=self.owner, acquired=True)
        added = self.master.store.get("node", node.uuid)  # as committed: a candidate?
        warn_missing(await send_config_files(self.master, [added], ancillary=True),
                     self.feedback, "the cluster's files (user-id pool, VNC passwords)")
        return None

    async def _commit(self, node: Node) -> None:
        store = self.master.store
        op = self.op
        async with store.transaction() as txn:
            if op.readd:
                record = txn.get("node", node.uuid)
                record.offline = record.drained = False
                if op.master_capable is not None:
                    record.master_capable = op.master_capable
                if op.vm_capable is not None:
                    record.vm_capable = op.vm_capable
                if op.ndparams is not None:
                    record.ndparams = self._ndparams
            else:
                record = node
            record.master_candidate = self._becomes_candidate(record)
            if op.readd:
                txn.update(record)
            else:
                txn.add(record)
        role = "master candidate" if record.master_candidate else "regular node"
        verb = "Re-added" if op.readd else "Added"
        # Design 2.1 reports the node's uuid on node adds; in the job log, as the
        # result stays Ganeti's (none).
        self.feedback(f"{verb} node {node.name} with UUID {record.uuid} to group "
                      f"{self._group.name} as {role}")

    def _becomes_candidate(self, node: Node) -> bool:
        """Whether the node joins the candidate pool (it is eligible and the pool short)."""
        store = self.master.store
        current, _eligible_count = candidate_stats(store.all("node"), exclude={node.uuid})
        return _eligible(node) and current < store.cluster.candidate_pool_size

    async def _leave(self, node: Node) -> None:
        result = (await self.master.rpc.call([node], "node_leave", {}))[node.name]
        if result.failed:
            assert result.error is not None
            self.feedback(
                f"Warning: node {node.name} joined but could not be told to leave again "
                f"({result.error.message}); restart its node daemon without a cluster")


async def seed_replica(master: MasterContext, node: Node) -> None:
    """Give a node about to become a master candidate a full copy of the configuration,
    so that it holds one before it counts as a candidate (confd on it answers, a
    failover may pick it); the master's replication keeps it current afterwards."""
    async def call(args: dict[str, Any]) -> RpcResult:
        return (await master.rpc.call([node], "config_replicate", args))[node.name]

    result = await call_in_parts(call, snapshot_args(master.store))
    if result.error is not None:
        raise OpExecError(f"cannot give node {node.name} a copy of the configuration before "
                          f"promoting it to master candidate: {result.error.message}")
    failed = await give_candidate_files(master, [node])
    if failed:
        raise OpExecError(f"cannot give node {node.name} the master candidates' files "
                          f"before promoting it: {failed[node.name]}")


async def give_candidate_files(master: MasterContext, nodes: list[Node]) -> dict[str, str]:
    """Send new master candidates what they need to become the master: the master's
    client certificate (node daemons take changes only from it) and the RAPI users
    file. The nodes that failed, with the reason."""
    files = [{k: v for k, v in f.items() if k != "candidates_only"}
             for f in master.ancillary_files() if f.get("candidates_only")]
    if not files or not nodes:
        return {}
    results = await master.rpc.call(nodes, "upload_files", {"files": files})
    return {name: r.error.message for name, r in results.items() if r.error is not None}


async def _equip_promoted(master: MasterContext, names: list[str],
                          feedback: Callable[[str], None]) -> None:
    """Give nodes promoted to master candidate their files; a failure is a warning
    (``gnt-cluster redistribute-conf`` sends them again)."""
    nodes = [n for n in master.store.all("node") if n.name in names and not n.offline]
    for name, message in sorted((await give_candidate_files(master, nodes)).items()):
        feedback(f"Warning: node {name} did not get the master candidates' files "
                 f"({message}); run 'gnt-cluster redistribute-conf' before a failover to it")


# -- remove ----------------------------------------------------------------------


class LUNodeRemove(LogicalUnit[OpNodeRemove]):
    """``OP_NODE_REMOVE``: forget a node without instances; it leaves the cluster."""

    OP_ID = "OP_NODE_REMOVE"
    REQ_BGL = True

    def expand_names(self) -> None:
        """The node by UUID (when given) or name."""
        node = expand_node(self.master.store, self.op.node_uuid or self.op.node_name)
        self._uuid, self._name = node.uuid, node.name

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The node and its resources, exclusively."""
        return {LockLevel.NODE: LockRequest([self._name]),
                LockLevel.NODE_RES: LockRequest([self._name])}

    def check_prereq(self) -> None:
        """Not the master, no instances."""
        store = self.master.store
        node = store.find("node", self._uuid)
        if node is None:
            raise NotFoundError(f"node {self._name} was removed while waiting for its lock")
        if node.uuid == store.cluster.master_node:
            raise OpPrereqError(
                f"node {node.name} is the master node and cannot be removed; fail the "
                "master over to another node first (gnt-cluster master-failover)")
        primary, secondary = _instances_on(store, node)
        if primary or secondary:
            raise OpPrereqError(
                f"node {node.name} still has instances: {', '.join(sorted(primary + secondary))}"
                "; remove them or move them to other nodes first")
        self._node = node

    async def execute(self) -> None:
        """Remove it from the configuration (refilling the candidate pool), drop its
        locks, and tell it to leave (an unreachable node only gives a warning)."""
        if self.op.dry_run:
            return None
        store = self.master.store
        node = self._node
        async with store.transaction() as txn:
            txn.remove("node", node.uuid)
            promoted = promote_candidates(
                txn, _nodes_after(store, removed={node.uuid}), store.cluster.candidate_pool_size)
        for level in (LockLevel.NODE_RES, LockLevel.NODE):
            await self.master.locks.remove(level, node.name, owner=self.owner)
        self.feedback(f"Removed node {node.name} from the cluster")
        if promoted:
            self.feedback(f"Promoted to master candidate: {', '.join(promoted)}")
            await _equip_promoted(self.master, promoted, self.feedback)
        result = (await self.master.rpc.call([node], "node_leave", {}))[node.name]
        if result.failed:
            assert result.error is not None
            self.feedback(
                f"Warning: node {node.name} could not be told to leave the cluster "
                f"({result.error.message}); it keeps its cluster certificates until its "
                "node daemon is reset")
        return None


# -- set params -----------------------------------------------------------------------


class LUNodeSetParams(LogicalUnit[OpNodeSetParams]):
    """``OP_NODE_SET_PARAMS``: role flags, capabilities, secondary IP, node parameters."""

    OP_ID = "OP_NODE_SET_PARAMS"

    def check_arguments(self) -> None:
        """Something to change; at most one role flag set; Ganeti-only fields refused."""
        op = self.op
        changes = [op.master_candidate, op.offline, op.drained, op.master_capable,
                   op.vm_capable, op.secondary_ip, op.ndparams, op.powered, op.aggregates,
                   op.traits]
        if all(value is None for value in changes) and not (op.hv_state or op.disk_state):
            raise ParameterError(
                "nothing to change: give at least one of master_candidate, offline, drained, "
                "master_capable, vm_capable, secondary_ip, ndparams, aggregates, traits")
        set_flags = [name for name in _ROLE_FLAGS if getattr(op, name) is True]
        if len(set_flags) > 1:
            raise ParameterError(
                f"a node can hold only one of the roles master candidate, drained and "
                f"offline; asked for {', '.join(set_flags)}")
        if op.powered is not None:
            raise OpPrereqError(
                f"cannot change the powered state of node {op.node_name}: corral has no "
                "out-of-band management")
        check_unsupported_state(hv_state=op.hv_state, disk_state=op.disk_state)
        self._secondary = _check_ip("secondary IP", op.secondary_ip) if op.secondary_ip else None
        self._ndparams = validated_ndparams(op.ndparams) if op.ndparams is not None else None
        self._might_demote = (op.master_candidate is False or op.offline is True
                              or op.drained is True or op.master_capable is False)
        self._lock_all = op.auto_promote and self._might_demote

    def expand_names(self) -> None:
        """The node by UUID (when given) or name."""
        node = expand_node(self.master.store, self.op.node_uuid or self.op.node_name)
        self._uuid, self._name = node.uuid, node.name

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The node (every node when another may be promoted) and its resources."""
        nodes: LockRequest = LockRequest(ALL_SET if self._lock_all else [self._name])
        return {LockLevel.NODE: nodes, LockLevel.NODE_RES: LockRequest([self._name])}

    def check_prereq(self) -> None:
        """Ganeti's role rules; compute the new flags."""
        store = self.master.store
        op = self.op
        node = store.find("node", self._uuid)
        if node is None:
            raise NotFoundError(f"node {self._name} was removed while waiting for its lock")
        cluster = store.cluster
        is_master = node.uuid == cluster.master_node
        flags = {name: getattr(op, name) for name in _ROLE_FLAGS}
        if is_master and (flags["master_candidate"] is False or flags["drained"]
                          or flags["offline"]):
            raise OpPrereqError(
                f"node {node.name} is the master: it cannot be demoted, drained or set "
                "offline; fail the master over to another node first (gnt-cluster "
                "master-failover)")
        if is_master and op.master_capable is False:
            raise OpPrereqError(f"node {node.name} is the master and must stay master capable")
        master_capable = node.master_capable if op.master_capable is None else op.master_capable
        if flags["master_candidate"] and not master_capable:
            raise OpPrereqError(
                f"node {node.name} is not master capable, so it cannot become a master "
                "candidate; set --master-capable yes as well")
        if op.vm_capable is False:
            primary, secondary = _instances_on(store, node)
            if primary or secondary:
                raise OpPrereqError(
                    f"node {node.name} hosts instances ({', '.join(sorted(primary + secondary))})"
                    "; it must stay vm capable")
        if self._secondary is not None:
            for other in store.all("node"):
                if other.uuid != node.uuid and self._secondary in (other.primary_ip,
                                                                   other.secondary_ip):
                    raise AlreadyExistsError(
                        f"secondary IP {self._secondary} is already used by node {other.name}")
            check_secondary_change(store.get("node", cluster.master_node), node,
                                   self._secondary, force=op.force, warn=self.feedback)
        for name in _ROLE_FLAGS:
            if flags[name] is False and getattr(node, name) is False:
                self.feedback(f"Ignoring request to unset flag {name}, already unset")
                flags[name] = None
        demoting = node.master_candidate and (
            flags["master_candidate"] is False or bool(flags["drained"])
            or bool(flags["offline"]) or op.master_capable is False)
        pool = cluster.candidate_pool_size
        if demoting and not op.auto_promote and not op.force:
            current, eligible = candidate_stats(store.all("node"), exclude={node.uuid})
            if current < min(eligible, pool):
                raise OpPrereqError(
                    f"not enough master candidates: demoting node {node.name} would leave "
                    f"{current} while {min(eligible, pool)} are wanted (candidate pool size "
                    f"{pool}); pass --auto-promote (RAPI auto_promote=True) to promote another "
                    "node, or --force to leave the pool short")
        if (flags["drained"] is False or flags["offline"] is False
                or (op.master_capable and not node.master_capable)):
            current, _ = candidate_stats(store.all("node"), exclude={node.uuid})
            if current < pool and not flags["master_candidate"]:
                flags["master_candidate"] = True
                self.feedback("Auto-promoting node to master candidate")
        if op.master_capable is False and node.master_candidate:
            self.feedback("Demoting from master candidate")
            flags["master_candidate"] = False
        old = (node.master_candidate, node.drained, node.offline)
        if flags["master_candidate"]:
            new = (True, False, False)
        elif flags["drained"]:
            new = (False, True, False)
        elif flags["offline"]:
            new = (False, False, True)
        elif False in flags.values():
            new = (False, False, False)
        else:
            new = old
        self._node = node
        self._old_flags, self._new_flags = old, new
        self._aggregates = self._traits = None
        if op.aggregates is not None:
            names = cluster.aggregates
            by_uuid = {uuid: name for name, uuid in names.items()}

            def aggregate(item: str) -> str:
                if item in names:
                    return names[item]
                if item.lower() in by_uuid:
                    return item.lower()
                raise NotFoundError(
                    f"aggregates: unknown aggregate {item!r} (aggregates: "
                    f"{', '.join(sorted(names)) or 'none'}; add one with 'gnt-cluster "
                    "add-aggregate NAME'; the node's group is an aggregate already)")

            self._aggregates = apply_list_change(node.aggregates, op.aggregates, aggregate,
                                                 "aggregates")
        if op.traits is not None:
            self._traits = apply_list_change(
                node.traits, op.traits, lambda t: check_traits([t])[0], "traits")

    async def execute(self) -> list[list[str]] | None:
        """Check a node coming online answers; apply; refill the pool with auto_promote;
        send a node back online the files made from the configuration (the uid pool)."""
        node = self._node
        op = self.op
        store = self.master.store
        if self._old_flags[2] and not self._new_flags[2]:
            try:
                await _check_version(
                    self.master, msgspec.structs.replace(node, offline=False),
                    f"bringing node {node.name} online")
            except CorralError as err:
                raise OpPrereqError(
                    f"node {node.name} cannot be set online: it does not answer properly "
                    f"({err.message})") from None
        if op.dry_run:
            return None
        if self._new_flags[0] and not self._old_flags[0]:
            await seed_replica(self.master, msgspec.structs.replace(
                node, offline=self._new_flags[2]))
        result: list[list[str]] = []
        async with store.transaction() as txn:
            record = txn.get("node", node.uuid)
            if self._ndparams is not None:
                record.ndparams = update_params(record.ndparams, self._ndparams)
                result.append(["ndparams", str(record.ndparams)])
            for name in ("master_capable", "vm_capable"):
                value = getattr(op, name)
                if value is not None:
                    setattr(record, name, value)
                    result.append([name, str(value)])
            if self._secondary is not None:
                record.secondary_ip = self._secondary
                result.append(["secondary_ip", self._secondary])
            if self._aggregates is not None:
                record.aggregates = self._aggregates
                label = {u: n for n, u in store.cluster.aggregates.items()}
                result.append(["aggregates", ",".join(sorted(label.get(u, u) for u in
                                                             self._aggregates))])
            if self._traits is not None:
                record.traits = self._traits
                result.append(["traits", ",".join(self._traits)])
            for name, before, after in zip(_ROLE_FLAGS, self._old_flags, self._new_flags,
                                           strict=True):
                if before != after:
                    setattr(record, name, after)
                    result.append([name, str(after)])
            txn.update(record)
            promoted: list[str] = []
            if self._lock_all:
                promoted = promote_candidates(txn, _nodes_after(store, [record]),
                                              store.cluster.candidate_pool_size,
                                              exclude={record.uuid})
        if promoted:
            self.feedback(f"Promoted to master candidate: {', '.join(promoted)}")
            await _equip_promoted(self.master, promoted, self.feedback)
        if self._old_flags[2] and not self._new_flags[2]:
            # An offline node was sent nothing: the uid pool may have changed meanwhile.
            warn_missing(await send_config_files(self.master, [store.get("node", node.uuid)]),
                         self.feedback)
        return result


#: The logical units of this area.
UNITS: tuple[type[LogicalUnit[Any]], ...] = (LUNodeAdd, LUNodeRemove, LUNodeSetParams)
