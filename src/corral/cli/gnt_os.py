"""``gnt-os``: the OS definitions the nodes offer, and their cluster-level settings.

``list``, ``info`` and ``diagnose`` submit ``OP_OS_DIAGNOSE`` (the master asks every
node); ``modify`` submits ``OP_CLUSTER_SET_PARAMS`` with ``os_hvp``, ``osparams``,
``hidden_os`` and ``blacklisted_os`` in Ganeti's shapes. Output follows Ganeti's
``gnt-os`` line for line.
"""

from __future__ import annotations

from typing import Any

import click

from corral import __version__
from corral.cli.common import CorralGroup, get_client, reason_trail
from corral.cli.jobs import exit_with, make_op, submit_and_wait, submit_op
from corral.cli.keyval import IdentValue, KeyValDict
from corral.cli.options import (
    KeyValType,
    dry_run_option,
    ident_keyval_option,
    no_headers_option,
    print_jobid_option,
    priority_option,
    reason_option,
    submit_option,
    yes_no_option,
)
from corral.cli.output import format_info, format_table
from corral.errors import NothingToChangeError, ParameterError

__all__ = ["main", "os_names"]

TOOL = "gnt-os"

_INFO_FIELDS = ["name", "valid", "variants", "parameters", "api_versions", "blacklisted",
                "hidden", "os_hvp", "osparams", "trusted", "os_version"]
_DIAGNOSE_FIELDS = ["name", "valid", "variants", "node_status", "hidden", "blacklisted",
                    "message", "os_version"]


def os_names(name: str, variants: list[str] | None) -> list[str]:
    """Every name an OS can be installed as: ``name+variant`` per variant, else ``name``."""
    return [f"{name}+{v}" for v in variants] if variants else [name]


def _diagnose(fields: list[str], priority: int | None, verb: str) -> list[list[Any]]:
    op = make_op("OP_OS_DIAGNOSE", {"output_fields": fields, "names": []},
                 trail=reason_trail(TOOL, verb), priority=priority)
    with get_client() as client:
        results = submit_and_wait(client, [op])
    assert results is not None
    rows: list[list[Any]] = results[0]
    return rows


@click.group(cls=CorralGroup)
@click.version_option(__version__, prog_name=TOOL)
def cli() -> None:
    """OS definitions: list, info, diagnose, modify."""


@cli.command("list")
@no_headers_option
@priority_option
@click.option("--hidden", "show_hidden", is_flag=True,
              help="Also list hidden OSes (corral extension).")
@click.option("--blacklisted", "show_blacklisted", is_flag=True,
              help="Also list blacklisted OSes (corral extension).")
def list_os(no_headers: bool, priority: int | None, show_hidden: bool,
            show_blacklisted: bool) -> None:
    """List the valid OSes (one line per variant); hidden and blacklisted ones are left
    out unless asked for."""
    fields = ["name", "variants"] + (["hidden"] if show_hidden else []) \
        + (["blacklisted"] if show_blacklisted else [])
    rows = _diagnose(fields, priority, "list")
    names = [[n] for row in rows for n in os_names(row[0], row[1])]
    for line in format_table(["Name"], names, no_headers=no_headers):
        click.echo(line)


def _yes(flag: bool) -> str:
    return str(flag)


@cli.command()
@priority_option
@click.argument("names", nargs=-1)
def info(priority: int | None, names: tuple[str, ...]) -> None:
    """Show details of every OS, or of the OSes NAMES (including hidden and invalid ones)."""
    rows = _diagnose(list(_INFO_FIELDS), priority, "info")
    wanted = list(names)
    all_hvp: dict[str, Any] = {}
    all_osparams: dict[str, Any] = {}
    for (name, valid, variants, parameters, api_versions, blacklisted, hidden, os_hvp,
         osparams, trusted, os_version) in rows:
        all_hvp.update(os_hvp)
        all_osparams.update(osparams)
        if wanted:
            if name not in wanted:
                continue
            wanted.remove(name)
        click.echo(f"{name}:")
        click.echo(f"  - valid: {_yes(valid)}")
        click.echo(f"  - hidden: {_yes(hidden)}")
        click.echo(f"  - blacklisted: {_yes(blacklisted)}")
        if valid:
            click.echo("  - API versions:")
            for version in sorted(api_versions):
                click.echo(f"    - {version}")
            if os_version is not None:
                click.echo(f"  - OS version: {os_version}")
            click.echo("  - variants:")
            for variant in variants:
                click.echo(f"    - {variant}")
            click.echo("  - parameters:")
            for pname, pdoc in parameters:
                click.echo(f"    - {pname}: {pdoc}")
        click.echo(f"  - trusted: {_yes(trusted)}")
        click.echo("")
    # Names no node has: show their cluster-level settings, if any.
    for name in wanted:
        if name in all_hvp or name in all_osparams:
            click.echo(format_info([(name, [
                ("OS-specific hypervisor parameters", all_hvp.get(name, {})),
                ("OS parameters", all_osparams.get(name, {})),
            ])]))
        else:
            click.echo(f"{name}: ")
        click.echo("")


def _status(valid: bool, message: str) -> str:
    return "valid" if valid else f"invalid - {message}"


def _node_line(entry: list[Any]) -> str:
    path, valid, message, variants, params, apis = entry[:6]
    trusted = entry[6] if len(entry) > 6 else True
    text = f"{_status(valid, message)} (path: {path})"
    text += f" [API versions: {', '.join(map(str, apis))}]" if apis else \
        " [no API versions declared]"
    highest = max(apis) if apis else 0
    if highest >= 15:
        text += f" [variants: {', '.join(variants)}]" if variants else " [no variants]"
    if highest >= 20:
        text += (f" [parameters: {', '.join(p[0] for p in params)}]" if params
                 else " [no parameters]")
    text += " [trusted]" if trusted else " [untrusted]"
    return text


@cli.command()
@priority_option
def diagnose(priority: int | None) -> None:
    """Show the state of every OS on every node; exit code 1 if any OS has a problem."""
    rows = _diagnose(list(_DIAGNOSE_FIELDS), priority, "diagnose")
    has_bad = False
    for name, valid, variants, node_status, hidden, blacklisted, message, os_version in rows:
        good: dict[str, str] = {}
        bad: dict[str, str] = {}
        shadowed: dict[str, list[str]] = {}
        for node, entries in node_status.items():
            shadowed[node] = []
            if not entries:
                bad[node] = "OS not found"
                continue
            line = _node_line(entries[0])
            (good if entries[0][1] else bad)[node] = line
            for entry in entries[1:]:
                shadowed[node].append(f"    [hidden] path: {entry[0]}, status: "
                                      f"{_status(entry[1], entry[2])}")
        if good and not bad:
            status = "valid" if valid else "invalid"
        elif bad and not good:
            status = "invalid"
        else:
            status = "partial valid"
        has_bad = has_bad or status != "valid"
        header = f"OS: {name} [global status: {status}]"
        header += " [hidden]" if hidden else ""
        header += " [blacklisted]" if blacklisted else ""
        click.echo(header)
        if variants:
            click.echo(f"  Variants: [{', '.join(variants)}]")
        if os_version is not None:
            click.echo(f"  OS version: {os_version}")
        if not valid and good and not bad and message:
            click.echo(f"  Problem: {message}")
        for lines in (good, bad):
            for node in sorted(lines):
                click.echo(f"  Node: {node}, status: {lines[node]}")
                for extra in shadowed[node]:
                    click.echo(extra)
        click.echo("")
    exit_with(int(has_bad))


@cli.command()
@ident_keyval_option("-H", "--hypervisor-parameters", "hvparams",
                     help="OS-specific hypervisor parameters, hypervisor:key=val,...; "
                          "'-hypervisor' drops all of the OS's overrides for it.")
@click.option("-O", "--os-parameters", "osparams", type=KeyValType(), default=None,
              help="Cluster-level OS parameters, key=val,...; '-key' removes one.")
@yes_no_option("--hidden", help="Hide the OS from listings (yes) or show it again (no).")
@yes_no_option("--blacklisted",
               help="Refuse new installs of the OS (yes) or allow them again (no).")
@dry_run_option
@priority_option
@submit_option
@print_jobid_option
@reason_option
@click.argument("os_name")
def modify(os_name: str, hvparams: dict[str, IdentValue], osparams: KeyValDict | None,
           hidden: bool | None, blacklisted: bool | None, dry_run: bool,
           priority: int | None, submit_only: bool, print_jobid: bool,
           reason: str | None) -> None:
    """Change the cluster-level settings of OS_NAME (an OS or OS+VARIANT)."""
    body: dict[str, Any] = {}
    if hvparams:
        for hv, values in hvparams.items():
            if values is False:
                raise ParameterError(
                    f"-H no_{hv}: not supported; use '-H -{hv}' to drop the OS's "
                    f"overrides for {hv}"
                )
        body["os_hvp"] = {os_name: dict(hvparams)}
    if osparams:
        body["osparams"] = {os_name: dict(osparams)}
    if hidden is not None:
        body["hidden_os"] = [["add" if hidden else "remove", os_name]]
    if blacklisted is not None:
        body["blacklisted_os"] = [["add" if blacklisted else "remove", os_name]]
    if not body:
        raise NothingToChangeError(
            "At least one of OS parameters or hypervisor parameters must be passed\n"
            "nothing to change: give at least one of -O, -H, --hidden, --blacklisted")
    result = submit_op(TOOL, "modify", "OP_CLUSTER_SET_PARAMS", body, reason=reason,
                       priority=priority, submit_only=submit_only, print_jobid=print_jobid,
                       dry_run=dry_run)
    if isinstance(result, dict) and result.get("changes"):
        prefix = "Would change" if result.get("dry_run") else "Changed"
        for line in result["changes"]:
            click.echo(f"{prefix} {line}")


cli.add_command(info, "show")  # Ganeti's alias


def main() -> None:
    """Entry point of ``gnt-os``."""
    cli(prog_name=TOOL)


if __name__ == "__main__":
    main()
