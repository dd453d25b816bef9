"""``corral-rapi``: the Remote API daemon.

Serves Ganeti's RAPI v2 over HTTPS (port 5080, with its own self-signed certificate,
``rapi.pem``, which no node daemon accepts) and talks luxi to the master daemon. Plain
HTTP needs the explicit ``--no-ssl``.

Privilege separation (design 2.2): started as root, it reads everything it needs (the
users file, the certificate and its key), binds its port, and then runs as the
configured unprivileged user and group. A later SIGHUP re-reads the users file as that
user, so the file must be readable by it to take effect; otherwise the users read at
start stay in force. The master daemon gives its socket (mode 0660) to the group
``rapi.json`` names (or its user's primary group), so an unprivileged RAPI reaches it;
a group given only on the command line does not, so put it in ``rapi.json``.

Settings come from the command line, else from ``rapi.json`` in the data directory
(``{"bind", "port", "require_authentication", "user", "group"}``), else the defaults.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import click
import msgspec
from aiohttp import web

from corral import __version__, x509
from corral.errors import CorralError, DaemonError
from corral.noded import join
from corral.paths import Paths
from corral.rapi.auth import Users
from corral.rapi.luxi_pool import LuxiPool
from corral.rapi.server import build_app
from corral.utils import loopcheck
from corral.utils import settings as daemon_settings
from corral.utils.background import background_unless_foreground
from corral.utils.log import setup_daemon_logging
from corral.utils.process import (
    PidFile,
    drop_privileges,
    lookup_group,
    lookup_user,
    notify_ready,
    raise_open_file_limit,
    refuse_start,
)
from corral.utils.settings import check_bind, check_port

__all__ = [
    "DEFAULT_PORT",
    "NAME",
    "Settings",
    "drop_privileges",
    "luxi_client_group",
    "main",
    "read_settings",
    "run",
    "settings_file",
]

#: The daemon's name, used for its pid and log files.
NAME: Final = "rapi"
#: Ganeti's RAPI port.
DEFAULT_PORT: Final = 5080
DEFAULT_BIND: Final = "0.0.0.0"
_ACCESS_FORMAT: Final = '%a "%r" %s %b %Tf'
#: Seconds an idle kept-alive connection stays open.
KEEPALIVE_TIMEOUT: Final = 75.0

log = logging.getLogger("corral.rapi")


@dataclass(frozen=True)
class Settings:
    """How the daemon runs."""

    bind: str = DEFAULT_BIND
    port: int = DEFAULT_PORT
    ssl: bool = True
    require_authentication: bool = False
    user: str | None = None
    group: str | None = None


def settings_file(paths: Paths) -> Path:
    """Where the daemon's settings live (optional)."""
    return paths.data_dir / "rapi.json"


class _StoredSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What ``rapi.json`` (or the command line) may set."""

    bind: str = DEFAULT_BIND
    port: int = DEFAULT_PORT
    require_authentication: bool = False
    user: str | None = None
    group: str | None = None

    def __post_init__(self) -> None:
        self.bind = check_bind(self.bind)
        check_port(self.port)


def read_settings(paths: Paths, **given: Any) -> Settings:
    """Command-line values (``given``, None when not given) over ``rapi.json`` over the
    defaults, checked."""
    stored = daemon_settings.read_settings(settings_file(paths), _StoredSettings, given)
    return Settings(bind=stored.bind, port=stored.port, ssl=not given.get("no_ssl"),
                    require_authentication=stored.require_authentication, user=stored.user,
                    group=stored.group)


def luxi_client_group(paths: Paths) -> int | None:
    """The group RAPI runs as on this node (from ``rapi.json``: its ``group``, else the
    ``user``'s primary group), or None when it keeps root's. The master daemon gives
    its socket to that group, so that an unprivileged RAPI can still reach it."""
    settings = read_settings(paths)
    if settings.group is not None:
        return lookup_group(settings.group)
    if settings.user is not None:
        return lookup_user(settings.user).pw_gid
    return None


def _ssl_context(paths: Paths) -> ssl.SSLContext:
    """Serve with RAPI's own self-signed certificate (:attr:`Paths.rapi_cert`), never
    the node's: the cluster CA did not sign it, so whoever gets it out of this
    unprivileged daemon cannot call any node daemon with it. Clients authenticate
    with passwords, not certificates, so none is asked for. A node without one (a
    cluster made before RAPI had its own) gets one naming it, made here while the
    daemon is still root."""
    membership = join.read_membership(paths)
    node_name = str(membership.get("node_name") or "")
    if node_name and not paths.rapi_cert.exists():
        ips = [str(membership["master_ip"])] if membership.get("master_name") == node_name \
            and membership.get("master_ip") else []
        cluster = str(membership.get("cluster_name") or node_name)
        try:
            x509.ensure_self_signed(paths.rapi_cert, paths.rapi_key, cluster,
                                    [cluster, node_name], ips, x509.CERT_DAYS)
        except OSError as err:
            raise DaemonError(
                f"this node has no RAPI certificate ({paths.rapi_cert}) and corral-rapi "
                f"cannot make one: {err.strerror or err} (it runs as its own user); make "
                "one with 'gnt-cluster renew-crypto --new-rapi-certificate'") from None
        log.info("made a self-signed RAPI certificate %s", paths.rapi_cert)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(paths.rapi_cert, paths.rapi_key)
    except (OSError, ssl.SSLError) as err:
        raise DaemonError(f"cannot load the RAPI certificate {paths.rapi_cert} and key "
                          f"{paths.rapi_key}: {err}; is this node part of a cluster?") from None
    return ctx


async def serve(paths: Paths, settings: Settings, users: Users,
                ssl_context: ssl.SSLContext | None) -> None:
    """Serve until SIGTERM or SIGINT; SIGHUP re-reads the users file."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    loop.add_signal_handler(signal.SIGHUP, users.load)
    luxi = LuxiPool(paths.master_socket)
    app = build_app(luxi=luxi, users=users, require_auth=settings.require_authentication)
    runner = web.AppRunner(app, access_log=logging.getLogger("corral.rapi.access"),
                           access_log_format=_ACCESS_FORMAT, shutdown_timeout=5.0,
                           keepalive_timeout=KEEPALIVE_TIMEOUT)
    await runner.setup()
    try:
        site = web.TCPSite(runner, settings.bind, settings.port, ssl_context=ssl_context,
                           reuse_address=True)
        try:
            await site.start()
        except OSError as err:
            raise DaemonError(f"cannot listen on {settings.bind} port {settings.port}: "
                              f"{err.strerror or err}") from None
        drop_privileges(settings.user, settings.group, daemon=NAME)
        scheme = "https" if ssl_context is not None else "http"
        log.info("serving RAPI on %s://%s:%d/ (authentication %s)", scheme, settings.bind,
                 settings.port, "required" if settings.require_authentication
                 else "for writes")
        notify_ready()
        await stop.wait()
        log.info("termination signal received, shutting down")
    finally:
        await runner.cleanup()
        await luxi.close()


def run(paths: Paths, *, debug: bool = False, console: bool = False, **given: Any) -> int:
    """Start the daemon in this process; return its exit status."""
    paths.ensure_dirs()
    setup_daemon_logging(paths.log_file(NAME), debug=debug, console=console)
    raise_open_file_limit()  # idle and slow clients hold a descriptor each
    try:
        pid_file = PidFile(paths.pid_file(NAME))
    except CorralError as err:
        return _refuse(err, log_it=False)
    try:
        log.info("corral-rapi %s starting (root %s)", __version__, paths.root)
        try:
            settings = read_settings(paths, **given)
            users = Users(paths.rapi_users)
            users.load()
            context = _ssl_context(paths) if settings.ssl else None
            loopcheck.run(serve(paths, settings, users, context))
        except CorralError as err:
            return _refuse(err)
        log.info("stopped")
        return 0
    finally:
        try:
            pid_file.remove()
        except OSError as err:  # no longer root: the pid file stays, unlocked (stale)
            log.info("pid file %s left behind: %s", pid_file.path, err)


def _refuse(err: CorralError, *, log_it: bool = True) -> int:
    return refuse_start("corral-rapi", err, log, exit_code=err.exit_code, log_it=log_it)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-b", "--bind", metavar="IP", default=None,
              help=f"Address to listen on (default: rapi.json, else {DEFAULT_BIND}).")
@click.option("-p", "--port", type=int, default=None,
              help=f"TCP port (default: rapi.json, else {DEFAULT_PORT}).")
@click.option("--no-ssl", is_flag=True, help="Serve plain HTTP instead of HTTPS.")
@click.option("--require-authentication", "require_authentication", is_flag=True,
              default=None, help="Refuse anonymous requests, reads included.")
@click.option("--user", default=None, help="Run as this user after start (needs root).")
@click.option("--group", default=None,
              help="Run as this group instead of the user's own (needs --user and root).")
@click.option("-f", "--foreground", is_flag=True,
              help="Stay in the foreground (by default the daemon goes into the background "
                   "once it serves).")
@click.option("-d", "--debug", is_flag=True, help="Log debug messages too.")
@click.option("--console", is_flag=True, help="Also log to standard error.")
@click.version_option(__version__, prog_name="corral-rapi")
def main(bind: str | None, port: int | None, no_ssl: bool, require_authentication: bool | None,
         user: str | None, group: str | None, foreground: bool, debug: bool,
         console: bool) -> None:
    """Run the corral Remote API daemon (Ganeti's RAPI v2 over HTTPS, port 5080).

    All paths derive from CORRAL_ROOT (default /). Runs on the master node, next to
    corral-masterd; 'corral-daemons start' starts it there.
    """
    paths = Paths.from_env()
    background_unless_foreground(foreground, "corral-rapi", "corral.rapi",
                                 paths.log_file("rapi"))
    sys.exit(run(paths, debug=debug, console=console, bind=bind, port=port,
                 no_ssl=no_ssl, require_authentication=require_authentication or None,
                 user=user, group=group))


if __name__ == "__main__":
    main()
