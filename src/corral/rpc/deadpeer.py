"""Noticing a node that is cut off while a call to it is under way.

A node RPC has a timeout of its own, chosen for what the procedure does: a minute for
a quick call, five for starting an instance, an hour for an OS installation. A node
that drops off the network (a cable, a switch, a host that froze) sends no reset: on
its own, TCP retries until that timeout is up, so an installation would wait an hour
for a node that is gone. The master's RPC sockets therefore ask the kernel to give up
on a peer that acknowledges nothing for :func:`dead_peer_timeout` seconds
(``TCP_USER_TIMEOUT``), and to probe an idle connection, one whose request was sent
and whose answer is not due yet, every few seconds (TCP keep-alive): the node's
kernel answers the probes however long its procedure runs, so only a node that is
really unreachable is given up on. The call then fails with the node named as
unreachable, long before its own timeout.

``$CORRAL_RPC_DEAD_PEER_TIMEOUT`` (seconds) changes the limit for the processes
started with it; 0 turns the detection off.
"""

from __future__ import annotations

import os
import socket
from typing import Any

__all__ = ["DEAD_PEER_ENV", "DEFAULT_DEAD_PEER_TIMEOUT", "dead_peer_timeout", "rpc_socket"]

#: The environment variable that changes :data:`DEFAULT_DEAD_PEER_TIMEOUT`.
DEAD_PEER_ENV = "CORRAL_RPC_DEAD_PEER_TIMEOUT"
#: Seconds without any acknowledgement after which a node is given up on.
DEFAULT_DEAD_PEER_TIMEOUT = 15.0


def dead_peer_timeout() -> float:
    """The limit for this process: the environment's, else the default (0: off)."""
    text = os.environ.get(DEAD_PEER_ENV, "").strip()
    if not text:
        return DEFAULT_DEAD_PEER_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        return DEFAULT_DEAD_PEER_TIMEOUT
    return max(value, 0.0)


def rpc_socket(addr_info: tuple[Any, ...]) -> socket.socket:
    """A TCP socket for ``addr_info`` (one :func:`socket.getaddrinfo` entry) that
    gives up on a silent peer after :func:`dead_peer_timeout` seconds."""
    family, kind, proto = addr_info[0], addr_info[1], addr_info[2]
    sock = socket.socket(family, kind, proto)
    limit = dead_peer_timeout()
    if limit <= 0:
        return sock
    try:
        idle = max(1, int(limit / 3))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, idle)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(limit * 1000))
    except (OSError, AttributeError):  # a platform without these options: TCP's own
        pass
    return sock
