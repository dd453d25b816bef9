"""``gnt-storage``: the ExtStorage providers the nodes offer.

``diagnose`` and ``info`` submit ``OP_EXT_STORAGE_DIAGNOSE`` (the master asks every
node) and print Ganeti's ``gnt-storage`` output line for line, with the exit codes of
Ganeti 3.0: 0, also for a provider name ``info`` does not find, and 1 (with Ganeti's
message on standard error) when no node has any provider. ``diagnose`` names nodes
by name where Ganeti 3.0 prints their UUIDs.
"""

from __future__ import annotations

from typing import Any

import click

from corral import __version__
from corral.cli.common import CorralGroup
from corral.cli.jobs import submit_op
from corral.cli.options import priority_option
from corral.utils.nicesort import nice_sorted

__all__ = ["main"]

TOOL = "gnt-storage"


def _diagnose(fields: list[str], priority: int | None, verb: str) -> list[list[Any]]:
    rows: list[list[Any]] = submit_op(TOOL, verb, "OP_EXT_STORAGE_DIAGNOSE",
                                      {"output_fields": fields, "names": []},
                                      priority=priority)
    return rows


@click.group(cls=CorralGroup)
@click.version_option(__version__, prog_name=TOOL)
def cli() -> None:
    """ExtStorage providers: diagnose, info."""


def _status(valid: bool, message: str) -> str:
    return "valid" if valid else f"invalid - {message}"


def _node_line(entry: list[Any]) -> str:
    path, valid, message, params = entry[:4]
    text = f"{_status(valid, message)} (path: {path})"
    if params:
        return text + f" [parameters: {', '.join(p[0] for p in params)}]"
    return text + " [no parameters]"


@cli.command()
@priority_option
def diagnose(priority: int | None) -> None:
    """Diagnose all ExtStorage providers

    Their state on every node and, from that, for every node group."""
    rows = _diagnose(["name", "node_status", "nodegroup_status"], priority, "diagnose")
    if not rows:
        click.echo("Can't get the list of ExtStorage providers", err=True)
        raise SystemExit(1)
    for name, node_status, group_status in rows:
        good: dict[str, str] = {}
        bad: dict[str, str] = {}
        for node, entries in node_status.items():
            if not entries:
                bad[node] = "ExtStorage provider not found"
            else:
                (good if entries[0][1] else bad)[node] = _node_line(entries[0])
        click.echo(f"Provider: {name}")
        click.echo("---")
        for lines in (good, bad):
            for node in nice_sorted(lines):
                click.echo(f"  Node: {node}, status: {lines[node]}")
        click.echo("  --")
        for wanted in (True, False):
            for group in nice_sorted(g for g, ok in group_status.items() if ok is wanted):
                click.echo(f"  For nodegroup: {group} --> {'valid' if wanted else 'invalid'}")
        click.echo("")


@cli.command()
@priority_option
@click.argument("names", nargs=-1, metavar="[PROVIDER...]")
def info(priority: int | None, names: tuple[str, ...]) -> None:
    """Show info about ExtStorage providers

    All of them, or those named: the node groups they are valid for and the
    parameters they take."""
    rows = _diagnose(["name", "nodegroup_status", "parameters"], priority, "info")
    if not rows:
        click.echo("Can't get the ExtStorage providers list", err=True)
        raise SystemExit(1)
    wanted = list(names)
    for name, group_status, parameters in rows:
        if names:
            if name not in wanted:
                continue
            wanted.remove(name)
        click.echo(f"{name}:")
        valid = nice_sorted(g for g, ok in group_status.items() if ok)
        if valid:
            click.echo("  - Valid for nodegroups:")
            for group in valid:
                click.echo(f"      {group}")
            click.echo("  - Supported parameters:")
            for pname, pdesc in parameters:
                click.echo(f"      {pname}: {pdesc}")
        else:
            click.echo("  - Invalid for all nodegroups")
        click.echo("")
    for name in wanted:
        click.echo(f"{name}: Not Found")
        click.echo("")


def main() -> None:
    """Entry point of ``gnt-storage``."""
    cli(prog_name=TOOL)


if __name__ == "__main__":
    main()
