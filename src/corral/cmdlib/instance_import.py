"""``OP_INSTANCE_CREATE`` with ``mode=import``: an instance from an export.

Before the locks are taken the export is found (on ``src_node``, or on whichever
node has it when none is given) and read; what the opcode does not say is taken
from the export, as Ganeti does: disk template, disk sizes, NICs (with their MACs),
OS, hypervisor and memory/vcpus. Instead of the OS ``create`` script, each disk's
image is streamed from the export to the new instance's OS ``import`` script
(:mod:`corral.cmdlib.disk_transfer`); an instance whose name differs from the
exported one then gets the OS ``rename`` script, as in Ganeti.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from corral.cmdlib.backup import allowed_compression_tools
from corral.cmdlib.common import expand_node
from corral.cmdlib.disk_transfer import TransferEnds, transfer_disk
from corral.cmdlib.export_config import ExportedInstance, parse_export
from corral.cmdlib.instance_base import RPC_INSTALL, RPC_QUICK, call_node, wire
from corral.errors import CorralError, NotFoundError, OpPrereqError, ParameterError
from corral.impexp import require_allowed
from corral.objects import Node
from corral.objects.specs import InstanceSpec

if TYPE_CHECKING:
    from corral.cmdlib.instance_create import LUInstanceCreate

__all__ = ["ImportSource", "import_disks", "read_export"]

_BE_KEYS = ("maxmem", "minmem", "vcpus")


class ImportSource:
    """The export an import reads: its node, name and contents."""

    def __init__(self, node: Node, name: str, exported: ExportedInstance) -> None:
        self.node = node
        self.name = name
        self.exported = exported


def _export_name(lu: LUInstanceCreate) -> str:
    path = lu.op.src_path
    if not path:
        return lu.op.instance_name
    # Ganeti gives the export's directory; corral's exports all live in one directory.
    return PurePosixPath(path).name


async def read_export(lu: LUInstanceCreate) -> ImportSource:
    """Find and read the export; fill what the opcode leaves open from it."""
    op, store = lu.op, lu.master.store
    require_allowed(op.compress, allowed_compression_tools(lu))
    name = _export_name(lu)
    key = op.src_node_uuid or op.src_node
    if key:
        node = expand_node(store, key)
    else:
        nodes = [n for n in store.all("node") if not n.offline]
        results = await lu.master.rpc.call(nodes, "export_list", {}, timeout=RPC_QUICK)
        holders = [n for n in nodes if not results[n.name].failed
                   and name in (results[n.name].payload or [])]
        if not holders:
            raise NotFoundError(f"no node has an export named {name!r} (see gnt-backup "
                                "list); give --src-node and --src-dir")
        node = holders[0]
    op.src_node, op.src_node_uuid = node.name, node.uuid
    info = await call_node(lu.master, node, "export_info", {"export": name},
                           f"reading the export {name}")
    exported = parse_export(info["config"], f"export {name} on node {node.name}")
    missing = [d.dump for d in exported.disks if d.dump not in info["files"]]
    if missing:
        raise OpPrereqError(f"export {name} on node {node.name} lacks the disk image(s) "
                            f"{', '.join(missing)}")
    _fill(lu, exported)
    return ImportSource(node, info["name"], exported)


def _fill(lu: LUInstanceCreate, exported: ExportedInstance) -> None:
    op = lu.op
    if not op.disk_template:
        op.disk_template = exported.disk_template
    if not op.disks:
        op.disks = [{"size": d.size, **({"name": d.name} if d.name else {})}
                    for d in exported.disks]
    if len(op.disks) != len(exported.disks):
        raise ParameterError(f"the export has {len(exported.disks)} disk(s) but "
                             f"{len(op.disks)} were given")
    if not op.nics:
        op.nics = [dict(nic) for nic in exported.nics]
    if not op.os_type:
        op.os_type = exported.os
    if not op.hypervisor and exported.hypervisor:
        op.hypervisor = exported.hypervisor
    for key in _BE_KEYS:
        value = exported.beparams.get(key)
        if key not in op.beparams and value not in (None, "None", ""):
            try:
                op.beparams[key] = int(str(value))
            except ValueError:
                continue
    if op.no_install:
        raise ParameterError("an import installs from the export: no_install does not "
                             "apply")


async def import_disks(lu: LUInstanceCreate, source: ImportSource, spec: InstanceSpec,
                       node: Node) -> None:
    """Stream every disk image of the export into the OS import script on ``node``;
    then the rename script when the instance's name differs from the export's."""
    op = lu.op
    search_path = list(lu.master.store.cluster.os_search_path)
    for index, disk in enumerate(source.exported.disks):
        label = f"disk/{index}"
        lu.feedback(f"Importing {label} from {source.node.name} to {node.name}")
        ends = TransferEnds(
            source_node=source.node,
            source={"kind": "export", "export": source.name, "file": disk.dump},
            destination_node=node,
            destination={"kind": "os", "instance": wire(spec), "index": index,
                         "search_path": search_path},
            compression=op.compress, expected=disk.size << 20)
        await transfer_disk(lu.master, lu.feedback, ends, label)
    if source.exported.name != op.instance_name:
        lu.feedback(f"Running rename script for {op.instance_name}")
        try:
            await call_node(lu.master, node, "instance_run_rename",
                            {"instance": wire(spec), "old_name": source.exported.name,
                             "debug": op.debug_level},
                            f"running the rename script of {op.instance_name}",
                            timeout=RPC_INSTALL)
        except CorralError as err:
            lu.feedback(f" - WARNING: {err.message}")

