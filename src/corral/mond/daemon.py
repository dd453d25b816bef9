"""``corral-mond``: the node monitoring daemon (Ganeti's ``ganeti-mond`` API, plus the
node's Prometheus metrics), one per node.

It is a daemon of its own, not part of the node daemon: it serves plain HTTP to any
monitoring system without credentials, so it holds nothing that changes the node,
and a burst of scrapes or a slow collector never delays the master's calls to the
node daemon. It reads what the node daemon leaves on disk (the instances' reason
trails and status records, the hypervisors' state) and the kernel's counters.

Where it listens: ``--bind``/``--port`` on the command line, else
``/var/lib/corral/mond.json`` (keys ``bind`` and ``port``), else all addresses and
port 1815 (Ganeti's); ``cache`` there sets how many seconds a report is reused (1).
SIGTERM/SIGINT stop it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import click
import msgspec
from aiohttp import web

from corral import __version__
from corral.errors import CorralError, DaemonError
from corral.mond.collectors import CpuSampler, collectors
from corral.mond.server import CACHE_SECONDS, MondApp
from corral.paths import Paths
from corral.utils import loopcheck
from corral.utils import settings as daemon_settings
from corral.utils.background import background_unless_foreground
from corral.utils.log import setup_daemon_logging
from corral.utils.process import PidFile, notify_ready, refuse_start
from corral.utils.settings import check_bind, check_port

__all__ = ["DEFAULT_PORT", "NAME", "Settings", "main", "run", "serve", "settings_file"]

#: The daemon's name, used for its pid, log and settings files.
NAME = "mond"
#: Ganeti's monitoring daemon port.
DEFAULT_PORT = 1815

log = logging.getLogger("corral.mond")


class Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Where mond listens (``mond.json`` holds these keys)."""

    bind: str = "0.0.0.0"
    port: int = DEFAULT_PORT
    cache: float = CACHE_SECONDS

    def __post_init__(self) -> None:
        self.bind = check_bind(self.bind)
        check_port(self.port, allow_zero=True)
        if self.cache < 0:
            raise ValueError(f"cache must be 0 or more seconds, got {self.cache}")


def settings_file(paths: Paths) -> Path:
    """Optional per-node settings (``bind``, ``port``), so that ``corral-daemons`` and
    the testbed start mond without arguments."""
    return paths.data_dir / f"{NAME}.json"


def read_settings(paths: Paths, **given: Any) -> Settings:
    """Command-line values over ``mond.json`` over the defaults."""
    return daemon_settings.read_settings(settings_file(paths), Settings, given)


async def serve(paths: Paths, settings: Settings) -> None:
    """Serve the API until SIGTERM or SIGINT arrives."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    cpu = CpuSampler()
    cpu.start()
    app = MondApp(paths, collectors(paths, cpu), cache_seconds=settings.cache)
    runner = web.AppRunner(app.application(), handle_signals=False, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, settings.bind, settings.port, reuse_address=True)
        try:
            await site.start()
        except OSError as err:
            raise DaemonError(f"cannot listen on TCP {settings.bind}:{settings.port}: "
                              f"{err.strerror or err}") from None
        log.info("serving the monitoring API on %s port %d", settings.bind, settings.port)
        notify_ready()
        await stop.wait()
        log.info("termination signal received, shutting down")
    finally:
        await runner.cleanup()
        await cpu.stop()


def run(paths: Paths, *, bind: str | None = None, port: int | None = None,
        debug: bool = False, console: bool = False) -> int:
    """Start the daemon in this process; return its exit status."""
    paths.ensure_dirs()
    setup_daemon_logging(paths.log_file(NAME), debug=debug, console=console)
    try:
        pid_file = PidFile(paths.pid_file(NAME))
    except CorralError as err:
        return refuse_start("corral-mond", err, log, exit_code=err.exit_code)
    try:
        log.info("corral-mond %s starting (root %s)", __version__, paths.root)
        try:
            settings = read_settings(paths, bind=bind, port=port)
            loopcheck.run(serve(paths, settings))
        except CorralError as err:
            return refuse_start("corral-mond", err, log, exit_code=err.exit_code)
        log.info("stopped")
        return 0
    finally:
        with contextlib.suppress(OSError):
            pid_file.remove()


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-b", "--bind", metavar="IP", default=None,
              help="Address to listen on (default: mond.json, else 0.0.0.0).")
@click.option("-p", "--port", type=click.IntRange(0, 65535), default=None,
              help=f"TCP port (default: mond.json, else {DEFAULT_PORT}).")
@click.option("-f", "--foreground", is_flag=True,
              help="Stay in the foreground (by default the daemon goes into the background "
                   "once it serves).")
@click.option("-d", "--debug", is_flag=True, help="Log debug messages too.")
@click.option("--console", is_flag=True, help="Also log to standard error.")
@click.version_option(__version__, prog_name="corral-mond")
def main(bind: str | None, port: int | None, foreground: bool, debug: bool,
         console: bool) -> None:
    """Run the corral node monitoring daemon (Ganeti's mond API and /metrics, HTTP).

    All paths derive from CORRAL_ROOT (default /).
    """
    paths = Paths.from_env()
    background_unless_foreground(foreground, "corral-mond", "corral.mond",
                                 paths.log_file(NAME))
    sys.exit(run(paths, bind=bind, port=port, debug=debug, console=console))


if __name__ == "__main__":
    main()
