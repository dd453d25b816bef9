"""``gnt-backup``: a tool corral does not have yet.

Each exists as a command so that its name does not fall through to Ganeti's tool of
the same name further along ``PATH`` (which would talk to another cluster, or fail
in its own way). Run with any arguments it says what is missing and that it comes
later, and exits 1, as Ganeti's tools do for an unknown command; ``--help`` says the
same and exits 0.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

import click

from corral.cli.common import CONTEXT_SETTINGS

__all__ = ["NOT_YET", "gnt_backup"]


@dataclass(frozen=True)
class MissingTool:
    """A Ganeti tool corral does not have yet."""

    #: The command's name, e.g. ``gnt-backup``.
    tool: str
    #: What it manages in Ganeti, as a noun phrase.
    what: str
    #: Ganeti's subcommands of the tool, for the help text.
    commands: tuple[str, ...]
    #: What to use meanwhile, if anything.
    meanwhile: str

    def message(self) -> str:
        """What the tool says when run."""
        return (f"{self.tool}: corral has no {self.what} yet; {self.tool} "
                f"({', '.join(self.commands)}) comes in a later release. {self.meanwhile}")


NOT_YET: dict[str, MissingTool] = {t.tool: t for t in (
    MissingTool("gnt-backup", "instance exports and imports",
                ("export", "import", "list", "list-fields", "remove"),
                "Meanwhile, 'gnt-instance move' copies an instance to another node."),
)}


def _entry_point(tool: str) -> Callable[[], None]:
    missing = NOT_YET[tool]

    @click.command(context_settings={**CONTEXT_SETTINGS, "ignore_unknown_options": True},
                   help=missing.message(), add_help_option=True)
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def command(args: tuple[str, ...]) -> None:
        click.echo(f"Failure: {missing.message()}", err=True)
        sys.exit(1)

    def main() -> None:
        command(prog_name=tool)

    main.__doc__ = f"Entry point of ``{tool}``: says that corral has no {missing.what} yet."
    return main


#: Entry point of ``gnt-backup``.
gnt_backup = _entry_point("gnt-backup")
