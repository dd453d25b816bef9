"""Slow and idle clients cannot hold a worker (issue 18, deliverable 5).

On the fuzz testbed's master: a client that sends its request one byte at a time (to
luxi; to RAPI in its headers and in its body) stays connected while other clients get
their answers, request after request; so do a hundred idle connections to each.
Nothing here is timed: each check is that the other requests complete while the slow
or idle clients are still connected. That the daemons eventually drop a request that
never completes is tested with short timeouts in the unit tests of the luxi and RAPI
servers (tests/unit/test_luxi.py, tests/unit/test_rapi_server.py); here the daemons
run with their real timeouts (60 s), which the tests stay well inside.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import TestbedHandle
from tests.fuzz.luxi_wire import VALID, LuxiConnection, assert_serves
from tests.fuzz.rapi_wire import RapiTarget

pytestmark = pytest.mark.integration

#: How many requests other clients make while a slow client trickles its bytes.
ROUNDS = 5
IDLE = 100


class Rapi(RapiTarget):
    """The fuzz testbed's RAPI: its address, a session and raw TLS connections."""

    def get_info(self) -> None:
        """``GET /2/info`` answers."""
        response = self.session.get(self.url + "/2/info", verify=self.ca, timeout=60)
        assert response.status_code == 200, response.text
        assert response.json()["name"], response.text


@pytest.fixture
def rapi(fuzz_testbed: TestbedHandle) -> Iterator[Rapi]:
    """The fuzz testbed's RAPI."""
    target = Rapi(fuzz_testbed)
    yield target
    target.session.close()


def still_connected(sock: socket.socket) -> bool:
    """Whether the peer has neither answered nor closed ``sock`` (nothing to read)."""
    sock.setblocking(False)
    try:
        data = sock.recv(1)
    except (BlockingIOError, ssl.SSLWantReadError):
        return True
    finally:
        sock.setblocking(True)
    return False if not data else pytest.fail(f"the slow client got an answer: {data!r}")


def trickle(sock: socket.socket, data: bytes, others: Callable[[], None]) -> None:
    """Send ``data`` a byte at a time, letting ``others`` make a request between two
    bytes, :data:`ROUNDS` times; the slow connection stays open throughout."""
    for byte in data[:ROUNDS]:
        sock.sendall(bytes([byte]))
        others()
        assert still_connected(sock)


def test_slow_luxi_client(fuzz_testbed: TestbedHandle) -> None:
    """A luxi client sending its request byte by byte holds no one up."""
    path = fuzz_testbed.paths.master_socket
    with LuxiConnection(path) as slow, LuxiConnection(path) as other:
        def query() -> None:
            answer = other.call(VALID)
            assert answer is not None and answer["success"], answer

        trickle(slow.sock, VALID, query)
        slow.send(VALID[ROUNDS:])  # finishing the request gets it answered
        answer = slow.answer()
        assert answer is not None and answer["success"], answer


def test_slow_rapi_headers(rapi: Rapi) -> None:
    """A RAPI client sending its headers byte by byte holds no one up."""
    with contextlib.closing(rapi.connect()) as slow:
        trickle(slow, b"GET /2/info HTTP/1.1\r\nHost: x\r\n\r\n", rapi.get_info)


def test_slow_rapi_body(rapi: Rapi) -> None:
    """A RAPI client sending its body byte by byte holds no one up."""
    with contextlib.closing(rapi.connect()) as slow:
        slow.sendall(b"PUT /2/instances/slow.testbed/startup HTTP/1.1\r\nHost: x\r\n"
                     + rapi.auth + b"Content-Type: application/json\r\nContent-Length: 40\r\n\r\n")
        trickle(slow, b'{"dry_run": true, "no_remember": true}', rapi.get_info)


def test_idle_connections(fuzz_testbed: TestbedHandle, rapi: Rapi) -> None:
    """A hundred idle connections to luxi and to RAPI (handshake done) stay open while
    others are served, and every one of them is still served afterwards."""
    path: Path = fuzz_testbed.paths.master_socket
    with contextlib.ExitStack() as stack:
        idle_luxi = [stack.enter_context(LuxiConnection(path)) for _ in range(IDLE)]
        idle_rapi = [stack.enter_context(contextlib.closing(rapi.connect()))
                     for _ in range(IDLE)]
        for _ in range(ROUNDS):
            assert_serves(path)
            rapi.get_info()
        assert all(still_connected(conn.sock) for conn in idle_luxi)
        assert all(still_connected(conn) for conn in idle_rapi)
        for conn in idle_luxi[:: IDLE // 10]:
            answer = conn.call(VALID)
            assert answer is not None and answer["success"], answer
        for conn in idle_rapi[:: IDLE // 10]:
            conn.sendall(b"GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                         + rapi.auth + b"\r\n")
            assert conn.recv(4096).startswith(b"HTTP/1.1 200 "), "an idle RAPI client"
