"""``gnt-backup``: instance exports and imports, with Ganeti 3.0's commands and options.

``export`` submits ``OP_BACKUP_EXPORT`` (mode local), ``import`` an
``OP_INSTANCE_CREATE`` with ``mode=import``, ``list`` ``OP_BACKUP_QUERY`` and
``remove`` ``OP_BACKUP_REMOVE``. ``--shutdown-timeout`` is in seconds, as for the
other corral tools.
"""

from __future__ import annotations

from typing import Any

import click

from corral import __version__
from corral.cli.common import CorralGroup
from corral.cli.gnt_instance import parse_disks, parse_nics
from corral.cli.jobs import submit_op
from corral.cli.keyval import IdentValue, KeyValDict
from corral.cli.options import (
    FieldSelection,
    IdentKeyValType,
    KeyValType,
    dry_run_option,
    force_option,
    no_headers_option,
    output_fields_option,
    print_jobid_option,
    priority_option,
    reason_option,
    resolve_fields,
    separator_option,
    submit_option,
)
from corral.cli.output import format_table
from corral.errors import ParameterError
from corral.objects.params import DISK_TEMPLATES, parse_size

__all__ = ["main"]

TOOL = "gnt-backup"

#: ``list`` fields: name → (title, description), as ``gnt-backup list-fields`` shows them.
_FIELDS = {"export": ("Export", "Export name"), "node": ("Node", "Node name")}


@click.group(cls=CorralGroup)
@click.version_option(__version__, prog_name=TOOL)
def cli() -> None:
    """Instance exports: export, import, list, list-fields, remove."""


@cli.command()
@click.option("-n", "--node", "node", required=True, metavar="NODE", help="Target node.")
@click.option("--transport-compression", "--compress", "compress", default="none",
              show_default=True, metavar="TOOL",
              help="Compression during the transfer: none or one of the cluster's "
                   "compression tools (gzip, gzip-fast, gzip-slow, zstd).")
@click.option("--noshutdown", is_flag=True,
              help="Do not shut the instance down for the export (unsafe).")
@click.option("--shutdown-timeout", type=click.IntRange(min=0), default=120,
              show_default=True, help="Seconds to wait for the instance to shut down.")
@click.option("--remove-instance", is_flag=True,
              help="Remove the instance from the cluster after the export.")
@click.option("--ignore-remove-failures", is_flag=True,
              help="Remove the instance from the configuration even if removing its "
                   "disks fails.")
@force_option
@submit_option
@print_jobid_option
@priority_option
@reason_option
@dry_run_option
@click.argument("instance_name")
def export(instance_name: str, node: str, compress: str, noshutdown: bool,
           shutdown_timeout: int, remove_instance: bool, ignore_remove_failures: bool,
           force: bool, submit_only: bool, print_jobid: bool, priority: int | None,
           reason: str | None, dry_run: bool) -> None:
    """Export INSTANCE_NAME's disks and configuration to NODE's export directory."""
    body = {"instance_name": instance_name, "target_node": node, "mode": "local",
            "compress": compress, "shutdown": not noshutdown,
            "shutdown_timeout": shutdown_timeout, "remove_instance": remove_instance,
            "ignore_remove_failures": ignore_remove_failures}
    result = submit_op(TOOL, "export", "OP_BACKUP_EXPORT", body, reason=reason,
                       priority=priority, submit_only=submit_only,
                       print_jobid=print_jobid, dry_run=dry_run)
    if result is None or dry_run:
        return
    finalized, disks = result
    failed = [str(i) for i, ok in enumerate(disks) if not ok]
    if not finalized or failed:
        raise SystemExit(1)


@cli.command("import")
@click.option("--src-node", metavar="NODE", help="Node holding the export.")
@click.option("--src-dir", metavar="DIR",
              help="The export's directory (default: the instance's name).")
@click.option("--compress", default="none", show_default=True, metavar="TOOL",
              help="Compression during the transfer.")
@click.option("-t", "--disk-template", "disk_template", type=click.Choice(DISK_TEMPLATES),
              help="Disk template (default: the export's).")
@click.option("-n", "--node", "node", metavar="PNODE[:SNODE]", help="Primary node.")
@click.option("-I", "--iallocator", metavar="NAME", help="The allocator that chooses.")
@click.option("-g", "--node-group", "group_name", metavar="GROUP", help="Node group.")
@click.option("--disk", "disk_items", type=IdentKeyValType(), multiple=True,
              help="Disk N: N:size=SIZE (default: the export's disks).")
@click.option("-s", "--os-size", "os_size", metavar="SIZE", help="One disk of SIZE.")
@click.option("--net", "net_items", type=IdentKeyValType(), multiple=True,
              help="NIC N: N:mac=MAC,ip=IP,mode=MODE,link=LINK (default: the export's).")
@click.option("--no-nics", is_flag=True, help="No NICs.")
@click.option("-H", "--hypervisor-parameters", "hv_option", type=IdentKeyValType(),
              default=None, help="Hypervisor and its parameters: HV[:key=val,...].")
@click.option("-B", "--backend-parameters", "beparams", type=KeyValType(), default=None,
              help="Backend parameters.")
@click.option("-O", "--os-parameters", "osparams", type=KeyValType(), default=None,
              help="OS parameters.")
@click.option("--no-name-check", is_flag=True, help="Do not resolve the instance name.")
@click.option("--no-ip-check", is_flag=True, help="Do not check the IP is unused.")
@click.option("--tags", metavar="TAG,...", help="Comma-separated tags.")
@click.option("--ignore-ipolicy", is_flag=True, help="Ignore instance policy violations.")
@submit_option
@print_jobid_option
@priority_option
@reason_option
@dry_run_option
@click.argument("instance_name")
def import_(instance_name: str, src_node: str | None, src_dir: str | None, compress: str,
            disk_template: str | None, node: str | None, iallocator: str | None,
            group_name: str | None, disk_items: tuple[tuple[str, IdentValue], ...],
            os_size: str | None, net_items: tuple[tuple[str, IdentValue], ...],
            no_nics: bool, hv_option: tuple[str, IdentValue] | None,
            beparams: KeyValDict | None, osparams: KeyValDict | None, no_name_check: bool,
            no_ip_check: bool, tags: str | None, ignore_ipolicy: bool, submit_only: bool,
            print_jobid: bool, priority: int | None, reason: str | None,
            dry_run: bool) -> None:
    """Create INSTANCE_NAME from an export, through its OS import script."""
    if disk_items and os_size is not None:
        raise ParameterError("give either --disk or -s, not both")
    if net_items and no_nics:
        raise ParameterError("give either --net or --no-nics, not both")
    pnode, _, snode = (node or "").partition(":")
    body: dict[str, Any] = {
        "instance_name": instance_name, "mode": "import", "compress": compress,
        "start": False, "name_check": not no_name_check, "ip_check": not no_ip_check,
        "beparams": dict(beparams or {}), "osparams": dict(osparams or {}),
    }
    if os_size is not None:
        body["disks"] = [{"size": parse_size(os_size)}]
    elif disk_items:
        body["disks"] = parse_disks(disk_items)
    if net_items:
        body["nics"] = parse_nics(net_items)
    elif no_nics:
        body["nics"] = []
        body["no_nics"] = True
    if hv_option is not None:
        hv, values = hv_option
        body["hypervisor"] = hv
        body["hvparams"] = dict(values) if isinstance(values, dict) else {}
    optional = {"src_node": src_node, "src_path": src_dir, "disk_template": disk_template,
                "pnode": pnode or None, "snode": snode or None, "iallocator": iallocator,
                "group_name": group_name}
    body.update({k: v for k, v in optional.items() if v is not None})
    if ignore_ipolicy:
        body["ignore_ipolicy"] = True
    if tags:
        body["tags"] = [t for t in tags.split(",") if t]
    submit_op(TOOL, "import", "OP_INSTANCE_CREATE", body, reason=reason, priority=priority,
              submit_only=submit_only, print_jobid=print_jobid, dry_run=dry_run)


@cli.command("list")
@click.option("--node", "nodes", multiple=True, metavar="NODE",
              help="Only the exports on NODE (repeatable).")
@no_headers_option
@separator_option
@output_fields_option
@priority_option
def list_exports(nodes: tuple[str, ...], no_headers: bool, separator: str | None,
                 output: FieldSelection | None, priority: int | None) -> None:
    """List the exports, one line per node and export."""
    fields = resolve_fields(output, ["node", "export"])
    unknown = [f for f in fields if f not in _FIELDS]
    if unknown:
        raise ParameterError(f"unknown field(s) {', '.join(unknown)}; known: "
                             f"{', '.join(_FIELDS)}")
    answer = submit_op(TOOL, "list", "OP_BACKUP_QUERY",
                       {"nodes": list(nodes), "use_locking": False}, priority=priority)
    rows = []
    for node in sorted(answer):
        exports = answer[node]
        if exports is False:
            click.echo(f"Error: no information on node {node}", err=True)
            continue
        for name in sorted(exports):
            values = {"node": node, "export": name}
            rows.append([values[f] for f in fields])
    for line in format_table([_FIELDS[f][0] for f in fields], rows, separator=separator,
                             no_headers=no_headers):
        click.echo(line)


@cli.command("list-fields")
@no_headers_option
@separator_option
def list_fields(no_headers: bool, separator: str | None) -> None:
    """The fields of ``list``."""
    rows = [[name, "Text", title, description]
            for name, (title, description) in _FIELDS.items()]
    for line in format_table(["Name", "Type", "Title", "Description"], rows,
                             separator=separator, no_headers=no_headers):
        click.echo(line)


@cli.command()
@submit_option
@print_jobid_option
@priority_option
@reason_option
@click.argument("instance_name")
def remove(instance_name: str, submit_only: bool, print_jobid: bool, priority: int | None,
           reason: str | None) -> None:
    """Remove the exports of INSTANCE_NAME from every node."""
    submit_op(TOOL, "remove", "OP_BACKUP_REMOVE", {"instance_name": instance_name},
              reason=reason, priority=priority, submit_only=submit_only,
              print_jobid=print_jobid)


def main() -> None:
    """Entry point of ``gnt-backup``."""
    cli(prog_name=TOOL)


if __name__ == "__main__":
    main()
