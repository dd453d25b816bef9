"""``gnt-instance recreate-disks``, ``replace-disks``, ``disk-status``, ``repair-disks``.

``recreate-disks`` and ``replace-disks`` take Ganeti's options and check them as
Ganeti's tool does (``--disk=N[:size=..]`` repeated, ``-n PNODE[:SNODE]``; exactly one
of ``-p``, ``-s``, ``-a``, ``-n``, ``-I``). ``disk-status`` and ``repair-disks`` are
corral's (design 2.1's instance disk status and repair instance): the first prints one
line per disk and node (``Disk``, ``Node``, ``Status``, ``Path``), the second what it
repaired.

:mod:`corral.cli.gnt_instance` adds these commands to the tool.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from corral.cli.common import get_client, reason_trail
from corral.cli.jobs import make_op, submit_and_wait, submit_op
from corral.cli.keyval import IdentValue
from corral.cli.options import (
    IdentKeyValType,
    dry_run_option,
    no_headers_option,
    print_jobid_option,
    priority_option,
    reason_option,
    separator_option,
    submit_option,
)
from corral.cli.output import format_table
from corral.errors import ParameterError
from corral.objects.params import parse_size

__all__ = ["DISK_COMMANDS"]

TOOL = "gnt-instance"


def _recreate_disks(items: Sequence[tuple[str, IdentValue]]) -> list[list[Any]]:
    """``--disk N[:size=SIZE,...]`` values → ``[[index, {params}], ...]`` (Ganeti's)."""
    disks: list[list[Any]] = []
    for ident, values in items:
        try:
            index = int(ident)
        except ValueError:
            raise ParameterError(f"Invalid disk index passed: {ident!r}") from None
        if not isinstance(values, dict):
            raise ParameterError(f"Invalid disk/{index} value: expected dict, got {values}")
        params: dict[str, Any] = dict(values)
        if "size" in params:
            try:
                params["size"] = parse_size(str(params["size"]))
            except ParameterError as err:
                raise ParameterError(f"Invalid disk size for disk {index}: "
                                     f"{err.message}") from None
        if "spindles" in params:
            try:
                params["spindles"] = int(str(params["spindles"]))
            except ValueError as err:
                raise ParameterError(f"Invalid spindles for disk {index}: {err}") from None
        disks.append([index, params])
    return disks


def _job_options(func: Any) -> Any:
    for decorator in (dry_run_option, reason_option, priority_option, print_jobid_option,
                      submit_option):
        func = decorator(func)
    return func


@click.command("recreate-disks")
@click.option("--disk", "disk_items", type=IdentKeyValType(), multiple=True,
              metavar="DISKS", help="Disk parameters")
@click.option("-n", "--node", "node", metavar="<pnode>[:<snode>]",
              help="Target node and optional secondary node")
@click.option("-I", "--iallocator", "iallocator", metavar="<NAME>",
              help="Select nodes for the instance automatically using the <NAME> "
                   "iallocator plugin")
@_job_options
@click.argument("instance_name", metavar="<instance-name>")
def recreate_disks(disk_items: tuple[tuple[str, IdentValue], ...], node: str | None,
                   iallocator: str | None, submit_only: bool, print_jobid: bool,
                   priority: int | None, reason: str | None, dry_run: bool,
                   instance_name: str) -> None:
    """Recreate an instance's disks"""
    nodes: list[str] = []
    if node:
        if iallocator:
            raise ParameterError("At most one of either --nodes or --iallocator can be "
                                 "passed")
        primary, _, secondary = node.partition(":")
        nodes = [primary, *([secondary] if secondary else [])]
    body: dict[str, Any] = {"instance_name": instance_name,
                            "disks": _recreate_disks(disk_items), "nodes": nodes}
    if iallocator:
        body["iallocator"] = iallocator
    submit_op(TOOL, "recreate-disks", "OP_INSTANCE_RECREATE_DISKS", body, reason=reason,
              priority=priority, submit_only=submit_only, print_jobid=print_jobid,
              dry_run=dry_run)


@click.command("replace-disks")
@click.option("-a", "--auto", "auto", is_flag=True,
              help="Automatically replace faulty disks (applies only to internally "
                   "mirrored disk templates, e.g. drbd)")
@click.option("--disks", "disks", metavar="DISKS",
              help="Comma-separated list of disks indices to act on (e.g. 0,2) (optional, "
                   "defaults to all disks)")
@click.option("-I", "--iallocator", "iallocator", metavar="<NAME>",
              help="Select nodes for the instance automatically using the <NAME> "
                   "iallocator plugin")
@click.option("--early-release", is_flag=True,
              help="Release the locks on the secondary node(s) early")
@click.option("-n", "--new-secondary", "new_secondary", metavar="NODE",
              help="Specifies the new secondary node")
@click.option("-p", "--on-primary", "on_primary", is_flag=True,
              help="Replace the disk(s) on the primary node (applies only to internally "
                   "mirrored disk templates, e.g. drbd)")
@click.option("-s", "--on-secondary", "on_secondary", is_flag=True,
              help="Replace the disk(s) on the secondary node (applies only to internally "
                   "mirrored disk templates, e.g. drbd)")
@click.option("--ignore-ipolicy", is_flag=True, help="Ignore instance policy violations")
@_job_options
@click.argument("instance_name", metavar="<instance-name>")
def replace_disks(auto: bool, disks: str | None, iallocator: str | None,
                  early_release: bool, new_secondary: str | None, on_primary: bool,
                  on_secondary: bool, ignore_ipolicy: bool, submit_only: bool,
                  print_jobid: bool, priority: int | None, reason: str | None,
                  dry_run: bool, instance_name: str) -> None:
    """Replaces disks for the instance"""
    try:
        indexes = [int(i) for i in disks.split(",")] if disks else []
    except ValueError as err:
        raise ParameterError(f"Invalid disk index passed: {err}") from None
    chosen = [on_primary, on_secondary, auto, new_secondary is not None,
              iallocator is not None].count(True)
    if chosen != 1:
        raise ParameterError("One and only one of the -p, -s, -a, -n and -I options must "
                             "be passed")
    if on_primary:
        mode = "replace_on_primary"
    elif on_secondary:
        mode = "replace_on_secondary"
    elif auto:
        mode = "replace_auto"
        if indexes:
            raise ParameterError("Cannot specify disks when using automatic mode")
    else:
        mode = "replace_new_secondary"
    body: dict[str, Any] = {"instance_name": instance_name, "disks": indexes, "mode": mode,
                            "early_release": early_release, "ignore_ipolicy": ignore_ipolicy}
    if new_secondary is not None:
        body["remote_node"] = new_secondary
    if iallocator is not None:
        body["iallocator"] = iallocator
    submit_op(TOOL, "replace-disks", "OP_INSTANCE_REPLACE_DISKS", body, reason=reason,
              priority=priority, submit_only=submit_only, print_jobid=print_jobid,
              dry_run=dry_run)


@click.command("disk-status")
@no_headers_option
@separator_option
@priority_option
@click.argument("instance_name", metavar="<instance-name>")
def disk_status(no_headers: bool, separator: str | None, priority: int | None,
                instance_name: str) -> None:
    """Show each disk of the instance on each node holding it, with its status: ok,
    inactive, degraded, faulty, missing, offline or unknown (corral)."""
    op = make_op("OP_INSTANCE_DISK_STATUS", {"instance_name": instance_name},
                 trail=reason_trail(TOOL, "disk-status"), priority=priority)
    with get_client() as client:
        results = submit_and_wait(client, [op])
    assert results is not None
    rows = [[entry["iv_name"], entry["node"], entry["status"], entry.get("dev_path") or "-"]
            for entry in results[0]]
    for line in format_table(["Disk", "Node", "Status", "Path"], rows, separator=separator,
                             no_headers=no_headers):
        click.echo(line)


@click.command("repair-disks")
@_job_options
@click.argument("instance_name", metavar="<instance-name>")
def repair_disks(submit_only: bool, print_jobid: bool, priority: int | None,
                 reason: str | None, dry_run: bool, instance_name: str) -> None:
    """Repair what is broken in the instance's disks while it keeps a good copy
    (corral: design 2.1's repair instance)."""
    done = submit_op(TOOL, "repair-disks", "OP_INSTANCE_REPAIR_DISKS",
                     {"instance_name": instance_name}, reason=reason, priority=priority,
                     submit_only=submit_only, print_jobid=print_jobid, dry_run=dry_run)
    for index, node, action in done or []:
        click.echo(f"disk/{index} on {node}: {action}")


#: The commands :mod:`corral.cli.gnt_instance` adds.
DISK_COMMANDS = (recreate_disks, replace_disks, disk_status, repair_disks)
