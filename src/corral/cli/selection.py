"""Choosing many instances at once: by name, by node, by tag, or all of them.

Ganeti's commands that act on many instances (``gnt-instance startup``, ``shutdown``,
``reboot``) share one set of selector options; the last one given decides what the
arguments mean:

============================  =====================================================
option                        the arguments are ... and the instances chosen are
============================  =====================================================
``--instance`` (the default)  instance names (or UUIDs): those instances
``--all``                     none: every instance in the cluster
``--node``                    node names: instances with a primary or secondary there
``--primary``                 node names: instances with their primary there
``--secondary``               node names: instances with a secondary there
``--node-tags``               tags: instances on nodes (primary or secondary) having
                              any of them
``--pri-node-tags``           tags: instances whose primary node has any of them
``--sec-node-tags``           tags: instances with a secondary node having any of them
``--tags``                    tags: instances having any of them
============================  =====================================================

The choice is made by asking the master (luxi ``Query``), never by reading the
configuration. As in Ganeti 3.0, names that match nothing are left out without a
word; only a selection that ends up empty is an error. Unlike Ganeti, an instance
selected twice (its primary and a secondary both among the nodes) is chosen once.

:func:`check_selection` and :func:`pick_instances` are the pure halves (what is
asked, what the answer selects); :func:`expand_instances` runs them against the
master. :func:`selection_options` adds the options to a click command. Naming single
objects (``gnt-node info NODE``) is :mod:`corral.cli.lookup`'s job.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any, TypeVar, cast

import click

from corral.cli.jobs import LuxiCaller
from corral.cli.lookup import name_or_uuid_filter, query_rows
from corral.errors import OpPrereqError

__all__ = [
    "NO_MATCH_MESSAGE",
    "SelectionMode",
    "check_selection",
    "expand_instances",
    "pick_instances",
    "selection_options",
    "selection_query",
]

F = TypeVar("F", bound=Callable[..., Any])

#: The error when the selection chose nothing (Ganeti's words).
NO_MATCH_MESSAGE = "Selection filter does not match any instances"


class SelectionMode(StrEnum):
    """What a command's arguments name; the values are Ganeti's ``_EXPAND_*`` words."""

    CLUSTER = "cluster"
    NODES = "nodes"
    NODES_PRI = "nodes-pri"
    NODES_SEC = "nodes-sec"
    NODES_BY_TAGS = "nodes-by-tags"
    NODES_PRI_BY_TAGS = "nodes-pri-by-tags"
    NODES_SEC_BY_TAGS = "nodes-sec-by-tags"
    INSTANCES = "instances"
    INSTANCES_BY_TAGS = "instances-by-tags"

    @property
    def by_node(self) -> bool:
        """The instances are found through nodes (by name or by tag)."""
        return self.value.startswith("nodes")

    @property
    def by_tags(self) -> bool:
        """The arguments are tags."""
        return self.value.endswith("-by-tags")

    @property
    def primaries(self) -> bool:
        """Node modes: instances whose primary is on a selected node count."""
        return self.by_node and "-sec" not in self.value

    @property
    def secondaries(self) -> bool:
        """Node modes: instances with a secondary on a selected node count."""
        return self.by_node and "-pri" not in self.value


#: The selector options in the order ``--help`` shows them: (option, mode, help).
_SELECTORS: tuple[tuple[str, SelectionMode, str], ...] = (
    ("--node", SelectionMode.NODES, "Filter by nodes (primary and secondary)"),
    ("--primary", SelectionMode.NODES_PRI, "Filter by nodes (primary only)"),
    ("--secondary", SelectionMode.NODES_SEC, "Filter by nodes (secondary only)"),
    ("--all", SelectionMode.CLUSTER, "Select all instances in the cluster"),
    ("--node-tags", SelectionMode.NODES_BY_TAGS, "Filter by node tag"),
    ("--pri-node-tags", SelectionMode.NODES_PRI_BY_TAGS, "Filter by primary node tag"),
    ("--sec-node-tags", SelectionMode.NODES_SEC_BY_TAGS, "Filter by secondary node tag"),
    ("--tags", SelectionMode.INSTANCES_BY_TAGS, "Filter by instance tag"),
    ("--instance", SelectionMode.INSTANCES, "Filter by instance name [default]"),
)

_META_KEY = "corral.cli.selection.mode"


def _remember(mode: SelectionMode) -> Callable[[click.Context, click.Parameter, bool], None]:
    def callback(ctx: click.Context, param: click.Parameter, value: bool) -> None:
        # Callbacks of given options run in command-line order: the last one wins,
        # as with Ganeti's store_const options sharing one destination.
        if value:
            ctx.meta[_META_KEY] = mode
    return callback


def selection_options(fn: F) -> F:
    """Add the selector options and ``--force-multiple`` to a command.

    The command gets ``selection: SelectionMode`` (the last selector given, or
    ``INSTANCES``) and ``force_multiple: bool``.
    """
    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> Any:
        kwargs["selection"] = click.get_current_context().meta.get(
            _META_KEY, SelectionMode.INSTANCES)
        return fn(*args, **kwargs)

    decorated: Any = click.option(
        "--force-multiple", "force_multiple", is_flag=True,
        help="Do not ask for confirmation when more than one instance is affected")(command)
    for flag, mode, text in reversed(_SELECTORS):
        decorated = click.option(flag, is_flag=True, expose_value=False,
                                 callback=_remember(mode), help=text)(decorated)
    return cast(F, decorated)


# -- the pure halves ----------------------------------------------------------------


def check_selection(mode: SelectionMode, names: Sequence[str]) -> None:
    """Refuse arguments that do not fit ``mode`` (Ganeti's messages, exit code 1)."""
    if mode is SelectionMode.CLUSTER:
        if names:
            raise OpPrereqError("Cluster filter mode takes no arguments", ecode="wrong_input")
        return
    if names:
        return
    if mode.by_node:
        raise OpPrereqError("No node tags passed" if mode.by_tags else "No node names passed",
                            ecode="wrong_input")
    raise OpPrereqError("No instance tags passed" if mode.by_tags
                        else "No instance names passed", ecode="wrong_input")


def selection_query(mode: SelectionMode, names: Sequence[str]
                    ) -> tuple[str, list[str], list[Any] | None]:
    """The luxi ``Query`` (resource, fields, filter) whose rows :func:`pick_instances`
    chooses from. Tags are matched here, not in the filter, as Ganeti does."""
    if mode.by_node:
        fields = ["name", "pinst_list", "sinst_list", "tags"]
        return "node", fields, (None if mode.by_tags else name_or_uuid_filter(names))
    if mode is SelectionMode.INSTANCES:
        return "instance", ["name", "tags"], name_or_uuid_filter(names)
    return "instance", ["name", "tags"], None


def _has_any_tag(row: Mapping[str, Any], tags: Iterable[str]) -> bool:
    return not set(row.get("tags") or ()).isdisjoint(tags)


def pick_instances(mode: SelectionMode, names: Sequence[str],
                   rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """The instance names ``mode`` and ``names`` choose from the query ``rows``.

    Rows are field → value maps of :func:`selection_query`'s fields. Instances come
    sorted by name; in node modes node by node (sorted by node name), primaries of all
    nodes before secondaries, each instance once.
    """
    ordered = sorted(rows, key=lambda row: str(row.get("name")))
    if not mode.by_node:
        if mode is SelectionMode.INSTANCES_BY_TAGS:
            ordered = [row for row in ordered if _has_any_tag(row, names)]
        return [str(row["name"]) for row in ordered]
    if mode.by_tags:
        ordered = [row for row in ordered if _has_any_tag(row, names)]
    chosen: list[str] = []
    if mode.primaries:
        chosen += [str(n) for row in ordered for n in sorted(row.get("pinst_list") or ())]
    if mode.secondaries:
        chosen += [str(n) for row in ordered for n in sorted(row.get("sinst_list") or ())]
    return list(dict.fromkeys(chosen))


# -- against the master -------------------------------------------------------------


def expand_instances(client: LuxiCaller, mode: SelectionMode,
                     names: Sequence[str]) -> list[str]:
    """The names of the instances ``mode`` and ``names`` select, asked of the master.

    An empty list only for ``CLUSTER`` (a cluster without instances); otherwise
    choosing nothing is an :class:`OpPrereqError`, as are arguments that do not fit.
    """
    check_selection(mode, names)
    resource, fields, qfilter = selection_query(mode, names)
    rows = query_rows(client, resource, fields, qfilter)
    chosen = pick_instances(mode, names, rows)
    if not chosen and mode is not SelectionMode.CLUSTER:
        raise OpPrereqError(NO_MATCH_MESSAGE, ecode="wrong_input")
    return chosen
