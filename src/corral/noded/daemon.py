"""``corral-noded``: the node daemon process.

Runs on every node, the master included. At start it locks its memory
(``mlockall``) so that it keeps working when the node's disks fail, logging a
warning when it cannot; log records it cannot write to its file go to the console
(design 2.1). It writes a locked pid file, listens where ``noded.json`` (or the
command line) says, and stops cleanly on SIGTERM or SIGINT.

Settings (``Paths.noded_settings``, optional): ``{"bind": "<ip>", "port": <int>}``.
Without them it listens on every address at the cluster's noded port (from the
node's membership) or 1811.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import ctypes.util
import logging
import os
import signal
import sys
import threading
from typing import TextIO

import click
import msgspec

from corral import __version__
from corral.errors import CorralError, DaemonError
from corral.noded import join
from corral.noded.clock import clock_problem
from corral.noded.server import NodeServer
from corral.paths import Paths
from corral.storage import lvm_report
from corral.utils import loopcheck
from corral.utils import settings as daemon_settings
from corral.utils.background import background_unless_foreground
from corral.utils.log import setup_daemon_logging
from corral.utils.process import PidFile, notify_ready, raise_open_file_limit, refuse_start
from corral.utils.settings import check_bind, check_port

__all__ = [
    "DEFAULT_BIND",
    "DEFAULT_PORT",
    "NAME",
    "ConsoleFallbackHandler",
    "Settings",
    "lock_memory",
    "main",
    "read_settings",
    "run",
    "serve",
]

#: The daemon's name, used for its pid and log files.
NAME = "noded"
#: Where noded listens without settings: every address, Ganeti's noded port.
DEFAULT_BIND = "0.0.0.0"
DEFAULT_PORT = 1811
#: Where records go that cannot be written to the log file (design 2.1).
CONSOLE = "/dev/console"

_MCL_CURRENT = 1
_MCL_FUTURE = 2
#: Threads of a daemon with locked memory lock their whole stack: keep both small.
_THREAD_STACK = 1 << 20
_WORKER_THREADS = 8

log = logging.getLogger("corral.noded")


class ConsoleFallbackHandler(logging.FileHandler):
    """A log file handler that writes a record it cannot write to the file to the
    console instead (standard error when the console cannot be opened either)."""

    def __init__(self, filename: str, console: str = CONSOLE) -> None:
        super().__init__(filename)
        self.console = console

    def handleError(self, record: logging.LogRecord) -> None:
        """Send the record to the console rather than drop it."""
        try:
            line = self.format(record) + "\n"
        except Exception:
            line = f"{record.levelname} {record.getMessage()}\n"
        try:
            with open(self.console, "a") as console:
                console.write(line)
            return
        except OSError:
            pass
        stream: TextIO | None = sys.stderr
        try:
            if stream is not None:
                stream.write(line)
                stream.flush()
        except (OSError, ValueError):
            pass


def _install_console_fallback() -> None:
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler) and not isinstance(
            handler, ConsoleFallbackHandler
        ):
            replacement = ConsoleFallbackHandler(handler.baseFilename)
            replacement.setFormatter(handler.formatter)
            replacement.setLevel(handler.level)
            root.removeHandler(handler)
            handler.close()
            root.addHandler(replacement)


def lock_memory() -> bool:
    """``mlockall(MCL_CURRENT | MCL_FUTURE)``; log a warning (not fail) when refused."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        result = libc.mlockall(_MCL_CURRENT | _MCL_FUTURE)
    except (OSError, AttributeError) as err:
        log.warning("cannot lock the daemon's memory: mlockall is unavailable (%s)", err)
        return False
    if result != 0:
        errno = ctypes.get_errno()
        log.warning("cannot lock the daemon's memory (mlockall): %s; continuing without",
                    os.strerror(errno))
        return False
    log.info("memory locked (mlockall)")
    return True


class Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Where the daemon listens: ``noded.json`` holds ``{"bind": ip, "port": n}``."""

    bind: str = DEFAULT_BIND
    port: int = DEFAULT_PORT

    def __post_init__(self) -> None:
        self.bind = check_bind(self.bind)
        check_port(self.port)


def read_settings(paths: Paths, bind: str | None = None, port: int | None = None) -> Settings:
    """The listening address: command line over ``noded.json`` over the defaults (the
    cluster's noded port once this node has joined).

    :raises ParameterError: for an unreadable or invalid settings file.
    """
    default_port = join.read_membership(paths).get("noded_port", DEFAULT_PORT)
    return daemon_settings.read_settings(paths.noded_settings, Settings,
                                  {"bind": bind, "port": port},
                                  defaults={"port": default_port})


def _announce_token(token: str) -> None:
    print(f"join token: {token}", flush=True)
    log.info("join token: %s", token)


async def serve(paths: Paths, settings: Settings) -> None:
    """Serve until SIGTERM or SIGINT arrives (or the listener is lost)."""
    loop = asyncio.get_running_loop()
    loop.set_default_executor(
        concurrent.futures.ThreadPoolExecutor(_WORKER_THREADS, thread_name_prefix="noded"))
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    server = NodeServer(paths, settings.bind, settings.port, on_token=_announce_token)
    try:
        await server.start()
    except OSError as err:
        raise DaemonError(
            f"cannot listen on {settings.bind} port {settings.port}: {err.strerror or err}"
        ) from None
    # LVM's reports for the monitoring daemon, which may not run LVM itself
    reports = asyncio.create_task(lvm_report.publish_forever(paths))
    try:
        notify_ready()
        stop_wait = asyncio.ensure_future(stop.wait())
        broken_wait = asyncio.ensure_future(server.broken.wait())
        await asyncio.wait([stop_wait, broken_wait], return_when=asyncio.FIRST_COMPLETED)
        for task in (stop_wait, broken_wait):
            task.cancel()
        if server.broken.is_set():
            raise DaemonError("the listener was lost; stopping so that a restart fixes it")
        log.info("termination signal received, shutting down")
    finally:
        reports.cancel()
        await server.stop()


def run(
    paths: Paths,
    *,
    bind: str | None = None,
    port: int | None = None,
    debug: bool = False,
    console: bool = False,
    mlock: bool = True,
) -> int:
    """Start the daemon in this process; return its exit status."""
    paths.ensure_dirs()
    setup_daemon_logging(paths.log_file(NAME), debug=debug, console=console)
    raise_open_file_limit()  # idle and slow clients hold a descriptor each
    _install_console_fallback()
    try:
        pid_file = PidFile(paths.pid_file(NAME))
    except CorralError as err:
        return _refuse(err, log_it=False)
    try:
        log.info("corral-noded %s starting (root %s)", __version__, paths.root)
        problem = clock_problem(paths)
        if problem is not None:
            log.error("%s", problem)
        threading.stack_size(_THREAD_STACK)
        if mlock:
            lock_memory()
        try:
            settings = read_settings(paths, bind, port)
            loopcheck.run(serve(paths, settings))
        except CorralError as err:
            return _refuse(err)
        log.info("stopped")
        return 0
    finally:
        pid_file.remove()


def _refuse(err: CorralError, *, log_it: bool = True) -> int:
    return refuse_start("corral-noded", err, log, exit_code=err.exit_code, log_it=log_it)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-b", "--bind", metavar="IP", default=None,
              help="Address to listen on (default: noded.json, else 0.0.0.0).")
@click.option("-p", "--port", type=int, default=None,
              help="TCP port (default: noded.json, else the cluster's noded port or 1811).")
@click.option("-f", "--foreground", is_flag=True,
              help="Stay in the foreground (by default the daemon goes into the background "
                   "once it serves).")
@click.option("-d", "--debug", is_flag=True, help="Log debug messages too.")
@click.option("--console", is_flag=True, help="Also log to standard error.")
@click.option("--no-mlock", is_flag=True, help="Do not lock the daemon's memory.")
@click.version_option(__version__, prog_name="corral-noded")
def main(bind: str | None, port: int | None, foreground: bool, debug: bool, console: bool,
         no_mlock: bool) -> None:
    """Run the corral node daemon (node RPC over mutual TLS, joining by token).

    All paths derive from CORRAL_ROOT (default /). A node that has not joined a
    cluster prints a one-time join token and waits for 'gnt-node add --token'.
    """
    paths = Paths.from_env()
    background_unless_foreground(foreground, "corral-noded", "corral.noded",
                                 paths.log_file("noded"))
    sys.exit(run(paths, bind=bind, port=port, debug=debug, console=console,
                 mlock=not no_mlock))


if __name__ == "__main__":
    main()
