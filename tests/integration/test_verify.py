"""gnt-cluster verify on the 3-node testbed: things broken behind corral's back are
reported with Ganeti's codes, in both output forms, with the exit codes scripts test.

Every test puts back what it broke, so they share the module's testbed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral import daemons
from corral.paths import Paths
from corral.utils.process import stop_daemon
from tests.conftest import TestbedHandle

pytestmark = pytest.mark.shared_testbed

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
FINDING = re.compile(r"^\S+ \S+ +\d+ [\d:]+ \d+   - (\w+):(\w+):(\w+):([^:]*):(.*)$")


def node_paths(testbed: TestbedHandle, index: int) -> Paths:
    """Paths of testbed node ``index`` (1-based)."""
    return Paths(Path(testbed.state["nodes"][index - 1]["root"]))


def fake_dir(testbed: TestbedHandle, index: int) -> Path:
    return node_paths(testbed, index).hypervisor_state_dir / "fake"


def verify(testbed: TestbedHandle, *args: str) -> tuple[int, str, list[tuple[str, ...]]]:
    """Exit code, standard output and the findings ``(severity, code, kind, item,
    message)`` of ``gnt-cluster verify --error-codes ARGS``."""
    proc = testbed.run("gnt-cluster", "verify", "--error-codes", *args, check=False)
    found = [m.groups() for line in proc.stdout.splitlines() if (m := FINDING.match(line))]
    return proc.returncode, proc.stdout, found


def clean(testbed: TestbedHandle, attempts: int = 20) -> None:
    """Verify finds nothing; a candidate whose node daemon just came back may need a
    moment to get the configuration again (the master retries every 5 s)."""
    for _ in range(attempts):
        code, out, found = verify(testbed)
        if code == 0 and not found:
            return
        if not all(f[1] == "ECLUSTERFILECHECK" and "replica" in f[4] for f in found):
            break
        subprocess.run(["sleep", "1"], check=True)
    raise AssertionError(f"verify is not clean:\n{out}")


@pytest.fixture
def instances(testbed: TestbedHandle) -> Iterator[None]:
    """``up.testbed`` running on node2 (diskless) and ``disk.testbed`` (a file disk,
    stopped) on node3; removed afterwards."""
    testbed.run("gnt-instance", "add", "-t", "diskless", "-n", "node2.testbed",
                "--no-install", "up.testbed")
    testbed.run("gnt-instance", "startup", "up.testbed")
    testbed.run("gnt-instance", "add", "-t", "file", "-n", "node3.testbed", "--no-install",
                "--no-start", "--disk", "0:size=8M", "disk.testbed")
    try:
        yield
    finally:
        for name in ("up.testbed", "disk.testbed"):
            testbed.run("gnt-instance", "remove", "-f", name, check=False)


def test_a_sound_cluster_verifies_clean_in_ganetis_words(testbed: TestbedHandle) -> None:
    code, out, found = verify(testbed)
    assert (code, found) == (0, [])
    lines = out.splitlines()
    assert re.fullmatch(r"Submitted jobs \d+, \d+", lines[0])
    assert re.fullmatch(r"Waiting for job \d+ \.\.\.", lines[1])
    steps = [line.split(" ", 5)[5] for line in lines if " * " in line]
    assert steps[:5] == ["* Verifying cluster config", "* Verifying cluster certificate files",
                         "* Verifying hypervisor parameters",
                         "* Verifying all nodes belong to an existing group",
                         "* Verifying group 'default'"]
    assert "* Verifying node status" in steps and "* Verifying instance status" in steps


def test_breakages_behind_corrals_back_are_reported(testbed: TestbedHandle, instances: None,
                                                    tmp_path: Path) -> None:
    n2, n3 = node_paths(testbed, 2), node_paths(testbed, 3)
    disk = next(p for p in n3.node_path("/srv/corral/file-storage").rglob("*") if p.is_file())
    cluster_disk = "/" + str(disk.relative_to(n3.root))
    stray = n3.node_path("/srv/corral/file-storage/stray/old.disk0")
    key = n2.confd_hmac_key
    saved_key = key.read_bytes()
    # the instance stops behind corral's back, runs on a node it does not belong to,
    # an unknown one runs on node1, node2's confd key changes, a disk file is lost and
    # an unknown one appears
    state = fake_dir(testbed, 2) / "up.testbed.json"
    saved_state = state.read_bytes()
    for index in (1, 3):
        fake_dir(testbed, index).mkdir(parents=True, exist_ok=True)
    shutil.copy(state, fake_dir(testbed, 3) / "up.testbed.json")
    state.unlink()
    (fake_dir(testbed, 1) / "stranger.testbed.json").write_bytes(saved_state)
    key.write_bytes(b"not the cluster's key\n")
    shutil.move(disk, tmp_path / "disk")
    stray.parent.mkdir()
    stray.write_bytes(b"")
    try:
        code, _out, found = verify(testbed)
        assert code == 1
        codes = {(f[0], f[1], f[3]) for f in found}
        assert ("ERROR", "EINSTANCEDOWN", "up.testbed") in codes
        assert ("ERROR", "EINSTANCEWRONGNODE", "up.testbed") in codes
        assert ("ERROR", "ENODEORPHANINSTANCE", "node1.testbed") in codes
        assert ("ERROR", "EINSTANCEMISSINGDISK", "disk.testbed") in codes
        assert ("WARNING", "ENODEORPHANLV", "node3.testbed") in codes
        assert ("ERROR", "ECLUSTERFILECHECK", "None") in codes
        messages = {f[1]: f[4] for f in found}
        assert messages["EINSTANCEDOWN"] == "instance not running on its primary node " \
                                            "node2.testbed"
        assert messages["EINSTANCEWRONGNODE"] == "instance should not run on node node3.testbed"
        assert messages["ENODEORPHANINSTANCE"] == "node is running unknown instance " \
                                                  "stranger.testbed"
        assert messages["EINSTANCEMISSINGDISK"] == f"volume {cluster_disk} missing on node " \
                                                   "node3.testbed"
        assert messages["ENODEORPHANLV"] == "volume /srv/corral/file-storage/stray/old.disk0 " \
                                            "is unknown"
        assert any(f[1] == "ECLUSTERFILECHECK" and f[4].startswith(
            "File /var/lib/corral/confd.key found with 2 different checksums") and
            "node2.testbed" in f[4] for f in found)
        # without --error-codes: Ganeti's other form
        plain = testbed.run("gnt-cluster", "verify", check=False).stdout
        assert "  - ERROR: instance up.testbed: instance not running on its primary node " \
               "node2.testbed" in plain
        assert "  - ERROR: cluster : File /var/lib/corral/confd.key found with" in plain
        # every error ignored: warnings only, exit 0
        ignored = [arg for c in sorted({f[1] for f in found if f[0] == "ERROR"})
                   for arg in ("-I", c)]
        code, _out, found = verify(testbed, *ignored)
        assert code == 0 and found and {f[0] for f in found} == {"WARNING"}
    finally:
        state.write_bytes(saved_state)
        (fake_dir(testbed, 3) / "up.testbed.json").unlink(missing_ok=True)
        (fake_dir(testbed, 1) / "stranger.testbed.json").unlink(missing_ok=True)
        key.write_bytes(saved_key)
        shutil.move(tmp_path / "disk", disk)
        shutil.rmtree(stray.parent)
    clean(testbed)


def test_a_stopped_node_daemon_is_enoderpc(testbed: TestbedHandle) -> None:
    paths = node_paths(testbed, 3)
    assert stop_daemon(paths.pid_file("noded")) is not None
    try:
        code, _out, found = verify(testbed)
        assert code == 1
        (rpc,) = [f for f in found if f[1] == "ENODERPC"]
        assert rpc[:4] == ("ERROR", "ENODERPC", "node", "node3.testbed")
        assert rpc[4].startswith("while contacting node: ")
    finally:
        daemons.start(paths)
    clean(testbed)


@pytest.mark.skipif(not LIBFAKETIME.exists(),
                    reason=f"libfaketime ({LIBFAKETIME}, Debian package faketime) is not "
                           "installed: no way to skew one node daemon's clock")
def test_a_node_with_a_skewed_clock_is_enodetime(testbed: TestbedHandle,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    paths = node_paths(testbed, 3)
    stop_daemon(paths.pid_file("noded"))
    try:
        with monkeypatch.context() as env:
            env.setenv("LD_PRELOAD", str(LIBFAKETIME))
            env.setenv("FAKETIME", "+10m")
            env.setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            # libfaketime intercepts every clock read: the daemon's loop check would
            # measure the preloaded library, not corral
            env.setenv("CORRAL_LOOP_CHECK", "0")
            daemons.start(paths, only=["noded"])
        code, _out, found = verify(testbed)
        assert code == 1
        (skew,) = [f for f in found if f[1] == "ENODETIME"]
        assert skew[3] == "node3.testbed"
        diverges = re.fullmatch(r"Node time diverges by at least (\d+\.\d)s from master "
                                r"node time", skew[4])
        # libfaketime's +10m, less the moments between its start and the call
        assert diverges and 500 < float(diverges.group(1)) <= 600.5, skew
    finally:
        stop_daemon(paths.pid_file("noded"))
        assert "LD_PRELOAD" not in os.environ or str(LIBFAKETIME) not in os.environ[
            "LD_PRELOAD"]
        daemons.start(paths, only=["noded"])
    clean(testbed)


def test_an_unknown_group_fails_its_job(testbed: TestbedHandle) -> None:
    proc = testbed.run("gnt-cluster", "verify", "-g", "nosuchgroup", check=False)
    assert proc.returncode == 1
    assert re.match(r"Submitted jobs \d+\nWaiting for job \d+ \.\.\.\n", proc.stdout)
    assert proc.stdout.endswith("1 job(s) failed while verifying the cluster.\n")
    assert re.search(r"Job \d+ has failed: Failure: prerequisites not met for this "
                     r"operation:\nerror type: unknown_entity, error details:\nNode group "
                     r"'nosuchgroup' not found", proc.stderr), proc.stderr
