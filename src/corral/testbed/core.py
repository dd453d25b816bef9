"""A whole corral cluster on one machine, unprivileged, under one directory.

Node *i* is ``node<i>.testbed`` with primary IP ``127.0.<1>.<i>`` (all of
``127.0.0.0/8`` is loopback) and its own ``CORRAL_ROOT`` in ``DIR/node<i>``.
``DIR/testbed.json`` records what was started; :func:`down` stops the testbed's
processes, by pid, and nothing else.

What runs today is the master daemon on node 1; later issues add noded, rapi and
confd processes for every node. A daemon restarted inside the testbed (with
``corral-daemons start`` under a node's root) belongs to it too: :func:`down`
finds it through the node's locked pid file. Ports those will use are chosen free now and
recorded, so several testbeds can run side by side with other services.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral import bootstrap, daemons
from corral.cmdlib.cluster import ClusterSetParams
from corral.errors import DaemonError, ParameterError
from corral.paths import ROOT_ENV, Paths
from corral.utils.files import write_public
from corral.utils.process import stop_daemon

__all__ = ["STATE_FILE", "Testbed", "TestbedNode", "down", "load", "up"]

STATE_FILE = "testbed.json"
CLUSTER_NAME = "cluster.testbed"
MAX_NODES = 50


@dataclass
class TestbedNode:
    """One node of a testbed."""

    name: str
    ip: str
    root: str
    master: bool = False
    daemons: dict[str, int] = field(default_factory=dict)
    """Pids of the daemons the testbed started on this node."""


@dataclass
class Testbed:
    """What ``testbed.json`` holds."""

    dir: str
    cluster_name: str
    master: str
    env: dict[str, str]
    nodes: list[TestbedNode]
    ports: dict[str, int]
    rapi: dict[str, Any]

    def to_json(self) -> str:
        """The ``testbed.json`` text."""
        data = {
            "dir": self.dir, "cluster_name": self.cluster_name, "master": self.master,
            "env": self.env, "nodes": [vars(n) for n in self.nodes], "ports": self.ports,
            "rapi": self.rapi,
        }
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @property
    def master_node(self) -> TestbedNode:
        """The master node's record."""
        return next(n for n in self.nodes if n.master)


def load(directory: Path) -> Testbed | None:
    """The testbed recorded in ``directory``, or ``None`` when there is none."""
    try:
        data = json.loads((directory / STATE_FILE).read_text())
    except FileNotFoundError:
        return None
    nodes = [TestbedNode(**n) for n in data.pop("nodes")]
    return Testbed(nodes=nodes, **data)


def _free_port(host: str, kind: int) -> int:
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _save(testbed: Testbed) -> None:
    write_public(Path(testbed.dir) / STATE_FILE, testbed.to_json())


def _running(testbed: Testbed) -> list[str]:
    """The testbed's live daemons, found through its nodes' pid files (as :func:`down`)."""
    return [
        f"corral-{name} on {node.name} (pid {pid})"
        for node in testbed.nodes
        for name, pid in daemons.status(Paths(Path(node.root))).items()
        if pid is not None
    ]


def up(directory: Path, nodes: int = 3) -> Testbed:
    """Create and start a testbed of ``nodes`` nodes in ``directory``."""
    if not 1 <= nodes <= MAX_NODES:
        raise ParameterError(f"--nodes must be between 1 and {MAX_NODES}, got {nodes}")
    directory = directory.resolve()
    old = load(directory)
    if old is not None:
        live = _running(old)
        if live:
            raise DaemonError(
                f"a testbed is already up in {directory} ({', '.join(live)}); "
                "stop it first with 'python -m corral.testbed down --dir "
                f"{directory}'"
            )
        for node in old.nodes:
            shutil.rmtree(node.root, ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)
    members = [
        TestbedNode(name=f"node{i}.testbed", ip=f"127.0.1.{i}",
                    root=str(directory / f"node{i}"), master=i == 1)
        for i in range(1, nodes + 1)
    ]
    master = members[0]
    ports = {
        "noded": _free_port(master.ip, socket.SOCK_STREAM),
        "rapi": _free_port(master.ip, socket.SOCK_STREAM),
        "confd": _free_port(master.ip, socket.SOCK_DGRAM),
    }
    paths = Paths(Path(master.root))
    shared = directory / "shared-file-storage"
    bootstrap.init_cluster(paths, bootstrap.InitOptions(
        cluster_name=CLUSTER_NAME, master_name=master.name, primary_ip=master.ip,
        params=ClusterSetParams(
            enabled_hypervisors=["fake"],
            enabled_disk_templates=["file", "sharedfile", "diskless"],
            shared_file_storage_dir=str(shared),
        ),
    ))
    testbed = Testbed(
        dir=str(directory), cluster_name=CLUSTER_NAME, master=master.name,
        env={ROOT_ENV: master.root, "PATH": f"{Path(sys.executable).parent}:"
             + os.environ.get("PATH", "/usr/bin:/bin")},
        nodes=members, ports=ports,
        rapi={"url": None, "user": bootstrap.RAPI_ADMIN,
              "password": paths.rapi_admin_password.read_text().strip()},
    )
    _save(testbed)
    try:
        master.daemons = daemons.start(paths)
    finally:
        _save(testbed)
    return testbed


def down(directory: Path) -> list[str]:
    """Stop the testbed in ``directory``; return what was stopped.

    Stopped are the daemons the testbed started and any daemon that holds the
    locked pid file of one of the testbed's nodes (one restarted inside the
    testbed, by a test or with ``corral-daemons start``): every one is a process
    of this testbed, found by pid, never by name.
    """
    testbed = load(directory.resolve())
    if testbed is None:
        return []
    stopped = []
    for node in testbed.nodes:
        paths = Paths(Path(node.root))
        for daemon in daemons.DAEMONS:
            pid = stop_daemon(paths.pid_file(daemon.name))
            if pid is not None:
                stopped.append(f"corral-{daemon.name} on {node.name} (pid {pid})")
        node.daemons.clear()
    with contextlib.suppress(FileNotFoundError):
        _save(testbed)
    return stopped
