"""``corral-masterd``: the master daemon process.

One asyncio process that owns the configuration store and answers luxi on a Unix
socket. It refuses to start (exit status and message naming the file) when the
store is missing, unreadable, corrupt or of a newer schema; it writes a locked pid
file, logs to its own file and shuts down cleanly on SIGTERM or SIGINT.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

import click

from corral import __version__
from corral.cmdlib.config_files import vnc_password_files
from corral.config import ConfigStore
from corral.daemon_users import read_daemon_users
from corral.errors import CorralError, NotClusterError
from corral.iallocator import PluginRunner
from corral.jobs import JobStore
from corral.luxi import LuxiServer
from corral.masterd.methods import MasterMethods
from corral.masterd.metrics import (
    MasterMetrics,
    MetricsListener,
    read_metrics_settings,
    start_listener,
)
from corral.masterd.rpc import MasterRpc
from corral.masterd.state import MasterState
from corral.noded.files import read_ancillary_files
from corral.paths import Paths
from corral.rapi.daemon import luxi_client_group
from corral.rpc.client import RpcClient
from corral.utils import loopcheck
from corral.utils.background import background_unless_foreground
from corral.utils.log import setup_daemon_logging
from corral.utils.process import (
    PidFile,
    lookup_group,
    notify_failed,
    notify_ready,
    raise_open_file_limit,
    refuse_start,
)

__all__ = ["NAME", "main", "serve"]

#: The daemon's name, used for its pid and log files.
NAME = "masterd"

log = logging.getLogger("corral.masterd")


async def serve(paths: Paths, store: ConfigStore) -> None:
    """Run the job queue and serve luxi until SIGTERM or SIGINT arrives."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    client = RpcClient(paths)
    state = MasterState(store, JobStore.open(paths.jobs_db),
                        rpc=MasterRpc(store, paths, client))
    state.paths = paths
    state.context.paths = paths
    state.context.ancillary_files = lambda: read_ancillary_files(
        paths, vnc_password_files(store))
    state.context.iallocators = PluginRunner(paths)
    metrics = MasterMetrics(state)
    metrics.attach(state)
    try:
        await state.start()
        server = LuxiServer(paths.master_socket, MasterMethods(state).dispatch,
                            group=_socket_group(paths))
        await server.start()
        log.info("serving luxi on %s (config serial %d)", paths.master_socket, store.serial)
        metrics_runner = await _metrics_listener(paths, metrics)
        notify_ready()
        try:
            await stop.wait()
            log.info("termination signal received, shutting down")
        finally:
            if metrics_runner is not None:
                await metrics_runner.stop()
            await server.stop()
    finally:
        try:
            await state.stop()
        finally:
            await client.close()


async def _metrics_listener(paths: Paths, metrics: MasterMetrics) -> MetricsListener | None:
    """The metrics listener; one that cannot start is logged and the master daemon
    serves without it (its jobs matter more than its figures)."""
    try:
        return await start_listener(metrics, read_metrics_settings(paths))
    except CorralError as err:
        log.error("no metrics: %s", err.message)
        return None


#: Seconds a thread holds the GIL while another waits for it (Python's default: 0.005).
GIL_SWITCH_INTERVAL = 0.001


def _open_store(paths: Paths) -> ConfigStore:
    if not paths.config_db.exists():
        raise NotClusterError(
            f"no cluster configuration at {paths.config_db}: this node is not an "
            "initialised master (create a cluster with 'gnt-cluster init')"
        )
    return ConfigStore.open(paths.config_db)


def run(paths: Paths, *, debug: bool = False, console: bool = False) -> int:
    """Start the daemon in this process; return its exit status."""
    paths.ensure_dirs()
    setup_daemon_logging(paths.log_file(NAME), debug=debug, console=console)
    raise_open_file_limit()  # idle and slow clients hold a descriptor each
    # Placement reads run in worker threads (corral.masterd.placement); each time the
    # event loop's thread gives the GIL up (every socket call), it waits for a worker
    # to hand it back, by default after 5 ms. 1 ms keeps the loop's callbacks short.
    sys.setswitchinterval(GIL_SWITCH_INTERVAL)
    try:
        pid_file = PidFile(paths.pid_file(NAME))
    except CorralError as err:
        message = f"corral-masterd: {err}"
        print(message, file=sys.stderr)
        notify_failed(message)
        return err.exit_code
    try:
        try:
            store = _open_store(paths)
        except CorralError as err:
            return _refuse(err)
        log.info("corral-masterd %s starting with %s", __version__, paths.config_db)
        try:
            loopcheck.run(serve(paths, store))
        except CorralError as err:  # e.g. an unreadable job queue at start
            return _refuse(err)
        finally:
            store.close()
        log.info("stopped")
        return 0
    finally:
        pid_file.remove()


def _socket_group(paths: Paths) -> int | None:
    """The group the luxi socket goes to: with privilege separation the admin group
    (RAPI, the watcher and the administrators), else the one RAPI's own settings
    name; bad settings only warn here, and the socket stays the master's."""
    try:
        users = read_daemon_users(paths)
        if users is not None:
            return lookup_group(users.admin_group)
        return luxi_client_group(paths)
    except CorralError as err:
        log.warning("luxi socket stays root's: %s", err.message)
        return None


def _refuse(err: CorralError) -> int:
    return refuse_start("corral-masterd", err, log, exit_code=err.exit_code)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-f", "--foreground", is_flag=True,
              help="Stay in the foreground (by default the daemon goes into the background "
                   "once it serves).")
@click.option("-d", "--debug", is_flag=True, help="Log debug messages too.")
@click.option("--console", is_flag=True, help="Also log to standard error.")
@click.version_option(__version__, prog_name="corral-masterd")
def main(foreground: bool, debug: bool, console: bool) -> None:
    """Run the corral master daemon (configuration and luxi socket).

    All paths derive from CORRAL_ROOT (default /). Normally started by
    'corral-daemons start' or 'gnt-cluster init'. Started by hand it goes into the
    background once it serves, unless -f is given.
    """
    paths = Paths.from_env()
    background_unless_foreground(foreground, "corral-masterd", "corral.masterd",
                                 paths.log_file("masterd"))
    sys.exit(run(paths, debug=debug, console=console))


if __name__ == "__main__":
    main()
