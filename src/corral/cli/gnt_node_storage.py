"""``gnt-node list-storage``, ``modify-storage``, ``repair-storage`` and ``volumes``.

The storage units of nodes (design 2.1) and their logical volumes, with Ganeti's
options, columns and messages: sizes in the unit ``--units`` asks for (human-readable
by default, MiB with ``--separator``), booleans as ``Y``/``N``, ``No changes to
perform, exiting.`` when ``modify-storage`` is given nothing to change. Storage types
are Ganeti's user-facing names; those corral has no units of are refused by the job.

:mod:`corral.cli.gnt_node` adds these commands to the tool.
"""

from __future__ import annotations

from typing import Any

import click

from corral.cli.common import get_client, reason_trail
from corral.cli.jobs import make_op, submit_and_wait, submit_op
from corral.cli.options import (
    FieldSelection,
    dry_run_option,
    no_headers_option,
    output_fields_option,
    print_jobid_option,
    priority_option,
    reason_option,
    resolve_fields,
    separator_option,
    submit_option,
    units_option,
    yes_no_option,
)
from corral.cli.output import effective_units, format_bool, format_table, format_unit
from corral.errors import ParameterError

__all__ = ["STORAGE_COMMANDS"]

TOOL = "gnt-node"

#: Storage types as the user names them (Ganeti's ``_USER_STORAGE_TYPE``).
USER_STORAGE_TYPES = ("file", "lvm-pv", "lvm-vg", "sharedfile", "gluster")
#: ``list-storage``'s columns and their headers (Ganeti's), in default order.
STORAGE_HEADERS = {"node": "Node", "type": "Type", "name": "Name", "size": "Size",
                   "used": "Used", "free": "Free", "allocatable": "Allocatable"}
#: corral's extra column (``-o +status``): ``ok``, or what is wrong with the unit.
EXTRA_HEADERS = {"status": "Status"}
_SIZE_FIELDS = ("size", "used", "free")
#: ``volumes``' columns and their headers (Ganeti's), in default order.
VOLUME_HEADERS = {"node": "Node", "phys": "PhysDev", "vg": "VG", "name": "Name",
                  "size": "Size", "instance": "Instance"}


def _storage_type(value: str) -> str:
    if value not in USER_STORAGE_TYPES:
        raise ParameterError(f"Unknown storage type: {value}")
    return value


def _table(headers: dict[str, str], fields: list[str], rows: list[list[Any]], *,
           sizes: tuple[str, ...], no_headers: bool, separator: str | None,
           units: str | None) -> list[str]:
    unit = effective_units(units, separator)
    cells = []
    for row in rows:
        line = []
        for field, value in zip(fields, row, strict=True):
            if field in sizes and value not in (None, ""):
                line.append(format_unit(float(value), unit))
            elif isinstance(value, bool):
                line.append(format_bool(value))
            else:
                line.append("" if value is None else str(value))
        cells.append(line)
    numeric = {i for i, field in enumerate(fields) if field in sizes}
    return format_table([headers.get(f, f) for f in fields], cells, separator=separator,
                        no_headers=no_headers, numeric_columns=numeric)


def _run(op_id: str, params: dict[str, Any], verb: str, priority: int | None) -> Any:
    op = make_op(op_id, params, trail=reason_trail(TOOL, verb), priority=priority)
    with get_client() as client:
        results = submit_and_wait(client, [op])
    assert results is not None
    return results[0]


@click.command("list-storage")
@no_headers_option
@separator_option
@units_option
@output_fields_option
@click.option("-t", "--storage-type", "storage_type", type=click.Choice(USER_STORAGE_TYPES),
              default=None, metavar="STORAGE_TYPE",
              help=f"Storage type ({', '.join(USER_STORAGE_TYPES)}).")
@priority_option
@click.argument("nodes", nargs=-1, metavar="<node-name>")
def list_storage(no_headers: bool, separator: str | None, units: str | None,
                 output: FieldSelection | None, storage_type: str | None,
                 priority: int | None, nodes: tuple[str, ...]) -> None:
    """List physical volumes on node(s). The available fields are (see the man page for
    details): node, type, name, size, used, free, allocatable."""
    fields = resolve_fields(output, list(STORAGE_HEADERS))
    params: dict[str, Any] = {"nodes": list(nodes), "output_fields": fields}
    if storage_type is not None:
        params["storage_type"] = storage_type
    rows = _run("OP_NODE_QUERY_STORAGE", params, "list-storage", priority)
    for line in _table({**STORAGE_HEADERS, **EXTRA_HEADERS}, fields, rows, sizes=_SIZE_FIELDS,
                       no_headers=no_headers, separator=separator, units=units):
        click.echo(line)


@click.command("modify-storage")
@yes_no_option("--allocatable", help="Set the allocatable flag on a volume.")
@dry_run_option
@priority_option
@submit_option
@print_jobid_option
@reason_option
@click.argument("node", metavar="<node-name>")
@click.argument("storage_type", metavar="<storage-type>")
@click.argument("name", metavar="<volume-name>")
def modify_storage(allocatable: bool | None, dry_run: bool, priority: int | None,
                   submit_only: bool, print_jobid: bool, reason: str | None, node: str,
                   storage_type: str, name: str) -> None:
    """Modify storage volume on a node."""
    _storage_type(storage_type)
    changes: dict[str, Any] = {}
    if allocatable is not None:
        changes["allocatable"] = allocatable
    if not changes:
        click.echo("No changes to perform, exiting.", err=True)
        return
    submit_op(TOOL, "modify-storage", "OP_NODE_MODIFY_STORAGE",
              {"node_name": node, "storage_type": storage_type, "name": name,
               "changes": changes},
              reason=reason, priority=priority, submit_only=submit_only,
              print_jobid=print_jobid, dry_run=dry_run)


@click.command("repair-storage")
@click.option("--ignore-consistency", is_flag=True,
              help="Ignore the consistency of the disks on the secondary. The source node "
                   "must be marked offline first for this to succeed.")
@dry_run_option
@priority_option
@submit_option
@print_jobid_option
@reason_option
@click.argument("node", metavar="<node-name>")
@click.argument("storage_type", metavar="<storage-type>")
@click.argument("name", metavar="<volume-name>")
def repair_storage(ignore_consistency: bool, dry_run: bool, priority: int | None,
                   submit_only: bool, print_jobid: bool, reason: str | None, node: str,
                   storage_type: str, name: str) -> None:
    """Repairs a storage volume on a node."""
    _storage_type(storage_type)
    submit_op(TOOL, "repair-storage", "OP_REPAIR_NODE_STORAGE",
              {"node_name": node, "storage_type": storage_type, "name": name,
               "ignore_consistency": ignore_consistency},
              reason=reason, priority=priority, submit_only=submit_only,
              print_jobid=print_jobid, dry_run=dry_run)


@click.command("volumes")
@no_headers_option
@separator_option
@units_option
@output_fields_option
@priority_option
@click.argument("nodes", nargs=-1, metavar="<node-name>")
def volumes(no_headers: bool, separator: str | None, units: str | None,
            output: FieldSelection | None, priority: int | None,
            nodes: tuple[str, ...]) -> None:
    """List logical volumes on node(s)."""
    fields = resolve_fields(output, list(VOLUME_HEADERS))
    rows = _run("OP_NODE_QUERYVOLS", {"nodes": list(nodes), "output_fields": fields},
                "volumes", priority)
    for line in _table(VOLUME_HEADERS, fields, rows, sizes=("size",),
                       no_headers=no_headers, separator=separator, units=units):
        click.echo(line)


#: The commands :mod:`corral.cli.gnt_node` adds.
STORAGE_COMMANDS = (list_storage, modify_storage, repair_storage, volumes)
