"""``gnt-cluster add-aggregate``, ``remove-aggregate`` and ``list-aggregates``:
corral's named placement aggregates (Ganeti has none; the verbs follow
``gnt-cluster``'s ``add-tags``/``remove-tags``/``list-tags``).

A named aggregate is a placement aggregate UUID with a name; nodes are put in it with
``gnt-node modify --aggregates +NAME`` and instances placed with ``gnt-instance add
--member-of NAME`` (or ``!NAME``, ``in:A,B``, ``!in:A,B``). See docs/placement.md.
"""

from __future__ import annotations

import click

from corral.cli.common import get_client
from corral.cli.jobs import submit_op
from corral.cli.options import (
    dry_run_option,
    no_headers_option,
    print_jobid_option,
    priority_option,
    reason_option,
    separator_option,
    submit_option,
)
from corral.cli.output import format_table

__all__ = ["add_aggregate_commands"]

TOOL = "gnt-cluster"


@click.command("add-aggregate")
@click.argument("name")
@click.option("--uuid", "aggregate_uuid", metavar="UUID",
              help="The aggregate's UUID (default: a new one), e.g. one a placement "
                   "client already uses.")
@dry_run_option
@priority_option
@submit_option
@print_jobid_option
@reason_option
def add_aggregate(name: str, aggregate_uuid: str | None, dry_run: bool, priority: int | None,
                  submit_only: bool, print_jobid: bool, reason: str | None) -> None:
    """Name a placement aggregate NAME, so that nodes can be put in it
    (gnt-node modify --aggregates +NAME) and instances placed by it
    (gnt-instance add --member-of NAME, '!NAME', 'in:A,B', '!in:A,B').

    NAME starts with a letter and has up to 63 letters, digits, '.', '_' and '-'. Prints
    the aggregate's UUID.
    """
    params = {"aggregate_name": name}
    if aggregate_uuid is not None:
        params["aggregate_uuid"] = aggregate_uuid
    result = submit_op(TOOL, "add-aggregate", "OP_CLUSTER_ADD_AGGREGATE", params,
                       reason=reason, priority=priority, submit_only=submit_only,
                       print_jobid=print_jobid, dry_run=dry_run)
    if result:
        click.echo(result)


@click.command("remove-aggregate")
@click.argument("name")
@dry_run_option
@priority_option
@submit_option
@print_jobid_option
@reason_option
def remove_aggregate(name: str, dry_run: bool, priority: int | None, submit_only: bool,
                     print_jobid: bool, reason: str | None) -> None:
    """Forget the named aggregate NAME; no node may be in it."""
    submit_op(TOOL, "remove-aggregate", "OP_CLUSTER_REMOVE_AGGREGATE",
              {"aggregate_name": name}, reason=reason, priority=priority,
              submit_only=submit_only, print_jobid=print_jobid, dry_run=dry_run)


@click.command("list-aggregates")
@no_headers_option
@separator_option
def list_aggregates(no_headers: bool, separator: str | None) -> None:
    """List the named aggregates: name, UUID and the nodes in each."""
    with get_client() as client:
        info = client.call("QueryClusterInfo")
        nodes = client.call("Query", "node", ["name", "aggregates.uuid"], None)
    members: dict[str, list[str]] = {}
    for row in nodes["data"]:
        name, uuids = (cell[1] for cell in row)
        for uuid in uuids or []:
            members.setdefault(uuid, []).append(name)
    rows = [(name, uuid, ",".join(sorted(members.get(uuid, []))))
            for name, uuid in sorted(info.get("aggregates", {}).items())]
    for line in format_table(["Name", "UUID", "Nodes"], rows, separator=separator,
                             no_headers=no_headers):
        click.echo(line)


def add_aggregate_commands(group: click.Group) -> None:
    """Add this module's commands to ``gnt-cluster``."""
    group.add_command(add_aggregate)
    group.add_command(remove_aggregate)
    group.add_command(list_aggregates)
