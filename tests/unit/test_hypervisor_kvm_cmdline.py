"""The kvm hypervisor's qemu command line from an instance's parameters (no qemu runs),
its runtime files and the checks a start makes before running anything."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import pytest

from corral.errors import HypervisorError
from corral.hypervisor import get_hypervisor
from corral.hypervisor.kvm import KvmHypervisor, missing_files, netdev
from corral.hypervisor.kvm.cmdline import assign_pci_slots, build_command
from corral.hypervisor.kvm.runtime import SOCKET_PATH_MAX, InstanceRuntime
from corral.noded import procedures
from corral.objects.params import HV_PARAMS
from corral.objects.specs import DiskSpec, InstanceSpec, NicSpec
from corral.paths import Paths

QEMU = "/usr/bin/qemu-system-x86_64"


def _spec(hvparams: dict[str, Any] | None = None, **fields: Any) -> InstanceSpec:
    filled = {name: spec.default for name, spec in HV_PARAMS["kvm"].items()}
    filled.update(hvparams or {})
    return InstanceSpec(name="vm1.example.com", uuid="0123abcd-0000-0000-0000-000000000000",
                        hypervisor="kvm", hvparams=filled,
                        beparams={"maxmem": 256, "minmem": 128, "vcpus": 2}, **fields)


def _command(tmp_path: Path, spec: InstanceSpec, disk_paths: list[str] | None = None,
             **options: Any) -> list[str]:
    runtime = InstanceRuntime(Paths(tmp_path), spec.name)
    return build_command(spec, disk_paths or [], runtime, binary=QEMU, **options)


def _after(command: list[str], flag: str) -> list[str]:
    """Every value given to ``flag``."""
    return [command[i + 1] for i, arg in enumerate(command) if arg == flag]


def test_defaults_follow_ganeti(tmp_path: Path) -> None:
    command = _command(tmp_path, _spec())
    assert command[0] == QEMU
    assert _after(command, "-machine") == ["pc"]
    assert _after(command, "-m") == ["256"]  # maxmem; minmem comes from the balloon
    assert _after(command, "-smp") == ["2"]
    assert "-enable-kvm" not in command and "-accel" not in command  # kvm_flag unset
    assert _after(command, "-append") == ["root=/dev/vda1 ro console=ttyS0,38400"]
    assert _after(command, "-kernel") == ["/boot/vmlinuz-3-kvmU"]
    assert "-initrd" not in command
    assert "virtio-balloon-pci,id=balloon0,addr=0x3" in _after(command, "-device")
    assert "-daemonize" in command and "-S" not in command
    assert "-S" in _command(tmp_path, _spec(), paused=True)
    assert _after(command, "-serial") == ["chardev:serial0"]
    assert _after(command, "-display") == ["none"]
    for flag in ("-no-reboot", "-no-shutdown", "-incoming", "-vnc"):
        assert flag not in command


def test_parameters_become_arguments(tmp_path: Path) -> None:
    spec = _spec({
        "kvm_flag": "disabled", "machine_version": "pc-i440fx-7.2", "acpi": False,
        "cpu_type": "qemu64", "cpu_cores": 2, "cpu_threads": 1, "cpu_sockets": 1,
        "kernel_path": "/k", "initrd_path": "/i", "root_path": "", "kernel_args": "quiet",
        "serial_speed": 115200, "reboot_behavior": "exit", "user_shutdown": True,
        "mem_path": "/hugepages", "kvm_extra": "-name 'two words' -rtc base=utc",
    })
    command = _command(tmp_path, spec)
    assert _after(command, "-accel") == ["tcg"]
    assert _after(command, "-machine") == ["pc-i440fx-7.2,acpi=off"]
    assert _after(command, "-cpu") == ["qemu64"]
    assert _after(command, "-smp") == ["2,cores=2,threads=1,sockets=1"]
    assert _after(command, "-initrd") == ["/i"]
    assert _after(command, "-append") == ["quiet console=ttyS0,115200"]
    assert "-no-reboot" in command and "-no-shutdown" in command
    assert command[command.index("-mem-path") + 1:command.index("-mem-path") + 3] == [
        "/hugepages", "-mem-prealloc"]
    assert command[-4:] == ["-name", "two words", "-rtc", "base=utc"]  # kvm_extra last
    assert "-enable-kvm" in _command(tmp_path, _spec({"kvm_flag": "enabled"}))


def test_disks_use_the_contract_ids(tmp_path: Path) -> None:
    disks = [DiskSpec(uuid="aaaabbbb-cccc", index=0, dev_type="file", size=64),
             DiskSpec(uuid="", index=1, dev_type="file", size=64, mode="ro")]
    spec = _spec({"kernel_path": "", "disk_cache": "none"}, disks=disks)
    command = _command(tmp_path, spec, ["/d/0,x", "/d/1"])
    blockdevs = _after(command, "-blockdev")
    assert blockdevs == [
        "driver=raw,node-name=disk-aaaabbbb-drive,file.driver=file,"
        "file.filename=/d/0,,x,cache.direct=on",
        "driver=raw,node-name=disk-1-drive,file.driver=file,file.filename=/d/1,"
        "cache.direct=on,read-only=on",
    ]
    devices = _after(command, "-device")
    assert "virtio-blk-pci,drive=disk-aaaabbbb-drive,id=disk-aaaabbbb,bootindex=1" in devices
    assert "virtio-blk-pci,drive=disk-1-drive,id=disk-1" in devices
    with pytest.raises(HypervisorError, match=r"disk_type .sd. is not supported.*accepted"):
        _command(tmp_path, _spec({"disk_type": "sd"}, disks=disks), ["/a", "/b"])
    with pytest.raises(HypervisorError, match="2 disks but 1 disk paths"):
        _command(tmp_path, spec, ["/a"])


def test_devices_get_fixed_pci_slots_and_keep_known_ones(tmp_path: Path) -> None:
    """Disks, then NICs, from slot 5 (the balloon has 3); a known layout (a migration's
    source, a soft reboot) is kept and only new devices take the free slots."""
    disks = [DiskSpec(uuid=f"{c * 8}-x", index=i, dev_type="file", size=64)
             for i, c in enumerate("ab")]
    nics = [NicSpec(index=0, uuid="cccccccc-x", mac="aa:00:00:00:00:01")]
    spec = _spec({"kernel_path": ""}, disks=disks, nics=nics)
    fresh = assign_pci_slots(spec, netdev.pci_nic_ids(spec))
    assert fresh == {"disk-aaaaaaaa": 5, "disk-bbbbbbbb": 6, "nic-cccccccc": 7}
    # disk b was hot-plugged into slot 9 and the NIC sits in 6 on the source
    known = {"disk-aaaaaaaa": 5, "disk-bbbbbbbb": 9, "nic-cccccccc": 6, "gone": 7}
    assert assign_pci_slots(spec, netdev.pci_nic_ids(spec), known) == {
        "disk-aaaaaaaa": 5, "disk-bbbbbbbb": 9, "nic-cccccccc": 6}
    command = _command(tmp_path, spec, ["/d/a", "/d/b"], pci_slots=known)
    devices = _after(command, "-device")
    assert "virtio-blk-pci,drive=disk-bbbbbbbb-drive,id=disk-bbbbbbbb,addr=0x9" in devices
    args = netdev.netdev_args(spec, [netdev.Tap(name="tap0", nic_index=0)],
                              pci_slots=known, romless=["nic-cccccccc"])
    assert args[-1] == ("virtio-net-pci,id=nic-cccccccc,netdev=nic-cccccccc-net,"
                        "mac=aa:00:00:00:00:01,addr=0x6,romfile=")
    # ISA NICs and IDE disks are not on the PCI bus
    isa = _spec({"kernel_path": "", "nic_type": "ne2k_isa", "disk_type": "ide"},
                disks=disks, nics=nics)
    assert assign_pci_slots(isa, netdev.pci_nic_ids(isa)) == {}
    many = _spec({"kernel_path": ""}, disks=[
        DiskSpec(uuid=f"{i:08d}-x", index=i, dev_type="file", size=1) for i in range(28)])
    with pytest.raises(HypervisorError, match="no free PCI slot left: slots 5-31"):
        assign_pci_slots(many, [])


def test_vnc_and_incoming(tmp_path: Path) -> None:
    spec = _spec({"vnc_bind_address": "127.0.0.1", "vnc_password_file": "/p"},
                 network_port=5907)
    command = _command(tmp_path, spec, incoming="tcp:0:4000")
    assert _after(command, "-vnc") == ["127.0.0.1:7,password=on"]
    assert _after(command, "-incoming") == ["tcp:0:4000"] and "-S" not in command
    anywhere = _command(tmp_path, _spec({"vnc_bind_address": "0.0.0.0"}, network_port=5901))
    assert _after(anywhere, "-vnc") == [":1"]
    # no port allocated: no VNC server, the instance still starts (as Ganeti)
    assert _after(_command(tmp_path, _spec({"vnc_bind_address": "127.0.0.1"})), "-vnc") == [
        "none"]
    with pytest.raises(HypervisorError, match=r"kvm_extra .* cannot be split"):
        _command(tmp_path, _spec({"kvm_extra": "-name 'open"}))


def test_socket_paths_stay_short_under_a_deep_root(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*["a-rather-long-directory-name"] * 8)
    runtime = InstanceRuntime(Paths(deep), "an-instance-with-a-long-name.example.com")
    assert len(str(runtime.dir / "qmp.sock")) > SOCKET_PATH_MAX
    for socket_path in (runtime.qmp_socket, runtime.serial_socket):
        assert len(str(socket_path)) <= SOCKET_PATH_MAX
    other = InstanceRuntime(Paths(tmp_path / "other"), runtime.name)
    assert other.qmp_socket != runtime.qmp_socket  # two nodes of one machine never share
    with pytest.raises(HypervisorError, match="invalid instance name"):
        InstanceRuntime(Paths(tmp_path), "../escape")


def test_start_refuses_missing_files_before_running_anything(tmp_path: Path) -> None:
    hypervisor = get_hypervisor("kvm", Paths(tmp_path))
    assert isinstance(hypervisor, KvmHypervisor)
    spec = _spec({"kvm_path": str(tmp_path / "no-qemu"), "kernel_path": "/no/kernel",
                  "initrd_path": "/no/initrd"})
    assert missing_files(spec) == [
        f"qemu binary {tmp_path / 'no-qemu'} (kvm_path) not found or not executable",
        "kernel /no/kernel (kernel_path) not found",
        "initrd /no/initrd (initrd_path) not found",
    ]
    with pytest.raises(HypervisorError, match="kernel /no/kernel"):
        asyncio.run(hypervisor.start(spec, []))
    assert asyncio.run(hypervisor.list_instances()) == []
    assert not (Paths(tmp_path).hypervisor_state_dir / "kvm" / spec.name).exists()


def test_check_host_names_missing_kvm_files(tmp_path: Path) -> None:
    """Before an instance moves to a node, the node says which of its kvm files it lacks."""
    spec = _spec({"kernel_path": "/no/kernel", "kvm_path": QEMU}, nics=[])
    answer = asyncio.run(procedures.dispatch(
        Paths(tmp_path), "instance_check_host", {"instance": msgspec.to_builtins(spec)}))
    assert "kernel /no/kernel (kernel_path) not found" in answer["missing"]
