"""``gnt-node``: add, remove, list, inspect and change the cluster's nodes.

Options and default columns are Ganeti's. corral's additions to ``add``:
``--primary-ip IP`` (corral does not resolve node names) and ``--token TOKEN``, the
one-time join token the new node's daemon printed when it started without a cluster
(it also keeps it in its ``join-token`` file); no SSH is needed. Wherever a node is
named, its UUID works too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from corral import __version__
from corral.cli.common import CorralGroup, get_client
from corral.cli.gnt_node_storage import STORAGE_COMMANDS
from corral.cli.jobs import (
    exit_with,
    list_fields_command,
    submit_op,
)
from corral.cli.jobset import wait_jobs
from corral.cli.listing import list_command
from corral.cli.lookup import query_named
from corral.cli.options import (
    GANETI_NOTHING,
    KeyValType,
    dry_run_option,
    force_option,
    print_jobid_option,
    priority_option,
    reason_option,
    submit_option,
    yes_no_option,
)
from corral.cli.output import format_info, format_params
from corral.cli.prompt import ask_user
from corral.cli.tags import add_tag_commands
from corral.errors import NothingToChangeError, ParameterError

__all__ = [
    "DEFAULT_FIELDS",
    "LIST_FORMAT",
    "main",
]

TOOL = "gnt-node"

#: ``gnt-node list``'s default columns (Ganeti's).
DEFAULT_FIELDS = ("name", "dtotal", "dfree", "mtotal", "mnode", "mfree", "pinst_cnt",
                  "sinst_cnt")

#: List-valued fields print comma-separated, as Ganeti prints them.
LIST_FORMAT: dict[str, Callable[[Any], str]] = {
    name: (lambda v: ",".join(str(x) for x in v))
    for name in ("pinst_list", "sinst_list", "tags", "aggregates", "aggregates.uuid", "traits")
}

#: What ``gnt-node info`` shows (Ganeti's selection).
_INFO_FIELDS = ["name", "pip", "sip", "pinst_list", "sinst_list", "master_candidate",
                "drained", "offline", "master_capable", "vm_capable", "ndparams",
                "custom_ndparams", "group", "role", "aggregates", "traits"]

F = TypeVar("F", bound=Callable[..., Any])


# -- commands ----------------------------------------------------------------------


@click.group(cls=CorralGroup)
@click.version_option(__version__, prog_name=TOOL)
def cli() -> None:
    """Node administration: add, remove, list, info, modify, evacuate, migrate, tags,
    storage units and volumes."""


@cli.command()
@click.argument("node")
@click.option("--primary-ip", metavar="IP",
              help="Primary IP address of the node (corral: required for a new node).")
@click.option("--token", metavar="TOKEN",
              help="The join token the node's daemon printed (corral: required).")
@click.option("-s", "--secondary-ip", metavar="ADDRESS",
              help="Secondary IP address (only when the cluster has a secondary network).")
@click.option("--readd", is_flag=True,
              help="Re-add a node that is in the configuration (e.g. reinstalled).")
@click.option("-g", "--node-group", "group", metavar="GROUP",
              help="Node group (name or UUID) [default: the default group].")
@yes_no_option("--master-capable", help="Whether the node can become a master candidate.")
@yes_no_option("--vm-capable", help="Whether the node can host instances.")
@click.option("--node-parameters", "ndparams", type=KeyValType(), default=None,
              help="Node parameters, key=val,...")
@click.option("--no-ssh-key-check", "no_ssh_key_check", is_flag=True, hidden=True)
@click.option("--force-join", "force_join", is_flag=True, hidden=True)
@click.option("--no-node-setup", "no_node_setup", is_flag=True, hidden=True)
@click.option("-v", "--verbose", "verbose", is_flag=True, hidden=True)
@priority_option
@submit_option
@print_jobid_option
@reason_option
def add(node: str, primary_ip: str | None, token: str | None, secondary_ip: str | None,
        readd: bool, group: str | None, master_capable: bool | None,
        vm_capable: bool | None, ndparams: dict[str, Any] | None, priority: int | None,
        submit_only: bool, print_jobid: bool, reason: str | None, **_ganeti_ssh: bool) -> None:
    """Add NODE to the cluster: its node daemon joins with TOKEN.

    The daemon of a node without a cluster prints a one-time token at start (and
    keeps it in its join-token file); give it with --token, and the node's address
    with --primary-ip. SSH options of Ganeti are accepted and ignored.
    """
    params: dict[str, Any] = {"node_name": node, "readd": readd}
    for key, value in (("primary_ip", primary_ip), ("token", token),
                       ("secondary_ip", secondary_ip), ("group", group),
                       ("master_capable", master_capable), ("vm_capable", vm_capable),
                       ("ndparams", ndparams)):
        if value is not None:
            params[key] = value
    submit_op(TOOL, "add", "OP_NODE_ADD", params, reason=reason, priority=priority,
              submit_only=submit_only, print_jobid=print_jobid)


@cli.command()
@click.argument("node")
@dry_run_option
@priority_option
@submit_option
@print_jobid_option
@reason_option
def remove(node: str, dry_run: bool, priority: int | None, submit_only: bool,
           print_jobid: bool, reason: str | None) -> None:
    """Remove NODE (it must have no instances); it forgets the cluster."""
    submit_op(TOOL, "remove", "OP_NODE_REMOVE", {"node_name": node}, reason=reason,
              priority=priority, submit_only=submit_only, print_jobid=print_jobid,
              dry_run=dry_run)


cli.add_command(list_command(
    "node", argument="<node-name>", filter_example="mfree < 1024",
    doc=('List nodes (all, or the NODES or filter given).\n'
         '\n'
         'Default columns: name, dtotal, dfree, mtotal, mnode, mfree, pinst_cnt, sinst_cnt;\n'
         "see 'gnt-node list-fields' for all fields."),
    default_fields=DEFAULT_FIELDS, formats=LIST_FORMAT, connect=lambda: get_client()))


cli.add_command(list_fields_command("node", "nodes", lambda: get_client()))


def _node_info(row: dict[str, Any]) -> list[tuple[str, Any]]:
    info: list[tuple[str, Any]] = [
        ("Node name", row["name"]),
        ("primary ip", row["pip"]),
        ("secondary ip", row["sip"]),
        ("master candidate", row["master_candidate"]),
        ("drained", row["drained"]),
        ("offline", row["offline"]),
        ("master_capable", row["master_capable"]),
        ("vm_capable", row["vm_capable"]),
    ]
    if row["vm_capable"]:
        info.append(("primary for instances", list(row["pinst_list"] or [])))
        info.append(("secondary for instances", list(row["sinst_list"] or [])))
    info.append(("node parameters", format_params(row["custom_ndparams"], row["ndparams"])))
    # corral's placement data, shown when there is some (Ganeti has none)
    if row.get("aggregates"):
        info.append(("aggregates", ", ".join(row["aggregates"])))
    if row.get("traits"):
        info.append(("traits", ", ".join(row["traits"])))
    return info


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the nodes' fields as JSON.")
@click.argument("nodes", nargs=-1)
def info(nodes: tuple[str, ...], as_json: bool) -> None:
    """Show the configuration of nodes (all, or the NODES given)."""
    with get_client() as client:
        rows = query_named(client, "node", "node", nodes, _INFO_FIELDS)
    if as_json:
        from corral import serializer  # msgspec: only when JSON is read or written
        click.echo(serializer.dumps_pretty(rows))
        return
    if rows:
        click.echo(format_info([_node_info(row) for row in rows]))


@cli.command()
@click.argument("node")
@force_option
@yes_no_option("-C", "--master-candidate", help="Set the master_candidate flag.")
@yes_no_option("-D", "--drained", help="Set the drained flag (no new instances).")
@yes_no_option("-O", "--offline", help="Set the offline flag (not contacted at all).")
@yes_no_option("--master-capable", help="Set the master_capable flag.")
@yes_no_option("--vm-capable", help="Set the vm_capable flag.")
@click.option("-s", "--secondary-ip", metavar="ADDRESS", help="New secondary IP address.")
@click.option("--auto-promote", is_flag=True,
              help="Promote other nodes to master candidate as needed.")
@click.option("--node-parameters", "ndparams", type=KeyValType(), default=None,
              help="Node parameters, key=val,... ('-key' resets one).")
@click.option("--aggregates", metavar="SPEC", default=None,
              help="Named placement aggregates (gnt-cluster add-aggregate): 'A,B' sets "
                   "them, '+A' adds, '-A' removes ('+A,-B' both), '' empties.")
@click.option("--traits", metavar="SPEC", default=None,
              help="Placement traits (os-traits names or CUSTOM_*): 'T1,T2' sets them, "
                   "'+T' adds, '-T' removes, '' empties.")
@dry_run_option
@priority_option
@submit_option
@print_jobid_option
@reason_option
def modify(node: str, force: bool, master_candidate: bool | None, drained: bool | None,
           offline: bool | None, master_capable: bool | None, vm_capable: bool | None,
           secondary_ip: str | None, auto_promote: bool, ndparams: dict[str, Any] | None,
           aggregates: str | None, traits: str | None, dry_run: bool, priority: int | None,
           submit_only: bool, print_jobid: bool, reason: str | None) -> None:
    """Change NODE's flags and parameters."""
    changes = {"master_candidate": master_candidate, "drained": drained, "offline": offline,
               "master_capable": master_capable, "vm_capable": vm_capable,
               "secondary_ip": secondary_ip, "ndparams": ndparams,
               "aggregates": _spec_list(aggregates), "traits": _spec_list(traits)}
    if all(value is None for value in changes.values()):
        raise NothingToChangeError(f"{GANETI_NOTHING}\nsee --help for the parameters")
    if offline is False and not force and not ask_user(
            "You are setting this node online manually. If the configuration has changed, "
            "this can cause issues such as split brain. To safely bring a node back "
            "online, please use --readd instead. If you are confident that the "
            "configuration hasn't changed, continue?"):
        exit_with(1)
    params: dict[str, Any] = {"node_name": node, "force": force, "auto_promote": auto_promote,
                              **{k: v for k, v in changes.items() if v is not None}}
    result = submit_op(TOOL, "modify", "OP_NODE_SET_PARAMS", params, reason=reason,
                       priority=priority, submit_only=submit_only, print_jobid=print_jobid,
                       dry_run=dry_run)
    if result:
        click.echo(f"Modified node {node}")
        for param, value in result:
            click.echo(f" - {param:<5} -> {value}")


def _spec_list(spec: str | None) -> list[str] | None:
    """``--aggregates``/``--traits``: the comma-separated items ('' is none)."""
    if spec is None:
        return None
    return [item.strip() for item in spec.split(",") if item.strip()]


def _wait_for_jobs(result: Any) -> int:
    """Wait for the jobs a unit submitted (its ``jobs`` result); how many failed."""
    with get_client() as client:
        done = wait_jobs(client, [("", bool(ok), data) for ok, data in result["jobs"]])
    return sum(1 for ok, _result in done if not ok)


@cli.command()
@force_option
@click.option("-I", "--iallocator", metavar="NAME",
              help="The allocator that chooses where the instances go ('.': the "
                   "cluster's default allocators, also used without -I and -n).")
@click.option("--ignore-soft-errors", is_flag=True,
              help="Tell the allocator to ignore soft errors such as N+1 violations.")
@click.option("-n", "--new-secondary", "dst_node", metavar="NODE",
              help="The new secondary node (secondary instances only).")
@click.option("--early-release", is_flag=True,
              help="Release the locks on the secondary node(s) early.")
@click.option("-p", "--primary-only", is_flag=True, help="Evacuate primary instances only.")
@click.option("-s", "--secondary-only", is_flag=True,
              help="Evacuate secondary instances only (mirrored disk templates).")
@priority_option
@submit_option
@print_jobid_option
@reason_option
@click.argument("node")
def evacuate(node: str, force: bool, iallocator: str | None, ignore_soft_errors: bool,
             dst_node: str | None, early_release: bool, primary_only: bool,
             secondary_only: bool, priority: int | None, submit_only: bool,
             print_jobid: bool, reason: str | None) -> None:
    """Move the instances away from NODE: one job per instance, to the nodes an
    allocator chooses (or, for secondaries, to the new secondary node)."""
    if dst_node is not None:
        click.echo("New secondary node given (disabling iallocator), hence evacuating "
                   "secondary instances only.", err=True)
        primary_only, secondary_only = False, True
    if primary_only and secondary_only:
        raise ParameterError("Only one of the --primary-only and --secondary-only options can "
                             "be passed")
    mode = ("primary-only" if primary_only else "secondary-only" if secondary_only
            else "all")
    fields = ([] if secondary_only else ["pinst_list"]) + \
        ([] if primary_only else ["sinst_list"])
    with get_client() as client:
        (row,) = query_named(client, "node", "node", [node], fields)
    instances = sorted({name for field in fields for name in row[field] or []})
    if not instances:
        click.echo(f"No instances to evacuate on node(s) {node}, exiting.", err=True)
        return
    if not force and not ask_user(f"Relocate instance(s) {', '.join(instances)} from "
                                  f"node(s) {node}?"):
        exit_with(13)
    params: dict[str, Any] = {"node_name": node, "mode": mode, "early_release": early_release,
                              "ignore_soft_errors": ignore_soft_errors}
    for key, value in (("remote_node", dst_node), ("iallocator", iallocator)):
        if value is not None:
            params[key] = value
    result = submit_op(TOOL, "evacuate", "OP_NODE_EVACUATE", params, reason=reason,
                       priority=priority, submit_only=submit_only, print_jobid=print_jobid)
    if result is None:
        return
    bad = _wait_for_jobs(result)
    if bad:
        click.echo(f"There were {bad} errors during the evacuation.")
        exit_with(1)
    click.echo("All instances evacuated successfully.")


@cli.command()
@force_option
@click.option("--non-live", is_flag=True,
              help="Migrate non-live: pause the instance, copy its memory, resume it there.")
@click.option("--migration-mode", type=click.Choice(["live", "non-live"]),
              help="Override the instances' migration mode.")
@click.option("-n", "--target-node", metavar="NODE",
              help="The node to migrate the instances to (shared storage).")
@click.option("-I", "--iallocator", metavar="NAME",
              help="The allocator that chooses each instance's node ('.': the cluster's "
                   "default allocators, also used without -I and -n).")
@click.option("--ignore-ipolicy", is_flag=True, help="Ignore instance policy violations.")
@click.option("--no-runtime-changes", "no_runtime_changes", is_flag=True,
              help="Do not allow runtime changes (memory ballooning) to make them fit.")
@priority_option
@submit_option
@print_jobid_option
@reason_option
@click.argument("node")
def migrate(node: str, force: bool, non_live: bool, migration_mode: str | None,
            target_node: str | None, iallocator: str | None, ignore_ipolicy: bool,
            no_runtime_changes: bool, priority: int | None, submit_only: bool,
            print_jobid: bool, reason: str | None) -> None:
    """Migrate every primary instance of NODE away: one migration job per instance."""
    with get_client() as client:
        (row,) = query_named(client, "node", "node", [node], ["name", "pinst_list"])
    instances = sorted(row["pinst_list"] or [])
    if not instances:
        click.echo(f"No primary instances on node {row['name']}, exiting.")
        return
    if not force and not ask_user(f"Migrate instance(s) {', '.join(instances)}?"):
        exit_with(13)
    if non_live and migration_mode is not None:
        raise ParameterError("Only one of the --non-live and --migration-mode options can be "
                             "passed")
    params: dict[str, Any] = {"node_name": node,
                              "mode": "non-live" if non_live else migration_mode,
                              "allow_runtime_changes": not no_runtime_changes,
                              "ignore_ipolicy": ignore_ipolicy}
    for key, value in (("target_node", target_node), ("iallocator", iallocator)):
        if value is not None:
            params[key] = value
    result = submit_op(TOOL, "migrate", "OP_NODE_MIGRATE", params, reason=reason,
                       priority=priority, submit_only=submit_only, print_jobid=print_jobid)
    if result is None:
        return
    bad = _wait_for_jobs(result)
    if bad:
        click.echo(f"There were {bad} errors during the node migration.")
        exit_with(1)
    click.echo("All instances migrated successfully.")


add_tag_commands(cli, TOOL, "node", "NODE")

for _command in STORAGE_COMMANDS:
    cli.add_command(_command)


def main() -> None:
    """Entry point of ``gnt-node``."""
    cli(prog_name=TOOL)


if __name__ == "__main__":
    main()
