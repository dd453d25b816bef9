"""Fuzzing RAPI below and above schemathesis (issue 18, deliverable 4).

``tests/integration/test_rapi_clients.py`` runs schemathesis over every documented
operation. This module adds what a schema cannot generate:

* **raw HTTP**: request lines, methods, paths, headers and bodies that are not HTTP
  or not what they claim (wrong lengths, broken chunked encoding, bad percent
  escapes, non-UTF-8, oversized headers), sent over TLS by hand; each gets an HTTP
  answer that is not a server error (or the connection closed), and RAPI then still
  answers;
* **stateful sequences** (a Hypothesis state machine): create, modify, start, stop,
  rename and remove instances in random orders, with valid and invalid parameters,
  through RAPI as a client would, each job followed to its end; after every step the
  instances RAPI lists are exactly those the model expects, in the expected state.
"""

from __future__ import annotations

import contextlib
import ssl
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from tests.conftest import TestbedHandle
from tests.fuzz.conftest import examples, scale
from tests.fuzz.rapi_wire import RapiTarget

pytestmark = pytest.mark.integration

PREFIX = "fz-sm-"
NODES = ("node1.testbed", "node2.testbed", "node3.testbed")
FINAL = ("success", "error", "canceled")


class Rapi(RapiTarget):
    """The fuzz testbed's RAPI as the write user."""

    def request(self, method: str, path: str, body: Any = None) -> requests.Response:
        """One request; a server error fails the test."""
        response = self.session.request(method, self.url + path, json=body,
                                        verify=self.ca, timeout=60)
        assert response.status_code < 500, (method, path, response.status_code,
                                            response.text[:300])
        return response

    def job(self, method: str, path: str, body: Any = None) -> str | None:
        """Submit a job; its final status, or None when RAPI refused it (4xx)."""
        response = self.request(method, path, body)
        if response.status_code != 200:
            error = response.json()
            assert {"code", "message", "explain"} <= set(error), error
            return None
        job_id = response.json()
        deadline = time.monotonic() + 120
        while True:
            status = self.request("GET", f"/2/jobs/{job_id}").json()["status"]
            if status in FINAL:
                return str(status)
            assert time.monotonic() < deadline, f"job {job_id} ({method} {path}) hangs"
            time.sleep(0.02)

    def raw(self, data: bytes) -> bytes:
        """Send ``data`` on a new TLS connection; the head of the first answer, or what
        came before the server closed. When no answer has come after a moment (the
        request announced more body than it has), bytes that end a chunked body or
        fill a short one are sent; if the server still waits for more (a body it
        cannot parse to its end, which its body timeout answers later), ``b""``."""
        with contextlib.closing(self.connect(timeout=30)) as conn:
            received = b""
            with contextlib.suppress(ConnectionError, ssl.SSLError, TimeoutError):
                conn.sendall(data)
                conn.settimeout(0.3)
                try:
                    received = conn.recv(65536)
                except TimeoutError:  # waiting for the rest of a body
                    conn.sendall(b"0\r\n\r\n" + b" " * 16)
                    conn.settimeout(2)
                while b"\r\n\r\n" not in received and (chunk := conn.recv(65536)):
                    received += chunk
            return received

    def assert_serves(self) -> None:
        """``GET /2/info`` answers."""
        assert self.request("GET", "/2/info").status_code == 200


@pytest.fixture
def rapi(fuzz_testbed: TestbedHandle) -> Iterator[Rapi]:
    """The fuzz testbed's RAPI."""
    target = Rapi(fuzz_testbed)
    yield target
    target.session.close()


# -- raw HTTP ----------------------------------------------------------------------------

tokens = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=10)
methods = st.sampled_from(["GET", "PUT", "POST", "DELETE", "HEAD", "OPTIONS", "PATCH",
                           "CONNECT", "TRACE", "get", ""]) | tokens
paths = st.one_of(
    st.sampled_from(["/", "/2/info", "/2/instances", "/2/instances/x/modify", "/2/jobs/1",
                     "/2/jobs/99999999999999999999999", "/2/query/instance", "/version",
                     "*", "http://x/2/info", "/2/instances/%zz", "/2/instances/%00",
                     "/2/instances/%ff%fe", "/2/../2/info", "//2/info", "/2/info?bulk=x",
                     "/2/instances?bulk=1&bulk=0", "/2/info#frag"]),
    st.text(max_size=30).map(lambda t: "/" + t))
versions = st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/9", "HTTP/1.1x", ""])
header_lines = st.lists(st.one_of(
    st.sampled_from([b"Content-Type: application/json", b"Content-Type: text/plain",
                     b"Content-Length: 5", b"Content-Length: -1", b"Content-Length: x",
                     b"Content-Length: 99999999999999999999", b"Transfer-Encoding: chunked",
                     b"Transfer-Encoding: gzip, chunked", b"Expect: 100-continue",
                     b"Connection: close", b"Authorization: Basic !!!",
                     b"Authorization: Bearer x", b"Host:", b"X: " + b"a" * 9000,
                     b"Bad Header", b": empty", b"Content-Encoding: gzip"]),
    st.tuples(tokens, st.binary(max_size=20)).map(lambda t: t[0].encode() + b": " + t[1]),
), max_size=5)
bodies = st.one_of(st.binary(max_size=60), st.sampled_from([
    b"0\r\n\r\n", b"zz\r\nabc\r\n0\r\n\r\n", b"5\r\n{}\r\n", b'{"a": 1}', b"[" * 500,
    b'{"__version__": 1, "name": "\xff"}']))


def _raw_request(method: str, path: str, version: str, headers: list[bytes], auth: bool,
                 body: bytes, auth_line: bytes) -> bytes:
    line = f"{method} {path} {version}".strip().encode("utf-8", "surrogatepass")
    head = line + b"\r\nHost: fuzz\r\n" + (auth_line if auth else b"")
    return head + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body


def test_raw_http(rapi: Rapi) -> None:
    """Malformed HTTP gets a client error or a closed connection, never a server error
    (501, Ganeti's answer to a method a resource lacks, is allowed); RAPI serves on."""
    @examples(80)
    @given(method=methods, path=paths, version=versions, headers=header_lines,
           auth=st.booleans(), body=bodies)
    def fuzz(method: str, path: str, version: str, headers: list[bytes], auth: bool,
             body: bytes) -> None:
        answer = rapi.raw(_raw_request(method, path, version, headers, auth, body,
                                       rapi.auth))
        statuses[answer.split(b" ", 2)[1] if answer else b"closed"] += 1
        if not answer:
            return  # closed without a word: allowed for what is not HTTP
        status_line = answer.split(b"\r\n", 1)[0]
        assert status_line.startswith(b"HTTP/"), answer[:200]  # aiohttp echoes the version
        status = int(status_line.split()[1])
        assert status < 500 or status == 501, answer[:400]

    statuses: Counter[bytes] = Counter()
    fuzz()
    # Not every request was refused before the dispatcher: some reached the routes.
    assert set(statuses) - {b"400", b"closed"}, statuses
    rapi.assert_serves()


# -- stateful sequences ------------------------------------------------------------------

names = st.integers(0, 5).map(lambda i: f"{PREFIX}{i}.testbed")
maxmem = st.one_of(st.integers(32, 256), st.sampled_from([0, -1, "128", "128M", "abc", None,
                                                          2**70, 1.5, True]))


class InstanceLifecycle(RuleBasedStateMachine):
    """A model of the instances this machine made: name -> (running, maxmem)."""

    rapi: Rapi  # set by the test before the machine runs

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[str, dict[str, Any]] = {}

    created = Bundle("created")

    @initialize()
    def clean(self) -> None:
        """Start from no instance of this machine (a previous run may have left some)."""
        for name in _listed(self.rapi):
            assert self.rapi.job("DELETE", f"/2/instances/{name}") == "success"

    @rule(target=created, name=names, node=st.sampled_from(NODES),
          memory=st.integers(32, 128))
    def create(self, name: str, node: str, memory: int) -> str:
        """Create; a name already taken fails (refused or the job ends in error)."""
        status = self.rapi.job("POST", "/2/instances", {
            "__version__": 1, "mode": "create", "name": name, "disk_template": "diskless",
            "disks": [], "nics": [{}], "os": "corral-ext4+default", "pnode": node,
            "no_install": True, "start": False, "name_check": False, "ip_check": False,
            "beparams": {"maxmem": memory, "minmem": memory}})
        if name in self.model:
            assert status != "success", f"{name} created twice"
        else:
            assert status == "success", f"creating {name}: {status}"
            self.model[name] = {"running": False, "maxmem": memory}
        return name

    @rule(name=st.one_of(created, names), memory=maxmem)
    def modify(self, name: str, memory: Any) -> None:
        """Change maxmem (minmem along when valid); invalid values are refused."""
        status = self.rapi.job("PUT", f"/2/instances/{name}/modify",
                               {"beparams": {"maxmem": memory, "minmem": memory}})
        valid = (name in self.model and type(memory) is int and 32 <= memory <= 256
                 and not self.model[name]["running"])
        if status == "success":
            assert name in self.model, f"modified {name}, which does not exist"
            if type(memory) is int:
                self.model[name]["maxmem"] = memory
            else:  # Ganeti's lenient forms ("128", "128M"), converted in the job
                self.model[name]["maxmem"] = _read(self.rapi, name)["beparams"]["maxmem"]
        elif valid:
            pytest.fail(f"modifying {name} to {memory!r}: {status}")

    @rule(name=st.one_of(created, names))
    def startup(self, name: str) -> None:
        """Start; only an existing instance starts."""
        status = self.rapi.job("PUT", f"/2/instances/{name}/startup")
        assert (status == "success") == (name in self.model), (name, status)
        if name in self.model:
            self.model[name]["running"] = True

    @rule(name=st.one_of(created, names))
    def shutdown(self, name: str) -> None:
        """Stop; only an existing instance stops."""
        status = self.rapi.job("PUT", f"/2/instances/{name}/shutdown", {"timeout": 0})
        assert (status == "success") == (name in self.model), (name, status)
        if name in self.model:
            self.model[name]["running"] = False

    @rule(name=consumes(created), new=names)
    def rename(self, name: str, new: str) -> None:
        """Rename a stopped instance to a free name; others fail."""
        status = self.rapi.job("PUT", f"/2/instances/{name}/rename",
                               {"new_name": new, "name_check": False, "ip_check": False})
        possible = (name in self.model and new not in self.model
                    and not self.model[name]["running"])
        if status == "success":
            assert name in self.model and (new not in self.model or new == name)
            self.model[new] = self.model.pop(name)
        else:
            assert not possible, f"renaming {name} to {new}: {status}"

    @rule(name=st.one_of(consumes(created), names))
    def remove(self, name: str) -> None:
        """Remove; a missing instance is an error."""
        status = self.rapi.job("DELETE", f"/2/instances/{name}")
        assert (status == "success") == (name in self.model), (name, status)
        self.model.pop(name, None)

    @invariant()
    def listed_as_modelled(self) -> None:
        """RAPI lists exactly the modelled instances, in the modelled state."""
        rows = {row["name"]: row for row in
                self.rapi.request("GET", "/2/instances?bulk=1").json()
                if row["name"].startswith(PREFIX)}
        assert set(rows) == set(self.model), (sorted(rows), sorted(self.model))
        for name, want in self.model.items():
            assert rows[name]["admin_state"] == ("up" if want["running"] else "down"), name
            assert rows[name]["beparams"]["maxmem"] == want["maxmem"], rows[name]["beparams"]

    def teardown(self) -> None:
        for name in _listed(self.rapi):
            self.rapi.job("DELETE", f"/2/instances/{name}")


def _listed(rapi: Rapi) -> list[str]:
    rows = rapi.request("GET", "/2/instances").json()
    return [row["id"] for row in rows if row["id"].startswith(PREFIX)]


def _read(rapi: Rapi, name: str) -> dict[str, Any]:
    result: dict[str, Any] = rapi.request("GET", f"/2/instances/{name}").json()
    return result


def test_instance_lifecycle_sequences(rapi: Rapi) -> None:
    """Create, modify, start, stop, rename and remove in random orders: RAPI's view
    matches the model after every step, and no step is a server error."""
    InstanceLifecycle.rapi = rapi
    settings = examples(4)
    settings = type(settings)(settings, stateful_step_count=max(4, round(12 * min(scale(), 5))))
    run_state_machine_as_test(InstanceLifecycle, settings=settings)
    rapi.assert_serves()
