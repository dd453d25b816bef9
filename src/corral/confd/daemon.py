"""``corral-confd``: the configuration query daemon of a master candidate.

Start-up, as root on a real node: read the HMAC key (mode 0400), bind the UDP
socket, take the locked pid file, then drop to ``--user``/``--group`` and serve.
The configuration file must be readable by that user: confd reloads it while it
runs. In tests and in the testbed everything runs as the invoking user and the
privilege options are left out.

Where it listens: ``--bind``/``--port`` (and ``--user``/``--group``) on the command
line, else ``/var/lib/corral/confd.json`` (:func:`settings_file`), else all addresses
and port 1814.

Signals: SIGTERM/SIGINT stop the daemon; SIGHUP checks the configuration for a
change at once; SIGUSR1 logs the packet counters (see
:class:`~corral.confd.server.Counters`) and writes them as JSON to
``/run/corral/confd.stats.json``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import sys
import time
from pathlib import Path

import click

from corral import __version__, serializer
from corral.confd.protocol import DEFAULT_PORT
from corral.confd.server import ConfdProtocol, Counters, serve_socket
from corral.confd.settings import NAME, SETTING_KEYS, Settings, read_settings, settings_file
from corral.confd.source import SnapshotSource
from corral.errors import CorralError, DaemonError, NotClusterError
from corral.paths import Paths
from corral.utils import loopcheck
from corral.utils.background import background_unless_foreground
from corral.utils.files import write_public
from corral.utils.log import setup_daemon_logging
from corral.utils.process import PidFile, drop_privileges, notify_ready, refuse_start

__all__ = ["NAME", "SETTING_KEYS", "Settings", "main", "read_settings", "run", "serve",
           "settings_file", "stats_file"]


#: Receive buffer asked for: bursts of queries queue here rather than get lost.
_RCVBUF = 4 << 20

log = logging.getLogger("corral.confd")


def stats_file(paths: Paths) -> Path:
    """Where SIGUSR1 writes the counters."""
    return paths.run_dir / f"{NAME}.stats.json"


def read_key(paths: Paths) -> bytes:
    """The cluster's confd HMAC key: the file's bytes, as Ganeti uses them."""
    try:
        key = paths.confd_hmac_key.read_bytes()
    except FileNotFoundError:
        raise NotClusterError(
            f"no confd key at {paths.confd_hmac_key}: this node is not in a cluster"
        ) from None
    except OSError as err:
        raise DaemonError(f"cannot read the confd key {paths.confd_hmac_key}: {err}") from None
    if not key:
        raise DaemonError(f"the confd key {paths.confd_hmac_key} is empty")
    return key


def open_socket(bind: str, port: int) -> socket.socket:
    """The bound, non-blocking UDP socket (made before privileges are dropped)."""
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        for option in (getattr(socket, "SO_RCVBUFFORCE", None), socket.SO_RCVBUF):
            if option is None:
                continue
            try:
                sock.setsockopt(socket.SOL_SOCKET, option, _RCVBUF)
                break
            except OSError:
                continue
        sock.bind((bind, port))
        sock.setblocking(False)
    except OSError as err:
        sock.close()
        raise DaemonError(f"cannot listen on UDP {bind}:{port}: {err.strerror or err}") from None
    return sock


def _report(paths: Paths, counters: Counters, source: SnapshotSource) -> None:
    stats = {"time": time.time(), "serial": source.current.serial if source.current else None,
             **counters.as_dict()}
    log.info("counters: %s", " ".join(f"{k}={v}" for k, v in stats.items() if k != "time"))
    try:
        write_public(stats_file(paths), serializer.dumps(stats) + b"\n")
    except OSError as err:
        log.warning("cannot write %s: %s", stats_file(paths), err)


async def serve(paths: Paths, key: bytes, sock: socket.socket, source: SnapshotSource) -> None:
    """Answer queries on ``sock`` until SIGTERM or SIGINT arrives."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    counters = Counters()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    loop.add_signal_handler(signal.SIGHUP, source.poke)
    loop.add_signal_handler(signal.SIGUSR1, _report, paths, counters, source)
    source.start()
    stop_serving = serve_socket(sock, ConfdProtocol(key, lambda: source.current,
                                                    counters=counters))
    try:
        host, port = sock.getsockname()[:2]
        log.info("answering on UDP %s:%d from %s", host, port, source.path)
        notify_ready()
        await stop.wait()
        log.info("termination signal received, shutting down")
        _report(paths, counters, source)
    finally:
        stop_serving()
        await source.stop()


def run(paths: Paths, *, bind: str | None = None, port: int | None = None,
        user: str | None = None, group: str | None = None, config: Path | None = None,
        debug: bool = False, console: bool = False) -> int:
    """Start the daemon in this process; return its exit status. Options left None
    come from ``confd.json`` or the defaults."""
    paths.ensure_dirs()
    setup_daemon_logging(paths.log_file(NAME), debug=debug, console=console)
    try:
        pid_file = PidFile(paths.pid_file(NAME))
    except CorralError as err:
        return _refuse(err)
    try:
        log.info("corral-confd %s starting (root %s)", __version__, paths.root)
        source = SnapshotSource(paths, config)
        try:
            options = read_settings(paths, bind=bind, port=port, user=user, group=group)
            key = read_key(paths)
            sock = open_socket(options.bind, options.port)
            # The first load still has the start-up privileges, so confd answers
            # even where its user cannot read the file (reloads then fail, logged).
            loopcheck.run(source.check())
            drop_privileges(options.user, options.group, daemon=NAME)
        except CorralError as err:
            return _refuse(err)
        try:
            loopcheck.run(serve(paths, key, sock, source))
        finally:
            sock.close()
        log.info("stopped")
        return 0
    finally:
        with contextlib.suppress(OSError):
            pid_file.remove()


def _refuse(err: CorralError) -> int:
    return refuse_start("corral-confd", err, log, exit_code=err.exit_code)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-b", "--bind", metavar="IP", default=None,
              help="Address to listen on (default: confd.json, else 0.0.0.0).")
@click.option("-p", "--port", type=click.IntRange(0, 65535), default=None,
              help=f"UDP port (default: confd.json, else {DEFAULT_PORT}).")
@click.option("--user", metavar="USER", default=None,
              help="Run as this user after binding the socket and reading the key.")
@click.option("--group", metavar="GROUP", default=None,
              help="Run as this group instead of the user's own (needs --user).")
@click.option("--config", "config", type=click.Path(path_type=Path), default=None,
              help="Answer from this configuration file (default: the store on the "
                   "master, else the replica).")
@click.option("-f", "--foreground", is_flag=True,
              help="Stay in the foreground (by default the daemon goes into the background "
                   "once it serves).")
@click.option("-d", "--debug", is_flag=True, help="Log debug messages too.")
@click.option("--console", is_flag=True, help="Also log to standard error.")
@click.version_option(__version__, prog_name="corral-confd")
def main(bind: str | None, port: int | None, user: str | None, group: str | None,
         config: Path | None, foreground: bool, debug: bool, console: bool) -> None:
    """Run the corral configuration query daemon (confd, UDP).

    All paths derive from CORRAL_ROOT (default /). It answers signed queries from
    the local configuration (the store on the master node, the replica on other
    master candidates) and reloads it when it changes.
    """
    paths = Paths.from_env()
    background_unless_foreground(foreground, "corral-confd", "corral.confd",
                                 paths.log_file("confd"))
    sys.exit(run(paths, bind=bind, port=port, user=user, group=group,
                 config=config, debug=debug, console=console))


if __name__ == "__main__":
    main()
