"""The node daemon's copy of LVM's reports, read by a monitoring daemon that may not
run LVM itself (privilege separation)."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from corral.mond import collectors as mond_collectors
from corral.mond.collectors import CpuSampler, collectors
from corral.paths import Paths
from corral.storage import lvm_report

#: One ``lvs`` row in the report's column order (sizes in bytes).
LV_ROW = ("Uu1|inst-disk0|-wi-a-----|253|0|253|0|1073741824|1||linear|Vv1|xenvg|linear|0|0|"
          "256||/dev/loop0:0-255|/dev/loop0(0)")


def _tools(directory: Path, *, works: bool) -> Path:
    """Stand-ins for ``lvs`` and ``vgs`` on PATH: they print one row each, or fail as
    LVM does for a user that is not root."""
    directory.mkdir()
    for name, row in (("lvs", LV_ROW), ("vgs", "xenvg|10236.00|9212.00")):
        script = directory / name
        body = (f"echo '  {row}'" if works
                else "echo '  /run/lock/lvm/P_global:aux: open failed: Permission denied' >&2"
                     "; exit 5")
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)
    return directory


async def _report(paths: Paths, name: str) -> object:
    for collector in collectors(paths, CpuSampler()):
        if collector.name == name:
            return await collector.gather()
    raise AssertionError(f"no collector {name}")


async def test_a_monitoring_daemon_without_root_reports_what_noded_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = Paths(tmp_path / "node")
    monkeypatch.setenv("PATH", str(_tools(tmp_path / "bin", works=True)))
    assert lvm_report.publish(paths)  # what noded (root) does every 15 s
    mode = stat.S_IMODE(os.stat(paths.lvm_report).st_mode)
    assert mode == 0o640
    # the monitoring daemon runs as another user, and LVM refuses it
    monkeypatch.setenv("PATH", str(_tools(tmp_path / "refusing", works=False)))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(mond_collectors, "_vgs_cache", None)
    volumes = await _report(paths, "lv")
    assert isinstance(volumes, list) and len(volumes) == 1
    assert (volumes[0]["name"], volumes[0]["vg_name"], volumes[0]["size"]) == (
        "inst-disk0", "xenvg", 1073741824)
    units = await _report(paths, "storage")
    assert {"type": "lvm-vg", "name": "xenvg", "size": 10236, "free": 9212} in units  # type: ignore[operator]


async def test_a_stale_copy_is_not_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            caplog: pytest.LogCaptureFixture) -> None:
    paths = Paths(tmp_path / "node")
    monkeypatch.setenv("PATH", str(_tools(tmp_path / "bin", works=True)))
    assert lvm_report.publish(paths)
    report = json.loads(paths.lvm_report.read_text())
    report["time"] = time.time() - lvm_report.MAX_AGE_SECONDS - 1  # noded stopped long ago
    paths.lvm_report.write_text(json.dumps(report))
    assert lvm_report.published_rows(paths, "lvs") is None
    monkeypatch.setenv("PATH", str(_tools(tmp_path / "refusing", works=False)))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(mond_collectors, "_lvm_warned", False)
    assert await _report(paths, "lv") == []
    assert "it needs root" in caplog.text and "Permission denied" in caplog.text


def test_no_report_on_a_node_without_lvm(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    paths = Paths(tmp_path / "node")
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(lvm_report, "_binary", lambda name: None)
    assert not lvm_report.publish(paths)
    assert not paths.lvm_report.exists()


async def test_noded_keeps_the_copy_only_where_mond_runs_as_its_own_user(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    paths = Paths(tmp_path / "node")
    monkeypatch.setenv("PATH", str(_tools(tmp_path / "bin", works=True)))
    task = asyncio.create_task(lvm_report.publish_forever(paths, interval=0.01))
    try:
        await asyncio.sleep(0.1)
        assert not paths.lvm_report.exists()  # mond runs as root: it runs LVM itself
        paths.daemon_users.parent.mkdir(parents=True, exist_ok=True)
        paths.daemon_users.write_text("{}")  # the node joined a separated cluster
        for _ in range(200):
            if paths.lvm_report.exists():
                break
            await asyncio.sleep(0.01)
        assert lvm_report.published_rows(paths, "vgs") == [["xenvg", "10236.00", "9212.00"]]
    finally:
        task.cancel()
