"""Inter-cluster moves between two testbed clusters that share a domain secret (one
pair of 2-node clusters for the whole module: every test leaves them as it found
them)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.cli.rapi_client import JobFailed, RapiClient
from corral.paths import Paths
from corral.x509 import moves
from tests.conftest import BIN, TestbedHandle, assert_no_daemons, run_testbed, run_tool


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, TestbedHandle]]:
    directory = tmp_path_factory.mktemp("moves") / "pair"
    try:
        proc = run_testbed("pair-up", "--nodes", "2", "--dir", str(directory))
        assert proc.returncode == 0, proc.stderr
        yield {side: TestbedHandle(directory / side, json.loads(
            (directory / side / "testbed.json").read_text()))
            for side in ("source", "destination")}
    finally:
        run_testbed("pair-down", "--dir", str(directory))
        assert_no_daemons(directory / "source")
        assert_no_daemons(directory / "destination")


def _client(handle: TestbedHandle) -> RapiClient:
    rapi = handle.state["rapi"]
    host, port = rapi["url"].removeprefix("https://").rsplit(":", 1)
    return RapiClient(host, int(port), username=rapi["user"], password=rapi["password"],
                      ca_file=rapi["ca"])


def _node_paths(handle: TestbedHandle, number: int) -> Paths:
    return Paths(Path(handle.state["nodes"][number - 1]["root"]))


def _secret(handle: TestbedHandle, number: int = 1) -> str:
    return _node_paths(handle, number).cluster_domain_secret.read_text()


@pytest.fixture
def instance(pair: dict[str, TestbedHandle]) -> Iterator[str]:
    src = pair["source"]
    src.run("gnt-instance", "add", "-t", "file", "--disk", "0:size=16M", "-o",
            "corral-ext4+default", "-n", "node2.source.testbed", "--no-ip-check",
            "--no-name-check", "web1")
    try:
        yield "web1"
    finally:
        src.run("gnt-instance", "remove", "-f", "web1", check=False)


def test_each_cluster_made_a_domain_secret_at_init_and_the_pair_shares_it(
        pair: dict[str, TestbedHandle]) -> None:
    src, dst = pair["source"], pair["destination"]
    assert src.state["cluster_name"] != dst.state["cluster_name"]
    secrets = {_secret(handle, n) for handle in (src, dst) for n in (1, 2)}
    assert len(secrets) == 1
    assert len(moves.read_domain_secret(secrets.pop())) >= 40
    for handle in (src, dst):
        mode = _node_paths(handle, 2).cluster_domain_secret.stat().st_mode
        assert mode & 0o077 == 0


def test_prepare_export_answers_values_signed_with_the_shared_secret(
        pair: dict[str, TestbedHandle], instance: str) -> None:
    src, dst = pair["source"], pair["destination"]
    client = _client(src)
    job = client.request("PUT", f"/2/instances/{instance}/prepare-export", {"mode": "remote"})
    (answer,) = client.wait_for_job(job)
    secret = moves.read_domain_secret(_secret(dst))  # the destination checks with its own
    name = moves.verify_key_name(answer["x509_key_name"], secret)
    verified = moves.verify_signed_certificate(answer["x509_ca"], secret)
    moves.check_handshake(answer["handshake"], secret)
    key = _node_paths(src, 2).crypto_dir / name
    assert (key / "cert").read_text() == verified.pem  # on the primary node, node2
    assert not (_node_paths(src, 1).crypto_dir / name).exists()
    log = src.run("gnt-job", "info", str(job)).stdout
    assert "Generating X509 certificate on node2.source.testbed" in log
    # mode=local needs nothing; a missing mode is refused before a job is queued
    (local,) = client.wait_for_job(client.request(
        "PUT", f"/2/instances/{instance}/prepare-export", {"mode": "local"}))
    assert local is None
    with pytest.raises(Exception, match="mode"):
        client.request("PUT", f"/2/instances/{instance}/prepare-export")
    run_tool(["corral-watcher"], {**os.environ, **src.state["env"],
                                  "CORRAL_ROOT": str(_node_paths(src, 2).root)})
    assert key.exists()  # valid for a day: the watcher keeps it


def _import_body(name: str, handshake: Any, ca: str) -> dict[str, Any]:
    return {"__version__": 1, "mode": "remote-import", "name": name,
            "disk_template": "diskless", "disks": [], "nics": [], "os": "corral-ext4+default",
            "pnode": "node1.destination.testbed", "ip_check": False, "name_check": False,
            "source_handshake": handshake, "source_x509_ca": ca,
            "source_instance_name": "web1"}


def test_the_destination_refuses_forged_foreign_and_expired_certificates_first(
        pair: dict[str, TestbedHandle], instance: str) -> None:
    src, dst = pair["source"], pair["destination"]
    client = _client(src)
    (answer,) = client.wait_for_job(client.request(
        "PUT", f"/2/instances/{instance}/prepare-export", {"mode": "remote"}))
    secret = moves.read_domain_secret(_secret(src))
    _, other_pem = moves.create_move_certificate("intruder")
    header = answer["x509_ca"].split("\n\n", 1)[0]
    old = dt.datetime.now(dt.UTC) - dt.timedelta(days=3)
    cases = {
        "signature": (answer["handshake"], f"{header}\n\n{other_pem.decode()}"),
        "foreign": (answer["handshake"], moves.sign_certificate(other_pem, "another-secret")),
        "expired": (answer["handshake"], moves.sign_certificate(
            moves.create_move_certificate("src", validity=60, now=old)[1], secret)),
        "handshake": (moves.make_handshake("another-secret"), answer["x509_ca"]),
    }
    expected = {
        "signature": "Invalid source X509 CA: the certificate's signature does not match",
        "foreign": "Invalid source X509 CA: the certificate's signature does not match",
        "expired": "Invalid source X509 CA: the certificate expired at",
        "handshake": "Invalid handshake: the handshake's HMAC does not match",
    }
    dest = _client(dst)
    for case, (handshake, ca) in cases.items():
        job = dest.request("POST", "/2/instances",
                           body=_import_body(f"moved-{case}", handshake, ca))
        with pytest.raises(JobFailed, match=expected[case]):
            dest.wait_for_job(job)
    # nothing was made on the destination, the source instance is as it was
    listed = dst.run("gnt-instance", "list", "--no-headers", "-o", "name").stdout.split()
    assert not [name for name in listed if name.startswith("moved-")]
    assert not any(_node_paths(dst, 1).crypto_dir.glob("x509-*"))
    assert src.run("gnt-instance", "list", "--no-headers", "-o", "name").stdout.split() \
        == [instance]


def _move_argv(pair: dict[str, TestbedHandle], tmp_path: Path, name: str,
               *extra: str) -> list[str]:
    """``move-instance`` from the source to node 2 of the destination, its passwords
    in files under ``tmp_path``."""
    src, dst = pair["source"], pair["destination"]
    rapi, dest_rapi = src.state["rapi"], dst.state["rapi"]
    password, dest_password = tmp_path / "password", tmp_path / "dest-password"
    password.write_text(rapi["password"] + "\n")
    dest_password.write_text(dest_rapi["password"] + "\n")
    src_host, src_port = rapi["url"].removeprefix("https://").rsplit(":", 1)
    dst_host, dst_port = dest_rapi["url"].removeprefix("https://").rsplit(":", 1)
    return [str(BIN / "move-instance"), "-v", f"--src-ca-file={rapi['ca']}",
            f"--dest-ca-file={dest_rapi['ca']}", f"--src-rapi-port={src_port}",
            f"--dest-rapi-port={dst_port}", "--src-username", rapi["user"],
            f"--src-password-file={password}", f"--dest-password-file={dest_password}",
            "--dest-primary-node", "node2.destination.testbed", *extra, src_host, dst_host,
            name]


def _move_instance(pair: dict[str, TestbedHandle], tmp_path: Path, name: str,
                   *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_move_argv(pair, tmp_path, name, *extra), capture_output=True,
                          text=True, timeout=180)


def test_move_instance_stops_when_the_clusters_do_not_share_the_secret(
        pair: dict[str, TestbedHandle], instance: str, tmp_path: Path) -> None:
    src, dst = pair["source"], pair["destination"]
    shared = tmp_path / "shared-secret"
    shared.write_text(_secret(src))
    dst.run("gnt-cluster", "renew-crypto", "-f", "--new-cluster-domain-secret")
    try:
        proc = _move_instance(pair, tmp_path, instance)
        assert proc.returncode == 1, proc.stderr
        assert "Invalid handshake" in proc.stderr
        assert instance not in dst.run("gnt-instance", "list", "--no-headers", "-o",
                                       "name").stdout.split()
        assert src.run("gnt-instance", "list", "--no-headers", "-o",
                       "name").stdout.split() == [instance]
    finally:
        dst.run("gnt-cluster", "renew-crypto", "-f", f"--cluster-domain-secret={shared}")
    assert _secret(dst) == _secret(src)


def test_the_watcher_removes_an_abandoned_moves_expired_key(
        pair: dict[str, TestbedHandle]) -> None:
    src = pair["source"]
    node2 = _node_paths(src, 2)
    old = dt.datetime.now(dt.UTC) - dt.timedelta(days=2)
    key_pem, cert_pem = moves.create_move_certificate("node2", now=old)
    stale = node2.crypto_dir / moves.new_key_name(old)
    stale.mkdir(parents=True, mode=0o700)
    (stale / "key").write_bytes(key_pem)
    (stale / "cert").write_bytes(cert_pem)
    run_tool(["corral-watcher"], {**os.environ, **src.state["env"],
                                  "CORRAL_ROOT": str(node2.root)})
    assert not stale.exists()


def _disk_path(handle: TestbedHandle, name: str) -> Path:
    disk_uuid = _client(handle).request("GET", f"/2/instances/{name}")["disk.uuids"][0]
    node = _client(handle).request("GET", f"/2/instances/{name}")["pnode"]
    number = int(node.split(".")[0].removeprefix("node"))
    (found,) = _node_paths(handle, number).root.rglob(f"*{disk_uuid}*")
    return found


@pytest.mark.parametrize("compression", ["none", "gzip", "zstd"])
def test_move_instance_moves_an_instance_and_its_data(
        pair: dict[str, TestbedHandle], tmp_path: Path, compression: str) -> None:
    src, dst = pair["source"], pair["destination"]
    name = f"mv-{compression}"
    keep = compression == "gzip"
    src.run("gnt-instance", "add", "-t", "file", "--disk", "0:size=16M", "-o",
            "corral-ext4+default", "-n", "node1.source.testbed", "--no-ip-check",
            "--no-name-check", name)
    def keys() -> set[Path]:
        return {key for handle in (src, dst) for number in (1, 2)
                for key in _node_paths(handle, number).crypto_dir.glob("x509-*")}

    try:
        disk = _disk_path(src, name)
        before = disk.read_bytes()
        old_keys = keys()
        proc = _move_instance(pair, tmp_path, name, f"--compress={compression}",
                              *(["--keep-source-instance"] if keep else []))
        assert proc.returncode == 0, proc.stderr
        assert f"{name}: Success" in proc.stderr
        assert _disk_path(dst, name).read_bytes() == before
        shown = dst.run("gnt-instance", "list", "--no-headers", "-o", "name,status").stdout
        assert f"{name} running" in shown
        left = src.run("gnt-instance", "list", "--no-headers", "-o", "name").stdout.split()
        assert (name in left) == keep
        assert keys() == old_keys  # both sides removed the move's keys
    finally:
        src.run("gnt-instance", "remove", "-f", name, check=False)
        dst.run("gnt-instance", "remove", "-f", name, check=False)


def _install_slow_os(handle: TestbedHandle) -> None:
    """OS ``slowexport``: corral-ext4 whose export sends 1 MiB, then stalls (so that a
    transfer is caught in the middle)."""
    for node in handle.state["nodes"]:
        os_dir = Paths(Path(node["root"])).node_path("/srv/corral/os")
        target = os_dir / "slowexport"
        if target.exists():
            continue
        shutil.copytree(os_dir / "corral-ext4", target)
        (target / "variants.list").unlink(missing_ok=True)
        export = target / "export"
        export.write_text('#!/bin/sh\n. "$(dirname "$0")/common.sh"\n'
                          'dd if="$EXPORT_DISK_PATH" bs=1M count=1 status=none\n'
                          "exec sleep 120\n")
        export.chmod(0o755)


def _running_importer(handle: TestbedHandle) -> dict[str, Any] | None:
    for node in handle.state["nodes"]:
        for status_file in Paths(Path(node["root"])).impexp_dir.glob("*.json"):
            with contextlib.suppress(ValueError, OSError):
                status = json.loads(status_file.read_text())
                if status.get("direction") == "import" and status.get("state") == "running":
                    return dict(status)
    return None


def _wait_for_jobs(handle: TestbedHandle) -> None:
    for _ in range(600):
        statuses = handle.run("gnt-job", "list", "--no-headers", "-o", "status").stdout.split()
        if all(status in ("success", "error", "canceled") for status in statuses):
            return
        time.sleep(0.1)
    raise AssertionError(f"jobs still running on {handle.state['cluster_name']}")


def test_an_importer_killed_in_the_middle_leaves_nothing_and_the_source_runs(
        pair: dict[str, TestbedHandle], tmp_path: Path) -> None:
    src, dst = pair["source"], pair["destination"]
    _install_slow_os(src)
    _install_slow_os(dst)
    name = "mv-killed"
    src.run("gnt-instance", "add", "-t", "file", "--disk", "0:size=16M", "-o", "slowexport",
            "-n", "node1.source.testbed", "--no-ip-check", "--no-name-check", name)
    old_keys = {key for handle in (src, dst) for number in (1, 2)
                for key in _node_paths(handle, number).crypto_dir.glob("x509-*")}
    try:
        mover = subprocess.Popen(_move_argv(pair, tmp_path, name), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        try:
            status = None
            for _ in range(600):
                status = _running_importer(dst)
                if status is not None or mover.poll() is not None:
                    break
                time.sleep(0.05)
            assert status is not None, "the import never started receiving"
            for pid in status["pids"]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            _, stderr = mover.communicate(timeout=120)
        finally:
            if mover.poll() is None:
                mover.kill()
                mover.wait()
        assert mover.returncode == 1, stderr
        assert "transfer failed after" in stderr, stderr  # the bytes done are named
        _wait_for_jobs(dst)  # the tool may stop waiting before the import's job ends
        # nothing of the import is left on the destination
        listed = dst.run("gnt-instance", "list", "--no-headers", "-o", "name").stdout.split()
        assert name not in listed
        for node in dst.state["nodes"]:
            storage = Paths(Path(node["root"])).node_path("/srv/corral/file-storage")
            assert not [p for p in storage.rglob("*") if p.is_file()], "disk files left"
        new_keys = {key for handle in (src, dst) for number in (1, 2)
                    for key in _node_paths(handle, number).crypto_dir.glob("x509-*")}
        assert new_keys == old_keys
        # the source instance is as it was, running
        shown = src.run("gnt-instance", "list", "--no-headers", "-o", "name,status").stdout
        assert f"{name} running" in shown
    finally:
        src.run("gnt-instance", "remove", "-f", name, check=False)
        dst.run("gnt-instance", "remove", "-f", name, check=False)
