"""Operating a real testbed (issue 17): the watcher restarts an instance killed behind
corral's back (fake hypervisor: its state file removed) with a ``gnt:watcher`` reason,
leaves an instance stopped through corral alone, honours ``gnt-cluster watcher
pause`` on every node and starts a node daemon that died; the node keeps the last
status change's reason trail in its file across a node daemon restart, and mond
reports it; the master's and the nodes' Prometheus metrics after a known workload."""

from __future__ import annotations

import base64
import json
import os
import signal
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from corral.paths import Paths
from corral.utils.process import running_pid
from tests.conftest import TestbedHandle, run_tool

pytestmark = [pytest.mark.integration, pytest.mark.shared_testbed]

INSTANCES = ("wd-up.testbed", "wd-stopped.testbed")


def _node_paths(testbed: TestbedHandle, number: int) -> Paths:
    return Paths(Path(testbed.state["nodes"][number - 1]["root"]))


def _node_env(testbed: TestbedHandle, number: int) -> dict[str, str]:
    return {**testbed.env, "CORRAL_ROOT": testbed.state["nodes"][number - 1]["root"]}


def _watcher(testbed: TestbedHandle, number: int = 1, *args: str) -> None:
    run_tool(["corral-watcher", *args], _node_env(testbed, number))


def _status(testbed: TestbedHandle) -> dict[str, str]:
    out = testbed.run("gnt-instance", "list", "--no-headers", "-o", "name,status",
                      *INSTANCES).stdout
    return dict(line.split() for line in out.splitlines())


def _kill_behind_corrals_back(testbed: TestbedHandle, name: str) -> None:
    state = _node_paths(testbed, 2).hypervisor_state_dir / "fake" / f"{name}.json"
    state.unlink()


def _trail(testbed: TestbedHandle, name: str) -> list[list[object]]:
    path = _node_paths(testbed, 2).instance_reason_dir / name
    data: list[list[object]] = json.loads(path.read_text())
    return data


@pytest.fixture
def instances(testbed: TestbedHandle):  # type: ignore[no-untyped-def]
    for name in INSTANCES:
        # --no-install leaves a new instance stopped, as in Ganeti
        testbed.run("gnt-instance", "add", "-t", "diskless", "--no-install",
                    "-n", "node2.testbed", name)
        testbed.run("gnt-instance", "startup", name)
    testbed.run("gnt-instance", "shutdown", "--reason", "not needed now", INSTANCES[1])
    try:
        yield testbed
    finally:
        testbed.run("gnt-cluster", "watcher", "continue")
        for name in INSTANCES:
            testbed.run("gnt-instance", "remove", "-f", name, check=False)


def test_watcher_restarts_a_killed_instance_and_leaves_a_stopped_one(
        instances: TestbedHandle) -> None:
    testbed = instances
    up, stopped = INSTANCES
    assert _trail(testbed, stopped)[0][:2] == ["user", "not needed now"]
    assert _trail(testbed, stopped)[-1][0] == "gnt:daemon:noded:shutdown"
    _kill_behind_corrals_back(testbed, up)
    assert _status(testbed) == {up: "ERROR_down", stopped: "ADMIN_down"}

    # Paused on every node: a pass changes nothing.
    out = testbed.run("gnt-cluster", "watcher", "pause", "1h").stdout
    assert out.startswith("The watcher is paused until ") and out.endswith(".\n")
    for number in (1, 2, 3):
        until = int(_node_paths(testbed, number).watcher_pause_file.read_text())
        assert 3500 < until - time.time() <= 3600
    assert testbed.run("gnt-cluster", "watcher", "info").stdout == out
    _watcher(testbed)
    assert _status(testbed)[up] == "ERROR_down"

    assert testbed.run("gnt-cluster", "watcher", "continue").stdout == \
        "The watcher is no longer paused.\n"
    assert testbed.run("gnt-cluster", "watcher", "info").stdout == \
        "The watcher is not paused.\n"
    assert not _node_paths(testbed, 3).watcher_pause_file.exists()
    _watcher(testbed)
    assert _status(testbed) == {up: "running", stopped: "ADMIN_down"}
    # The restart's trail: the watcher's reason, the queue's and the node daemon's.
    trail = _trail(testbed, up)
    assert trail[0][:2] == ["gnt:watcher", f"Restarting instance {up}"]
    assert [entry[0] for entry in trail][1:] == ["gnt:opcode:instance_startup",
                                                 "gnt:daemon:noded:start"]
    log = (_node_paths(testbed, 1).log_dir / "watcher.log").read_text()
    assert f"restarting instance {up} (attempt 1 of 5)" in log

    # A second pass finds everything as wanted: it submits nothing.
    jobs_before = testbed.run("gnt-job", "list", "--no-headers", "-o", "id").stdout
    _watcher(testbed)
    assert testbed.run("gnt-job", "list", "--no-headers", "-o", "id").stdout == jobs_before


def test_bad_watcher_commands_are_ganetis_errors(testbed: TestbedHandle) -> None:
    for args, message in ((["pause"], "Missing pause duration"),
                          (["pause", "abc"], "Invalid time specification 'abc'"),
                          (["bogus"], "Command 'bogus' is not valid.")):
        proc = testbed.run("gnt-cluster", "watcher", *args, check=False)
        assert proc.returncode == 1
        assert proc.stderr.splitlines() == [
            "Failure: prerequisites not met for this operation:",
            "error type: wrong_input, error details:", message]


def test_watcher_starts_a_node_daemon_that_died(instances: TestbedHandle) -> None:
    testbed = instances
    node2 = _node_paths(testbed, 2)
    before = _trail(testbed, INSTANCES[1])
    pid = running_pid(node2.pid_file("noded"))
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # a daemon of this test's testbed, by its pid
    deadline = time.monotonic() + 10
    while running_pid(node2.pid_file("noded")) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running_pid(node2.pid_file("noded")) is None
    _watcher(testbed, 2)
    assert running_pid(node2.pid_file("noded")) not in (None, pid)
    # The node answers again, and its files outlived the daemon.
    assert _status(testbed)[INSTANCES[1]] == "ADMIN_down"
    assert _trail(testbed, INSTANCES[1]) == before


# -- the monitoring daemon and the metrics ------------------------------------------------

def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _mond(testbed: TestbedHandle, number: int, path: str) -> tuple[int, bytes]:
    ip = testbed.state["nodes"][number - 1]["ip"]
    return _get(f"http://{ip}:{testbed.state['ports']['mond']}{path}")


def _samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text.decode())
            for sample in family.samples}


def test_mond_reports_instance_status_with_the_reason_trail(instances: TestbedHandle) -> None:
    testbed = instances
    up, stopped = INSTANCES
    status, body = _mond(testbed, 2, "/1/list/collectors")
    assert status == 200
    listed = json.loads(body)
    for entry in (["cpu-avg-load", "default", 0], ["diskstats", "storage", 0],
                  ["lv", "storage", 0], ["inst-status-kvm", "instance", 1],
                  ["inst-status-fake", "instance", 1], ["storage", "storage", 0],
                  ["hypervisor", "hypervisor", 0]):
        assert entry in listed
    assert _mond(testbed, 2, "/") == (200, b"[1]")
    assert _mond(testbed, 2, "/1") == (200, b"null")
    assert _mond(testbed, 2, "/1/report/storage/nope") == (
        404, b"Unable to produce a report for the requested resource")
    assert _mond(testbed, 2, "/2") == (404, b"Resource not found")

    def report() -> dict[str, Any]:
        status, body = _mond(testbed, 2, "/1/report/instance/inst-status-fake")
        assert status == 200
        data: dict[str, Any] = json.loads(body)
        return data

    # (the testbed's mond keeps no report cache: each report is fresh)
    first = report()
    assert (first["name"], first["version"], first["format_version"], first["category"],
            first["kind"]) == ("inst-status-fake", "B", 1, "instance", 1)
    assert first["timestamp"] > 10**18
    by_name = {i["name"]: i for i in first["data"]["instances"]}
    assert (by_name[stopped]["adminState"], by_name[stopped]["actualState"]) == \
        ("down", "shutdown")
    assert by_name[stopped]["status"] == {"code": 0, "message": ""}
    assert by_name[stopped]["state_reason"] == _trail(testbed, stopped)
    assert by_name[up]["actualState"] == "running" and by_name[up]["uptime"] is not None
    assert first["data"]["status"]["code"] == 0

    # A node daemon restart loses nothing: the report reads the files it left.
    node2 = _node_paths(testbed, 2)
    pid = running_pid(node2.pid_file("noded"))
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    run_tool(["corral-daemons", "start"], _node_env(testbed, 2))
    testbed.run("gnt-instance", "startup", "--reason", "back to work", stopped)
    by_name = {i["name"]: i for i in report()["data"]["instances"]}
    assert by_name[stopped]["adminState"] == "up"
    assert by_name[stopped]["state_reason"][0][:2] == ["user", "back to work"]
    assert by_name[stopped]["state_reason"][-1][0] == "gnt:daemon:noded:start"

    _kill_behind_corrals_back(testbed, up)
    broken = report()["data"]
    assert {i["name"]: i["status"]["code"] for i in broken["instances"]}[up] == 4
    assert broken["status"] == {"code": 4,
                                "message": "The instance is not running as it should be"}
    _watcher(testbed)

    samples = _samples(_mond(testbed, 2, "/metrics")[1])
    assert samples[("corral_instance_up", (("hypervisor", "fake"), ("instance", up)))] == 1
    assert samples[("corral_instance_admin_up",
                    (("hypervisor", "fake"), ("instance", stopped)))] == 1
    assert samples[("corral_instance_memory_bytes",
                    (("hypervisor", "fake"), ("instance", up)))] == 128 << 20
    assert any(name == "corral_node_storage_free_bytes" for name, _labels in samples)


def test_master_metrics_after_a_known_workload(testbed: TestbedHandle) -> None:
    master = testbed.state["nodes"][0]["ip"]
    url = f"http://{master}:{testbed.state['ports']['metrics']}/metrics"

    def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        status, body = _get(url)
        assert status == 200
        return _samples(body)

    def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
              **labels: str) -> float:
        return samples.get((name, tuple(sorted(labels.items()))), 0.0)

    before = scrape()
    for _ in range(3):
        testbed.run("gnt-debug", "delay", "0")
    after = scrape()
    assert value(after, "corral_jobs_finished_total", status="success",
                 opcode="OP_TEST_DELAY") - value(
        before, "corral_jobs_finished_total", status="success", opcode="OP_TEST_DELAY") == 3
    assert value(after, "corral_opcode_duration_seconds_count", opcode="OP_TEST_DELAY") >= 3
    assert value(after, "corral_lock_wait_seconds_count", opcode="OP_TEST_DELAY") >= 3
    assert value(after, "corral_jobs", status="success", opcode="OP_TEST_DELAY") >= 3
    assert value(after, "corral_job_queue_length") == 0
    serial = int(json.loads(testbed.run("gnt-cluster", "info", "--json").stdout)[
        "config_serial"])
    assert value(after, "corral_config_serial") == serial
    assert value(after, "corral_rpc_duration_seconds_count", procedure="jobs_replicate") > 0
    for node in ("node2.testbed", "node3.testbed"):
        assert (("corral_replication_lag", (("candidate", node), ("stream", "configuration")))
                in after)


# -- cluster-wide commands -------------------------------------------------------------

def test_command_runs_on_every_node_through_the_node_daemons(testbed: TestbedHandle) -> None:
    out = testbed.run("gnt-cluster", "command", "echo out; echo err >&2; pwd; exit 3").stdout
    blocks = out.split("------------------------------------------------\n")[1:]
    assert [block.splitlines()[0] for block in blocks] == [
        "node: node2.testbed", "node: node3.testbed", "node: node1.testbed"]  # master last
    for number, block in zip((2, 3, 1), blocks, strict=True):
        root = testbed.state["nodes"][number - 1]["root"]
        assert block.splitlines()[1:] == ["out", root, "err", "", "return code = 3"]
    out = testbed.run("gnt-cluster", "command", "-M", "-n", "node3.testbed",
                      "printf 'a\\nb\\n'").stdout
    assert out.splitlines() == ["------------------------------------------------",
                                "node3.testbed: a", "node3.testbed: b", "return code = 0"]
    out = testbed.run("gnt-cluster", "command", "--failure-only", "-g", "default",
                      "test", "-d", "/nonexistent-ops").stdout
    assert out.count("return code = 1") == 3
    assert testbed.run("gnt-cluster", "command", "--failure-only", "true").stdout == ""
    bad = testbed.run("gnt-cluster", "command", "-n", "nosuch", "true", check=False)
    assert bad.returncode == 1 and "Node name nosuch not found" in bad.stderr


def test_copyfile_copies_to_every_other_node(testbed: TestbedHandle, tmp_path: Path) -> None:
    source = tmp_path / "ops-copy.conf"
    source.write_bytes(b"key = value\n" * 1000)
    source.chmod(0o640)
    os.utime(source, (1_700_000_000, 1_700_000_000))
    assert testbed.run("gnt-cluster", "copyfile", str(source)).stdout == ""
    for number in (2, 3):
        copy = _node_paths(testbed, number).node_path(str(source))
        assert copy.read_bytes() == source.read_bytes()
        assert (copy.stat().st_mode & 0o777, copy.stat().st_mtime) == (0o640, 1_700_000_000)
    assert not _node_paths(testbed, 1).node_path(str(source)).exists()  # the source's node
    missing = testbed.run("gnt-cluster", "copyfile", str(tmp_path / "none"), check=False)
    assert missing.returncode == 1
    assert missing.stderr.splitlines()[-1] == f"No such filename '{tmp_path / 'none'}'"


def test_renew_crypto_keeps_instances_running_and_nodes_answering(
        instances: TestbedHandle) -> None:
    testbed = instances
    up = INSTANCES[0]
    before = {n: (_node_paths(testbed, n).ca_cert.read_text(),
                  _node_paths(testbed, n).node_cert.read_text(),
                  _node_paths(testbed, n).confd_hmac_key.read_bytes()) for n in (1, 2, 3)}
    refused = testbed.run("gnt-cluster", "renew-crypto", "--new-rapi-certificate",
                          "--rapi-certificate=/nonexistent", "-f", check=False)
    assert refused.returncode == 1 and refused.stderr.startswith(
        "Only one of the --new-rapi-certificate and --rapi-certificate options")
    out = testbed.run("gnt-cluster", "renew-crypto", "-f", "--new-cluster-certificate",
                      "--new-confd-hmac-key", "--new-rapi-certificate",
                      "--new-cluster-domain-secret").stdout.splitlines()
    assert out[0].startswith("Updating certificates now.")
    assert out[-1].startswith("All requested certificates and keys have been replaced.")
    cas = {_node_paths(testbed, n).ca_cert.read_text() for n in (1, 2, 3)}
    assert len(cas) == 1 and cas.pop().count("BEGIN CERTIFICATE") == 1
    for number in (1, 2, 3):
        paths = _node_paths(testbed, number)
        ca, cert, key = before[number]
        assert paths.ca_cert.read_text() != ca and paths.node_cert.read_text() != cert
        assert paths.confd_hmac_key.read_bytes() != key
        assert not list(paths.data_dir.glob("*.new"))
    # The instance ran throughout; every node answers the master with the new certificates.
    assert _status(testbed)[up] == "running"
    nodes = testbed.run("gnt-node", "list", "--no-headers", "-o", "name,mfree").stdout
    assert all(line.split()[1] != "?" for line in nodes.splitlines()), nodes
    testbed.run("gnt-instance", "reboot", up)
    # confd answers with the new key, RAPI with its new certificate.
    assert run_tool(["corral-confd-query", "ping"], testbed.env).stdout.strip()
    rapi = testbed.state["rapi"]
    context = ssl.create_default_context(cafile=rapi["ca"])
    request = urllib.request.Request(f"{rapi['url']}/version", headers={
        "Authorization": "Basic " + base64.b64encode(
            f"{rapi['user']}:{rapi['password']}".encode()).decode()})
    with urllib.request.urlopen(request, context=context, timeout=10) as answer:
        assert answer.read().strip() == b"2"

    # A secret given in a file reaches every node, and never the job (others read jobs).
    secret = _node_paths(testbed, 1).root / "ops-domain-secret"
    secret.write_text("0123456789abcdef-ops-secret\n")
    testbed.run("gnt-cluster", "renew-crypto", "-f", f"--cluster-domain-secret={secret}")
    for number in (1, 2, 3):
        assert _node_paths(testbed, number).cluster_domain_secret.read_text() == \
            secret.read_text()
    jobs = testbed.run("gnt-job", "list", "--no-headers", "-o", "id").stdout.split()
    shown = testbed.run("gnt-job", "info", jobs[-1]).stdout
    assert "OP_CLUSTER_RENEW_CRYPTO" in shown and "ops-secret" not in shown
