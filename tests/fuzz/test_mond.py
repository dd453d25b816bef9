"""Fuzzing the monitoring daemon's HTTP API (issue 18, deliverable 4).

``corral-mond`` answers Ganeti's monitoring API and Prometheus' ``/metrics`` over
plain HTTP to anyone on the network. Hypothesis sends it requests with random
methods, paths (the API's own and others, with odd escapes), query strings and
bodies; none may be a server error, and the daemon still reports afterwards.
"""

from __future__ import annotations

import contextlib
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import TestbedHandle
from tests.fuzz.conftest import examples

pytestmark = pytest.mark.integration

PATHS = ("/", "/1", "/1/list/collectors", "/1/report/all", "/1/report/storage/diskstats",
         "/1/report/instance/inst-status-xen", "/1/report/x/y", "/1/report/", "/metrics",
         "/2", "/1/report/%00/%ff", "//1/report/all", "/1/report/all?x=%zz",
         "/metrics?name[]=x")


def _request(address: tuple[str, int], data: bytes) -> bytes:
    """Send ``data``; the head of the answer (or what came before the close)."""
    with contextlib.closing(socket.create_connection(address, timeout=30)) as conn:
        conn.sendall(data)
        received = b""
        with contextlib.suppress(ConnectionError):
            while b"\r\n\r\n" not in received and (chunk := conn.recv(65536)):
                received += chunk
        return received


def test_http_requests(fuzz_testbed: TestbedHandle) -> None:
    """Random requests to mond get an HTTP answer that is not a server error."""
    node = fuzz_testbed.state["nodes"][1]
    address = (node["ip"], fuzz_testbed.state["ports"]["mond"])

    @examples(40)
    @given(method=st.sampled_from(["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "X"]),
           path=st.one_of(st.sampled_from(PATHS),
                          st.text(max_size=25).map(lambda t: "/1/report/" + t),
                          st.text(max_size=25).map(lambda t: "/" + t)),
           body=st.binary(max_size=40))
    def fuzz(method: str, path: str, body: bytes) -> None:
        line = f"{method} {path} HTTP/1.1".encode("utf-8", "surrogatepass")
        answer = _request(address, line + b"\r\nHost: x\r\nConnection: close\r\n"
                          + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        if not answer:
            return
        status = int(answer.split(b" ", 2)[1])
        assert status < 500, answer[:300]

    fuzz()
    answer = _request(address, b"GET /1/report/all HTTP/1.1\r\nHost: x\r\n"
                               b"Connection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
