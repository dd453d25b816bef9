"""``add-tags``, ``remove-tags`` and ``list-tags``: the same three commands in every tool.

Ganeti's tools share them: ``gnt-cluster add-tags TAG...`` works on the cluster,
``gnt-node add-tags NODE TAG...`` (and likewise for groups and instances) on one
object named by its name or UUID. Tags come as arguments and/or from ``--from FILE``
(one per line, ``-`` for standard input). Changes run as jobs and take the usual
job options; listing asks the master directly and prints one tag a line, sorted.

``gnt-cluster search-tags PATTERN`` runs ``OP_TAGS_SEARCH`` as a job and prints
``PATH TAG`` for every tag matching the regular expression, sorted; finding nothing
exits 1, as Ganeti's does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import click

from corral.cli.common import get_client
from corral.cli.jobs import exit_with, submit_op
from corral.cli.options import (
    print_jobid_option,
    priority_option,
    reason_option,
    submit_option,
)
from corral.errors import ParameterError

__all__ = ["add_tag_commands", "read_tags", "search_tags_command"]

_CHANGES = (
    ("add-tags", "OP_TAGS_SET", "added", "Add TAGS to {target}."),
    ("remove-tags", "OP_TAGS_DEL", "removed", "Remove TAGS from {target}."),
)


def read_tags(tags: Sequence[str], source: str | None, verb: str) -> list[str]:
    """The tags given as arguments plus those in ``--from FILE`` (one per line, ``-``
    for standard input); blank lines are skipped. None at all is an error."""
    result = list(tags)
    if source is not None:
        with click.open_file(source, "r") as stream:
            result.extend(line.strip() for line in stream if line.strip())
    if not result:
        raise ParameterError(f"No tags to be {verb}\ngive tags as arguments or with --from")
    return result


def _change_command(tool: str, kind: str, target: str | None, verb: str, op_id: str,
                    done: str, doc: str) -> click.Command:
    def callback(tags: tuple[str, ...], source: str | None, priority: int | None,
                 submit_only: bool, print_jobid: bool, reason: str | None,
                 name: str = "") -> None:
        submit_op(tool, verb, op_id,
                  {"kind": kind, "name": name, "tags": read_tags(tags, source, done)},
                  reason=reason, priority=priority, submit_only=submit_only,
                  print_jobid=print_jobid)

    decorators: list[Callable[[Any], Any]] = [
        click.option("--from", "source", metavar="FILE",
                     help="File with tags, one per line ('-' for standard input)."),
        priority_option, submit_option, print_jobid_option, reason_option,
    ]
    if target is not None:
        decorators.append(click.argument("name", metavar=target))
    decorators.append(click.argument("tags", nargs=-1))
    func: Any = callback
    for decorator in reversed(decorators):
        func = decorator(func)
    func.__doc__ = doc.format(target=target or "the cluster")
    return click.command(verb)(func)


def _list_command(kind: str, target: str | None) -> click.Command:
    def callback(name: str = "") -> None:
        with get_client() as client:
            tags = client.call("QueryTags", kind, name)
        for tag in sorted(tags):
            click.echo(tag)

    func: Any = callback
    if target is not None:
        func = click.argument("name", metavar=target)(func)
    func.__doc__ = f"List the tags of {target or 'the cluster'}, one per line, sorted."
    return click.command("list-tags")(func)


def add_tag_commands(group: click.Group, tool: str, kind: str,
                     target: str | None = None) -> None:
    """Give ``group`` the three tag commands for objects of ``kind``.

    ``kind`` is the tag kind of ``OP_TAGS_*`` (``cluster``, ``node``, ``nodegroup``,
    ``instance``); ``target`` is the metavar of the object argument (``NODE``), or
    None for the cluster, which takes none.
    """
    for verb, op_id, done, doc in _CHANGES:
        group.add_command(_change_command(tool, kind, target, verb, op_id, done, doc))
    group.add_command(_list_command(kind, target))


def search_tags_command(tool: str) -> click.Command:
    """``search-tags PATTERN``: the tags of every object matching a regular expression."""

    @click.command("search-tags")
    @priority_option
    @reason_option
    @click.argument("pattern")
    def search_tags(pattern: str, priority: int | None, reason: str | None) -> None:
        """Print PATH TAG for each tag on the cluster, its nodes, groups and instances
        that the regular expression PATTERN matches (anywhere in the tag); exit 1 when
        none does."""
        found = submit_op(tool, "search-tags", "OP_TAGS_SEARCH", {"pattern": pattern},
                          reason=reason, priority=priority)
        if not found:
            exit_with(1)
        for path, tag in sorted((str(path), str(tag)) for path, tag in found):
            click.echo(f"{path} {tag}")

    return search_tags
