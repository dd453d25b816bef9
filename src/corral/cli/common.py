"""What every gnt-* tool shares: error reporting, the master connection, reason trails.

Errors are printed as ``Failure: <message>`` on standard error (the prefix Ganeti's
tools use, which scripts look for) and the process exits with the error's code.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from corral.errors import CorralError, MasterUnreachableError
from corral.luxi import Client
from corral.paths import Paths

__all__ = ["CONTEXT_SETTINGS", "CorralGroup", "get_client", "reason_trail"]

CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class CorralGroup(click.Group):
    """A click group that reports :class:`CorralError` the way gnt-* tools do."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("context_settings", CONTEXT_SETTINGS)
        super().__init__(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the subcommand; turn corral errors into a message and an exit code."""
        try:
            return super().invoke(ctx)
        except CorralError as err:
            click.echo(f"Failure: {err.message}", err=True)
            sys.exit(err.exit_code)


def get_client(paths: Paths | None = None, *, explain: bool = True) -> Client:
    """A luxi client for this node's master daemon: the one place the tools connect.

    When the master daemon cannot be reached and ``explain`` holds, the error says
    why, as Ganeti's tools do: that this machine is in no cluster, or which node is
    the master to run the command on (see :mod:`corral.cli.master`). That lookup
    runs only after connecting failed, never on the master's normal path.
    """
    paths = paths or Paths.from_env()

    def why(err: MasterUnreachableError) -> CorralError:
        from corral.cli.master import explain_unreachable

        return explain_unreachable(paths, err)

    return Client(paths.master_socket, explain=why if explain else None)


def reason_trail(tool: str, verb: str, user_text: str | None = None) -> list[list[Any]]:
    """The reason trail a CLI command starts with.

    A user's ``--reason`` text comes first as ``("user", text, ns)``, then the tool's
    own entry ``("gnt:client:<tool>", verb, ns)``, the order Ganeti's tools use.
    """
    trail: list[list[Any]] = []
    if user_text:
        trail.append(["user", user_text, time.time_ns()])
    trail.append([f"gnt:client:{tool}", verb, time.time_ns()])
    return trail
