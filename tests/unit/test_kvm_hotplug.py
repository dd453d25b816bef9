"""The kvm hotplug steps against a scripted QMP peer: the commands qemu gets (with the
contract's ids and the instance's disk settings), what a refusal takes back, and the
runtime record that follows the devices. Real guests: tests/system/test_kvm_hotplug.py."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
from qemu.qmp import ExecuteError
from qemu.qmp.models import ErrorResponse

from corral.errors import HypervisorError
from corral.hypervisor.kvm import hotplug, netdev
from corral.hypervisor.kvm.runtime import InstanceRuntime, RuntimeRecord
from corral.objects.specs import DiskSpec, InstanceSpec, NicSpec
from corral.paths import Paths

DISK_UUID = "6f1c2a9e-0b3d-4c5e-8f7a-1b2c3d4e5f60"
NIC_UUID = "a0b1c2d3-e4f5-4a6b-8c7d-9e0f1a2b3c4d"


class FakeQmp:
    """Answers QMP commands from a list of plugged device ids and the PCI slots they
    hold (the balloon in slot 3, each device of ``devices`` in ``slots`` or the next
    slot from 5); ``refuse`` names a command qemu refuses."""

    def __init__(self, devices: set[str] | None = None,
                 slots: dict[str, int] | None = None) -> None:
        self.devices = set(devices or ())
        self.slots = {"balloon0": 3, **(slots or {})}
        for ident in sorted(self.devices - set(self.slots)):
            self.slots[ident] = max(4, *self.slots.values()) + 1
        self.commands: list[tuple[str, dict[str, Any]]] = []
        self.refuse: str | None = None

    async def execute(self, command: str, arguments: dict[str, Any] | None = None) -> Any:
        self.commands.append((command, dict(arguments or {})))
        if command == self.refuse:
            raise ExecuteError(ErrorResponse({"error": {"class": "GenericError",
                                                        "desc": "no room on the bus"}}),
                               command, {})
        if command == "qom-list":
            return [{"name": d, "type": "child<virtio-blk-pci>"} for d in self.devices]
        if command == "device_add":
            assert arguments is not None
            slot = int(arguments["addr"], 16)
            assert slot not in self.slots.values(), f"slot {slot} is taken"
            self.devices.add(arguments["id"])
            self.slots[arguments["id"]] = slot
        if command == "query-pci":
            return [{"bus": 0, "devices": [
                {"bus": 0, "slot": slot, "function": 0, "qdev_id": ident}
                for ident, slot in self.slots.items()]}]
        if command == "add-fd":
            return {"fdset-id": 3, "fd": 27}
        return {}

    def send_fd_scm(self, fd: int) -> None:
        self.commands.append(("(fd)", {}))

    def names(self) -> list[str]:
        return [c for c, _a in self.commands if c not in ("qom-list", "query-pci")]


def _record(tmp_path: Path, **hvparams: Any) -> tuple[InstanceRuntime, RuntimeRecord]:
    runtime = InstanceRuntime(Paths(tmp_path), "inst1")
    runtime.dir.mkdir(parents=True)
    spec = InstanceSpec(name="inst1", uuid="inst-uuid", hypervisor="kvm",
                        hvparams={"disk_type": "paravirtual", "nic_type": "paravirtual",
                                  **hvparams},
                        disks=[DiskSpec(uuid="0000aaaa-x", index=0, dev_type="file", size=8)],
                        nics=[])
    record = RuntimeRecord(name="inst1", spec=spec, disk_paths=["/d/disk0"],
                           pci_slots={"disk-0000aaaa": 5})
    runtime.write(record)
    return runtime, record


def _disk(index: int = 1, mode: str = "rw") -> DiskSpec:
    return DiskSpec(uuid=DISK_UUID, index=index, dev_type="file", size=8, mode=mode)


def _file(tmp_path: Path) -> str:
    path = tmp_path / "disk1"
    path.write_bytes(b"\0" * 4096)
    return str(path)


def test_disk_add_hands_qemu_the_file_with_the_instance_settings_then_plugs_it(
        tmp_path: Path) -> None:
    runtime, record = _record(tmp_path, disk_cache="none", disk_aio="native")
    qmp = FakeQmp({"disk-0000aaaa"})
    path = _file(tmp_path)
    asyncio.run(hotplug._disk(qmp, runtime, record, "hotadd", _disk(mode="ro"), path))
    assert qmp.names() == ["(fd)", "add-fd", "blockdev-add", "remove-fd", "device_add"]
    node = next(a for c, a in qmp.commands if c == "blockdev-add")
    assert node == {"driver": "raw", "node-name": "disk-6f1c2a9e-drive", "read-only": True,
                    "file": {"driver": "file", "filename": "/dev/fdset/3", "aio": "native"},
                    "cache": {"direct": True}}
    assert next(a for c, a in qmp.commands if c == "remove-fd") == {"fdset-id": 3}
    # slot 3 holds the balloon, 5 disk 0: the new disk takes 6
    assert qmp.commands[-1][1] == {"driver": "virtio-blk-pci", "id": "disk-6f1c2a9e",
                                   "drive": "disk-6f1c2a9e-drive", "addr": "0x6"}
    saved = runtime.read()
    assert saved is not None
    assert [d.uuid for d in saved.spec.disks] == ["0000aaaa-x", DISK_UUID]
    assert saved.disk_paths == ["/d/disk0", path]
    assert saved.pci_slots == {"disk-0000aaaa": 5, "disk-6f1c2a9e": 6}


def test_a_refused_disk_add_takes_its_block_node_back(tmp_path: Path) -> None:
    runtime, record = _record(tmp_path)
    qmp = FakeQmp()
    qmp.refuse = "device_add"
    with pytest.raises(HypervisorError, match="qemu refused to add disk/1: no room"):
        asyncio.run(hotplug._disk(qmp, runtime, record, "hotadd", _disk(),
                                  _file(tmp_path)))
    assert qmp.names() == ["(fd)", "add-fd", "blockdev-add", "remove-fd", "device_add",
                           "blockdev-del"]
    saved = runtime.read()
    assert saved is not None and saved.disk_paths == ["/d/disk0"]  # nothing recorded


def test_disks_of_a_type_that_cannot_be_hot_plugged_are_refused_first(
        tmp_path: Path) -> None:
    runtime, record = _record(tmp_path, disk_type="ide")
    qmp = FakeQmp()
    with pytest.raises(HypervisorError, match="disk_type ide cannot be hot-plugged; "
                                              "hot-pluggable: paravirtual"):
        asyncio.run(hotplug._disk(qmp, runtime, record, "hotadd", _disk(),
                                  "/d/disk1"))
    assert qmp.names() == []


def test_removing_a_device_qemu_no_longer_has_only_updates_the_record(
        tmp_path: Path) -> None:
    """A repeated removal (its first answer was lost) does no harm."""
    runtime, record = _record(tmp_path)
    qmp = FakeQmp()
    gone = DiskSpec(uuid="0000aaaa-x", index=0, dev_type="file", size=8)
    asyncio.run(hotplug._disk(qmp, runtime, record, "hotremove", gone, None))
    assert qmp.names() == ["blockdev-del"]
    saved = runtime.read()
    assert saved is not None and saved.spec.disks == [] and saved.disk_paths == []


def test_nic_add_hands_qemu_the_tap_and_records_it(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    runtime, record = _record(tmp_path)
    made: list[str] = []

    async def setup_taps(paths: Paths, spec: InstanceSpec, *, user: int | None = None,
                         incoming: bool = False) -> list[netdev.Tap]:
        [nic] = spec.nics
        made.append(nic.uuid)
        return [netdev.Tap(name="tapfeed", nic_index=nic.index, nic_uuid=nic.uuid,
                           link="br0", mac=nic.mac)]

    monkeypatch.setattr(netdev, "setup_taps", setup_taps)
    monkeypatch.setattr(hotplug, "_open_tap", lambda name: os.open("/dev/null", os.O_RDONLY))
    qmp = FakeQmp()
    nic = NicSpec(index=0, uuid=NIC_UUID, mac="aa:00:00:00:00:07", link="br0")
    asyncio.run(hotplug._nic(qmp, runtime, record, "hotadd", nic))
    assert made == [NIC_UUID]
    assert qmp.names() == ["(fd)", "getfd", "netdev_add", "device_add"]
    assert next(a for c, a in qmp.commands if c == "netdev_add") == {
        "type": "tap", "id": "nic-a0b1c2d3-net", "fd": "nic-a0b1c2d3-fd"}
    # the record gives slot 5 to disk 0 (the fake qemu does not list it): 6 is free
    assert qmp.commands[-1][1] == {"driver": "virtio-net-pci", "id": "nic-a0b1c2d3",
                                   "netdev": "nic-a0b1c2d3-net", "mac": "aa:00:00:00:00:07",
                                   "romfile": "", "addr": "0x6"}
    saved = runtime.read()
    assert saved is not None
    assert saved.taps == ["tapfeed"]
    assert [t.nic_uuid for t in netdev.recorded_taps(saved)] == [NIC_UUID]
    assert [n.mac for n in saved.spec.nics] == ["aa:00:00:00:00:07"]


def test_a_plugged_device_avoids_every_slot_in_use_and_its_removal_frees_it(
        tmp_path: Path) -> None:
    """Slots the record gives and slots qemu reports (a device from kvm_extra, say) are
    both avoided; a removed device's slot is free again, and the record says so."""
    runtime, record = _record(tmp_path)
    qmp = FakeQmp({"disk-0000aaaa", "extra0"}, slots={"disk-0000aaaa": 5, "extra0": 6})
    asyncio.run(hotplug._disk(qmp, runtime, record, "hotadd", _disk(), _file(tmp_path)))
    assert qmp.commands[-1][1]["addr"] == "0x7"
    qmp.devices.discard("disk-6f1c2a9e")  # the guest let it go (tests/system unplugs)
    del qmp.slots["disk-6f1c2a9e"]
    asyncio.run(hotplug._disk(qmp, runtime, record, "hotremove", _disk(), None))
    saved = runtime.read()
    assert saved is not None and saved.pci_slots == {"disk-0000aaaa": 5}


def test_a_hot_added_nic_is_recorded_without_an_option_rom_until_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime, record = _record(tmp_path)

    async def setup_taps(paths: Paths, spec: InstanceSpec, *, user: int | None = None,
                         incoming: bool = False) -> list[netdev.Tap]:
        [nic] = spec.nics
        return [netdev.Tap(name="tapfeed", nic_index=nic.index, nic_uuid=nic.uuid,
                           link="br0", mac=nic.mac)]

    async def teardown_taps(taps: list[netdev.Tap]) -> None:
        return None

    monkeypatch.setattr(netdev, "setup_taps", setup_taps)
    monkeypatch.setattr(netdev, "teardown_taps", teardown_taps)
    monkeypatch.setattr(hotplug, "_open_tap", lambda name: os.open("/dev/null", os.O_RDONLY))
    qmp = FakeQmp({"disk-0000aaaa"})
    nic = NicSpec(index=0, uuid=NIC_UUID, mac="aa:00:00:00:00:07", link="br0")
    asyncio.run(hotplug._nic(qmp, runtime, record, "hotadd", nic))
    saved = runtime.read()
    assert saved is not None
    assert saved.romless == ["nic-a0b1c2d3"] and saved.pci_slots["nic-a0b1c2d3"] == 6
    qmp.devices.discard("nic-a0b1c2d3")  # the guest let it go (tests/system unplugs)
    asyncio.run(hotplug._nic(qmp, runtime, saved, "hotremove", nic))
    saved = runtime.read()
    assert saved is not None and saved.romless == [] and "nic-a0b1c2d3" not in saved.pci_slots
