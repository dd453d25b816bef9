"""The fuzz testbed's RAPI as the fuzz tests reach it: its URL and address, a session
as the write user, the Basic authorization header for hand-written requests, and raw
TLS connections (the counterpart of :mod:`tests.fuzz.luxi_wire`)."""

from __future__ import annotations

import base64
import socket
import ssl

import requests

from tests.conftest import TestbedHandle


class RapiTarget:
    """The testbed's RAPI daemon: ``url``, ``address``, ``ca``, a ``session`` and
    ``auth`` (an ``Authorization`` header line for raw requests)."""

    def __init__(self, testbed: TestbedHandle) -> None:
        info = testbed.state["rapi"]
        self.url: str = info["url"]
        host, port = self.url.removeprefix("https://").rsplit(":", 1)
        self.address = (host, int(port))
        self.ca: str = info["ca"]
        self.session = requests.Session()
        self.session.auth = (info["user"], info["password"])
        token = base64.b64encode(f"{info['user']}:{info['password']}".encode()).decode()
        self.auth = f"Authorization: Basic {token}\r\n".encode()

    def connect(self, timeout: float = 60.0) -> ssl.SSLSocket:
        """A TLS connection, handshake done, nothing sent."""
        context = ssl.create_default_context(cafile=self.ca)
        context.check_hostname = False
        return context.wrap_socket(socket.create_connection(self.address, timeout=timeout))
