"""A whole corral cluster on one machine, unprivileged, under one directory.

Node *i* is ``node<i>.testbed`` with primary IP ``127.0.<1>.<i>`` (all of
``127.0.0.0/8`` is loopback) and its own ``CORRAL_ROOT`` in ``DIR/node<i>``.
``DIR/testbed.json`` records what was started; :func:`down` stops the testbed's
processes, by pid, and nothing else.

Every node runs a node daemon on its own address; node 1 is the master and runs
the master daemon and the Remote API daemon too. The other nodes join by the
one-time token their node daemon prints, as ``gnt-node add --token`` does. Every
master candidate (by default every node) runs confd on its own address and the
testbed's confd port. :func:`failover` moves the master role to another node.
The testbed follows the real master: :func:`load` asks the nodes which one is the
master (the one holding the newest configuration store), so after a
``gnt-cluster master-failover`` run by hand on a node, ``testbed.json``, ``status``
and ``failover --to`` point at the new master.

RAPI listens on the master's address with its own certificate and requires
authentication for every request; ``testbed.json`` holds its URL, the certificate that
verifies it and the credentials of the write user ``admin``::

    "rapi": {"url": "https://127.0.1.1:PORT", "ca": ".../rapi.pem",
             "user": "admin", "password": "..."}

A daemon restarted inside the testbed (with ``corral-daemons start`` under a node's
root) belongs to it too: :func:`down` finds it through the node's locked pid file.
Ports are chosen free at every node's address and recorded, so several testbeds can
run side by side with other services. ``up`` starts two nodes' daemons at a time and
``down`` stops the nodes side by side (a daemon's start is mostly Python importing
its modules, one core's work).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import socket
import sys
import time
from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral import bootstrap, daemons
from corral import failover as corral_failover
from corral.cli.jobs import StdioReporter, poll_job
from corral.cmdlib.cluster import ClusterSetParams
from corral.confd.daemon import settings_file as confd_settings_file
from corral.config import load_readonly
from corral.errors import CorralError, DaemonError, NotFoundError, ParameterError
from corral.hypervisor import HYPERVISOR_NAMES
from corral.hypervisor.kvm import KvmHypervisor
from corral.luxi.client import Client
from corral.masterd.metrics import settings_file as masterd_settings_file
from corral.mond.daemon import settings_file as mond_settings_file
from corral.objects.ipolicy import lenient_bounds
from corral.paths import ROOT_ENV, Paths
from corral.rapi.daemon import settings_file as rapi_settings_file
from corral.serializer import dumps, dumps_pretty, loads
from corral.testbed import guest
from corral.utils.files import write_public
from corral.utils.process import running_pid, stop_daemon

__all__ = [
    "STATE_FILE", "Testbed", "TestbedNode", "bundled_extstorage_dir", "bundled_os_dir", "down",
    "failover", "load", "up",
]

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
    launcher: list[str] = field(default_factory=list)
    """The command prefix its daemons start with (``ip netns exec NS`` for a node in
    a network namespace; empty for one on the host)."""


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
        return dumps_pretty(data) + "\n"

    @property
    def master_node(self) -> TestbedNode:
        """The master node's record."""
        return next(n for n in self.nodes if n.master)


def load(directory: Path) -> Testbed | None:
    """The testbed recorded in ``directory``, or ``None`` when there is none.

    If the master changed behind the testbed's back (``gnt-cluster master-failover``
    run on a node), the records follow the real master and ``testbed.json`` is
    rewritten.
    """
    try:
        data = loads((directory / STATE_FILE).read_bytes())
    except FileNotFoundError:
        return None
    nodes = [TestbedNode(**n) for n in data.pop("nodes")]
    testbed = Testbed(nodes=nodes, **data)
    real = _real_master(testbed)
    if real is not None and (real.name != testbed.master or not real.master):
        _point_at(testbed, real)
        _save(testbed)
    return testbed


def _real_master(testbed: Testbed) -> TestbedNode | None:
    """The node the cluster itself names as its master, or None when no node holds a
    configuration store (the testbed is not up yet, or a failover is under way).

    Only the master holds the store; the others hold replicas. If the old master was
    unreachable during a failover it still holds its (older) store too, so the
    newest store decides.
    """
    newest: tuple[int, str] | None = None
    for node in testbed.nodes:
        db = Paths(Path(node.root)).config_db
        if not db.exists():
            continue
        try:
            store = load_readonly(db)
        except (CorralError, OSError):
            continue  # being renamed by a failover right now
        if newest is None or store.serial > newest[0]:
            newest = (store.serial, store.master_name)
    if newest is None:
        return None
    return next((n for n in testbed.nodes if n.name == newest[1]), None)


def _point_at(testbed: Testbed, master: TestbedNode) -> None:
    """Record ``master`` as the master: the tools' environment, RAPI, the daemons
    running on every node now."""
    for member in testbed.nodes:
        member.master = member is master
        member.daemons = {name: pid for name, pid in
                          daemons.status(Paths(Path(member.root))).items() if pid is not None}
    testbed.master = master.name
    testbed.env[ROOT_ENV] = master.root
    testbed.rapi["url"] = f"https://{master.ip}:{testbed.ports['rapi']}"
    testbed.rapi["ca"] = str(Paths(Path(master.root)).rapi_cert)


def _free_port(hosts: Sequence[str], kind: int, taken: Collection[int] = (),
               attempts: int = 50) -> int:
    """A port of ``kind`` free on every one of ``hosts`` that can be bound from here
    (the first must be), and not in ``taken``: every node's daemon listens on the
    testbed's one port at its own address, and other testbeds on this machine use
    the same loopback addresses."""
    for _ in range(attempts):
        with socket.socket(socket.AF_INET, kind) as sock:
            sock.bind((hosts[0], 0))
            port: int = sock.getsockname()[1]
        if port not in taken and all(_bindable(host, port, kind) for host in hosts[1:]):
            return port
    raise DaemonError(f"no port free on all of {', '.join(hosts)} in {attempts} tries")


def _bindable(host: str, port: int, kind: int) -> bool:
    """Whether ``port`` is free at ``host`` (an address not on this machine's own
    interfaces, such as one inside a network namespace, is not checked)."""
    with socket.socket(socket.AF_INET, kind) as sock:
        try:
            sock.bind((host, port))
        except OSError as err:
            return err.errno == errno.EADDRNOTAVAIL
    return True


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


def up(directory: Path, nodes: int = 3, *, hypervisors: Sequence[str] = ("fake",),
       tiny_guest: Path | None = None, addresses: Sequence[str] | None = None,
       launchers: Sequence[Sequence[str]] | None = None, domain: str = "testbed") -> Testbed:
    """Create and start a testbed of ``nodes`` nodes in ``directory``.

    ``hypervisors`` are the cluster's enabled hypervisors, the first the default (only
    ``fake`` unless asked). With ``kvm`` among them the cluster's kvm parameters ask for
    TCG (``kvm_flag=disabled``: this machine has no usable KVM) and, with
    ``tiny_guest`` (a directory :func:`corral.testbed.guest.build` fills), boot the tiny
    guest's kernel and initrd, so ``gnt-instance add -t diskless --no-install -H kvm``
    boots it. :func:`down` kills every kvm guest of the testbed's nodes.

    ``addresses`` (one per node) replace the loopback addresses ``127.0.1.<i>`` and
    ``launchers`` give each node's daemons a command prefix: together they put nodes
    on a test network (:class:`corral.testbed.netns.NodeNetwork`), some of them in
    namespaces of their own. The master (node 1) must be reachable from here.

    ``domain`` names the cluster ``cluster.DOMAIN`` and its nodes ``node<i>.DOMAIN``, so
    that two testbeds side by side (:mod:`corral.testbed.pair`) are told apart.
    """
    if not 1 <= nodes <= MAX_NODES:
        raise ParameterError(f"--nodes must be between 1 and {MAX_NODES}, got {nodes}")
    hypervisors = list(hypervisors)
    unknown = [name for name in hypervisors if name not in HYPERVISOR_NAMES]
    if not hypervisors or unknown:
        raise ParameterError(
            f"--hypervisors: unknown {', '.join(unknown) or '(none given)'}; corral"
            f" implements {', '.join(HYPERVISOR_NAMES)}")
    for given, what in ((addresses, "addresses"), (launchers, "launchers")):
        if given is not None and len(given) != nodes:
            raise ParameterError(f"{what}: {len(given)} given for {nodes} nodes")
    hvparams = _kvm_params(tiny_guest) if "kvm" in hypervisors else {}
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
        TestbedNode(name=f"node{i}.{domain}",
                    ip=addresses[i - 1] if addresses else f"127.0.1.{i}",
                    root=str(directory / f"node{i}"), master=i == 1,
                    launcher=list(launchers[i - 1]) if launchers else [])
        for i in range(1, nodes + 1)
    ]
    master = members[0]
    hosts = [member.ip for member in members]
    ports: dict[str, int] = {}
    for service, kind in (("noded", socket.SOCK_STREAM), ("rapi", socket.SOCK_STREAM),
                          ("confd", socket.SOCK_DGRAM), ("mond", socket.SOCK_STREAM),
                          ("metrics", socket.SOCK_STREAM)):
        ports[service] = _free_port(hosts, kind, taken=ports.values())
    shared = directory / "shared-file-storage"
    shared.mkdir(exist_ok=True)
    for member in members:
        _prepare_node(Path(member.root), member.ip, ports, shared)
    paths = Paths(Path(master.root))
    bootstrap.init_cluster(paths, bootstrap.InitOptions(
        cluster_name=f"cluster.{domain}", master_name=master.name, primary_ip=master.ip,
        noded_port=ports["noded"],
        params=ClusterSetParams(
            enabled_hypervisors=hypervisors,
            hvparams=hvparams or None,
            enabled_disk_templates=["file", "sharedfile", "diskless"],
            # tiny test instances: Ganeti's default policy refuses disks under 1 GiB
            ipolicy={"minmax": lenient_bounds()},
        ),
    ))
    testbed = Testbed(
        dir=str(directory), cluster_name=f"cluster.{domain}", master=master.name,
        env={ROOT_ENV: master.root, "PATH": f"{Path(sys.executable).parent}:"
             + os.environ.get("PATH", "/usr/bin:/bin")},
        nodes=members, ports=ports,
        rapi={"url": f"https://{master.ip}:{ports['rapi']}", "ca": str(paths.rapi_cert),
              "user": bootstrap.RAPI_ADMIN,
              "password": paths.rapi_admin_password.read_text().strip()},
    )
    _save(testbed)
    try:
        _start_daemons(members)
        _join(paths, members[1:])
        for member in members[1:]:
            _wait_for_confd(member)
    finally:
        _save(testbed)
    return testbed


#: How many nodes start their daemons at once (:func:`_start_daemons`).
START_WORKERS = 2


def _start_daemons(members: Sequence[TestbedNode]) -> None:
    """Start every node's daemons, recording their pids: each node's in their usual
    order, two nodes at a time (a daemon's start is mostly Python importing its modules,
    one core's work, and the nodes of a testbed that joins no cluster yet do not depend
    on one another). The master goes first; an error is raised once every node's start
    has ended, so what did start is recorded for :func:`down`."""
    def start(member: TestbedNode) -> None:
        member.daemons = daemons.start(Paths(Path(member.root)), launcher=member.launcher)

    with ThreadPoolExecutor(max_workers=START_WORKERS,
                            thread_name_prefix="testbed-start") as pool:
        futures = [pool.submit(start, member) for member in members]
    for future in futures:
        future.result()


def _kvm_params(tiny_guest: Path | None) -> dict[str, dict[str, Any]]:
    """The testbed's cluster-wide kvm parameters: TCG, and the tiny guest when given
    (no ``root_path``: its initramfs is the root)."""
    params: dict[str, Any] = {"kvm_flag": "disabled", "kvm_path": _qemu_binary()}
    if tiny_guest is not None:
        built = guest.build(tiny_guest)
        params.update(kernel_path=str(built.kernel), initrd_path=str(built.initrd),
                      kernel_args=guest.kernel_args(), root_path="")
    return {"kvm": params}


def _qemu_binary() -> str:
    """qemu's binary here (``kvm_path``): Ganeti's default ``/usr/bin/kvm`` is not on
    every host."""
    found = shutil.which("qemu-system-x86_64")
    if found is None:
        raise NotFoundError(
            "qemu-system-x86_64 is not installed: 'make sysdeps' installs qemu-system-x86")
    return found


def _wait_for_confd(member: TestbedNode, timeout: float = 30.0) -> None:
    """A node that joined as a master candidate gets its replica, and then its node
    daemon starts confd; wait for that (a node with no replica after a few seconds is
    no candidate and runs no confd)."""
    paths = Paths(Path(member.root))
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        pid = running_pid(paths.pid_file("confd"))
        if pid is not None:
            member.daemons["confd"] = pid
            return
        if not paths.config_replica.exists() and time.monotonic() - started > 5:
            return
        time.sleep(0.05)
    raise DaemonError(f"confd did not start on {member.name} within {timeout:.0f} s; see "
                      f"{paths.log_file('confd')} and {paths.log_file('noded')}")


def failover(directory: Path, node: str) -> Testbed:
    """Make ``node`` (a name or a 1-based index) the testbed's master with
    ``gnt-cluster master-failover`` run there; ``testbed.json`` then points the tools
    and RAPI at it."""
    testbed = load(directory.resolve())
    if testbed is None:
        raise NotFoundError(f"no testbed in {directory} (no {STATE_FILE})")
    chosen = next((n for i, n in enumerate(testbed.nodes, 1)
                   if node in (n.name, str(i))), None)
    if chosen is None:
        raise ParameterError(f"no node {node!r} in the testbed; its nodes: "
                             f"{', '.join(n.name for n in testbed.nodes)}")
    if chosen.master:
        raise ParameterError(f"{chosen.name} is the testbed's master already")
    asyncio.run(corral_failover.master_failover(Paths(Path(chosen.root))))
    _point_at(testbed, chosen)
    _save(testbed)
    return testbed


def bundled_os_dir() -> Path:
    """The OS definitions shipped with corral (``share/os`` in the source tree)."""
    return Path(__file__).resolve().parents[3] / "share" / "os"


def _prepare_node(root: Path, ip: str, ports: dict[str, int], shared: Path) -> None:
    """Give a node its noded, RAPI, confd and mond settings and masterd's metrics
    listener, the bundled OS definitions and ExtStorage providers and the shared
    storage.

    Every node sees the cluster's shared file storage directory as a link to one
    directory of the testbed, which is what a shared mount looks like on real hosts.
    RAPI runs only on the master, but every node has its settings (its own address,
    the testbed's RAPI port), so that after a master failover it serves from there.
    """
    paths = Paths(root)
    paths.ensure_dirs()
    write_public(paths.noded_settings, dumps({"bind": ip, "port": ports["noded"]}) + b"\n")
    write_public(rapi_settings_file(paths), dumps(
        {"bind": ip, "port": ports["rapi"], "require_authentication": True}) + b"\n")
    write_public(confd_settings_file(paths), dumps(
        {"bind": ip, "port": ports["confd"]}) + b"\n")
    # no report cache: a test sees each change at once
    write_public(mond_settings_file(paths), dumps(
        {"bind": ip, "port": ports["mond"], "cache": 0}) + b"\n")
    write_public(masterd_settings_file(paths), dumps(
        {"metrics_bind": ip, "metrics_port": ports["metrics"]}) + b"\n")
    os_dir = paths.node_path("/srv/corral/os")
    os_dir.mkdir(parents=True, exist_ok=True)
    for definition in sorted(bundled_os_dir().iterdir()):
        target = os_dir / definition.name
        if not target.exists():
            shutil.copytree(definition, target)
    _install_providers(paths, shared.parent / "ext-volumes")
    link = paths.node_path(Paths.DEFAULT_SHARED_FILE_STORAGE_DIR)
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(shared, target_is_directory=True)


def _install_providers(paths: Paths, volumes: Path) -> None:
    """Give a node the ExtStorage providers shipped with corral in
    ``/srv/corral/extstorage``; ``corral-file`` keeps its volumes in ``volumes``, one
    directory of the testbed every node sees (shared storage, as on real hosts)."""
    target_dir = paths.node_path("/srv/corral/extstorage")
    target_dir.mkdir(parents=True, exist_ok=True)
    volumes.mkdir(exist_ok=True)
    for provider in sorted(bundled_extstorage_dir().iterdir()):
        target = target_dir / provider.name
        if not target.exists():
            shutil.copytree(provider, target)
    settings = target_dir / "corral-file" / "settings"
    if settings.parent.is_dir():
        write_public(settings, f"VOLUME_DIR={volumes}\n")


def bundled_extstorage_dir() -> Path:
    """The ExtStorage providers shipped with corral (``share/extstorage``)."""
    return Path(__file__).resolve().parents[3] / "share" / "extstorage"


def _join(master: Paths, members: list[TestbedNode]) -> None:
    """Add ``members`` to the cluster with their noded's one-time tokens, as
    ``gnt-node add --token`` does."""
    if not members:
        return
    ops = [
        {"OP_ID": "OP_NODE_ADD", "node_name": m.name, "primary_ip": m.ip,
         "token": daemons.wait_for_token(Paths(Path(m.root))),
         "reason": [["gnt:client:testbed", "up", time.time_ns()]]}
        for m in members
    ]
    with Client(master.master_socket) as client:
        for op in ops:
            job_id = int(client.call("SubmitJob", [op]))
            try:
                poll_job(client, job_id, StdioReporter(quiet=True))
            except CorralError as err:
                raise DaemonError(
                    f"adding {op['node_name']} to the testbed failed: {err}") from err


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
    # The nodes stop side by side (each waits mostly for its processes to exit), each
    # node its guests first and then its daemons in their usual order.
    with ThreadPoolExecutor(max_workers=len(testbed.nodes),
                            thread_name_prefix="testbed-down") as pool:
        per_node = list(pool.map(_stop_node, testbed.nodes))
    stopped = [line for lines in per_node for line in lines]
    with contextlib.suppress(FileNotFoundError):
        _save(testbed)
    return stopped


def _stop_node(node: TestbedNode) -> list[str]:
    """Stop one node's kvm guests and then its daemons; return what was stopped."""
    paths = Paths(Path(node.root))
    guests = asyncio.run(KvmHypervisor(paths).stop_all())
    stopped = [f"kvm guest {name} on {node.name}" for name in guests]
    for daemon in daemons.DAEMONS:
        pid = stop_daemon(paths.pid_file(daemon.name))
        if pid is not None:
            stopped.append(f"corral-{daemon.name} on {node.name} (pid {pid})")
    node.daemons.clear()
    return stopped
