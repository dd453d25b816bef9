"""Master failover on the 3-node testbed: kill -9 the master daemon with queued jobs,
fail over to a candidate, and every job is there and runs; the old master becomes a
candidate that follows the new master; master-ping tells the two apart."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from pathlib import Path

from corral import daemons
from corral.paths import Paths
from corral.utils.process import running_pid
from corral.x509 import load_cert_info
from tests.conftest import TestbedHandle, run_testbed, run_tool


def _paths(testbed: TestbedHandle, index: int) -> Paths:
    return Paths(Path(testbed.state["nodes"][index - 1]["root"]))


def _env(testbed: TestbedHandle, index: int) -> dict[str, str]:
    return {**testbed.env, "CORRAL_ROOT": str(_paths(testbed, index).root)}


def _serial(db: Path) -> int:
    conn = sqlite3.connect(f"{db.absolute().as_uri()}?mode=ro", uri=True)
    try:
        [(value,)] = conn.execute("SELECT value FROM meta WHERE key = 'serial'").fetchall()
    finally:
        conn.close()
    return int(value)


def _jobs(env: dict[str, str]) -> dict[int, str]:
    out = run_tool(["gnt-job", "list", "--no-headers", "-o", "id,status"], env).stdout
    return {int(line.split()[0]): line.split()[1] for line in out.splitlines()}


def test_kill_master_fail_over_and_every_job_is_there(testbed: TestbedHandle) -> None:
    old = testbed.env
    run_tool(["gnt-filter", "add", "--action", "PAUSE", "--predicates",
              '[["opcode", ["=", "OP_ID", "OP_TEST_DELAY"]]]'], old)
    queued = [int(run_tool(["gnt-debug", "delay", "--submit", "--print-jobid", "0"], old)
                  .stdout.split()[0]) for _ in range(10)]
    before = _jobs(old)
    assert all(before[job] == "queued" for job in queued)
    pid = running_pid(_paths(testbed, 1).pid_file("masterd"))
    assert pid is not None
    os.kill(pid, signal.SIGKILL)

    new = _env(testbed, 2)
    out = run_tool(["gnt-cluster", "master-failover"], new).stdout
    assert "node2.testbed is the master now (was node1.testbed)" in out
    assert run_tool(["gnt-cluster", "getmaster"], new).stdout.strip() == "node2.testbed"
    # Every job the old master had is there, with the state it had.
    assert _jobs(new) == before
    roles = run_tool(["gnt-node", "list", "--no-headers", "-o", "name,role"], new).stdout
    assert roles.split() == ["node1.testbed", "C", "node2.testbed", "M", "node3.testbed", "C"]
    # The paused jobs run once the filter goes.
    [filter_uuid] = run_tool(["gnt-filter", "list", "--no-headers", "-o", "uuid"],
                             new).stdout.split()
    run_tool(["gnt-filter", "delete", filter_uuid], new)
    for job in queued:
        run_tool(["gnt-job", "wait", str(job)], new)
    assert all(_jobs(new)[job] == "success" for job in queued)

    # The old master is a candidate now and follows the new one.
    assert run_tool(["gnt-cluster", "master-ping"], new, check=False).returncode == 0
    assert run_tool(["gnt-cluster", "master-ping"], old, check=False).returncode == 1
    run_tool(["gnt-cluster", "add-tags", "after-failover"], new)
    target = _serial(_paths(testbed, 2).config_db)
    replica = _paths(testbed, 1).config_replica
    deadline = time.monotonic() + 30
    while _serial(replica) != target and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _serial(replica) == target
    assert not _paths(testbed, 1).config_db.exists()


def test_failover_needs_a_majority_or_no_voting(testbed: TestbedHandle) -> None:
    new = _env(testbed, 2)
    # node1 (the master) and node3 down: one candidate of three cannot elect itself.
    daemons.stop(_paths(testbed, 1))
    daemons.stop(_paths(testbed, 3))
    refused = run_tool(["gnt-cluster", "master-failover"], new, check=False)
    assert refused.returncode == 1 and "majority" in refused.stderr
    assert not _paths(testbed, 2).config_db.exists()
    # Without the master's client certificate no node would take changes from it.
    certificate = _paths(testbed, 2).master_client_cert
    certificate.rename(certificate.with_suffix(".away"))
    lacking = run_tool(["gnt-cluster", "master-failover", "--no-voting", "--yes-do-it"], new,
                       check=False)
    assert lacking.returncode == 1 and "lacks the master's client certificate" in lacking.stderr
    certificate.with_suffix(".away").rename(certificate)
    forced = run_tool(["gnt-cluster", "master-failover", "--no-voting", "--yes-do-it"], new)
    assert "node2.testbed is the master now" in forced.stdout
    # RAPI starts there with a certificate that names its new node.
    rapi = load_cert_info(_paths(testbed, 2).rapi_cert.read_bytes())
    assert "node2.testbed" in rapi.dns_names and "127.0.1.2" in rapi.ip_addresses
    assert run_tool(["gnt-cluster", "master-ping"], new, check=False).returncode == 0
    # A node that is no candidate, or the master itself, is told why it cannot.
    again = run_tool(["gnt-cluster", "master-failover"], new, check=False)
    assert again.returncode == 1 and "master already" in again.stderr


def test_testbed_fails_over_and_confd_follows(testbed: TestbedHandle) -> None:
    """Every candidate runs confd; its answers follow configuration changes and a
    failover done with the testbed's own command."""
    node2 = _env(testbed, 2)
    assert all(running_pid(_paths(testbed, i).pid_file("confd")) for i in (1, 2, 3))
    testbed.run("gnt-instance", "add", "-t", "diskless", "--no-install", "--no-start",
                "-n", "node3.testbed", "--net", "0:mode=routed,ip=192.0.2.50,link=10",
                "ip1.testbed")

    def ask(env: dict[str, str], *query: str) -> str:
        deadline = time.monotonic() + 10
        while True:
            out = run_tool(["corral-confd-query", *query], env, check=False).stdout.strip()
            if out or time.monotonic() > deadline:
                return out
            time.sleep(0.1)

    assert ask(node2, "node-pip-by-instance-ip", "192.0.2.50", "--link", "10") == "127.0.1.3"
    assert ask(node2, "cluster-master") == "node1.testbed"
    proc = run_testbed("failover", "--dir", str(testbed.dir), "--to", "3")
    assert proc.returncode == 0, proc.stderr
    testbed.reload()
    assert testbed.state["master"] == "node3.testbed"
    assert testbed.run("gnt-cluster", "getmaster").stdout.strip() == "node3.testbed"
    deadline = time.monotonic() + 10
    while ask(node2, "cluster-master") != "node3.testbed" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ask(node2, "cluster-master") == "node3.testbed"
    assert ask(node2, "node-role", "node1.testbed") == "candidate"
