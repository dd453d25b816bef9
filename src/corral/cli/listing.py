"""The ``list`` command of the tools whose resources are plain named objects (nodes,
node groups, networks): Ganeti's list options, names, globs or a filter (``-F``) as
arguments, the tool's default columns and value formats."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import click

from corral.cli.jobs import Formatter, exit_with, generic_list
from corral.cli.lookup import selection_filter
from corral.cli.options import FieldSelection, common_list_options, resolve_fields

__all__ = ["list_command"]


def list_command(resource: str, *, argument: str, filter_example: str, doc: str,
                 default_fields: Sequence[str], formats: Mapping[str, Formatter],
                 connect: Callable[[], Any]) -> click.Command:
    """The ``list`` command listing ``resource`` items.

    ``argument`` is Ganeti's name for one item in the usage line (``<node-name>``),
    ``filter_example`` a filter to show in ``-F``'s help, ``doc`` the command's help,
    ``formats`` how some fields' values are shown, and ``connect()`` opens the tool's
    luxi client (a context manager; looked up at each call so tests can replace it).
    """

    @click.command("list")
    @common_list_options
    @click.option("-v", "--verbose", is_flag=True,
                  help="Verbose marks for missing values, e.g. (unavail).")
    @click.option("-F", "--filter", "force_filter", is_flag=True,
                  help=f"Treat the argument as a filter, e.g. '{filter_example}'.")
    @click.argument("names", nargs=-1, metavar=argument)
    def list_(names: tuple[str, ...], output: FieldSelection | None, no_headers: bool,
              separator: str | None, units: str | None, as_json: bool, verbose: bool,
              force_filter: bool) -> None:
        fields = resolve_fields(output, default_fields)
        with connect() as client:
            code = generic_list(client, resource, fields,
                                qfilter=selection_filter(names, force_filter),
                                separator=separator, no_headers=no_headers, units=units,
                                verbose=verbose, as_json=as_json, overrides=formats)
        exit_with(code)

    list_.help = doc
    return list_
