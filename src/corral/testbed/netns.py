"""A private network for testbed nodes, some of them in network namespaces.

A :class:`NodeNetwork` is a Linux bridge in the root namespace with a /24 of its own
(``10.X.Y.0/24``, chosen free of the host's routes). Node *i* has the address
``10.X.Y.(10+i)``: on the bridge itself for a node that runs in the root namespace,
or inside a namespace of its own joined to the bridge by a veth pair for an
*isolated* node. Every node reaches every other one and the test process reaches
them all (the route to the /24 goes through the bridge, never the default route).

An isolated node can be cut off (:meth:`NodeNetwork.cut`: the bridge side of its
veth goes down, so its packets are lost, as when a cable is pulled: no refusal, no
reset) and joined again (:meth:`NodeNetwork.heal`). Its daemons are started through
:meth:`NodeNetwork.launcher` (``ip netns exec``), so every process they start later
(confd on a new candidate, the master daemon after a failover) lives there too.

Names carry a prefix and the pid of the process that made them, so networks of
concurrent test runs never meet; :meth:`NodeNetwork.destroy` removes the bridge, the
veths and the namespaces, whatever state they are in.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Collection
from dataclasses import dataclass, field

__all__ = ["NodeNetwork", "netns_available"]

_IP = "ip"


def netns_available() -> str | None:
    """Why namespaced test networks cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces, veth pairs and bridges need root"
    if shutil.which(_IP) is None:
        return "no ip command (iproute2)"
    return None


def _ip(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([_IP, *argv], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise OSError(f"ip {' '.join(argv)} failed: {result.stderr.strip()}")
    return result


def _used_subnets() -> set[str]:
    """The ``10.X.Y`` prefixes the host's addresses and routes already use."""
    text = _ip("-4", "route", "show", "table", "all").stdout + _ip("-4", "addr").stdout
    used = set()
    for word in text.split():
        if word.startswith("10."):
            parts = word.split("/")[0].split(".")
            if len(parts) == 4:
                used.add(".".join(parts[:3]))
    return used


@dataclass
class NodeNetwork:
    """The bridge, namespaces and veths of one testbed's private network."""

    prefix: str
    subnet: str
    """``10.X.Y``: node *i* is ``10.X.Y.(10+i)``, the bridge ``10.X.Y.1``."""
    isolated: frozenset[int]
    """The nodes (1-based) that run in a namespace of their own."""
    nodes: int
    made: list[str] = field(default_factory=list)
    """What exists, for :meth:`destroy`: ``bridge NAME``, ``netns NAME``."""

    @classmethod
    def create(cls, nodes: int, isolated: Collection[int], *, prefix: str = "cnet"
               ) -> NodeNetwork:
        """Make the network for ``nodes`` nodes, ``isolated`` ones in namespaces.

        ``prefix`` (at most 5 characters) and this process's pid name everything; on
        failure whatever was made is removed before the error is raised.
        """
        if len(prefix) > 5:
            raise ValueError(f"network prefix {prefix!r} is longer than 5 characters")
        bad = [i for i in isolated if not 1 <= i <= nodes]
        if bad:
            raise ValueError(f"isolated nodes {bad} are not among nodes 1..{nodes}")
        pid = os.getpid()
        used = _used_subnets()
        start = pid % 4096
        subnet = next(
            s for k in range(4096)
            if (s := f"10.{200 + (start + k) // 256 % 50}.{(start + k) % 256}") not in used)
        network = cls(prefix=f"{prefix}{pid}", subnet=subnet,
                      isolated=frozenset(isolated), nodes=nodes)
        try:
            network._build()
        except BaseException:
            network.destroy()
            raise
        return network

    @property
    def bridge(self) -> str:
        """The bridge's interface name."""
        return f"{self.prefix}b"

    def namespace(self, node: int) -> str:
        """The namespace of isolated node ``node``."""
        return f"{self.prefix}n{node}"

    def host_veth(self, node: int) -> str:
        """The bridge side of isolated node ``node``'s veth pair."""
        return f"{self.prefix}h{node}"

    def address(self, node: int) -> str:
        """Node ``node``'s (1-based) address."""
        return f"{self.subnet}.{10 + node}"

    def addresses(self) -> list[str]:
        """Every node's address, node 1 first."""
        return [self.address(i) for i in range(1, self.nodes + 1)]

    def launcher(self, node: int) -> list[str]:
        """The command prefix that runs a program where node ``node`` lives."""
        if node in self.isolated:
            return [_IP, "netns", "exec", self.namespace(node)]
        return []

    def _build(self) -> None:
        bridge = self.bridge
        _ip("link", "add", bridge, "type", "bridge", "forward_delay", "0")
        self.made.append(f"bridge {bridge}")
        _ip("addr", "add", f"{self.subnet}.1/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for node in range(1, self.nodes + 1):
            if node not in self.isolated:
                _ip("addr", "add", f"{self.address(node)}/32", "dev", bridge)
                continue
            ns, host, inner = self.namespace(node), self.host_veth(node), f"{self.prefix}p{node}"
            _ip("netns", "add", ns)
            self.made.append(f"netns {ns}")
            _ip("link", "add", host, "type", "veth", "peer", "name", inner)
            self.made.append(f"veth {host}")
            _ip("link", "set", inner, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{self.address(node)}/24", "dev", inner)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "set", inner, "up")
            _ip("link", "set", host, "master", bridge)
            _ip("link", "set", host, "up")

    def _check_isolated(self, node: int) -> None:
        if node not in self.isolated:
            raise ValueError(f"node {node} runs in the root namespace: it cannot be cut off")

    def cut(self, node: int) -> None:
        """Cut isolated node ``node`` off: every packet to or from it is lost."""
        self._check_isolated(node)
        _ip("link", "set", self.host_veth(node), "down")

    def heal(self, node: int) -> None:
        """Join isolated node ``node`` to the network again."""
        self._check_isolated(node)
        _ip("link", "set", self.host_veth(node), "up")

    def destroy(self) -> None:
        """Remove the namespaces, veths and the bridge (what is left of them)."""
        for item in reversed(self.made):
            kind, name = item.split(" ", 1)
            if kind == "netns":
                _ip("netns", "del", name, check=False)
            else:
                with contextlib.suppress(OSError):
                    _ip("link", "del", name, check=False)
        self.made.clear()
