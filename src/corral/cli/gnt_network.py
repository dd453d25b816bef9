"""``gnt-network``: add, modify, connect, disconnect, remove, list and show networks.

Commands, options, default columns and the ``info`` layout are Ganeti's. ``connect``
without groups connects the network to every node group, with the NIC mode and
link given by ``-N`` (the cluster's NIC defaults for what ``-N`` leaves out);
``disconnect`` without groups disconnects it from every group it is connected to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import click

from corral import __version__
from corral.cli.common import CorralGroup, get_client
from corral.cli.jobs import exit_with, list_fields_command, submit_op
from corral.cli.listing import list_command
from corral.cli.lookup import query_named, query_rows
from corral.cli.options import (
    KeyValType,
    dry_run_option,
    force_option,
    print_jobid_option,
    priority_option,
    reason_option,
    submit_option,
)
from corral.cli.tags import add_tag_commands
from corral.errors import ParameterError

__all__ = ["DEFAULT_FIELDS", "LIST_FORMAT", "format_network_info", "main"]

TOOL = "gnt-network"

#: ``gnt-network list``'s default columns (Ganeti's).
DEFAULT_FIELDS = ("name", "network", "gateway", "mac_prefix", "group_list", "tags")

_INFO_FIELDS = ["serial_no", "network", "gateway", "network6", "gateway6", "mac_prefix",
                "free_count", "reserved_count", "map", "external_reservations",
                "group_list", "inst_list"]


def _groups_text(groups: Sequence[Sequence[str]]) -> str:
    return ", ".join(f"{g[0]} ({g[1]}, {g[2]}, {g[3]})" for g in groups)


#: How list columns print (Ganeti's layout of lists).
LIST_FORMAT: dict[str, Callable[[Any], str]] = {
    "group_list": _groups_text,
    "inst_list": lambda v: ",".join(v),
    "tags": lambda v: ",".join(v),
}


def _csv(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [item.strip() for item in value.split(",") if item.strip()]


def _job_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed([dry_run_option, priority_option, submit_option,
                            print_jobid_option, reason_option]):
        func = option(func)
    return func


_reserved_option = click.option("--add-reserved-ips", default=None,
                                help="Comma-separated list of reserved IPs to add")
_mac_prefix_option = click.option(
    "-m", "--mac-prefix", default=None, metavar="PREFIX",
    help="MAC prefix of the network's NICs, in the format XX:XX:XX")
_gateway_option = click.option("--gateway", default=None,
                               help="IP address of the router (gateway)")
_network6_option = click.option("--network6", default=None, help="IPv6 network in CIDR notation")
_gateway6_option = click.option("--gateway6", default=None,
                                help="IPv6 address of the router (gateway)")
_conflicts_option = click.option("--no-conflicts-check", "no_conflicts_check", is_flag=True,
                                 help="Don't check for conflicting IPs")


@click.group(cls=CorralGroup)
@click.version_option(__version__, prog_name=TOOL)
def cli() -> None:
    """IP network administration: add, modify, connect, disconnect, remove, list, info."""


@cli.command()
@click.argument("network_name")
@click.option("--network", "subnet", default=None, help="IPv4 network in CIDR notation")
@_gateway_option
@_reserved_option
@_mac_prefix_option
@_network6_option
@_gateway6_option
@_conflicts_option
@click.option("--tags", default=None, help="Comma-separated list of tags")
@_job_options
def add(network_name: str, subnet: str | None, gateway: str | None,
        add_reserved_ips: str | None, mac_prefix: str | None, network6: str | None,
        gateway6: str | None, no_conflicts_check: bool, tags: str | None, dry_run: bool,
        priority: int | None, submit_only: bool, print_jobid: bool,
        reason: str | None) -> None:
    """Add a new IP network called NETWORK_NAME (--network is required)."""
    if subnet is None:
        raise ParameterError("The --network option must be given\nthe IPv4 subnet in CIDR "
                             "notation, e.g. --network=192.0.2.0/24")
    params: dict[str, Any] = {"network_name": network_name, "network": subnet,
                              "conflicts_check": not no_conflicts_check,
                              "tags": _csv(tags) or []}
    for key, value in (("gateway", gateway), ("network6", network6), ("gateway6", gateway6),
                       ("mac_prefix", mac_prefix),
                       ("add_reserved_ips", _csv(add_reserved_ips))):
        if value is not None:
            params[key] = value
    submit_op(TOOL, "add", "OP_NETWORK_ADD", params, reason=reason, priority=priority,
              submit_only=submit_only, print_jobid=print_jobid, dry_run=dry_run)


@cli.command()
@click.argument("network_name")
@_reserved_option
@click.option("--remove-reserved-ips", default=None,
              help="Comma-separated list of reserved IPs to remove")
@_gateway_option
@_mac_prefix_option
@_network6_option
@_gateway6_option
@_job_options
def modify(network_name: str, add_reserved_ips: str | None, remove_reserved_ips: str | None,
           gateway: str | None, mac_prefix: str | None, network6: str | None,
           gateway6: str | None, dry_run: bool, priority: int | None, submit_only: bool,
           print_jobid: bool, reason: str | None) -> None:
    """Change NETWORK_NAME's gateway, IPv6 settings, MAC prefix or reservations."""
    params: dict[str, Any] = {"network_name": network_name}
    for key, value in (("gateway", gateway), ("network6", network6), ("gateway6", gateway6),
                       ("mac_prefix", mac_prefix),
                       ("add_reserved_ips", _csv(add_reserved_ips)),
                       ("remove_reserved_ips", _csv(remove_reserved_ips))):
        if value is not None:
            params[key] = value
    if len(params) == 1:
        click.echo("Please give at least one of the parameters.", err=True)
        exit_with(1)
    submit_op(TOOL, "modify", "OP_NETWORK_SET_PARAMS", params, reason=reason,
              priority=priority, submit_only=submit_only, print_jobid=print_jobid,
              dry_run=dry_run)


def _all_groups() -> list[str]:
    with get_client() as client:
        return [str(row["name"]) for row in query_rows(client, "group", ["name"], None)]


@cli.command()
@click.argument("network_name")
@click.argument("groups", nargs=-1)
@click.option("-N", "--nic-parameters", "nicparams", type=KeyValType(), default=None,
              help="NIC parameters of the connection: mode=...,link=...,vlan=...")
@_conflicts_option
@priority_option
@reason_option
def connect(network_name: str, groups: tuple[str, ...], nicparams: dict[str, Any] | None,
            no_conflicts_check: bool, priority: int | None, reason: str | None) -> None:
    """Connect NETWORK_NAME to the GROUPS (all groups when none are given) with the
    NIC mode and link of -N."""
    given = dict(nicparams or {})
    unknown = sorted(set(given) - {"mode", "link", "vlan"})
    if unknown:
        raise ParameterError(f"unknown NIC parameter(s) {', '.join(unknown)} for a "
                             "connection; valid: mode, link, vlan")
    with get_client() as client:
        defaults = client.call("QueryClusterInfo").get("nicparams", {}).get("default", {})
    mode = str(given.get("mode") or defaults.get("mode", "bridged"))
    link = str(given.get("link") or defaults.get("link", ""))
    vlan = str(given.get("vlan") or "")
    for group in groups or _all_groups():
        submit_op(TOOL, "connect", "OP_NETWORK_CONNECT",
                  {"network_name": network_name, "group_name": group, "network_mode": mode,
                   "network_link": link, "network_vlan": vlan,
                   "conflicts_check": not no_conflicts_check},
                  reason=reason, priority=priority)


@cli.command()
@click.argument("network_name")
@click.argument("groups", nargs=-1)
@priority_option
@reason_option
def disconnect(network_name: str, groups: tuple[str, ...], priority: int | None,
               reason: str | None) -> None:
    """Disconnect NETWORK_NAME from the GROUPS (all it is connected to when none are
    given)."""
    if not groups:
        with get_client() as client:
            rows = query_named(client, "network", "Network", [network_name], ["group_list"])
        groups = tuple(str(g[0]) for g in rows[0]["group_list"] or ())
    for group in groups:
        submit_op(TOOL, "disconnect", "OP_NETWORK_DISCONNECT",
                  {"network_name": network_name, "group_name": group},
                  reason=reason, priority=priority)


@cli.command()
@click.argument("network_name")
@force_option
@_job_options
def remove(network_name: str, force: bool, dry_run: bool, priority: int | None,
           submit_only: bool, print_jobid: bool, reason: str | None) -> None:
    """Remove the network NETWORK_NAME (connected to no group)."""
    submit_op(TOOL, "remove", "OP_NETWORK_REMOVE",
              {"network_name": network_name, "force": force}, reason=reason,
              priority=priority, submit_only=submit_only, print_jobid=print_jobid,
              dry_run=dry_run)


cli.add_command(list_command(
    "network", argument="<network-name>", filter_example="free_count > 0",
    doc=('List the IP networks (all, or the NETWORKS or filter given).\n'
         '\n'
         'Default columns: name, network, gateway, mac_prefix, group_list, tags; see\n'
         "'gnt-network list-fields' for all fields."),
    default_fields=DEFAULT_FIELDS, formats=LIST_FORMAT, connect=lambda: get_client()))


cli.add_command(list_fields_command("network", "networks", lambda: get_client()))


def _usage_map(bitmap: str) -> list[str]:
    lines = []
    for start in range(0, len(bitmap), 64):
        chunk = bitmap[start:start + 64]
        lines.append(f"    {start:>5} {chunk:<64} {start + 63}")
    return lines


def format_network_info(row: dict[str, Any], users: list[tuple[str, list[str]]]) -> str:
    """Ganeti's ``gnt-network info`` text of one network; ``users`` are the instances
    on it with their ``index:ip`` NICs."""
    size = len(row["map"] or "")
    free = row["free_count"] or 0
    share = 100.0 * free / size if size else 0.0
    lines = [
        f"Network name: {row['name']}",
        f"UUID: {row['uuid']}",
        f"Serial number: {row['serial_no']}",
        f"  Subnet: {row['network']}",
        f"  Gateway: {row['gateway']}",
        f"  IPv6 Subnet: {row['network6']}",
        f"  IPv6 Gateway: {row['gateway6']}",
        f"  Mac Prefix: {row['mac_prefix']}",
        f"  Size: {size}",
        f"  Free: {free} ({share:.2f}%)",
        "  Usage map:",
        *_usage_map(row["map"] or ""),
        "         (X) used    (.) free",
    ]
    if row["external_reservations"]:
        lines += ["  externally reserved IPs:", f"    {row['external_reservations']}"]
    groups = row["group_list"] or []
    if groups:
        lines.append("  connected to node groups:")
        lines += [f"    {g[0]} (mode:{g[1]} link:{g[2]} vlan:{g[3]})" for g in groups]
    else:
        lines.append("  not connected to any node group")
    if users:
        lines.append(f"  used by {len(users)} instances:")
        lines += [f"    {name}: {', '.join(nics)}" for name, nics in users]
    else:
        lines.append("  not used by any instances")
    return "\n".join(lines)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the networks' fields as JSON.")
@click.argument("networks", nargs=-1)
def info(networks: tuple[str, ...], as_json: bool) -> None:
    """Show the networks (all, or the NETWORKS given): pool, groups, instances."""
    with get_client() as client:
        rows = query_named(client, "network", "Network name", networks, _INFO_FIELDS)
        instances = query_rows(client, "instance", ["name", "nic.ips", "nic.networks"], None)
    if as_json:
        from corral import serializer  # msgspec: only when JSON is read or written
        click.echo(serializer.dumps_pretty(rows))
        return
    texts = []
    for row in rows:
        users = []
        for inst in instances:
            nics = [f"{i}:{ip}" for i, (ip, net) in
                    enumerate(zip(inst["nic.ips"] or [], inst["nic.networks"] or [],
                                  strict=False)) if net == row["uuid"]]
            if nics:
                users.append((str(inst["name"]), nics))
        texts.append(format_network_info(row, users))
    if texts:
        click.echo("\n".join(texts))


add_tag_commands(cli, TOOL, "network", "NETWORK")


def main() -> None:
    """Entry point of ``gnt-network``."""
    cli(prog_name=TOOL)


if __name__ == "__main__":
    main()
