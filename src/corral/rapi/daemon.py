"""``corral-rapi``: the Remote API daemon.

Serves Ganeti's RAPI v2 over HTTPS (port 5080, the node's certificate from the cluster
CA) and talks luxi to the master daemon. Plain HTTP needs the explicit ``--no-ssl``.

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
import grp
import ipaddress
import json
import logging
import os
import pwd
import signal
import ssl
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import click
from aiohttp import web

from corral import __version__
from corral.errors import CorralError, DaemonError, ParameterError
from corral.paths import Paths
from corral.rapi.auth import Users
from corral.rapi.luxi_pool import LuxiPool
from corral.rapi.server import build_app
from corral.utils import loopcheck
from corral.utils.log import setup_daemon_logging
from corral.utils.process import PidFile, notify_ready, refuse_start

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
_SETTING_KEYS: Final = ("bind", "port", "require_authentication", "user", "group")
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


def _load_file(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise ParameterError(f"cannot read the settings file {path}: {err}") from None
    if not isinstance(data, dict):
        raise ParameterError(f"{path} must hold a JSON object with keys "
                             f"{', '.join(_SETTING_KEYS)}")
    unknown = sorted(set(data) - set(_SETTING_KEYS))
    if unknown:
        raise ParameterError(f"{path}: unknown setting(s) {', '.join(unknown)}; known: "
                             f"{', '.join(_SETTING_KEYS)}")
    return data


def read_settings(paths: Paths, **given: Any) -> Settings:
    """Command-line values (``given``, None when not given) over ``rapi.json`` over the
    defaults, checked."""
    source = str(settings_file(paths))
    data = _load_file(settings_file(paths))
    merged = {key: given[key] if given.get(key) is not None else data.get(key)
              for key in _SETTING_KEYS}
    bind = merged["bind"] if merged["bind"] is not None else DEFAULT_BIND
    try:
        bind = str(ipaddress.ip_address(bind))
    except ValueError:
        raise ParameterError(f"bind address {bind!r} ({source} or --bind) is not an IP "
                             "address") from None
    port = merged["port"] if merged["port"] is not None else DEFAULT_PORT
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ParameterError(f"port {port!r} ({source} or --port) is not a TCP port (1-65535)")
    require = merged["require_authentication"]
    if require is not None and not isinstance(require, bool):
        raise ParameterError(f"{source}: require_authentication must be true or false")
    for key in ("user", "group"):
        if merged[key] is not None and not isinstance(merged[key], str):
            raise ParameterError(f"{source}: {key} must be a name or a number as text")
    return Settings(bind=bind, port=port, ssl=not given.get("no_ssl"),
                    require_authentication=bool(require), user=merged["user"],
                    group=merged["group"])


def luxi_client_group(paths: Paths) -> int | None:
    """The group RAPI runs as on this node (from ``rapi.json``: its ``group``, else the
    ``user``'s primary group), or None when it keeps root's. The master daemon gives
    its socket to that group, so that an unprivileged RAPI can still reach it."""
    settings = read_settings(paths)
    if settings.group is not None:
        return _lookup_group(settings.group)
    if settings.user is not None:
        return _lookup_user(settings.user).pw_gid
    return None


def _lookup_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except (KeyError, OverflowError):
        raise ParameterError(f"unknown user {name!r} (--user)") from None


def _lookup_group(name: str) -> int:
    try:
        return grp.getgrgid(int(name)).gr_gid if name.isdigit() else grp.getgrnam(name).gr_gid
    except (KeyError, OverflowError):
        raise ParameterError(f"unknown group {name!r} (--group)") from None


def drop_privileges(user: str | None, group: str | None) -> None:
    """Run as ``user`` and ``group`` from now on (their ids or names).

    The group defaults to the user's; supplementary groups become the user's own
    (``initgroups``), or just the group when only a group is given.
    :raises DaemonError: when not running as root, or root could be regained.
    """
    if user is None and group is None:
        if os.geteuid() == 0:
            log.warning("running as root: give --user/--group (or \"user\"/\"group\" in "
                        "rapi.json) to drop privileges after start")
        return
    if os.geteuid() != 0:
        raise DaemonError(f"--user/--group need the daemon to start as root; it runs as "
                          f"uid {os.geteuid()}")
    entry = _lookup_user(user) if user is not None else None
    gid = _lookup_group(group) if group is not None else entry.pw_gid if entry else 0
    if entry is not None:
        os.initgroups(entry.pw_name, gid)
    else:
        os.setgroups([gid])
    os.setgid(gid)
    if entry is not None:
        os.setuid(entry.pw_uid)
        try:
            os.setuid(0)
        except PermissionError:
            pass
        else:
            raise DaemonError("dropping privileges failed: root could be regained")
    log.info("running as uid %d, gid %d", os.getuid(), os.getgid())


def _ssl_context(paths: Paths) -> ssl.SSLContext:
    """Serve with the node's certificate; clients authenticate with passwords, not
    certificates, so none is asked for."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(paths.node_cert, paths.node_key)
    except (OSError, ssl.SSLError) as err:
        raise DaemonError(f"cannot load the certificate {paths.node_cert} and key "
                          f"{paths.node_key}: {err}; is this node part of a cluster?") from None
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
        drop_privileges(settings.user, settings.group)
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
@click.option("--group", default=None, help="Run as this group after start (needs root).")
@click.option("-f", "--foreground", is_flag=True,
              help="Accepted for Ganeti compatibility; the daemon never forks itself.")
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
    sys.exit(run(Paths.from_env(), debug=debug, console=console, bind=bind, port=port,
                 no_ssl=no_ssl, require_authentication=require_authentication or None,
                 user=user, group=group))


if __name__ == "__main__":
    main()
