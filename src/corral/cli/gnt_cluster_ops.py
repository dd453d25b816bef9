"""``gnt-cluster`` commands for operating a running cluster: ``watcher``
(pause, continue, info), and the cluster-wide ``command``, ``copyfile`` and
``renew-crypto`` (:mod:`corral.cli.cluster_wide`).

Output and errors are Ganeti 3.0's, recorded from it: ``The watcher is paused until
Thu Nov 26 13:07:29 2026.``, ``The watcher is no longer paused.``, ``The watcher is
not paused.``; a bad duration or sub-command is a ``wrong_input`` failure.
"""

from __future__ import annotations

import time

import click

from corral.cli.common import get_client
from corral.cli.options import reason_option
from corral.errors import OpPrereqError

__all__ = ["add_ops_commands", "watcher"]


def _show_pause(until: float | None) -> None:
    if until is not None and until > time.time():
        click.echo(f"The watcher is paused until {time.ctime(until)}.")
    else:
        click.echo("The watcher is not paused.")


@click.command("watcher")
@click.argument("command")
@click.argument("duration", required=False)
@reason_option
def watcher(command: str, duration: str | None, reason: str | None) -> None:
    """Pause the watcher for a while (30, 90s, 5m, 1h, 2d, 1w), end the pause, or
    show whether it is paused.

    The pause holds on every node: each node's corral-watcher does nothing until then.
    """
    from corral.watcher.pause import parse_timespec

    if command not in ("pause", "continue", "info"):
        raise OpPrereqError(f"Command '{command}' is not valid.", ecode="wrong_input")
    if command == "pause" and duration is None:
        raise OpPrereqError("Missing pause duration", ecode="wrong_input")
    until = time.time() + parse_timespec(duration) if command == "pause" and duration else None
    with get_client() as client:
        if command == "continue":
            client.call("SetWatcherPause", None)
            click.echo("The watcher is no longer paused.")
        elif command == "pause":
            _show_pause(client.call("SetWatcherPause", until))
        else:
            (value,) = client.call("QueryConfigValues", ["watcher_pause"])
            _show_pause(value)


def add_ops_commands(group: click.Group) -> None:
    """Add this module's commands to ``gnt-cluster``."""
    from corral.cli.cluster_wide import command, copyfile, renew_crypto

    group.add_command(watcher)
    group.add_command(command)
    group.add_command(copyfile)
    group.add_command(renew_crypto)
