"""Privilege separation on a real node: each daemon runs as its own user, and each
reads what it needs and nothing more (users and groups made for this test).

One master node under a directory every user may enter, its cluster made with
daemon accounts of this test's own prefix (``cpv<pid>-``); ``corral-daemons start``
(as root) creates the accounts and starts each daemon as its user. The daemons'
rights are tried by running a probe with exactly the uid, gid and groups the
running daemon has (read from ``/proc``), so what a probe cannot open, the daemon
cannot either. Everything (daemons, accounts, the directory) goes at the end.

The daemons run a Python their users can reach: the suite's own interpreter when
they can, else the system's python3 of the same version with this virtualenv's
packages on its path (a Python under root's home, as pyenv installs it, is closed
to other users).
"""

from __future__ import annotations

import base64
import grp
import json
import os
import pwd
import shutil
import ssl
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from corral import bootstrap, daemon_users, daemons
from corral.cli.jobs import StdioReporter, poll_job
from corral.cmdlib.cluster import ClusterSetParams
from corral.confd.client import query_sync
from corral.confd.protocol import QueryType
from corral.daemon_users import DaemonUsers
from corral.errors import DaemonError
from corral.luxi.client import Client
from corral.objects.ipolicy import lenient_bounds
from corral.paths import ROOT_ENV, Paths
from corral.testbed.core import bundled_os_dir
from corral.utils import loopcheck
from corral.utils.files import write_public
from tests.conftest import free_port

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                       reason="privilege separation needs root and useradd to create "
                              "the daemons' users"),
]

IP, IP2 = "127.0.1.1", "127.0.1.2"
PREFIX = f"cpv{os.getpid()}-"
#: Two people: one in the admin group, one not.
ADMIN, OUTSIDER = f"{PREFIX}alice", f"{PREFIX}bob"


@dataclass
class Node:
    base: Path
    paths: Paths
    python: str
    users: DaemonUsers
    ports: dict[str, int]

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, ROOT_ENV: str(self.paths.root)}

    def pid(self, daemon: str) -> int:
        pid = daemons.status(self.paths).get(daemon)
        assert pid is not None, f"corral-{daemon} does not run"
        return pid

    def probe(self, ids: tuple[int, int, list[int]], code: str) -> Any:
        """Run ``code`` (Python printing one JSON value last) as ``ids``."""
        uid, gid, groups = ids
        proc = subprocess.run([self.python, "-c", code], env=self.env, capture_output=True,
                              text=True, timeout=60, user=uid, group=gid,
                              extra_groups=groups, cwd="/")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])


def _ids(pid: int) -> tuple[int, int, list[int]]:
    """The real uid, gid and supplementary groups of a running process."""
    fields = dict(line.split(":", 1) for line in
                  Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return (int(fields["Uid"].split()[0]), int(fields["Gid"].split()[0]),
            [int(g) for g in fields["Groups"].split()])


def _user_ids(name: str) -> tuple[int, int, list[int]]:
    entry = pwd.getpwnam(name)
    return entry.pw_uid, entry.pw_gid, os.getgrouplist(name, entry.pw_gid)


def _python_for_daemons(base: Path) -> str:
    """An interpreter the daemon users can run with corral and its dependencies."""
    probe = daemon_users.Credentials("nobody", 65534, 65534, ())
    try:
        daemon_users.check_interpreter(probe, "probe")
        return sys.executable
    except DaemonError:
        pass  # closed to them: the system's Python of the same version, if any
    system = "/usr/bin/python3"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    try:
        found = subprocess.run([system, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        found = ""
    if found != version:
        pytest.skip(f"this Python ({sys.executable}) is closed to other users and there is "
                    f"no system python{version} for the daemons' users to run")
    venv = base / "venv"
    subprocess.run([system, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python*/site-packages"))
    ours = sysconfig.get_paths()["purelib"]  # this virtualenv's, with corral in it
    (site / "corral-suite.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return str(venv / "bin" / "python")


def _settings(paths: Paths, ports: dict[str, int], ip: str = IP) -> None:
    paths.ensure_dirs()
    for name, body in (
        ("noded.json", {"bind": ip, "port": ports["noded"]}),
        ("rapi.json", {"bind": ip, "port": ports["rapi"], "require_authentication": True}),
        ("confd.json", {"bind": ip, "port": ports["confd"]}),
        ("mond.json", {"bind": ip, "port": ports["mond"], "cache": 0}),
        ("masterd.json", {"metrics_bind": ip, "metrics_port": ports["metrics"]}),
    ):
        write_public(paths.data_dir / name, json.dumps(body) + "\n")
    os_dir = paths.node_path("/srv/corral/os")
    os_dir.mkdir(parents=True)
    shutil.copytree(bundled_os_dir() / "corral-ext4", os_dir / "corral-ext4")


def _remove_accounts(users: DaemonUsers) -> None:
    for name in [users.user(d) for d in daemon_users.SEPARATED_DAEMONS] + [ADMIN, OUTSIDER]:
        subprocess.run(["userdel", name], capture_output=True, check=False)
    for name in [*users.groups(), ADMIN, OUTSIDER]:
        subprocess.run(["groupdel", name], capture_output=True, check=False)


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    base = Path(tempfile.mkdtemp(prefix="corral-privsep-"))
    base.chmod(0o755)  # the daemons' users enter it, as they enter / on a real node
    users = DaemonUsers(PREFIX, PREFIX)
    paths = Paths(base / "node1")
    ports = {"noded": free_port(IP), "rapi": free_port(IP), "mond": free_port(IP),
             "metrics": free_port(IP), "confd": free_port(IP, 2)}
    try:
        python = _python_for_daemons(base)
        _settings(paths, ports)
        bootstrap.init_cluster(paths, bootstrap.InitOptions(
            cluster_name="cluster.test", master_name="node1.test", primary_ip=IP,
            noded_port=ports["noded"], daemon_users=users,
            params=ClusterSetParams(enabled_hypervisors=["fake"],
                                    enabled_disk_templates=["diskless"],
                                    ipolicy={"minmax": lenient_bounds()})))
        for name, groups in ((ADMIN, [users.admin_group]), (OUTSIDER, [])):
            subprocess.run(["useradd", "--system", "--no-create-home", "--user-group",
                            *(["--groups", ",".join(groups)] if groups else []), name],
                           check=True, capture_output=True)
        started = subprocess.run([python, "-m", "corral.cli.daemons", "start"],
                                 env={**os.environ, ROOT_ENV: str(paths.root)},
                                 capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, started.stderr + started.stdout
        yield Node(base, paths, python, users, ports)
    finally:
        daemons.stop(paths)
        _remove_accounts(users)
        found = loopcheck.reports(base)
        shutil.rmtree(base, ignore_errors=True)
        assert not found, found


def test_each_daemon_runs_as_its_own_user(node: Node) -> None:
    # init made the accounts, corral-daemons start found them: a third time changes none
    assert daemon_users.ensure_accounts(node.users, node.paths) == []
    assert _ids(node.pid("noded"))[:2] == (0, 0)
    for daemon in ("masterd", "rapi", "confd", "mond"):
        uid, gid, groups = _ids(node.pid(daemon))
        assert pwd.getpwuid(uid).pw_name == f"{PREFIX}{daemon}"
        assert grp.getgrgid(gid).gr_name == f"{PREFIX}{daemon}"
        assert sorted(grp.getgrgid(g).gr_name for g in groups) == \
            sorted(node.users.supplementary(daemon)), daemon
    # the luxi socket: the master's, for the admin group only
    st = node.paths.master_socket.stat()
    assert (pwd.getpwuid(st.st_uid).pw_name, grp.getgrgid(st.st_gid).gr_name,
            st.st_mode & 0o777) == (f"{PREFIX}masterd", f"{PREFIX}admin", 0o660)


_OPEN = """
import json, sys
result = {}
for path in sys.argv[1:] or %r:
    try:
        open(path, "rb").read(1)
        result[path] = "read"
    except OSError as err:
        result[path] = err.strerror
print(json.dumps(result))
"""


def _can_read(node: Node, ids: tuple[int, int, list[int]], *paths: Path) -> dict[str, str]:
    return {Path(p).name: how for p, how in
            node.probe(ids, _OPEN % [str(p) for p in paths]).items()}


def test_confd_reads_its_key_and_the_store_but_no_private_key(node: Node) -> None:
    p = node.paths
    seen = _can_read(node, _ids(node.pid("confd")), p.ca_key, p.node_key,
                     p.master_client_cert, p.rapi_key, p.rapi_users, p.jobs_db,
                     p.confd_hmac_key, p.config_db)
    assert seen == {"ca-key.pem": "Permission denied", "server-key.pem": "Permission denied",
                    "master-client.pem": "Permission denied",
                    "rapi-key.pem": "Permission denied", "users": "Permission denied",
                    "jobs.db": "Permission denied", "confd.key": "read", "config.db": "read"}
    # and it answers from the store it reads as its user
    key = p.confd_hmac_key.read_bytes().strip()
    best = query_sync(key, [(IP, node.ports["confd"])], QueryType.CLUSTER_MASTER,
                      timeout=5).best
    assert best is not None and best.answer == "node1.test"


def test_rapi_cannot_open_the_configuration_store(node: Node) -> None:
    p = node.paths
    ids = _ids(node.pid("rapi"))
    seen = _can_read(node, ids, p.config_db, p.jobs_db, p.ca_key, p.confd_hmac_key,
                     p.rapi_users, p.rapi_key)
    assert seen == {"config.db": "Permission denied", "jobs.db": "Permission denied",
                    "ca-key.pem": "Permission denied", "confd.key": "Permission denied",
                    "users": "read", "rapi-key.pem": "read"}
    code = ("import json, sys; from corral.config.readonly import load_readonly\n"
            "from corral.errors import CorralError\n"
            f"try: load_readonly({str(p.config_db)!r}); print(json.dumps('opened'))\n"
            "except CorralError as err: print(json.dumps(err.message))")
    assert "Permission denied" in node.probe(ids, code)
    # nor remove the master's socket or pid file from the (sticky) run directory
    code = ("import json, os, sys\nseen = {}\nfor path in sys.argv[1:] or %r:\n"
            "    try: os.unlink(path); seen[path] = 'removed'\n"
            "    except OSError as err: seen[path] = err.strerror\nprint(json.dumps(seen))")
    targets = [str(p.master_socket), str(p.pid_file("masterd"))]
    assert set(node.probe(ids, code % targets).values()) == {"Operation not permitted"}


_LUXI = """
import json
from corral.luxi.client import Client
try:
    with Client(%r) as client:
        print(json.dumps(client.call("QueryConfigValues", ["cluster_name"])))
except Exception as err:
    print(json.dumps(f"{type(err).__name__}: {err}"))
"""


def test_luxi_socket_admits_the_admin_group_only(node: Node) -> None:
    code = _LUXI % str(node.paths.master_socket)
    assert node.probe(_user_ids(ADMIN), code) == ["cluster.test"]
    refused = node.probe(_user_ids(OUTSIDER), code)
    assert "ermission denied" in str(refused), refused
    # an administrator in the admin group uses the tools without root; others cannot
    listed = {person: _as(node, person, [node.python, "-m", "corral.cli.gnt_node", "list",
                                         "--no-headers", "-o", "name"])
              for person in (ADMIN, OUTSIDER)}
    assert (listed[ADMIN].returncode, listed[ADMIN].stdout) == (0, "node1.test\n")
    assert listed[OUTSIDER].returncode != 0
    assert "ermission denied" in listed[OUTSIDER].stderr, listed[OUTSIDER]


def _as(node: Node, person: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    uid, gid, groups = _user_ids(person)
    return subprocess.run(argv, env=node.env, capture_output=True, text=True, timeout=60,
                          user=uid, group=gid, extra_groups=groups, cwd="/")


def _rapi(node: Node, method: str, path: str, body: Any = None) -> Any:
    password = node.paths.rapi_admin_password.read_text().strip()
    request = urllib.request.Request(
        f"https://{IP}:{node.ports['rapi']}{path}", method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Basic " +
                 base64.b64encode(f"{bootstrap.RAPI_ADMIN}:{password}".encode()).decode()})
    context = ssl.create_default_context(cafile=str(node.paths.rapi_cert))
    context.check_hostname = False
    with urllib.request.urlopen(request, context=context, timeout=30) as answer:
        return json.loads(answer.read())


def _wait(node: Node, job_id: Any) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while (job := _rapi(node, "GET", f"/2/jobs/{job_id}"))["status"] not in (
            "success", "error", "canceled") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert job["status"] == "success", job
    return dict(job)


def test_jobs_submitted_through_rapi_run(node: Node) -> None:
    _wait(node, _rapi(node, "POST", "/2/instances", {
        "__version__": 1, "mode": "create", "name": "inst1.test", "disk_template": "diskless",
        "disks": [], "nics": [], "os": "corral-ext4+default", "pnode": "node1.test",
        "no_install": True, "hypervisor": "fake", "name_check": False, "ip_check": False,
        "beparams": {"maxmem": 64, "minmem": 64}}))
    _wait(node, _rapi(node, "PUT", "/2/instances/inst1.test/startup"))
    assert _rapi(node, "GET", "/2/instances/inst1.test")["status"] == "running"


def test_watcher_restarts_as_root_then_works_as_its_user(node: Node) -> None:
    confd = node.pid("confd")
    os.kill(confd, 15)
    deadline = time.monotonic() + 30
    while daemons.status(node.paths).get("confd") is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    node.paths.watcher_state_file.unlink(missing_ok=True)
    ran = subprocess.run([node.python, "-m", "corral.watcher.main"], env=node.env,
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    # confd is back, as its user; the state the watcher wrote after the drop is its own
    assert pwd.getpwuid(_ids(node.pid("confd"))[0]).pw_name == f"{PREFIX}confd"
    owner = node.paths.watcher_state_file.stat().st_uid
    assert pwd.getpwuid(owner).pw_name == f"{PREFIX}watcher"


def test_mond_reads_what_noded_writes(node: Node) -> None:
    """Run after the jobs: the monitoring daemon, as its user, sees the instance."""
    url = f"http://{IP}:{node.ports['mond']}/1/report/instance/inst-status-fake"
    with urllib.request.urlopen(url, timeout=30) as answer:
        report = json.loads(answer.read())
    [instance] = report["data"]["instances"]
    assert (instance["name"], instance["actualState"]) == ("inst1.test", "running")
    # the reason trail of its last start, which noded wrote
    assert any(entry[0].startswith("gnt:client:rapi") for entry in instance["state_reason"]), \
        instance


def test_confd_reads_commits_still_in_the_masters_write_ahead_log(node: Node) -> None:
    """Run after the jobs: their commits sit in the WAL file the master daemon (not
    root) made; it carries the store's group, so confd reads them."""
    wal = node.paths.config_db.with_name("config.db-wal")
    assert grp.getgrgid(wal.stat().st_gid).gr_name == f"{PREFIX}confd"
    key = node.paths.confd_hmac_key.read_bytes().strip()
    deadline = time.monotonic() + 20
    while True:
        best = query_sync(key, [(IP, node.ports["confd"])], QueryType.INSTANCE_LIST,
                          timeout=5).best
        if best is not None and "inst1.test" in best.answer:
            break
        assert time.monotonic() < deadline, best
        time.sleep(0.1)


@pytest.fixture(scope="module")
def second(node: Node) -> Iterator[Paths]:
    """node2, started as a node in no cluster (its noded and mond as root)."""
    ip = IP2
    paths = Paths(node.base / "node2")
    _settings(paths, {**node.ports, "mond": free_port(ip)}, ip=ip)
    try:
        started = subprocess.run([node.python, "-m", "corral.cli.daemons", "start"],
                                 env={**os.environ, ROOT_ENV: str(paths.root)},
                                 capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, started.stderr + started.stdout
        yield paths
    finally:
        daemons.stop(paths)


def _running_as(paths: Paths) -> dict[str, str]:
    return {name: pwd.getpwuid(_ids(pid)[0]).pw_name
            for name, pid in daemons.status(paths).items() if pid is not None}


def _wait_running_as(paths: Paths, wanted: dict[str, str]) -> None:
    deadline = time.monotonic() + 30
    while (seen := _running_as(paths)) != wanted:
        assert time.monotonic() < deadline, f"{paths.root}: daemons run as {seen}"
        time.sleep(0.1)


def test_a_joining_node_takes_the_masters_accounts(node: Node, second: Paths) -> None:
    assert _running_as(second) == {"noded": "root", "mond": "root"}  # no cluster yet
    with Client(node.paths.master_socket) as client:
        job_id = int(client.call("SubmitJob", [{
            "OP_ID": "OP_NODE_ADD", "node_name": "node2.test", "primary_ip": IP2,
            "token": daemons.wait_for_token(second),
            "reason": [["gnt:client:test", "privsep", time.time_ns()]]}]))
        poll_job(client, job_id, StdioReporter(quiet=True))
    assert second.daemon_users.read_text() == node.paths.daemon_users.read_text()
    # its mond starts again as its user; as a new master candidate it gets a replica,
    # and its node daemon starts confd, as confd's user, answering from it
    _wait_running_as(second, {"noded": "root", "mond": f"{PREFIX}mond",
                              "confd": f"{PREFIX}confd"})
    key = second.confd_hmac_key.read_bytes().strip()
    best = query_sync(key, [(IP2, node.ports["confd"])], QueryType.CLUSTER_MASTER,
                      timeout=5).best
    assert best is not None and best.answer == "node1.test"


def test_the_new_master_after_a_failover_runs_its_daemons_as_their_users(
        node: Node, second: Paths) -> None:
    env = {**os.environ, ROOT_ENV: str(second.root)}
    moved = subprocess.run([node.python, "-m", "corral.cli.gnt_cluster", "master-failover"],
                           env=env, capture_output=True, text=True, timeout=120)
    assert moved.returncode == 0, moved.stderr + moved.stdout
    users = {d: f"{PREFIX}{d}" for d in ("masterd", "rapi", "confd", "mond")}
    _wait_running_as(second, {"noded": "root", **users})
    _wait_running_as(node.paths, {"noded": "root", "confd": users["confd"],
                                  "mond": users["mond"]})
    # the store the replica became is the master daemon's now, and serves luxi
    owner = pwd.getpwuid(second.config_db.stat().st_uid).pw_name
    assert owner == users["masterd"]
    assert node.probe(_user_ids(ADMIN), _LUXI % str(second.master_socket)) == ["cluster.test"]
