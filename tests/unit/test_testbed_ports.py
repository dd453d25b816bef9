"""The testbed's ports: one port per service, free at every node's address."""

from __future__ import annotations

import re
import socket

import pytest

from corral.errors import DaemonError
from corral.testbed import core


def test_a_port_in_use_at_a_node_address_is_not_free() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.1.2", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert not core._bindable("127.0.1.2", port, socket.SOCK_STREAM)
        assert core._bindable("127.0.1.3", port, socket.SOCK_STREAM)
    assert core._bindable("127.0.1.2", port, socket.SOCK_STREAM)


def test_an_address_of_another_network_is_not_checked() -> None:
    # 192.0.2.0/24 (TEST-NET-1) is on no interface here: a node inside a namespace.
    assert core._bindable("192.0.2.7", 1, socket.SOCK_STREAM)


def test_the_chosen_port_is_free_everywhere_and_not_taken_already() -> None:
    hosts = ["127.0.1.1", "127.0.1.2", "127.0.1.3"]
    chosen: list[int] = []
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_STREAM):
        port = core._free_port(hosts, kind, taken=chosen)
        assert port not in chosen
        assert all(core._bindable(host, port, kind) for host in hosts)
        chosen.append(port)


def test_no_free_port_is_an_error_naming_the_addresses(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    monkeypatch.setattr(core, "_bindable", lambda host, port, kind: False)
    with pytest.raises(DaemonError, match=re.escape("127.0.1.1, 127.0.1.2 in 3 tries")):
        core._free_port(["127.0.1.1", "127.0.1.2"], socket.SOCK_STREAM, attempts=3)
