"""``corral-daemons``: start, stop and list the corral daemons of this node."""

from __future__ import annotations

import sys

import click

from corral import __version__, daemons
from corral.cli.common import CorralGroup
from corral.paths import Paths

__all__ = ["main"]


@click.group(cls=CorralGroup)
@click.version_option(__version__, prog_name="corral-daemons")
def cli() -> None:
    """Manage the corral daemons of this node (paths derive from CORRAL_ROOT)."""


@cli.command()
def start() -> None:
    """Start every daemon this node should run; running ones are left alone."""
    for name, pid in daemons.start(Paths.from_env()).items():
        click.echo(f"corral-{name}: running (pid {pid})")


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
