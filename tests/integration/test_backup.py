"""``gnt-backup`` on the shared 3-node testbed: export and import through the OS
scripts and the disk transport, list and remove, the import of an export Ganeti 3.0
made, a transfer cut in the middle and an export directory too small."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from corral.paths import Paths
from tests.conftest import TestbedHandle
from tests.integration.test_filter_seed import _rapi

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "share" / "os" / "corral-tiny"
GANETI_EXPORT = ROOT / "tests" / "data" / "ganeti-export" / "o-inst1.example"
SLOW_EXPORT = ROOT / "tests" / "data" / "os" / "slowexport" / "export"
#: sha256 of the disk image of the recorded Ganeti export (26 000 bytes of text, then
#: zeros to 4 MiB), as Ganeti 3.0 exported it.
#: The bytes at the start of a corral-tiny disk that its scripts write.
BLOCK = 4096
GANETI_DISK_SHA256 = "1d74dd3f06290a56186de3fbe9e0d0f5d1ba7cbe61c2584b20005fe861d0a34a"


def _paths(testbed: TestbedHandle, index: int) -> Paths:
    return Paths(Path(testbed.state["nodes"][index - 1]["root"]))


def _install_os(testbed: TestbedHandle, name: str, *, variants: bool = False,
                export: Path | None = None) -> None:
    for index in range(1, len(testbed.state["nodes"]) + 1):
        target = _paths(testbed, index).node_path("/srv/corral/os") / name
        if target.exists():
            continue
        shutil.copytree(TINY, target)
        if variants:
            (target / "variants.list").write_text("default\n")
        if export is not None:
            shutil.copy(export, target / "export")


def _disk(testbed: TestbedHandle, index: int, instance: str) -> Path:
    """The (only) file disk of ``instance`` on node ``index``."""
    out = testbed.run("gnt-instance", "info", instance).stdout
    [line] = [line for line in out.splitlines() if "logical_id" in line]
    path = line.split("'")[-2]
    return _paths(testbed, index).node_path(path)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _exports(testbed: TestbedHandle) -> list[list[str]]:
    out = testbed.run("gnt-backup", "list", "--no-headers", "--separator", "|").stdout
    return [line.split("|") for line in out.splitlines() if line]


@pytest.mark.shared_testbed
def test_export_import_round_trip(testbed: TestbedHandle) -> None:
    """Export a running instance with zstd, import it under another name on another
    node, compare the disks; the source keeps running; list and remove."""
    _install_os(testbed, "corral-tiny")
    testbed.run("gnt-instance", "add", "-t", "file", "-o", "corral-tiny", "-n",
                "node2.testbed", "--disk", "0:size=8M", "--no-name-check", "--no-ip-check",
                "src.testbed")
    disk = _disk(testbed, 2, "src.testbed")
    data = os.urandom(3 << 20) + bytes(3 << 20) + os.urandom(1 << 20)
    with disk.open("r+b") as f:
        f.write(data)
    want = _sha(disk)
    out = testbed.run("gnt-backup", "export", "-n", "node3.testbed",
                      "--transport-compression", "zstd", "src.testbed")
    log = out.stdout + out.stderr
    assert "disk/0" in log and "on the wire, zstd" in log
    export = _paths(testbed, 3).export_dir / "src.testbed"
    config = (export / "config.ini").read_text()
    assert "[export]" in config and "os = corral-tiny" in config
    assert "disk0_size = 8" in config and "compression = none" in config
    dump = next(line.split(" = ")[1] for line in config.splitlines()
                if line.startswith("disk0_dump"))
    assert _sha(export / dump) == want
    assert _exports(testbed) == [["node3.testbed", "src.testbed"]]
    status = testbed.run("gnt-instance", "list", "--no-headers", "-o", "status",
                         "src.testbed").stdout.split()
    assert status == ["running"]

    testbed.run("gnt-backup", "import", "-n", "node1.testbed", "--src-node",
                "node3.testbed", "--src-dir", "src.testbed", "--net", "0:mac=generate",
                "--compress", "gzip", "--no-name-check", "--no-ip-check", "copy.testbed")
    copy = _disk(testbed, 1, "copy.testbed").read_bytes()
    # The rename script (the name changed) rewrote the OS's configuration block at the
    # start of the disk; everything after it is the exported data.
    assert b"copy.testbed" in copy[:BLOCK]
    assert len(copy) == len(data) + (1 << 20) and copy[BLOCK:] == disk.read_bytes()[BLOCK:]
    testbed.run("gnt-backup", "remove", "src.testbed")
    assert _exports(testbed) == []
    assert not export.exists()
    # RAPI: PUT /2/instances/N/export, Ganeti's body (destination is the node).
    rapi = _rapi(testbed)
    status, job_id, _ = rapi.request("PUT", "/2/instances/copy.testbed/export",
                                     {"mode": "local", "destination": "node2.testbed",
                                      "shutdown": False})
    assert status == 200
    job = rapi.wait(job_id)
    assert job["status"] == "success", job
    assert _exports(testbed) == [["node2.testbed", "copy.testbed"]]
    testbed.run("gnt-backup", "remove", "copy.testbed")
    for name in ("src.testbed", "copy.testbed"):
        testbed.run("gnt-instance", "remove", "-f", name)


@pytest.mark.shared_testbed
def test_import_of_an_export_made_by_ganeti(testbed: TestbedHandle) -> None:
    """The export directory Ganeti 3.0 wrote (config.ini as recorded; the image
    rebuilt from its known contents) imports into corral."""
    _install_os(testbed, "o-dd", variants=True)
    target = _paths(testbed, 1).export_dir / "o-inst1.example"
    target.mkdir(parents=True)
    shutil.copy(GANETI_EXPORT / "config.ini", target / "config.ini")
    image = b"corral-ganeti-export-test\n" * 1000
    (target / "9c08bf95-a03d-4ba7-acba-ee84062fabc9").write_bytes(
        image + bytes((4 << 20) - len(image)))
    assert ["node1.testbed", "o-inst1.example"] in _exports(testbed)
    testbed.run("gnt-backup", "import", "-n", "node2.testbed", "--src-node", "node1.testbed",
                "--no-name-check", "--no-ip-check", "--net", "0:mac=generate,link=br0",
                "o-inst1.example")
    rows = testbed.run("gnt-instance", "list", "--no-headers", "--separator", "|", "-o",
                       "os,disk_template,disk.sizes,be/maxmem", "o-inst1.example").stdout
    assert rows.split() == ["o-dd+default|file|4|128"]
    assert _sha(_disk(testbed, 2, "o-inst1.example")) == GANETI_DISK_SHA256
    testbed.run("gnt-instance", "remove", "-f", "o-inst1.example")
    testbed.run("gnt-backup", "remove", "o-inst1.example")


def _running_importer(paths: Paths) -> dict[str, object]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for path in paths.impexp_dir.glob("*.json"):
            status = json.loads(path.read_text())
            if status.get("direction") == "import" and status.get("state") == "running":
                return status
        time.sleep(0.1)
    raise AssertionError("no importer started running")


@pytest.mark.shared_testbed
def test_cut_transfer_and_full_directory(testbed: TestbedHandle) -> None:
    """Killing the importer mid-way fails the job with the bytes sent and leaves no
    export; an export bigger than the free space fails before anything is sent,
    naming the node."""
    _install_os(testbed, "slowexport", export=SLOW_EXPORT)
    testbed.run("gnt-instance", "add", "-t", "file", "-o", "slowexport", "-n",
                "node2.testbed", "--disk", "0:size=4M", "--no-name-check", "--no-ip-check",
                "--no-start", "cut.testbed")
    job = int(testbed.run("gnt-backup", "export", "-n", "node3.testbed", "--submit",
                          "--print-jobid", "cut.testbed").stdout.split()[0])
    importer = _running_importer(_paths(testbed, 3))
    sink = min(int(pid) for pid in importer["pids"])  # type: ignore[union-attr]
    os.killpg(sink, signal.SIGKILL)
    waited = testbed.run("gnt-job", "wait", str(job), check=False)
    assert waited.returncode != 0
    info = testbed.run("gnt-job", "info", str(job)).stdout
    assert "transfer failed after" in info and "bytes" in info
    assert not (_paths(testbed, 3).export_dir / "cut.testbed.new").exists()
    assert not (_paths(testbed, 3).export_dir / "cut.testbed").exists()
    assert _exports(testbed) == []
    testbed.run("gnt-instance", "remove", "-f", "cut.testbed")

    # A sparse disk larger than the free space but not than the file system.
    usage = shutil.disk_usage(_paths(testbed, 3).data_dir)
    size = (usage.free + usage.total) // 2 >> 20
    testbed.run("gnt-instance", "add", "-t", "file", "-o", "corral-tiny", "-n",
                "node2.testbed", "--disk", f"0:size={size}M", "--ignore-ipolicy", "--no-start",
                "--no-name-check", "--no-ip-check", "huge.testbed")
    full = testbed.run("gnt-backup", "export", "-n", "node3.testbed", "huge.testbed",
                       check=False)
    assert full.returncode != 0
    assert "node3.testbed" in full.stderr and "MiB free" in full.stderr
    assert _exports(testbed) == []

    # The cluster's compression_tools limit what a transfer may use.
    info = testbed.run("gnt-cluster", "info").stdout
    assert "  compression tools: \n    - gzip\n    - gzip-fast\n    - gzip-slow\n" \
        "    - zstd\n" in info
    testbed.run("gnt-cluster", "modify", "--compression-tools", "gzip")
    try:
        refused = testbed.run("gnt-backup", "export", "-n", "node3.testbed",
                              "--transport-compression", "zstd", "huge.testbed", check=False)
        assert refused.returncode != 0
        assert "compression tool 'zstd' is not allowed" in refused.stderr
        assert "allowed: none, gzip" in refused.stderr
    finally:
        testbed.run("gnt-cluster", "modify", "--compression-tools",
                    "gzip,gzip-fast,gzip-slow,zstd")
    testbed.run("gnt-instance", "remove", "-f", "huge.testbed")
