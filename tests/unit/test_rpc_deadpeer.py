"""The master's RPC sockets give up on a silent node (corral.rpc.deadpeer)."""

from __future__ import annotations

import socket

import pytest

from corral.rpc.deadpeer import (
    DEAD_PEER_ENV,
    DEFAULT_DEAD_PEER_TIMEOUT,
    dead_peer_timeout,
    rpc_socket,
)

_INFO = (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", 0))


def test_the_limit_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEAD_PEER_ENV, raising=False)
    assert dead_peer_timeout() == DEFAULT_DEAD_PEER_TIMEOUT
    monkeypatch.setenv(DEAD_PEER_ENV, "4.5")
    assert dead_peer_timeout() == 4.5
    monkeypatch.setenv(DEAD_PEER_ENV, "soon")  # not a number: the default
    assert dead_peer_timeout() == DEFAULT_DEAD_PEER_TIMEOUT
    monkeypatch.setenv(DEAD_PEER_ENV, "-1")
    assert dead_peer_timeout() == 0


def test_a_socket_probes_and_gives_up_after_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEAD_PEER_ENV, "6")
    with rpc_socket(_INFO) as sock:
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 6000
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 2
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 2


def test_zero_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DEAD_PEER_ENV, "0")
    with rpc_socket(_INFO) as sock:
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 0


def test_a_refused_certificate_names_the_clock() -> None:
    from corral.rpc.client import _reason

    alert = OSError("[SSL: TLSV13_ALERT_BAD_CERTIFICATE] tlsv13 alert bad certificate")
    assert "which it does when its clock is far off" in _reason(alert)
    assert _reason(OSError("something else")) == "something else"


def test_a_reset_during_the_handshake_names_the_clock_too() -> None:
    """With TLS 1.3 a node that refuses the certificate may reset the connection
    instead of sending its alert; the message still says what to look at."""
    import errno

    import aiohttp

    from corral.rpc.client import _reason

    reset = aiohttp.ClientOSError(errno.ECONNRESET, "Connection reset by peer")
    reason = _reason(reset)
    assert reason.startswith("Connection reset by peer")
    assert "which it does when its clock is far off" in reason
    other = aiohttp.ClientOSError(errno.EPIPE, "Broken pipe")
    assert "clock" not in _reason(other)
