"""LVM on loop devices, for real, at the node: storage units, plain disks' metadata.

Each test gets a volume group of two loop devices that only its node's LVM
configuration sees (:mod:`corral.testbed.loopvg`). This host has no device-mapper
(HOST-FACTS.md), so LVM works on metadata only: volumes are created, grown, renamed
and removed for real, but never activated; the tests that need an active volume
(a snapshot, data on the volume) say so and skip where activation is impossible.
The allocatable flag, the repair of a volume group that lost a physical volume and
what activation does without device-mapper are tested through the cluster, in
tests/system/test_storage_cluster.py.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.errors import BlockDeviceError
from corral.noded import procedures
from corral.objects.specs import DiskSpec
from corral.paths import Paths
from corral.storage import PlainStorage, get_units
from corral.testbed.loopvg import LoopVolumeGroup, device_mapper_available, lvm_available

pytestmark = pytest.mark.system

PREFIX = "storage-lvm"


@pytest.fixture
def node(tmp_path: Path) -> Paths:
    return Paths(tmp_path / "node1")


@pytest.fixture
def vg(tmp_path: Path, node: Paths) -> Iterator[LoopVolumeGroup]:
    """Two 64 MiB physical volumes in one group, seen by ``node``'s LVM only."""
    reason = lvm_available()
    if reason:
        pytest.skip(reason)
    group = LoopVolumeGroup.create(tmp_path / "vg", [64, 64], prefix=PREFIX)
    try:
        group.install(node)
        yield group
    finally:
        group.destroy()


def plain(vg: str, lv: str, size: int = 8, index: int = 0, **params: Any) -> DiskSpec:
    return DiskSpec(uuid=f"uuid-{lv}", index=index, dev_type="plain", size=size,
                    logical_id=[vg, lv], params=params)


def lvs(group: LoopVolumeGroup, *fields: str) -> dict[str, list[str]]:
    """``lvs`` of the group through its own configuration: {lv name: [fields]}."""
    out = group.lvm("lvs", "--noheadings", "--separator", "|", "-o",
                    ",".join(("lv_name", *fields)), group.name).stdout
    return {line.split("|")[0].strip(): [v.strip() for v in line.split("|")[1:]]
            for line in out.splitlines() if line.strip()}


async def test_units_list_volume_groups_and_physical_volumes(
        vg: LoopVolumeGroup, node: Paths) -> None:
    rows = await get_units("lvm-vg", node).list(None, ["name", "size", "used", "free",
                                                       "allocatable"])
    assert rows == [[vg.name, 120, 0, 120, True]]  # two PVs of 60 MiB of extents
    pvs = await get_units("lvm-pv", node).list(None, ["name", "size", "free", "allocatable"])
    assert pvs == [[device, 60, 60, True] for device in sorted(vg.devices)]
    with pytest.raises(BlockDeviceError, match=rf"volume group 'nosuchvg' does not exist.*"
                                               rf"its volume groups: {vg.name}\)"):
        await get_units("lvm-vg", node).list("nosuchvg", ["name"])
    with pytest.raises(BlockDeviceError, match=r"physical volume '/dev/nosuch' does not "
                                               r"exist.*its physical volumes: /dev/loop"):
        await get_units("lvm-pv", node).modify("/dev/nosuch", {"allocatable": False})


async def test_plain_disk_metadata_life_cycle(vg: LoopVolumeGroup, node: Paths) -> None:
    disks = PlainStorage(node)
    disk = plain(vg.name, "uuid-1.disk0", size=10, stripes=2)
    path = await disks.create(disk)
    assert path == f"/dev/{vg.name}/uuid-1.disk0"
    size, stripes = lvs(vg, "lv_size", "stripes")["uuid-1.disk0"]
    # 10 MiB: 3 extents of 4 MiB, rounded up to a whole number of stripes.
    assert stripes == "2" and size.startswith("16.00")
    info = await disks.info(disk)
    assert info["size"] == 16 and info["path"] == path
    with pytest.raises(BlockDeviceError, match="already exists"):
        await disks.create(disk)
    await disks.grow(disk, 8, dryrun=True)
    assert (await disks.info(disk))["size"] == 16
    await disks.grow(disk, 8)
    assert (await disks.info(disk))["size"] == 24
    with pytest.raises(BlockDeviceError, match=r"has only \d+ MiB free"):
        await disks.grow(disk, 500)
    status = await disks.find(disk)
    assert status is not None and status["ldisk_status"] == "ok"
    assert not status["is_degraded"] and not status["active"]
    await disks.rename(disk, [vg.name, "renamed"])
    assert "renamed" in lvs(vg) and "uuid-1.disk0" not in lvs(vg)
    assert await disks.find(disk) is None
    with pytest.raises(BlockDeviceError, match="stays in its group"):
        await disks.rename(plain(vg.name, "renamed"), ["othervg", "x"])
    await disks.remove(plain(vg.name, "renamed"))
    await disks.remove(plain(vg.name, "renamed"))  # gone already: fine
    assert lvs(vg) == {}
    with pytest.raises(BlockDeviceError, match=r"volume group 'novg' does not exist on "
                                               rf"this node \(its volume groups: {vg.name}\)"):
        await disks.create(plain("novg", "x"))


async def test_snapshot_and_data_need_an_active_volume(vg: LoopVolumeGroup, node: Paths) -> None:
    if not device_mapper_available():
        pytest.skip("LVM snapshots and the data of a volume need an active volume, and "
                    "this host has no device-mapper to activate one (HOST-FACTS.md)")
    disks = PlainStorage(node)
    disk = plain(vg.name, "lv0")
    await disks.create(disk)
    assert await disks.snapshot(disk, "lv0.snap", 4) == [vg.name, "lv0.snap"]


async def test_node_procedures_list_volumes_and_block_devices(
        vg: LoopVolumeGroup, node: Paths) -> None:
    await PlainStorage(node).create(plain(vg.name, "vol1", 8))
    volumes = await procedures.dispatch(node, "node_volumes", {})
    assert len(volumes) == 1 and volumes[0]["name"] == "vol1"
    assert volumes[0]["vg"] == vg.name and volumes[0]["dev"] in vg.devices
    assert volumes[0]["size"] == 8
    listed = await procedures.dispatch(node, "lv_list", {"volume_groups": [vg.name]})
    assert listed == {f"{vg.name}/vol1": [8, True, False]}
    sizes = await procedures.dispatch(node, "bdev_sizes",
                                      {"devices": [vg.devices[0], "/dev/nonexistent"]})
    assert sizes == {vg.devices[0]: 64}
    rows = await procedures.dispatch(node, "storage_list", {
        "su_type": "lvm-vg", "fields": ["name", "free"]})
    assert rows == [[vg.name, 112]]
    info = await procedures.dispatch(node, "node_info", {
        "hypervisors": ["fake"], "volume_groups": [vg.name]})
    assert info["lvm"]["vgs"][vg.name] == {"size": 120, "free": 112,
                                           "allocatable_free": 112, "missing_pvs": 0}


def test_the_groups_devices_are_invisible_to_other_configurations(
        vg: LoopVolumeGroup, tmp_path: Path) -> None:
    other = tmp_path / "other-lvm"
    other.mkdir()
    other.joinpath("lvm.conf").write_text('devices { global_filter = [ "r|.*|" ] }\n')
    out = subprocess.run(["vgs", "--noheadings", "-o", "vg_name"], capture_output=True,
                         text=True, env={**vg.environment(), "LVM_SYSTEM_DIR": str(other)})
    assert vg.name not in out.stdout
    assert os.path.exists(vg.devices[0])
