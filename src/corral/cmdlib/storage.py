"""Storage units and volumes on nodes: list, modify and repair units; list LVs.

Ganeti's logical units for design 2.1's storage units framework
(``OP_NODE_QUERY_STORAGE``, ``OP_NODE_MODIFY_STORAGE``, ``OP_REPAIR_NODE_STORAGE``)
and ``OP_NODE_QUERYVOLS``. The node daemons do the work
(:mod:`corral.storage.units`); here are the checks, the locks (node locks, shared
for the listings) and the assembly of the rows, in Ganeti's order: nodes by name,
units by name within a node.

A storage type is usable only when a disk template of that type is enabled
(``lvm-pv`` counts as ``lvm-vg``), as in Ganeti. Repairing a volume group first
checks that the instances with disks on that node have no faulty disk on their other
nodes: the repair removes the volumes that lived on the vanished physical volume,
which is safe only while another copy exists.
"""

from __future__ import annotations

from typing import Any, TypeVar

from corral.cmdlib.base import LockRequest, LogicalUnit, MasterContext, QueryResource
from corral.cmdlib.common import check_node_online, expand_node
from corral.errors import CorralError, OpExecError, OpPrereqError, ParameterError
from corral.locking import ALL_SET, LockLevel
from corral.objects import Cluster, Node
from corral.objects.disk_templates import DISK_TEMPLATE_INFO
from corral.opcodes.storage_ops import (
    OpNodeModifyStorage,
    OpNodeQueryStorage,
    OpNodeQueryvols,
    OpRepairNodeStorage,
)
from corral.storage.units import MODIFIABLE_FIELDS, STORAGE_FIELDS

__all__ = [
    "REPORTING_TYPES",
    "UNITS",
    "VOLUME_FIELDS",
    "LUNodeModifyStorage",
    "LUNodeQueryStorage",
    "LUNodeQueryvols",
    "LURepairNodeStorage",
    "check_storage_type_enabled",
    "check_vg_on_nodes",
    "create_storage_dirs",
    "query_resources",
]

#: The fields of a storage unit row (Ganeti's ``VALID_STORAGE_FIELDS``).
UNIT_FIELDS = ("node", "type", *STORAGE_FIELDS)
#: Storage types that report their units (Ganeti's ``STS_REPORT_NODE_STORAGE``, less
#: ``gluster``, which corral does not have).
REPORTING_TYPES = ("file", "lvm-pv", "lvm-vg", "sharedfile")
#: The fields of ``gnt-node volumes``.
VOLUME_FIELDS = ("node", "phys", "vg", "name", "size", "instance")
#: Storage types whose units can be repaired (Ganeti's ``VALID_STORAGE_OPERATIONS``).
REPAIRABLE_TYPES = ("lvm-vg",)
_RPC_TIMEOUT = 120.0


def check_storage_type_enabled(cluster: Cluster, storage_type: str) -> None:
    """Refuse a storage type no enabled disk template uses (Ganeti's words); physical
    volumes count as their volume groups."""
    wanted = "lvm-vg" if storage_type == "lvm-pv" else storage_type
    for name in cluster.enabled_disk_templates:
        row = DISK_TEMPLATE_INFO.get(name)
        if row is not None and row.storage_type == wanted:
            return
    raise OpPrereqError(
        f"No disk template of storage type '{wanted}' is enabled in this cluster. Enabled "
        f"disk templates are: {','.join(cluster.enabled_disk_templates)}",
        ecode="wrong_input")


def _unknown_fields(fields: list[str], known: tuple[str, ...]) -> None:
    unknown = [f for f in fields if f not in known]
    if unknown:
        raise ParameterError(f"Unknown output fields selected: {','.join(unknown)}\n"
                             f"known fields: {', '.join(known)}")


async def check_vg_on_nodes(master: MasterContext, vg_name: str) -> None:
    """Refuse a cluster volume group that an online vm_capable node does not have
    (Ganeti's check of ``--vg-name``, without its minimum size: corral takes groups
    of any size), naming the node and the groups it has."""
    nodes = sorted((n for n in master.store.all("node") if n.vm_capable and not n.offline),
                   key=lambda n: n.name)
    results = await master.rpc.call(nodes, "node_info", {"volume_groups": [vg_name]},
                                     timeout=_RPC_TIMEOUT) if nodes else {}
    for node in nodes:
        info = results[node.name].get("asking for its volume groups")
        lvm = info.get("lvm") if isinstance(info, dict) else None
        groups = lvm.get("vgs") if isinstance(lvm, dict) else None
        if not isinstance(groups, dict):
            why = lvm.get("error") if isinstance(lvm, dict) else "no answer"
            raise OpPrereqError(f"Error on node '{node.name}': cannot list its volume "
                                f"groups: {why}", ecode="environment_error")
        if vg_name not in groups:
            raise OpPrereqError(
                f"Error on node '{node.name}': volume group '{vg_name}' missing\nits volume "
                f"groups: {', '.join(sorted(groups)) or 'none'}", ecode="environment_error")


async def create_storage_dirs(master: MasterContext, feedback: Any,
                              directories: list[tuple[str, str]]) -> None:
    """Make the storage directories ``[(type, path)]`` on every online vm_capable node
    (the ``create-dir`` operation of their storage units); a node that cannot is a
    warning in the job log (the directory is then made at its first disk)."""
    nodes = sorted((n for n in master.store.all("node") if n.vm_capable and not n.offline),
                   key=lambda n: n.name)
    for storage_type, path in directories:
        if not nodes or not path:
            continue
        results = await master.rpc.call(
            nodes, "storage_execute", {"su_type": storage_type, "su_args": [path],
                                       "name": path, "operation": "create-dir"},
            timeout=_RPC_TIMEOUT)
        for node in nodes:
            error = results[node.name].error
            if error is not None:
                feedback(f" - WARNING: node {node.name}: cannot create the {storage_type} "
                         f"storage directory {path}: {error.message}")


def storage_args(cluster: Cluster, storage_type: str) -> list[str]:
    """What the node's units of ``storage_type`` need: the storage directory."""
    if storage_type == "file":
        return [cluster.file_storage_dir]
    if storage_type == "sharedfile":
        return [cluster.shared_file_storage_dir]
    return []


def _named_nodes(lu: LogicalUnit[Any], names: list[str]) -> list[str]:
    """Canonical names of ``names`` (all nodes when empty), sorted."""
    store = lu.master.store
    if not names:
        return sorted(node.name for node in store.all("node"))
    return sorted({expand_node(store, name).name for name in names})


def _node_locks(names: list[str], every: bool, *, shared: bool
                ) -> dict[LockLevel, LockRequest]:
    request = LockRequest(ALL_SET if every else names, shared=shared)
    return {LockLevel.NODE: request}


# -- list ------------------------------------------------------------------------


class LUNodeQueryStorage(LogicalUnit[OpNodeQueryStorage]):
    """``gnt-node list-storage``: rows of the storage units of one type on nodes."""

    OP_ID = "OP_NODE_QUERY_STORAGE"

    def check_arguments(self) -> None:
        """Known fields only."""
        _unknown_fields(self.op.output_fields, UNIT_FIELDS)

    def expand_names(self) -> None:
        """The nodes asked about (all when none)."""
        self.node_names = _named_nodes(self, self.op.nodes)

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The nodes, shared."""
        return _node_locks(self.node_names, not self.op.nodes, shared=True)

    def check_prereq(self) -> None:
        """The type is enabled (or, when none is given, the first enabled template's
        type reports storage)."""
        cluster = self.master.store.cluster
        storage_type: str
        if self.op.storage_type:
            check_storage_type_enabled(cluster, self.op.storage_type)
            storage_type = self.op.storage_type
        else:
            first = (cluster.enabled_disk_templates or ["diskless"])[0]
            row = DISK_TEMPLATE_INFO.get(first)
            storage_type = row.storage_type if row else first
            if storage_type not in REPORTING_TYPES:
                raise OpPrereqError(
                    f"Storage reporting for storage type '{storage_type}' is not supported. "
                    "Please use the --storage-type option to specify one of the supported "
                    f"storage types ({', '.join(REPORTING_TYPES)}) or set the default disk "
                    "template to one that supports storage reporting.", ecode="wrong_input")
        if storage_type not in REPORTING_TYPES:
            raise OpPrereqError(f"corral has no storage units of type '{storage_type}'; it "
                                f"reports {', '.join(REPORTING_TYPES)}", ecode="wrong_input")
        self.storage_type = storage_type

    async def execute(self) -> list[list[Any]]:
        """Ask every online node of the set; a node that fails is a warning."""
        store = self.master.store
        fields = ["name", *(f for f in self.op.output_fields
                            if f not in ("name", "node", "type"))]
        nodes = [store.get("node", name) for name in self.node_names]
        nodes = [node for node in nodes if not node.offline]
        args = {"su_type": self.storage_type,
                "su_args": storage_args(store.cluster, self.storage_type),
                "name": self.op.name, "fields": fields}
        results = await self.master.rpc.call(nodes, "storage_list", args,
                                             timeout=_RPC_TIMEOUT) if nodes else {}
        rows: list[list[Any]] = []
        for node in nodes:
            result = results[node.name]
            if result.failed or not isinstance(result.payload, list):
                message = result.error.message if result.error else repr(result.payload)
                self.feedback(f" - WARNING: Can't get storage data from node {node.name}: "
                              f"{message}")
                continue
            for unit in sorted(result.payload, key=lambda row: str(row[0])):
                values = dict(zip(fields, unit, strict=False))
                rows.append([node.name if f == "node" else
                             self.storage_type if f == "type" else values.get(f)
                             for f in self.op.output_fields])
        return rows


# -- modify, repair ------------------------------------------------------------------


_ChangeOp = TypeVar("_ChangeOp", OpNodeModifyStorage, OpRepairNodeStorage)


class _NodeStorageChange(LogicalUnit[_ChangeOp]):
    """A change of one storage unit on one node (locked exclusively)."""

    node: Node

    def expand_names(self) -> None:
        """The node by name or UUID."""
        op = self.op
        self.node = expand_node(self.master.store, op.node_uuid or op.node_name)
        op.node_name, op.node_uuid = self.node.name, self.node.uuid
        if not op.name:
            raise ParameterError("the storage unit's name is missing")

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The node, exclusively."""
        return _node_locks([self.node.name], False, shared=False)

    def check_prereq(self) -> None:
        """The node is online and the type enabled."""
        self.node = self.master.store.get("node", self.node.uuid)
        check_node_online(self.node, f"change storage unit {self.op.name}")
        check_storage_type_enabled(self.master.store.cluster, self.op.storage_type)

    async def call(self, procedure: str, args: dict[str, Any], failed: str) -> None:
        """Call ``procedure`` on the node; its error is ``failed`` + the node's words."""
        op = self.op
        base = {"su_type": op.storage_type,
                "su_args": storage_args(self.master.store.cluster, op.storage_type),
                "name": op.name}
        results = await self.master.rpc.call([self.node], procedure, {**base, **args},
                                             timeout=_RPC_TIMEOUT)
        result = results[self.node.name]
        if result.failed:
            assert result.error is not None
            raise OpExecError(f"{failed} '{op.name}' on {self.node.name}: "
                              f"{result.error.message}")


class LUNodeModifyStorage(_NodeStorageChange[OpNodeModifyStorage]):
    """``gnt-node modify-storage``: a physical volume's ``allocatable`` flag."""

    OP_ID = "OP_NODE_MODIFY_STORAGE"

    def check_arguments(self) -> None:
        """A type whose units can change, and only their changeable fields."""
        op = self.op
        modifiable = MODIFIABLE_FIELDS.get(op.storage_type)
        if modifiable is None:
            raise ParameterError(f"Storage units of type '{op.storage_type}' can not be "
                                 "modified")
        extra = sorted(set(op.changes) - modifiable)
        if extra:
            raise ParameterError(f"The following fields can not be modified for storage "
                                 f"units of type '{op.storage_type}': {extra!r}")
        value = op.changes.get("allocatable")
        if "allocatable" in op.changes and not isinstance(value, bool):
            raise ParameterError(f"allocatable must be true or false, not {value!r}")

    async def execute(self) -> None:
        """``storage_modify`` on the node."""
        if self.op.dry_run:
            return
        await self.call("storage_modify", {"changes": dict(self.op.changes)},
                        "Failed to modify storage unit")


class LURepairNodeStorage(_NodeStorageChange[OpRepairNodeStorage]):
    """``gnt-node repair-storage``: make a volume group consistent again."""

    OP_ID = "OP_REPAIR_NODE_STORAGE"

    def check_arguments(self) -> None:
        """A type whose units can be repaired."""
        if self.op.storage_type not in REPAIRABLE_TYPES:
            raise ParameterError(f"Storage units of type '{self.op.storage_type}' can not "
                                 "be repaired")

    def extra_nodes(self) -> list[Node]:
        """The other nodes of the instances with disks on this node."""
        store = self.master.store
        others: dict[str, Node] = {}
        for inst in store.all("instance"):
            nodes = _instance_nodes(self, inst.uuid)
            if self.node.uuid in nodes:
                for uuid in nodes - {self.node.uuid}:
                    other = store.get("node", uuid)
                    others[other.name] = other
        return sorted(others.values(), key=lambda n: n.name)

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The node exclusively, the instances' other nodes shared (their disks are
        checked)."""
        locks = super().declare_locks()
        self.others = self.extra_nodes()
        if self.others:
            # One level holds one mode: the checked nodes are locked with the node.
            names = sorted({self.node.name, *(n.name for n in self.others)})
            locks[LockLevel.NODE] = LockRequest(names, shared=False)
        return locks

    async def execute(self) -> None:
        """Check the other copies, then ``storage_execute fix-consistency``."""
        await self._check_other_copies()
        if self.op.dry_run:
            return
        self.feedback(f"Repairing storage unit '{self.op.name}' on {self.node.name} ...")
        await self.call("storage_execute", {"operation": "fix-consistency"},
                        "Failed to repair storage unit")

    async def _check_other_copies(self) -> None:
        """Refuse (or with ``ignore_consistency`` warn) when an instance with disks
        on this node has a faulty disk on one of its other nodes."""
        from corral.cmdlib.disk_status import faulty_disks
        store = self.master.store
        for inst in sorted(store.all("instance"), key=lambda i: i.name):
            nodes = _instance_nodes(self, inst.uuid)
            if self.node.uuid not in nodes:
                continue
            for uuid in sorted(nodes - {self.node.uuid}):
                other = store.get("node", uuid)
                try:
                    if await faulty_disks(self.master, inst, other):
                        raise OpPrereqError(f"Instance '{inst.name}' has faulty disks on "
                                            f"node '{other.name}'")
                except CorralError as err:
                    if not self.op.ignore_consistency:
                        raise
                    self.feedback(f" - WARNING: {err.message}")


def _instance_nodes(lu: LogicalUnit[Any], instance_uuid: str) -> set[str]:
    """UUIDs of the nodes holding an instance's disks (its primary included)."""
    store = lu.master.store
    inst = store.get("instance", instance_uuid)
    nodes = {inst.primary_node}
    for disk_uuid in inst.disks:
        disk = store.find("disk", disk_uuid)
        if disk is not None:
            nodes.update(disk.nodes)
    return nodes


# -- volumes -------------------------------------------------------------------------


class LUNodeQueryvols(LogicalUnit[OpNodeQueryvols]):
    """``gnt-node volumes``: the logical volumes on nodes and whose they are."""

    OP_ID = "OP_NODE_QUERYVOLS"

    def check_arguments(self) -> None:
        """Known fields only."""
        _unknown_fields(self.op.output_fields, VOLUME_FIELDS)

    def expand_names(self) -> None:
        """The nodes asked about (all when none)."""
        self.node_names = _named_nodes(self, self.op.nodes)

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The nodes, shared."""
        return _node_locks(self.node_names, not self.op.nodes, shared=True)

    async def execute(self) -> list[list[str]]:
        """``node_volumes`` on every online node; rows as strings, by device."""
        store = self.master.store
        nodes = [store.get("node", name) for name in self.node_names]
        nodes = [node for node in nodes if not node.offline]
        owners = _volume_owners(self)
        results = await self.master.rpc.call(nodes, "node_volumes", {},
                                             timeout=_RPC_TIMEOUT) if nodes else {}
        rows: list[list[str]] = []
        for node in nodes:
            result = results[node.name]
            if result.failed or not isinstance(result.payload, list):
                message = result.error.message if result.error else repr(result.payload)
                self.feedback(f" - WARNING: Can't compute volume data on node {node.name}: "
                              f"{message}")
                continue
            for volume in sorted(result.payload, key=lambda v: (v["dev"], v["vg"],
                                                                v["name"])):
                owner = owners.get((node.uuid, f"{volume['vg']}/{volume['name']}"), "-")
                values = {"node": node.name, "phys": volume["dev"], "vg": volume["vg"],
                          "name": volume["name"], "size": str(int(float(volume["size"]))),
                          "instance": owner}
                rows.append([str(values[f]) for f in self.op.output_fields])
        return rows


def _volume_owners(lu: LogicalUnit[Any]) -> dict[tuple[str, str], str]:
    """``(node uuid, "vg/lv")`` -> the name of the instance whose plain disk it is."""
    store = lu.master.store
    owners: dict[tuple[str, str], str] = {}
    for inst in store.all("instance"):
        for disk_uuid in inst.disks:
            disk = store.find("disk", disk_uuid)
            if disk is None or disk.dev_type != "plain" or len(disk.logical_id) != 2:
                continue
            volume = f"{disk.logical_id[0]}/{disk.logical_id[1]}"
            for node_uuid in disk.nodes or [inst.primary_node]:
                owners[(node_uuid, volume)] = inst.name
    return owners


def _units() -> tuple[type[LogicalUnit[Any]], ...]:
    from corral.cmdlib import instance_repair, verify_disks
    return (LUNodeQueryStorage, LUNodeModifyStorage, LURepairNodeStorage, LUNodeQueryvols,
            *instance_repair.UNITS, *verify_disks.UNITS)


#: The logical units of the storage area: storage units and volumes here, disk
#: verification (:mod:`corral.cmdlib.verify_disks`) and the repairs of an instance's
#: disks (:mod:`corral.cmdlib.instance_repair`).
UNITS: tuple[type[LogicalUnit[Any]], ...] = _units()


def query_resources(ctx: Any) -> dict[str, QueryResource]:
    """This area answers no ``OP_QUERY`` resource."""
    return {}
