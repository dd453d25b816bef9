"""OpenStack Placement itself, run locally: the reference the gabbi runner and the
placement benchmark compare corral's ``/placement/`` with.

:func:`ensure_installed` installs ``openstack-placement`` (16.x, the version the
placement issue names) into its OWN virtual environment under a cache directory
(``$CORRAL_PLACEMENT_REF`` or ``~/.cache/corral-placement-ref``), never into the
project's venv: Placement pins SQLAlchemy, oslo.* and webob versions corral has no use
for. :class:`ReferencePlacement` writes a ``placement.conf`` (SQLite file database,
``[api] auth_strategy = noauth2``: ``X-Auth-Token: admin`` is the admin, as in
Placement's own functional tests; the pre-RBAC policy defaults those tests run with),
syncs the schema with ``placement-manage db sync`` and serves the WSGI application
with a threading ``wsgiref`` server of that venv on ``127.0.0.1:<free port>``. The
server is this process's child, stopped by its pid::

    with ReferencePlacement(workdir) as ref:
        requests.get(ref.url + "/resource_providers",
                     headers={"x-auth-token": "admin"})

``python -m corral.testbed.placement_ref install`` installs it ahead of time;
``... serve DIR`` runs one in the foreground (Ctrl-C stops it).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from corral.errors import CorralError

__all__ = ["PLACEMENT_REQUIREMENT", "ReferencePlacement", "cache_dir", "ensure_installed",
           "installed_python"]

#: The reference the placement issue names: OpenStack Placement 16.
PLACEMENT_REQUIREMENT = "openstack-placement>=16,<17"

# The server the reference venv runs: Placement's WSGI application under the standard
# library's wsgiref with a thread per request (Placement is a plain WSGI app; production
# deployments put it under uwsgi or mod_wsgi, neither of which is needed to compare
# answers). Request logging is off: it would cost a write to stderr per request.
# With a prefix the application is mounted below it (SCRIPT_NAME), as a web server
# mounts Placement at /placement: its links then start with the prefix.
# wsgiref says ``text/plain`` for a request without a Content-Type; a real server says
# nothing, and Placement answers the two differently (basic-http.yaml checks it).
_SERVER = """
import socketserver, sys
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass

    def get_environ(self):
        env = super().get_environ()
        if self.headers.get("content-type") is None:
            env.pop("CONTENT_TYPE", None)
        return env

class Threading(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    request_queue_size = 64

from placement.wsgi.api import application

prefix = sys.argv[2]

def mounted(environ, start_response):
    path = environ.get("PATH_INFO", "")
    if prefix:
        if path != prefix and not path.startswith(prefix + "/"):
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found"]
        environ["SCRIPT_NAME"] = prefix
        environ["PATH_INFO"] = path[len(prefix):]
    return application(environ, start_response)

server = make_server("127.0.0.1", int(sys.argv[1]), mounted,
                     server_class=Threading, handler_class=Quiet)
print("serving", flush=True)
server.serve_forever()
"""

_CONF = """[DEFAULT]
debug = False
use_stderr = True

[api]
auth_strategy = noauth2

[placement_database]
connection = sqlite:///{db}

[oslo_policy]
enforce_new_defaults = False
enforce_scope = False
"""


def cache_dir() -> Path:
    """Where the reference venv lives (``$CORRAL_PLACEMENT_REF`` overrides it)."""
    env = os.environ.get("CORRAL_PLACEMENT_REF")
    return Path(env) if env else Path.home() / ".cache" / "corral-placement-ref"


def installed_python() -> Path | None:
    """The reference venv's python when Placement is installed in it, else None."""
    python = cache_dir() / "venv" / "bin" / "python"
    manage = cache_dir() / "venv" / "bin" / "placement-manage"
    return python if python.exists() and manage.exists() else None


def ensure_installed() -> Path:
    """Install Placement into its own venv (idempotent); its python."""
    python = installed_python()
    if python is not None:
        return python
    venv = cache_dir() / "venv"
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", PLACEMENT_REQUIREMENT],
                   check=True)
    python = installed_python()
    if python is None:
        raise CorralError(f"installing {PLACEMENT_REQUIREMENT} into {venv} left no "
                          "placement-manage")
    return python


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ReferencePlacement:
    """One Placement server with its own SQLite database in ``workdir``, at ``url``
    (below ``prefix``, e.g. ``/placement``, when one is given)."""

    def __init__(self, workdir: Path | None = None, *, port: int | None = None,
                 prefix: str = "") -> None:
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix=f"corral-placement-ref-{os.getpid()}-")
            workdir = Path(self._tmp.name)
        self.workdir = workdir
        self.port = port or free_port()
        self.prefix = prefix.rstrip("/")
        self.url = f"http://127.0.0.1:{self.port}{self.prefix}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> None:
        """Write the configuration, sync the schema, start the server, wait for it."""
        python = installed_python()
        if python is None:
            raise CorralError("OpenStack Placement is not installed: run "
                              "'python -m corral.testbed.placement_ref install'")
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "placement.conf"
        conf.write_text(_CONF.format(db=self.workdir / "placement.sqlite"))
        env = dict(os.environ, OS_PLACEMENT_CONFIG_DIR=str(self.workdir))
        env.pop("PYTHONPATH", None)
        bindir = python.parent
        subprocess.run([str(bindir / "placement-manage"), "--config-file", str(conf),
                        "db", "sync"], check=True, env=env, capture_output=True)
        log = open(self.workdir / "server.log", "wb")  # noqa: SIM115 - the child keeps it
        self.process = subprocess.Popen([str(python), "-c", _SERVER, str(self.port),
                                         self.prefix],
                                        env=env, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise CorralError("the reference Placement exited at start: "
                                  + (self.workdir / "server.log").read_text()[-2000:])
            try:
                with urllib.request.urlopen(self.url + "/", timeout=5) as response:
                    if response.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise CorralError(f"the reference Placement did not answer on {self.url} "
                                  f"within {timeout:.0f} s")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the server by its pid and reap it."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> ReferencePlacement:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``install`` | ``serve [DIR]`` (foreground, prints the URL)."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in ("install", "serve"):
        print("usage: python -m corral.testbed.placement_ref install | serve [DIR]",
              file=sys.stderr)
        return 2
    if args[0] == "install":
        print(ensure_installed())
        return 0
    ensure_installed()
    ref = ReferencePlacement(Path(args[1]) if len(args) > 1 else None)
    ref.start()
    print(ref.url, flush=True)
    try:
        while ref.process is not None and ref.process.poll() is None:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        ref.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
