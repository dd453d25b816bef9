"""gnt-cluster and corral-daemons against a real testbed (master daemon on loopback)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from corral.luxi import Client
from corral.paths import Paths
from corral.utils.process import process_alive, running_pid
from tests.conftest import TestbedHandle, assert_no_daemons, free_port, run_testbed, run_tool

pytestmark = pytest.mark.integration


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.shared_testbed
def test_testbed_json_describes_the_running_cluster(testbed: TestbedHandle) -> None:
    state = testbed.state
    assert state["master"] == "node1.testbed"
    assert [n["ip"] for n in state["nodes"]] == ["127.0.1.1", "127.0.1.2", "127.0.1.3"]
    assert state["env"]["CORRAL_ROOT"] == state["nodes"][0]["root"]
    assert state["rapi"]["user"] == "admin" and len(state["rapi"]["password"]) >= 16
    pid = state["nodes"][0]["daemons"]["masterd"]
    assert running_pid(testbed.paths.pid_file("masterd")) == pid
    assert len(set(state["ports"].values())) == 5  # noded, rapi, confd, mond, metrics


@pytest.mark.shared_testbed
def test_info_shows_cluster_in_ganeti_layout(testbed: TestbedHandle) -> None:
    out = testbed.run("gnt-cluster", "info").stdout
    assert re.search(r"^Cluster name: cluster\.testbed$", out, re.M)
    assert re.search(r"^Master node: node1\.testbed$", out, re.M)
    assert re.search(r"^Default hypervisor: fake$", out, re.M)
    assert re.search(r"^  candidate pool size: 10$", out, re.M)
    assert re.search(r"^Default instance parameters: ?\n  default: ?\n(    .*\n)*    maxmem: 128$",
                     out, re.M)
    info = testbed.info()
    assert info["name"] == "cluster.testbed"
    assert info["enabled_disk_templates"] == ["file", "sharedfile", "diskless"]
    assert info["beparams"]["default"]["vcpus"] == 1


@pytest.mark.shared_testbed
def test_getmaster_and_version(testbed: TestbedHandle) -> None:
    assert testbed.run("gnt-cluster", "getmaster").stdout == "node1.testbed\n"
    lines = testbed.run("gnt-cluster", "version").stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "Software version", "Internode protocol", "Configuration format", "OS api version",
        "Export interface", "VCS version",
    ]
    assert "OS api version: 20" in lines


def test_modify_changes_every_family(testbed: TestbedHandle) -> None:
    before = testbed.info()["config_serial"]
    out = testbed.run(
        "gnt-cluster", "modify", "-B", "maxmem=1G,minmem=512M,vcpus=2",
        "-H", "kvm:kernel_path=/boot/vmlinuz-test,acpi=false", "-H", "fake:migration_mode=non-live",
        "-N", "link=br0", "-D", "plain:stripes=2", "--node-parameters", "ssh_port=2222",
        "--enabled-hypervisors", "fake,kvm", "-C", "5", "--max-running-jobs", "7",
        "--mac-prefix", "AA:BB:CC", "--uid-pool", "4000-4099,5000", "-I", "hail,builtin",
        "--os-search-path", "/srv/os1,/srv/os2",
    ).stdout
    assert "Changed beparams" in out
    info = testbed.info()
    assert info["config_serial"] == before + 1
    be = info["beparams"]["default"]
    assert (be["maxmem"], be["minmem"], be["vcpus"]) == (1024, 512, 2)
    assert info["hvparams"]["kvm"]["kernel_path"] == "/boot/vmlinuz-test"
    assert info["hvparams"]["kvm"]["acpi"] is False
    assert info["hvparams"]["fake"]["migration_mode"] == "non-live"
    assert info["nicparams"]["default"]["link"] == "br0"
    assert info["diskparams"]["plain"]["stripes"] == 2
    assert info["ndparams"]["ssh_port"] == 2222
    assert info["enabled_hypervisors"] == ["fake", "kvm"]
    assert info["candidate_pool_size"] == 5 and info["max_running_jobs"] == 7
    assert info["mac_prefix"] == "aa:bb:cc"
    assert info["uid_pool"] == [[4000, 4099], [5000, 5000]]
    assert info["default_iallocators"] == ["hail", "builtin"]
    assert info["os_search_path"] == ["/srv/os1", "/srv/os2"]
    text = testbed.run("gnt-cluster", "info").stdout
    assert re.search(r"^  uid pool: 4000-4099, 5000$", text, re.M)

    testbed.run("gnt-cluster", "modify", "--add-uids", "6000-6009", "--remove-uids", "5000")
    assert testbed.info()["uid_pool"] == [[4000, 4099], [6000, 6009]]
    # "-key" and "key=default" restore built-in defaults.
    testbed.run("gnt-cluster", "modify", "-H", "kvm:-kernel_path,acpi=default")
    kvm = testbed.info()["hvparams"]["kvm"]
    assert kvm["kernel_path"] == "/boot/vmlinuz-3-kvmU" and kvm["acpi"] is True


@pytest.mark.shared_testbed
def test_modify_dry_run_changes_nothing(testbed: TestbedHandle) -> None:
    before = testbed.info()
    out = testbed.run("gnt-cluster", "modify", "-B", "vcpus=4", "--dry-run").stdout
    # The job log's dry-run line (as Ganeti's), then what would change.
    logged, *changes = out.splitlines()
    assert logged.endswith(" - INFO: dry-run mode requested, not actually executing the operation")
    assert changes[0].startswith("Would change beparams")
    after = testbed.info()
    assert after["config_serial"] == before["config_serial"]
    assert after["beparams"] == before["beparams"]


@pytest.mark.shared_testbed
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-B", "maxmemory=1G"], "unknown backend parameter 'maxmemory'; valid ones: "
                                 "always_failover, auto_balance, maxmem, minmem"),
        (["-H", "xen:foo=1"], "unknown hypervisor 'xen'"),
        (["-H", "kvm:no_such=1"], "unknown kvm hypervisor parameter 'no_such'"),
        (["-B", "vcpus=two"], "backend parameter 'vcpus': 'two' is not an int"),
        (["-B", "maxmem=1G,maxmem=2G"], "duplicate key 'maxmem'"),
        (["-B", "minmem=2G,maxmem=1G"], "must not exceed maxmem"),
        (["--enabled-hypervisors", "xen-pvm"], "unknown hypervisor 'xen-pvm'; valid ones: kvm"),
        (["--enabled-disk-templates", "plain"], "no LVM volume group is set"),
        (["--uid-pool", "5-x"], "5-x"),
        (["--mac-prefix", "zz:00:00"], "invalid MAC prefix"),
        (["-C", "0"], "candidate_pool_size must be at least 1"),
        ([], "nothing to change"),
    ],
)
def test_modify_bad_input_is_refused_and_changes_nothing(
    testbed: TestbedHandle, args: list[str], message: str
) -> None:
    before = testbed.info()
    proc = testbed.run("gnt-cluster", "modify", *args, check=False)
    assert proc.returncode != 0
    assert message.lower() in proc.stderr.lower(), proc.stderr
    assert testbed.info() == before


def test_modify_reason_trail_is_kept_on_its_job(testbed: TestbedHandle) -> None:
    testbed.run("gnt-cluster", "modify", "-B", "vcpus=3", "--reason", "ticket 4711")
    with Client(testbed.paths.master_socket) as client:
        rows = client.call("QueryJobs", None, ["id", "summary", "reason"])
    job_id, summary, reasons = rows[-1]
    assert summary == ["CLUSTER_SET_PARAMS"]
    trail = [entry[:2] for entry in reasons[0]]
    assert trail == [["user", "ticket 4711"], ["gnt:client:gnt-cluster", "modify"],
                     ["gnt:opcode:cluster_set_params", f"job={job_id};index=0"]]
    assert all(isinstance(entry[2], int) and entry[2] > 10**18 for entry in reasons[0])


@pytest.mark.shared_testbed
def test_init_on_existing_cluster_changes_nothing(testbed: TestbedHandle) -> None:
    paths = testbed.paths
    watched = [paths.config_db, paths.ca_cert, paths.ca_key, paths.node_cert, paths.confd_hmac_key,
               paths.rapi_users]
    before = {p: _digest(p) for p in watched}
    proc = testbed.run("gnt-cluster", "init", "--master-name", "node1.testbed",
                       "--primary-ip", "127.0.1.1", "other.testbed", check=False)
    assert proc.returncode == 1
    assert "already belongs to a cluster" in proc.stderr
    assert str(paths.config_db) in proc.stderr
    assert {p: _digest(p) for p in watched} == before
    assert testbed.info()["name"] == "cluster.testbed"


def test_init_writes_private_files_and_refuses_bad_names(tmp_path: Path) -> None:
    env = {**os.environ, "CORRAL_ROOT": str(tmp_path)}
    bad = run_tool(["gnt-cluster", "init", "--master-name", "m.test", "--primary-ip", "1.2.3",
                    "c.test", "--no-start"], env, check=False)
    assert bad.returncode == 1 and "invalid primary IP '1.2.3'" in bad.stderr
    assert not (tmp_path / "var/lib/corral/config.db").exists()
    bad = run_tool(["gnt-cluster", "init", "--master-name", "m.test", "--primary-ip",
                    "127.0.9.1", "-B", "nope=1", "c.test", "--no-start"], env, check=False)
    assert "unknown backend parameter 'nope'" in bad.stderr
    assert not any((tmp_path / "var/lib/corral").glob("*.pem"))

    run_tool(["gnt-cluster", "init", "--master-name", "m.test", "--primary-ip", "127.0.9.1",
              "c.test", "--no-start", "--uid-pool", "4000-4010"], env)
    data = tmp_path / "var/lib/corral"
    for name in ("ca-key.pem", "server-key.pem", "confd.key", "rapi/users", "rapi/admin-password"):
        assert (data / name).stat().st_mode & 0o077 == 0, name
    users = (data / "rapi/users").read_text()
    assert re.search(r"^admin \S+ write$", users, re.M)
    status = run_tool(["corral-daemons", "status"], env, check=False)
    assert status.returncode == 3 and "corral-masterd: not running" in status.stdout


def _corrupt(db: Path) -> str:
    db.write_bytes(b"this is not a database" * 100)
    return str(db)


def _newer_schema(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value = 999 WHERE key = 'schema_version'")
    conn.close()
    return "999"


@pytest.mark.parametrize("damage", [_corrupt, _newer_schema])
def test_daemon_refuses_a_bad_store_naming_the_file(tmp_path: Path, damage: Any) -> None:
    env = {**os.environ, "CORRAL_ROOT": str(tmp_path)}
    run_tool(["gnt-cluster", "init", "--master-name", "m.test", "--primary-ip", "127.0.9.1",
              "c.test", "--no-start"], env)
    # The node daemon starts first: on loopback and a free port, never Ganeti's 1811.
    Paths(tmp_path).noded_settings.write_text(
        json.dumps({"bind": "127.0.9.1", "port": free_port("127.0.9.1")}))
    db = tmp_path / "var/lib/corral/config.db"
    detail = damage(db)
    before = _digest(db)
    proc = run_tool(["corral-daemons", "start"], env, check=False)
    assert proc.returncode != 0
    assert str(db) in proc.stderr and detail in proc.stderr, proc.stderr
    assert running_pid(tmp_path / "run/corral/masterd.pid") is None
    direct = run_tool(["corral-masterd"], env, check=False)
    assert direct.returncode != 0 and str(db) in direct.stderr
    assert _digest(db) == before, "a refused store must be left as it was"


def test_daemon_refuses_a_corrupt_job_queue_naming_the_file(tmp_path: Path) -> None:
    env = {**os.environ, "CORRAL_ROOT": str(tmp_path)}
    run_tool(["gnt-cluster", "init", "--master-name", "m.test", "--primary-ip", "127.0.9.1",
              "c.test", "--no-start"], env)
    jobs_db = tmp_path / "var/lib/corral/jobs.db"
    _corrupt(jobs_db)
    before = _digest(jobs_db)
    direct = run_tool(["corral-masterd"], env, check=False)
    assert direct.returncode != 0
    assert "refusing to start" in direct.stderr and str(jobs_db) in direct.stderr, direct.stderr
    assert "Traceback" not in direct.stderr
    assert running_pid(tmp_path / "run/corral/masterd.pid") is None
    assert _digest(jobs_db) == before, "a refused job queue must be left as it was"


def test_no_master_daemon_gives_a_clear_error(tmp_path: Path) -> None:
    env = {**os.environ, "CORRAL_ROOT": str(tmp_path)}
    proc = run_tool(["gnt-cluster", "info"], env, check=False)
    assert proc.returncode == 1
    # A machine in no cluster says so, in Ganeti's words.
    assert "Cluster not initialized or this machine is not part of a cluster" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_daemons_stop_start_status(testbed: TestbedHandle) -> None:
    assert "corral-masterd: running" in testbed.run("corral-daemons", "status").stdout
    testbed.run("corral-daemons", "stop")
    assert testbed.run("corral-daemons", "status", check=False).returncode == 3
    # SIGTERM is a clean shutdown: socket and pid file gone, the log says so.
    assert not testbed.paths.master_socket.exists()
    assert not testbed.paths.pid_file("masterd").exists()
    assert "termination signal received" in testbed.paths.log_file("masterd").read_text()
    assert testbed.run("gnt-cluster", "info", check=False).returncode == 1
    testbed.run("corral-daemons", "start")
    assert testbed.info()["name"] == "cluster.testbed"


def test_destroy_requires_confirmation_then_removes_everything(testbed: TestbedHandle) -> None:
    paths = testbed.paths
    proc = testbed.run("gnt-cluster", "destroy", check=False)
    assert proc.returncode == 1 and "--yes-do-it" in proc.stderr
    assert paths.config_db.exists()
    refused = testbed.run("gnt-cluster", "destroy", "--yes-do-it", check=False)
    assert refused.returncode == 1 and "node2.testbed" in refused.stderr
    testbed.run("gnt-node", "remove", "node2.testbed")
    testbed.run("gnt-node", "remove", "node3.testbed")
    testbed.run("gnt-cluster", "destroy", "--yes-do-it")
    assert not paths.config_db.exists() and not paths.ca_key.exists()
    assert running_pid(paths.pid_file("masterd")) is None
    # The node can start over.
    testbed.run("gnt-cluster", "init", "--master-name", "node1.testbed", "--primary-ip",
                "127.0.1.1", "again.testbed")
    assert testbed.info()["name"] == "again.testbed"


def test_two_testbeds_run_side_by_side(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    try:
        for d in dirs:
            proc = run_testbed("up", "--nodes", "2", "--dir", str(d))
            assert proc.returncode == 0, proc.stderr
        handles = [TestbedHandle(d, json.loads((d / "testbed.json").read_text())) for d in dirs]
        uuids = {h.info()["uuid"] for h in handles}
        assert len(uuids) == 2
        again = run_testbed("up", "--nodes", "2", "--dir", str(dirs[0]))
        assert again.returncode != 0 and "already up" in again.stderr
        pid_a = handles[0].state["nodes"][0]["daemons"]["masterd"]
        run_testbed("down", "--dir", str(dirs[0]))
        assert running_pid(handles[0].paths.pid_file("masterd")) is None
        assert not process_alive(pid_a)
        assert handles[1].info()["uuid"] in uuids
    finally:
        for d in dirs:
            run_testbed("down", "--dir", str(d))
            assert_no_daemons(d)
