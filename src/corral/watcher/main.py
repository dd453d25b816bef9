"""``corral-watcher``: one watcher pass on this node, then exit (run it from a timer).

Exit status 0 when the pass ran (or had nothing to do: paused, or another watcher
runs), 1 when it failed; what it did goes to ``/var/log/corral/watcher.log`` (and to
standard error with ``-d``).
"""

from __future__ import annotations

import logging
import sys

import click

from corral import __version__
from corral.errors import CorralError
from corral.paths import Paths
from corral.utils.log import setup_daemon_logging
from corral.watcher.pause import parse_timespec
from corral.watcher.run import Options, run_pass

__all__ = ["main"]

log = logging.getLogger("corral.watcher")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-d", "--debug", is_flag=True, help="Log debug messages too, and log to "
              "standard error as well.")
@click.option("-A", "--job-age", default=None, metavar="TIMESPEC",
              help="Archive finished jobs older than this (30, 90s, 5m, 6h, 2d, 1w); "
                   "default: the cluster's job_archive_age (6h unless 'gnt-cluster modify "
                   "--job-archive-age' changed it).")
@click.option("--ignore-pause", is_flag=True, help="Run even though the watcher is paused "
              "(gnt-cluster watcher pause).")
@click.version_option(__version__, prog_name="corral-watcher")
def cli(debug: bool, job_age: str | None, ignore_pause: bool) -> None:
    """Keep this node and, on the master, the cluster as the administrator asked:
    start corral daemons that died, restart instances that should run and are down,
    activate the disks of instances on a rebooted node, archive old jobs.

    One pass per run; run it every few minutes on every node (cron or a systemd
    timer: see share/). All paths derive from CORRAL_ROOT (default /).
    """
    paths = Paths.from_env()
    setup_daemon_logging(paths.log_file("watcher"), debug=debug, console=debug)
    try:
        options = Options(job_age=None if job_age is None else parse_timespec(job_age),
                          ignore_pause=ignore_pause)
        report = run_pass(paths, options)
    except CorralError as err:
        log.error("watcher pass failed: %s", err.message)
        click.echo(f"corral-watcher: {err.message}", err=True)
        sys.exit(1)
    log.debug("pass done: %s", report)


def main() -> None:
    """Entry point of ``corral-watcher``."""
    cli(prog_name="corral-watcher")


if __name__ == "__main__":
    main()
