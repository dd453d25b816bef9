"""``gnt-group``: add, remove, rename, fill, list and change node groups.

Options and default columns are Ganeti's; static-state options are not offered
(corral keeps none). Wherever a group or node is named, its UUID works too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from corral import __version__
from corral.cli.common import CorralGroup, get_client
from corral.cli.ipolicy import format_policy, ipolicy_from_options, ipolicy_options
from corral.cli.jobs import list_fields_command, submit_op
from corral.cli.keyval import IdentValue
from corral.cli.listing import list_command
from corral.cli.lookup import query_named
from corral.cli.options import (
    KeyValType,
    dry_run_option,
    force_option,
    ident_keyval_option,
    print_jobid_option,
    priority_option,
    reason_option,
    submit_option,
)
from corral.cli.output import format_info, format_params
from corral.cli.tags import add_tag_commands
from corral.errors import ParameterError

__all__ = ["DEFAULT_FIELDS", "LIST_FORMAT", "main"]

TOOL = "gnt-group"

#: ``gnt-group list``'s default columns (Ganeti's).
DEFAULT_FIELDS = ("name", "node_cnt", "pinst_cnt", "alloc_policy", "ndparams")

_ALLOC_POLICIES = ("preferred", "last_resort", "unallocable")


def _fmt_dict(data: Any) -> str:
    if not data:
        return "(empty)"
    return ", ".join(f"{key}={value}" for key, value in data.items())


#: How list columns print (Ganeti's overrides).
LIST_FORMAT: dict[str, Callable[[Any], str]] = {
    "node_list": lambda v: ",".join(v),
    "pinst_list": lambda v: ",".join(v),
    "tags": lambda v: ",".join(v),
    "ndparams": _fmt_dict,
}

_INFO_FIELDS = ["ndparams", "custom_ndparams", "diskparams", "custom_diskparams",
                "ipolicy", "custom_ipolicy"]


def _diskparams(merged: dict[str, IdentValue]) -> dict[str, Any] | None:
    """``-D template:key=val`` → ``{template: {key: val}}``; whole-template removal is
    refused (reset single parameters with ``-D template:-key``)."""
    if not merged:
        return None
    result: dict[str, Any] = {}
    for template, values in merged.items():
        if not isinstance(values, dict):
            raise ParameterError(
                f"-D {'-' if values is None else 'no_'}{template}: a whole template's "
                f"parameters cannot be removed; reset single ones with -D {template}:-name")
        result[template] = values
    return result


def _group_params(func: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed([
        click.option("--alloc-policy", type=click.Choice(_ALLOC_POLICIES), default=None,
                     help="Instance allocation policy of the group."),
        click.option("--node-parameters", "ndparams", type=KeyValType(), default=None,
                     help="Node parameters, key=val,... ('-key' resets one)."),
        ident_keyval_option("-D", "--disk-parameters", "diskparams",
                            help="Disk template parameters, template:key=val,...; "
                                 "repeatable."),
    ]):
        func = option(func)
    return ipolicy_options(std=False)(func)


def _params(group: str, alloc_policy: str | None, ndparams: dict[str, Any] | None,
            diskparams: dict[str, IdentValue], kw: dict[str, Any]) -> dict[str, Any]:
    """The opcode parameters ``add`` and ``modify`` share; only those given."""
    params: dict[str, Any] = {"group_name": group}
    for key, value in (("alloc_policy", alloc_policy), ("ndparams", ndparams),
                       ("diskparams", _diskparams(diskparams)),
                       ("ipolicy", ipolicy_from_options(kw, group=True))):
        if value is not None:
            params[key] = value
    return params


def _job_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed([dry_run_option, priority_option, submit_option,
                            print_jobid_option, reason_option]):
        func = option(func)
    return func


@click.group(cls=CorralGroup)
@click.version_option(__version__, prog_name=TOOL)
def cli() -> None:
    """Node group administration: add, remove, rename, assign-nodes, list, info, modify."""


@cli.command()
@click.argument("group")
@_group_params
@_job_options
def add(group: str, alloc_policy: str | None, ndparams: dict[str, Any] | None,
        diskparams: dict[str, IdentValue], dry_run: bool, priority: int | None,
        submit_only: bool, print_jobid: bool, reason: str | None, **kw: Any) -> None:
    """Add a node group called GROUP."""
    params = _params(group, alloc_policy, ndparams, diskparams, kw)
    submit_op(TOOL, "add", "OP_GROUP_ADD", params, reason=reason, priority=priority,
              submit_only=submit_only, print_jobid=print_jobid, dry_run=dry_run)


@cli.command("assign-nodes")
@click.argument("group")
@click.argument("nodes", nargs=-1, required=True)
@force_option
@_job_options
def assign_nodes(group: str, nodes: tuple[str, ...], force: bool, dry_run: bool,
                 priority: int | None, submit_only: bool, print_jobid: bool,
                 reason: str | None) -> None:
    """Move NODES into GROUP."""
    submit_op(TOOL, "assign-nodes", "OP_GROUP_ASSIGN_NODES",
              {"group_name": group, "nodes": list(nodes), "force": force}, reason=reason,
              priority=priority, submit_only=submit_only, print_jobid=print_jobid,
              dry_run=dry_run)


@cli.command()
@click.argument("group")
@_job_options
def remove(group: str, dry_run: bool, priority: int | None, submit_only: bool,
           print_jobid: bool, reason: str | None) -> None:
    """Remove the (empty) GROUP."""
    submit_op(TOOL, "remove", "OP_GROUP_REMOVE", {"group_name": group}, reason=reason,
              priority=priority, submit_only=submit_only, print_jobid=print_jobid,
              dry_run=dry_run)


@cli.command()
@click.argument("group")
@click.argument("new_name")
@_job_options
def rename(group: str, new_name: str, dry_run: bool, priority: int | None, submit_only: bool,
           print_jobid: bool, reason: str | None) -> None:
    """Rename GROUP to NEW_NAME."""
    submit_op(TOOL, "rename", "OP_GROUP_RENAME", {"group_name": group, "new_name": new_name},
              reason=reason, priority=priority, submit_only=submit_only, print_jobid=print_jobid,
              dry_run=dry_run)


@cli.command()
@click.argument("group")
@_group_params
@_job_options
def modify(group: str, alloc_policy: str | None, ndparams: dict[str, Any] | None,
           diskparams: dict[str, IdentValue], dry_run: bool, priority: int | None,
           submit_only: bool, print_jobid: bool, reason: str | None, **kw: Any) -> None:
    """Change GROUP's parameters."""
    params = _params(group, alloc_policy, ndparams, diskparams, kw)
    if len(params) == 1:
        raise ParameterError("please give at least one of the parameters (see --help)")
    result = submit_op(TOOL, "modify", "OP_GROUP_SET_PARAMS", params, reason=reason,
                       priority=priority, submit_only=submit_only, print_jobid=print_jobid,
                       dry_run=dry_run)
    if result:
        click.echo(f"Modified node group {group}")
        for param, value in result:
            click.echo(f" - {param:<5} -> {value}")


cli.add_command(list_command(
    "group", argument="<group-name>", filter_example="node_cnt > 0",
    doc=('List node groups (all, or the GROUPS or filter given).\n'
         '\n'
         'Default columns: name, node_cnt, pinst_cnt, alloc_policy, ndparams; see\n'
         "'gnt-group list-fields' for all fields."),
    default_fields=DEFAULT_FIELDS, formats=LIST_FORMAT, connect=lambda: get_client()))


cli.add_command(list_fields_command("group", "node groups", lambda: get_client()))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the groups' fields as JSON.")
@click.argument("groups", nargs=-1)
def info(groups: tuple[str, ...], as_json: bool) -> None:
    """Show node groups (all, or the GROUPS given)."""
    with get_client() as client:
        rows = query_named(client, "group", "node group", groups, _INFO_FIELDS)
    if as_json:
        from corral import serializer  # msgspec: only when JSON is read or written
        click.echo(serializer.dumps_pretty(rows))
        return
    if rows:
        click.echo(format_info([[
            ("Node group", row["name"]),
            ("Node parameters", format_params(row["custom_ndparams"], row["ndparams"])),
            ("Disk parameters", format_params(row["custom_diskparams"], row["diskparams"])),
            ("Instance policy", format_policy(row["custom_ipolicy"], row["ipolicy"],
                                              cluster=False)),
        ] for row in rows]))


add_tag_commands(cli, TOOL, "nodegroup", "GROUP")


def main() -> None:
    """Entry point of ``gnt-group``."""
    cli(prog_name=TOOL)


if __name__ == "__main__":
    main()
