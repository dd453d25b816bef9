"""``gnt-debug``: test jobs and a view of the master daemon's locks."""

from __future__ import annotations

import time
from typing import Any

import click

from corral import __version__
from corral.cli.common import CorralGroup, get_client, reason_trail
from corral.cli.jobs import Formatter, exit_with, generic_list, make_op, submit_and_wait
from corral.cli.options import (
    FieldSelection,
    dry_run_option,
    no_headers_option,
    output_fields_option,
    print_jobid_option,
    priority_option,
    reason_option,
    resolve_fields,
    separator_option,
    submit_option,
)

__all__ = ["LOCK_FIELDS", "main"]

TOOL = "gnt-debug"

#: ``gnt-debug locks`` columns without ``-o`` (Ganeti's).
LOCK_FIELDS = ("name", "mode", "owner", "pending")


@click.group(cls=CorralGroup)
@click.version_option(__version__, prog_name=TOOL)
def cli() -> None:
    """Debugging aids: delay (a test job), locks."""


@cli.command()
@click.option("--no-master", "on_master", flag_value=False, default=True,
              help="Do not sleep in the master daemon.")
@click.option("-n", "on_nodes", metavar="NODE", multiple=True,
              help="Also sleep on NODE, in its node daemon; repeatable.")
@click.option("-r", "--repeat", type=click.IntRange(min=0), default=0, show_default=True,
              help="Number of times to repeat the sleep.")
@click.option("-i", "--interruptible", is_flag=True,
              help="Sleep in the master daemon only, interruptible by writing to the Unix "
                   "socket named in the job log (delay-test entry) or by gnt-job cancel.")
@click.option("-l", "--no-locks", is_flag=True,
              help="Do not take locks while sleeping.")
@dry_run_option
@priority_option
@submit_option
@print_jobid_option
@reason_option
@click.argument("duration", type=click.FloatRange(min=0))
def delay(duration: float, on_master: bool, on_nodes: tuple[str, ...], repeat: int,
          interruptible: bool, no_locks: bool, dry_run: bool, priority: int | None,
          submit_only: bool, print_jobid: bool, reason: str | None) -> None:
    """Run a job that sleeps DURATION seconds (OP_TEST_DELAY)."""
    params: dict[str, Any] = {"duration": duration, "on_master": on_master,
                              "on_nodes": list(on_nodes), "repeat": repeat,
                              "no_locks": no_locks}
    if interruptible:
        params["interruptible"] = True
    op = make_op("OP_TEST_DELAY", params, trail=reason_trail(TOOL, "delay", reason),
                 priority=priority, dry_run=dry_run)
    with get_client() as client:
        submit_and_wait(client, [op], submit_only=submit_only, print_jobid=print_jobid)


def _dash_if_empty(fmt: Formatter) -> Formatter:
    return lambda value: fmt(value) if value else "-"


def _pending(value: Any) -> str:
    return ", ".join(f"{mode}:{','.join(map(str, owners))}" for mode, owners in value)


#: Lock columns as Ganeti prints them: "-" when empty, owners comma-separated,
#: pending acquires as "mode:owner,owner".
LOCK_FORMAT: dict[str, Formatter] = {
    "mode": _dash_if_empty(str),
    "owner": _dash_if_empty(lambda v: ",".join(map(str, v))),
    "pending": _dash_if_empty(_pending),
}


@cli.command()
@output_fields_option
@no_headers_option
@separator_option
@click.option("--interval", type=click.IntRange(min=1), default=None,
              help="Repeat every N seconds until interrupted.")
@click.option("-v", "--verbose", is_flag=True,
              help="Verbose marks for missing values, e.g. (unavail).")
def locks(output: FieldSelection | None, no_headers: bool, separator: str | None,
          interval: int | None, verbose: bool) -> None:
    """List the master daemon's locks: name, mode, owners and pending acquires."""
    fields = resolve_fields(output, LOCK_FIELDS)
    with get_client() as client:
        while True:
            code = generic_list(client, "lock", fields, separator=separator,
                                no_headers=no_headers, verbose=verbose, overrides=LOCK_FORMAT)
            if code or not interval:
                break
            click.echo("")
            time.sleep(interval)
    exit_with(code)


def main() -> None:
    """Entry point of ``gnt-debug``."""
    cli(prog_name=TOOL)


if __name__ == "__main__":
    main()
