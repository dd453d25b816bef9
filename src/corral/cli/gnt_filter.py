"""``gnt-filter``: job filter rules that accept, pause, reject or rate-limit jobs.

Filter changes go straight to the master daemon (they bypass the job queue, so a
filter can stop a queue that is full of work).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import click

from corral import __version__
from corral.cli.common import CorralGroup, get_client, reason_trail
from corral.cli.jobs import exit_with, generic_list, list_fields_command
from corral.cli.options import (
    FieldSelection,
    common_list_options,
    reason_option,
    resolve_fields,
)
from corral.errors import NotFoundError

__all__ = ["DEFAULT_FIELDS", "FILTER_FIELDS", "main", "parse_action"]

TOOL = "gnt-filter"

#: Every field ``info`` shows; also ``list``'s default columns (Ganeti's).
FILTER_FIELDS = ("uuid", "watermark", "priority", "predicates", "action", "reason_trail")
DEFAULT_FIELDS = FILTER_FIELDS


def parse_action(text: str) -> str | list[Any]:
    """``--action``: ACCEPT, PAUSE, REJECT, CONTINUE, or ``RATE_LIMIT n`` → ``["RATE_LIMIT", n]``.

    Other words pass through unchanged so that the master daemon, which owns the
    rules, names what is wrong with them.
    """
    match = re.fullmatch(r"\s*RATE_LIMIT\s+(\d+)\s*", text)
    if match:
        return ["RATE_LIMIT", int(match.group(1))]
    return text.strip()


def _action(ctx: click.Context, param: click.Parameter, value: str) -> str | list[Any]:
    return parse_action(value)


def _predicates(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return []
    from corral import serializer  # msgspec: only when JSON is read or written

    try:
        return serializer.loads(value)
    except ValueError as err:
        raise click.BadParameter(
            f"not valid JSON ({err}); give a JSON list of predicates such as "
            "'[[\"reason\", [\"=\", \"source\", \"user\"]]]'",
            ctx, param,
        ) from None


def _rule_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--priority``, ``--predicates``, ``--action`` and ``--reason``."""
    for option in reversed([
        click.option("--priority", type=int, default=0, show_default=True,
                     help="Priority of the rule; lower numbers are evaluated first."),
        click.option("--predicates", metavar="JSON", default=None, callback=_predicates,
                     help="JSON list of predicates: [\"jobid\"|\"opcode\"|\"reason\", "
                          "query filter]; the rule applies when all hold. An opcode or "
                          "reason predicate holds when some opcode or trail entry "
                          "matches; [\"!\", F] at its top means none matches F."),
        click.option("--action", metavar="ACTION", default="CONTINUE", callback=_action,
                     show_default=True,
                     help="ACCEPT, PAUSE, REJECT, CONTINUE or 'RATE_LIMIT n'."),
        reason_option,
    ]):
        func = option(func)
    return func


@click.group(cls=CorralGroup)
@click.version_option(__version__, prog_name=TOOL)
def cli() -> None:
    """Job filter rules: add, list, info, replace, delete."""


def _replace(uuid: str | None, verb: str, priority: int, predicates: Any,
             action: str | list[Any], reason: str | None) -> None:
    with get_client() as client:
        result = client.call("ReplaceFilter", uuid, priority, predicates, action,
                             reason_trail(TOOL, verb, reason))
    click.echo(result)


@cli.command()
@_rule_options
def add(priority: int, predicates: Any, action: str | list[Any], reason: str | None) -> None:
    """Add a filter rule and print its UUID."""
    _replace(None, "add", priority, predicates, action, reason)


@cli.command()
@click.argument("uuid")
@_rule_options
def replace(uuid: str, priority: int, predicates: Any, action: str | list[Any],
            reason: str | None) -> None:
    """Replace the rule UUID (adding it if there is none) and print its UUID."""
    _replace(uuid, "replace", priority, predicates, action, reason)


@cli.command("list")
@common_list_options
@click.option("-v", "--verbose", is_flag=True,
              help="Verbose marks for missing values, e.g. (unavail).")
@click.argument("uuids", nargs=-1, metavar="<filter-uuid>")
def list_(uuids: tuple[str, ...], output: FieldSelection | None, no_headers: bool,
          separator: str | None, units: str | None, as_json: bool, verbose: bool) -> None:
    """List filter rules (all, or the UUIDs given)."""
    fields = resolve_fields(output, DEFAULT_FIELDS)
    with get_client() as client:
        code = generic_list(client, "filter", fields, uuids, namefield="uuid",
                            separator=separator, no_headers=no_headers, units=units,
                            verbose=verbose, as_json=as_json)
    exit_with(code)


cli.add_command(list_fields_command("filter", "filter rules", lambda: get_client()))


@cli.command()
@click.argument("uuids", nargs=-1)
def info(uuids: tuple[str, ...]) -> None:
    """Show filter rules (all, or the UUIDs given)."""
    with get_client() as client:
        rows = client.call("QueryFilters", list(uuids) or None, list(FILTER_FIELDS))
    missing = [u for u, row in zip(uuids, rows, strict=False) if row is None]
    for row in rows:
        if row is None:
            continue
        uuid, watermark, priority, predicates, action, trail = row
        click.echo(f"UUID: {uuid}")
        click.echo(f"  Watermark: {watermark}")
        click.echo(f"  Priority: {priority}")
        click.echo(f"  Predicates: {predicates}")
        click.echo(f"  Action: {action}")
        click.echo(f"  Reason trail: {trail}")
    if missing:
        raise NotFoundError(f"filter {', '.join(missing)} not found; see 'gnt-filter list'")


@cli.command()
@click.argument("uuid")
def delete(uuid: str) -> None:
    """Remove the filter rule UUID; jobs it held are re-evaluated."""
    with get_client() as client:
        client.call("DeleteFilter", uuid)


def main() -> None:
    """Entry point of ``gnt-filter``."""
    cli(prog_name=TOOL)


if __name__ == "__main__":
    main()
