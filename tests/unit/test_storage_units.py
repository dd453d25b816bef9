"""Storage units without root: storage directories for real, LVM through recorded reports.

The LVM reports below are what lvm2 2.03 printed on this project's machines
(``--reportformat json --units m --nosuffix``); tests/system/test_storage_lvm.py runs
the same code against real volume groups on loop devices.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from corral.errors import BlockDeviceError, ParameterError
from corral.paths import Paths
from corral.storage.lvm import CommandResult, LvmTools, check_name, lvm_environment
from corral.storage.units import LvmPvUnits, LvmVgUnits, get_units

STORAGE = "/srv/corral/file-storage"


@pytest.fixture
def node(tmp_path: Path) -> Paths:
    return Paths(tmp_path / "node1")


# -- storage directories --------------------------------------------------------------


async def test_file_units_list_size_use_and_free(node: Paths) -> None:
    units = get_units("file", node, [STORAGE])
    rows = await units.list(None, ["name", "size", "used", "free", "allocatable"])
    [[name, size, used, free, allocatable]] = rows
    assert (name, used, allocatable) == (STORAGE, 0, True) and size >= free > 0
    local = node.node_path(STORAGE)
    local.mkdir(parents=True)
    (local / "disk").write_bytes(b"x" * (2 * 1024 * 1024))
    assert await units.list(STORAGE, ["used"]) == [[2]]
    with pytest.raises(BlockDeviceError, match=r"storage directory '/srv/other' does not "
                                               r"exist on this node \(its storage "
                                               rf"directories: {STORAGE}\)"):
        await units.list("/srv/other", ["name"])
    with pytest.raises(ParameterError, match="unknown storage field"):
        await units.list(None, ["colour"])


async def test_storage_directory_creation_and_removal(node: Paths) -> None:
    sub = f"{STORAGE}/pool"
    units = get_units("file", node, [sub])
    assert await units.status(sub) == {"name": sub, "ok": False,
                                       "message": "the directory does not exist"}
    await units.execute(sub, "create-dir")
    assert node.node_path(sub).is_dir() and (await units.status(sub))["ok"]
    (node.node_path(sub) / "disk").write_text("data")
    with pytest.raises(BlockDeviceError, match="not empty"):
        await units.execute(sub, "remove-dir")
    (node.node_path(sub) / "disk").unlink()
    await units.execute(sub, "remove-dir")
    assert not node.node_path(sub).exists()
    outside = get_units("file", node, ["/var/tmp/elsewhere"])
    with pytest.raises(BlockDeviceError, match="outside the storage directories this node"):
        await outside.execute("/var/tmp/elsewhere", "create-dir")
    with pytest.raises(ParameterError, match="no operation 'fix-consistency'"):
        await units.execute(sub, "fix-consistency")
    with pytest.raises(ParameterError, match="cannot be modified"):
        await units.modify(sub, {"allocatable": False})


def test_unknown_unit_type(node: Paths) -> None:
    with pytest.raises(ParameterError, match="storage type 'rados' has no units"):
        get_units("rados", node)


# -- LVM through recorded reports ------------------------------------------------------

_VG = {"vg_size": "180.00", "vg_free": "172.00", "vg_attr": "wz-pn-",
       "vg_missing_pv_count": "1"}
PVS = {"report": [{"pv": [
    {"pv_name": "/dev/loop0", "vg_name": "xenvg", "pv_size": "60.00", "pv_used": "8.00",
     "pv_free": "52.00", "pv_attr": "u--", **_VG},
    {"pv_name": "/dev/loop1", "vg_name": "xenvg", "pv_size": "60.00", "pv_used": "0",
     "pv_free": "60.00", "pv_attr": "a--", **_VG},
    {"pv_name": "[unknown]", "vg_name": "xenvg", "pv_size": "60.00", "pv_used": "0",
     "pv_free": "60.00", "pv_attr": "a-m", **_VG},
    {"pv_name": "/dev/loop2", "vg_name": "", "pv_size": "10.00", "pv_used": "0",
     "pv_free": "10.00", "pv_attr": "---", "vg_size": "", "vg_free": "", "vg_attr": "",
     "vg_missing_pv_count": ""}]}]}
LVS = {"report": [{"lv": [
    {"vg_name": "xenvg", "lv_name": "a.disk0", "lv_size": "16.00", "lv_attr": "-wi-XX----",
     "devices": "/dev/loop0(0)", "stripes": "1"},
    {"vg_name": "xenvg", "lv_name": "a.disk0", "lv_size": "16.00", "lv_attr": "-wi-XX----",
     "devices": "/dev/loop1(0)", "stripes": "1"},
    {"vg_name": "xenvg", "lv_name": "b.disk0", "lv_size": "8.00", "lv_attr": "-wi-XX--p-",
     "devices": "[unknown](0)", "stripes": "1"}]}]}


class FakeLvm:
    """Answers the LVM commands with the recorded reports; records what ran."""

    def __init__(self) -> None:
        self.ran: list[list[str]] = []

    async def __call__(self, argv: Sequence[str], env: Mapping[str, str]) -> CommandResult:
        self.ran.append(list(argv))
        report: dict[str, Any] | None = {"pvs": PVS, "lvs": LVS}.get(argv[0])
        if report is not None:
            return CommandResult(0, json.dumps(report), "  WARNING: ignored\n")
        if argv[0] == "pvchange" and argv[-1] == "/dev/broken":
            return CommandResult(5, "", "  WARNING: x\n  Cannot use /dev/broken: device "
                                        "not found\n")
        return CommandResult(0, "", "")


async def test_lvm_reports_are_read_into_volumes(node: Paths) -> None:
    lvm = LvmTools(node, FakeLvm())
    [vg] = await lvm.volume_groups()
    assert (vg.size, vg.free, vg.partial, vg.missing_pvs) == (180, 172, True, 1)
    # Only the allocatable PV that is present counts for new volumes.
    assert vg.allocatable_free == 60
    volumes = {lv.name: lv for lv in await lvm.logical_volumes()}
    assert volumes["a.disk0"].devices == ("/dev/loop0", "/dev/loop1")
    assert not volumes["a.disk0"].faulty and volumes["b.disk0"].faulty
    assert not volumes["a.disk0"].active


async def test_names_lvm_would_read_as_options_run_nothing(node: Paths) -> None:
    """A volume group a caller names (noded's lv_list) that LVM would refuse or read as
    an option is refused before any command runs."""
    fake = FakeLvm()
    lvm = LvmTools(node, fake)
    for bad in ("--config=devices{}", "]; }", ""):
        with pytest.raises(BlockDeviceError, match="not a valid LVM name"):
            await lvm.logical_volumes([bad])
    with pytest.raises(BlockDeviceError, match="starting with '-'"):
        await lvm.physical_volumes(["-a"])
    assert fake.ran == []


async def test_lvm_units_use_the_reports_and_pvchange(node: Paths) -> None:
    fake = FakeLvm()
    pv_units = LvmPvUnits(node, fake)
    assert await pv_units.list(None, ["name", "free", "allocatable"]) == [
        ["/dev/loop0", 52, False], ["/dev/loop1", 60, True], ["/dev/loop2", 10, False],
        ["[unknown]", 60, True]]
    assert await pv_units.status("[unknown]") == {
        "name": "[unknown]", "ok": False, "message": "its device is missing"}
    assert await pv_units.list("/dev/loop1", ["status"]) == [["ok"]]
    await pv_units.modify("/dev/loop0", {"allocatable": True})
    assert fake.ran[-1] == ["pvchange", "-x", "y", "/dev/loop0"]
    with pytest.raises(ParameterError, match="true or false"):
        await pv_units.modify("/dev/loop0", {"allocatable": "yes"})
    vg_units = LvmVgUnits(node, fake)
    assert await vg_units.list("xenvg", ["name", "size", "used", "free"]) == [
        ["xenvg", 180, 8, 172]]
    status = await vg_units.status("xenvg")
    assert status == {"name": "xenvg", "ok": False, "message": "1 physical volume(s) missing"}


async def test_a_failed_lvm_command_is_quoted(node: Paths) -> None:
    lvm = LvmTools(node, FakeLvm())
    with pytest.raises(BlockDeviceError, match=r"changing x failed: WARNING: x; Cannot use "
                                               r"/dev/broken: device not found \(exit code "
                                               r"5\)"):
        await lvm.run(["pvchange", "-x", "n", "/dev/broken"], "changing x")


def test_lvm_names_and_the_node_configuration(node: Paths) -> None:
    for bad in ("-x", "a b", "..", "x_mlog", "é"):
        with pytest.raises(BlockDeviceError, match="not a valid LVM name"):
            check_name(bad, "volume group")
    check_name("storage-lvm-12.x+y_z", "volume group")
    assert "LVM_SYSTEM_DIR" not in lvm_environment(node)
    conf = node.node_path("/etc/lvm/lvm.conf")
    conf.parent.mkdir(parents=True)
    conf.write_text("devices {}\n")
    env = lvm_environment(node)
    assert env["LVM_SYSTEM_DIR"] == str(conf.parent) and env["LC_ALL"] == "C"
    assert "LVM_SYSTEM_DIR" not in lvm_environment(Paths(Path("/")))
