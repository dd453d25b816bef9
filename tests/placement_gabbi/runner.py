"""Run OpenStack Placement's own gabbi API tests against a Placement endpoint.

The YAML files are NOT in this repository: :func:`gabbits_dir` downloads the
``openstack-placement`` 16.x wheel (``pip download --no-deps``) into a cache directory
the first time and unpacks its ``placement/tests/functional/gabbits/`` there. Each file
runs with gabbi, in this process, against ``--url``; the ``fixtures:`` it names are
re-made over REST by :mod:`tests.placement_gabbi.fixtures`, which first empties the
server.

    .venv/bin/python -m tests.placement_gabbi.runner --url http://127.0.0.1:8778 [FILE...]
    .venv/bin/python -m tests.placement_gabbi.runner --reference          # Placement itself
    .venv/bin/python -m tests.placement_gabbi.runner --testbed DIR        # corral's testbed

A testbed for ``--testbed`` is started with ``CORRAL_PLACEMENT_CLUSTER=off`` in its
environment, so that its master daemon leaves the cluster's nodes and instances out of
``/placement/`` (the files expect a server holding only what their fixtures make).

With ``--testbed`` (and in the pytest entry) the tokens the YAML sends are given to
users of the master's RAPI users file for the run (:func:`corral_tokens`): ``admin`` and
``admin:admin`` to a user with ``write``, ``user`` to one without rights, which is what
they are under Placement's ``noauth2`` and default policy.

Without files it runs :data:`CHOSEN`. It prints one line per file (passed, failed,
skipped tests) and, with ``-v``, each failure.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import types
import unittest
import urllib.parse
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import ply.yacc
import urllib3
from gabbi import handlers, httpclient, json_parser, suitemaker, utils

from corral.paths import Paths
from corral.rapi.users import placement_token_option
from corral.testbed.placement_ref import PLACEMENT_REQUIREMENT, cache_dir
from corral.utils.process import running_pid
from tests.placement_gabbi import fixtures
from tests.placement_gabbi.fixtures import PlacementClient

__all__ = ["CHOSEN", "CORRAL_PASSING", "LEFT_OUT", "FileResult", "corral_tokens", "gabbits_dir",
           "run_file", "run_files"]

#: The files the runner runs by default: those of the features corral's /placement/
#: serves (providers, inventories, traits, aggregates, resource classes, allocations,
#: usages, allocation candidates with member_of and granular groups, reshaper).
CHOSEN: tuple[str, ...] = (
    "aggregate.yaml",
    "allocation-bad-class.yaml",
    "allocation-candidates.yaml",
    "allocation-candidates-any-traits.yaml",
    "allocation-candidates-any-traits-groups.yaml",
    "allocation-candidates-bug-1792503.yaml",
    "allocation-candidates-mappings-numa.yaml",
    "allocation-candidates-mappings-sharing.yaml",
    "allocation-candidates-member-of.yaml",
    "allocation-candidates-root-required.yaml",
    "allocations.yaml",
    "allocations-1-8.yaml",
    "allocations-1-12.yaml",
    "allocations-1.28.yaml",
    "allocations-bug-1714072.yaml",
    "allocations-bug-1778591.yaml",
    "allocations-bug-1778743.yaml",
    "allocations-bug-1779717.yaml",
    "allocations-mappings.yaml",
    "allocations-post.yaml",
    "basic-http.yaml",
    "bug-1674694.yaml",
    "confirm-auth.yaml",
    "consumer-types-1.38.yaml",
    "consumer-types-bug-story-2009167.yaml",
    "ensure-consumer.yaml",
    "granular.yaml",
    "granular-same-subtree.yaml",
    "inventory.yaml",
    "microversion.yaml",
    "microversion-bug-1724065.yaml",
    "non-cors.yaml",
    "reshaper.yaml",
    "resource-class-in-use.yaml",
    "resource-classes.yaml",
    "resource-classes-1-6.yaml",
    "resource-classes-1-7.yaml",
    "resource-classes-last-modified.yaml",
    "resource-provider.yaml",
    "resource-provider-aggregates.yaml",
    "resource-provider-any-traits.yaml",
    "resource-provider-bug-1779818.yaml",
    "resource-provider-duplication.yaml",
    "resource-provider-links.yaml",
    "resource-provider-resources-query.yaml",
    "same-subtree-deep.yaml",
    "shared-resources.yaml",
    "traits.yaml",
    "unicode.yaml",
    "usage.yaml",
    "with-allocations.yaml",
)

#: The files of :data:`CHOSEN` that pass on corral's /placement/ (testbed of the
#: pytest entry, tests/placement_gabbi/test_gabbi.py); refresh with
#: ``python -m tests.placement_gabbi.runner --testbed DIR`` as the server grows.
CORRAL_PASSING: tuple[str, ...] = tuple(
    name for name in CHOSEN if name not in (
        # The malformed Content-Length is refused by the HTTP server (aiohttp) before
        # /placement/ sees it, with the server's own 400 text.
        "basic-http.yaml",
        # "non admin forbidden": a user without rights reads with 200 on corral (every
        # authenticated RAPI user may read), where Placement's policy says 403.
        "resource-classes.yaml",
        "resource-provider.yaml",
    ))

#: Files of the wheel the runner leaves out, and why.
LEFT_OUT: Mapping[str, str] = {
    "cors.yaml": "needs the server configured with a CORS origin (oslo.middleware "
                 "option), not an API feature",
    **{f"{area}-policy.yaml": "opens every policy rule to non-admins inside Placement's "
                              "process (oslo.policy), which no REST call can do"
       for area in ("aggregate", "allocation-candidates", "allocations", "inventory",
                    "reshaper", "resource-classes", "resource-provider", "traits",
                    "usage")},
    **{f"{area}-{kind}-rbac.yaml": "Keystone roles and scopes (X-Roles, system scope) "
                                   "under oslo.policy's RBAC defaults: corral "
                                   "authorises by its RAPI users, not Keystone roles"
       for area in ("aggregate", "allocation-candidates", "allocations", "inventory",
                    "reshaper", "resource-classes", "resource-provider", "traits",
                    "usage")
       for kind in ("legacy", "secure")},
}


# gabbi parses each JSONPath of a response check with jsonpath_rw, which rebuilds its
# PLY parser tables on every parse (ply.yacc.yacc with write_tables=0): 0.05-0.1 s per
# check, most of a file's run time. While a file runs, the tables are built once per
# grammar object (gabbi keeps one parser object), and a parsed expression, which
# evaluating does not change, is kept per string.
json_parser.parse = functools.lru_cache(maxsize=4096)(json_parser.parse)
_YACC = ply.yacc.yacc


@functools.cache
def _yacc_once(module: object, start: str) -> Any:
    return _YACC(module=module, start=start, debug=False, write_tables=0,
                 errorlog=ply.yacc.NullLogger())


def _cached_yacc(*args: Any, **kwargs: Any) -> Any:
    if args or "module" not in kwargs or "start" not in kwargs:
        return _YACC(*args, **kwargs)
    return _yacc_once(kwargs["module"], kwargs["start"])


class _KeptAlive(httpclient.Http):  # type: ignore[misc]
    """gabbi's client without its ``clear()`` after every request, so the tests of a
    file share kept-alive connections instead of a TCP and TLS handshake each."""

    def clear(self) -> None:
        """Keep the pools (:func:`_fast_gabbi` clears them at the end)."""


@contextlib.contextmanager
def _fast_gabbi(ca: str | None) -> Iterator[None]:
    """PLY tables built once; gabbi's HTTPS checks against ``ca`` (a one-certificate
    file) rather than loading certifi's whole bundle for every test's connection; one
    client per kind of test (non-verbose ones) for the whole file."""
    clients: dict[tuple[Any, ...], _KeptAlive] = {}
    real_get_http = httpclient.get_http

    def get_http(verbose: Any = False, caption: str = "", cert_validate: bool = True,
                 hostname: str | None = None, timeout: int = 30) -> Any:
        if verbose:
            return real_get_http(verbose=verbose, caption=caption,
                                 cert_validate=cert_validate, hostname=hostname,
                                 timeout=timeout)
        key = (cert_validate, hostname, timeout)
        if key not in clients:
            clients[key] = _KeptAlive(strict=True, ca_certs=ca or httpclient.certifi.where(),
                                      server_hostname=hostname, timeout=timeout,
                                      **({} if cert_validate else {"cert_reqs": "CERT_NONE"}))
        return clients[key]

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(ply.yacc, "yacc", _cached_yacc))
        stack.enter_context(mock.patch.object(httpclient, "get_http", get_http))
        try:
            yield
        finally:
            for client in clients.values():
                urllib3.PoolManager.clear(client)


def _wheel_dir() -> Path:
    return cache_dir() / "wheel"


def gabbits_dir() -> Path:
    """The unpacked gabbi files of the Placement 16 wheel (downloaded once)."""
    target = cache_dir() / "gabbits"
    if (target / "microversion.yaml").exists():
        return target
    wheels = _wheel_dir()
    wheels.mkdir(parents=True, exist_ok=True)
    if not list(wheels.glob("openstack_placement-*.whl")):
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--only-binary", ":all:", "-d", str(wheels), PLACEMENT_REQUIREMENT],
                       check=True)
    wheel = sorted(wheels.glob("openstack_placement-*.whl"))[-1]
    prefix = "placement/tests/functional/gabbits/"
    partial = target.with_name("gabbits.partial")
    partial.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith(prefix) and name.endswith(".yaml"):
                (partial / name[len(prefix):]).write_bytes(archive.read(name))
    partial.rename(target)
    return target


@dataclass
class FileResult:
    """What one gabbi file did: counts and, per failed test, its name and message."""

    name: str
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    expected_failures: int = 0
    seconds: float = 0.0
    failures: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every test passed (skips by the file's own ``skip:`` and xfails included)."""
        return self.failed == 0 and self.passed > 0

    def line(self) -> str:
        """One summary line."""
        status = "PASS" if self.ok else "FAIL"
        extra = f", {self.expected_failures} xfail" if self.expected_failures else ""
        return (f"{status} {self.name}: {self.passed} passed, {self.failed} failed, "
                f"{self.skipped} skipped{extra} ({self.seconds:.1f} s)")


class _Result(unittest.TestResult):
    def __init__(self, file_result: FileResult) -> None:
        super().__init__()
        self.file_result = file_result

    def addSuccess(self, test: unittest.TestCase) -> None:
        self.file_result.passed += 1

    def addFailure(self, test: unittest.TestCase, err: object) -> None:
        super().addFailure(test, err)  # type: ignore[arg-type]
        self.file_result.failed += 1
        self.file_result.failures.append((test.id(), self.failures[-1][1]))

    def addError(self, test: unittest.TestCase, err: object) -> None:
        super().addError(test, err)  # type: ignore[arg-type]
        self.file_result.failed += 1
        self.file_result.failures.append((test.id(), self.errors[-1][1]))

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        self.file_result.skipped += 1

    def addExpectedFailure(self, test: unittest.TestCase, err: object) -> None:
        self.file_result.expected_failures += 1

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
        self.file_result.failed += 1
        self.file_result.failures.append((test.id(), "unexpected success of an xfail test"))


@contextlib.contextmanager
def _environment() -> Iterator[None]:
    """Put back os.environ as it was (the fixtures export their identifiers there)."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _mount_links(data: dict[str, Any], prefix: str) -> None:
    """Expect links below the mount point: the files were written for Placement at the
    root of its URL space; a Placement mounted at ``prefix`` (SCRIPT_NAME) answers
    ``prefix + href`` in every ``links[].href``, as corral at ``/placement`` does.
    (Checked on Placement itself: ``--reference --prefix /placement``.)"""
    for test in data.get("tests", []):
        paths = test.get("response_json_paths")
        if not isinstance(paths, dict):
            continue
        for key, value in paths.items():
            if key.endswith(".href") and isinstance(value, str) and value.startswith("/"):
                paths[key] = prefix + value


def run_file(path: Path, client: PlacementClient) -> FileResult:
    """Run one gabbi file against ``client``'s server."""
    result = FileResult(path.name)
    started = time.monotonic()
    url = urllib.parse.urlsplit(client.url)
    port = url.port or (443 if url.scheme == "https" else 80)
    with path.open() as handle:
        data = utils.load_yaml(handle)
    defaults = data.setdefault("defaults", {})
    if url.scheme == "https":
        defaults["ssl"] = True
        defaults["cert_validate"] = client.verify or client.ca is not None
    # Extra headers (e.g. corral's HTTP basic credentials) come first, so that a
    # test's own headers (a missing or different x-auth-token) still win.
    if client.headers:
        defaults["request_headers"] = {**client.headers,
                                       **(defaults.get("request_headers") or {})}
    prefix = url.path.rstrip("/")
    if prefix:
        _mount_links(data, prefix)
    fixtures.configure(client)
    module = types.SimpleNamespace(**fixtures.FIXTURES)
    handler_objects = [handler() for handler in handlers.RESPONSE_HANDLERS]
    with _environment(), _fast_gabbi(client.ca):
        suite = suitemaker.test_suite_from_dict(
            unittest.defaultTestLoader, path.stem.replace("-", "_").replace(".", "_"),
            data, str(path.parent), url.hostname, port, module, None,
            prefix=prefix, handlers=handler_objects,
            test_loader_name="placement_gabbi")
        with contextlib.redirect_stdout(io.StringIO()):
            suite.run(_Result(result))
    result.seconds = time.monotonic() - started
    return result


def run_files(names: Sequence[str], client: PlacementClient,
              out: io.TextIOBase | None = None, verbose: bool = False) -> list[FileResult]:
    """Run the named files of the wheel in turn, printing a line per file to ``out``."""
    directory = gabbits_dir()
    results = []
    for name in names:
        res = run_file(directory / name, client)
        results.append(res)
        if out is not None:
            print(res.line(), file=out, flush=True)
            if verbose:
                for test, message in res.failures:
                    print(f"  {test}\n    " + message.strip().replace("\n", "\n    ")[-1500:],
                          file=out)
    return results


@contextlib.contextmanager
def corral_tokens(testbed_dir: Path) -> Iterator[PlacementClient]:
    """For the testbed in ``testbed_dir``: its /placement/ client, the YAML's tokens
    valid meanwhile (users added to the master's users file, which is put back after)."""
    state = json.loads((testbed_dir / "testbed.json").read_text())
    paths = Paths(Path(state["env"]["CORRAL_ROOT"]))
    users = paths.rapi_users
    saved = users.read_text()
    admin_options = ",".join(["write", placement_token_option("admin"),
                              placement_token_option("admin:admin")])
    lines = [f"gabbi-admin {secrets.token_hex(16)} {admin_options}",
             f"gabbi-user {secrets.token_hex(16)} {placement_token_option('user')}"]

    def reread() -> None:
        pid = running_pid(paths.pid_file("rapi"))
        if pid is None:
            raise fixtures.FixtureError("the testbed's RAPI daemon is not running")
        os.kill(pid, signal.SIGHUP)

    client = PlacementClient(state["rapi"]["url"] + "/placement", ca=state["rapi"]["ca"])
    try:
        users.write_text(saved.rstrip("\n") + "\n" + "\n".join(lines) + "\n")
        reread()
        deadline = time.monotonic() + 30
        while True:  # the daemon reads the file when it handles the signal
            try:
                client.call("GET", "/resource_providers")
                break
            except fixtures.FixtureError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield client
    finally:
        users.write_text(saved)
        reread()


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="the Placement endpoint, e.g. "
                        "https://127.0.1.1:5080/placement")
    target.add_argument("--reference", action="store_true",
                        help="start OpenStack Placement 16 locally and run against it")
    target.add_argument("--testbed", type=Path,
                        help="a running corral testbed's directory")
    parser.add_argument("--prefix", default="",
                        help="with --reference: mount Placement below this path")
    parser.add_argument("--header", action="append", default=[],
                        help="NAME:VALUE sent with every request (e.g. authorization)")
    parser.add_argument("--insecure", action="store_true",
                        help="do not verify the server's TLS certificate")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("files", nargs="*", help="gabbi file names (default: CHOSEN)")
    args = parser.parse_args(argv)
    headers = dict(h.split(":", 1) for h in args.header)
    names = args.files or list(CHOSEN)
    with contextlib.ExitStack() as stack:
        if args.testbed:
            client = stack.enter_context(corral_tokens(args.testbed))
            client.headers.update(headers)
        else:
            if args.reference:
                from corral.testbed.placement_ref import ReferencePlacement, ensure_installed
                ensure_installed()
                url = stack.enter_context(ReferencePlacement(prefix=args.prefix)).url
            else:
                url = args.url
            client = PlacementClient(url, headers, verify=not args.insecure)
        results = run_files(names, client, sys.stdout, args.verbose)  # type: ignore[arg-type]
    passed = [r.name for r in results if r.ok]
    print(f"{len(passed)}/{len(results)} files pass")
    return 0 if len(passed) == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
