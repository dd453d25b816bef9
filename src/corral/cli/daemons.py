"""``corral-daemons``: start, stop and list the corral daemons of this node."""

from __future__ import annotations

import contextlib
import sys

import click

from corral import __version__, daemons
from corral.cli.common import CorralGroup
from corral.paths import Paths
from corral.utils.process import running_pid

__all__ = ["main"]


@click.group(cls=CorralGroup)
@click.version_option(__version__, prog_name="corral-daemons")
def cli() -> None:
    """Manage the corral daemons of this node (paths derive from CORRAL_ROOT)."""


@cli.command()
def start() -> None:
    """Start every daemon this node should run; running ones are left alone.

    On a node in no cluster yet, print the node daemon's one-time join token, which
    'gnt-node add --token' on the master needs.
    """
    paths = Paths.from_env()
    joined = paths.node_membership.exists() or paths.config_db.exists()
    if not joined and running_pid(paths.pid_file("noded")) is None:
        # A token file left from an earlier run is stale: the new daemon makes its own.
        with contextlib.suppress(FileNotFoundError):
            paths.join_token.unlink()
    failed: dict[str, str] = {}
    for name, pid in daemons.start(paths, failed=failed).items():
        click.echo(f"corral-{name}: running (pid {pid})")
    for name, reason in failed.items():
        click.echo(f"corral-{name}: not started (the node works without it): {reason}",
                   err=True)
    if not joined:
        token = daemons.wait_for_token(paths)
        click.echo(f"join token: {token}")
        click.echo("This node is in no cluster yet. To add it, run on the master: "
                   f"gnt-node add --primary-ip ADDRESS --token {token} NODE_NAME "
                   f"(the token is also in {paths.join_token}).")




@cli.command()
def stop() -> None:
    """Stop every corral daemon of this node (SIGTERM, then SIGKILL after 15 s)."""
    for name, pid in daemons.stop(Paths.from_env()).items():
        click.echo(f"corral-{name}: " + ("not running" if pid is None else f"stopped (pid {pid})"))


@cli.command()
def status() -> None:
    """Show which daemons run; exit status 0 if all do, 3 if any does not (LSB)."""
    state = daemons.status(Paths.from_env())
    for name, pid in state.items():
        click.echo(f"corral-{name}: " + ("not running" if pid is None else f"running (pid {pid})"))
    if not state:
        click.echo("no corral daemons belong on this node (no cluster configuration here)")
    sys.exit(0 if state and all(pid is not None for pid in state.values()) else 3)


def main() -> None:
    """Entry point of ``corral-daemons``."""
    cli(prog_name="corral-daemons")


if __name__ == "__main__":
    main()
