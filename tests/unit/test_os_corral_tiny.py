"""The bundled ``corral-tiny`` OS definition against the tiny guest's own reader: what
``create`` and ``rename`` write at the start of the disk is what the guest's init reads
at boot (``bin/diskconfig`` of the initramfs, run here with the host's shell)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from corral.errors import OsError, OsScriptError
from corral.objects.specs import DiskSpec, InstanceSpec, NicSpec
from corral.osapi import build_env, find_os, run_script, verify_params
from corral.testbed import guest as tiny_guest

OS_DIR = Path(__file__).resolve().parents[2] / "share" / "os"


def _disk(tmp_path: Path, size: int = 8 << 20) -> Path:
    disk = tmp_path / "disk0"
    with disk.open("wb") as f:
        f.truncate(size)
    return disk


def _spec(disk: Path | None, name: str = "vm1.example.com", ip: str | None = "192.0.2.20",
          **osparams: str) -> InstanceSpec:
    disks = [] if disk is None else [
        DiskSpec(uuid="d0", index=0, dev_type="file", size=8, logical_id=["loop", str(disk)])]
    return InstanceSpec(name=name, uuid="u1", os="corral-tiny", osparams=dict(osparams),
                        disk_template="file" if disks else "diskless", disks=disks,
                        nics=[NicSpec(index=0, mac="aa:00:00:00:00:01", uuid="n0", ip=ip,
                                      mode="routed", link="100")])


def _read_config(tmp_path: Path, *disks: Path) -> dict[str, str]:
    """What the guest's init gets from ``diskconfig DISK...``."""
    script = tmp_path / "diskconfig"
    script.write_text(tiny_guest._DISKCONFIG)
    out = subprocess.run(["sh", str(script), *map(str, disks)], capture_output=True,
                         text=True, check=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines())


async def _run(tmp_path: Path, script: str, spec: InstanceSpec, disk_paths: list[str],
               **extra: str) -> str:
    os_def, variant = find_os([OS_DIR], "corral-tiny")
    log = tmp_path / "os.log"
    env = {**build_env(os_def, variant, spec, disk_paths), **extra}
    await run_script(os_def, script, env, log)
    return log.read_text()


async def test_create_writes_what_the_guest_reads_and_keeps_the_rest(tmp_path: Path) -> None:
    disk = _disk(tmp_path)
    with disk.open("r+b") as f:  # data beyond the configuration block stays
        f.seek(4096)
        f.write(b"payload")
    log = await _run(tmp_path, "create", _spec(disk), [str(disk)])
    assert "vm1.example.com configured on" in log
    assert _read_config(tmp_path, disk) == {
        "disk": "disk0", "hostname": "vm1.example.com", "ip": "192.0.2.20/24"}
    data = disk.read_bytes()
    assert data[4096:4103] == b"payload"
    assert len(data) == 8 << 20
    assert data.startswith((tiny_guest.DISK_CONFIG_MAGIC + "\n").encode())


async def test_parameters_and_the_nic_network_set_prefix_and_gateway(tmp_path: Path) -> None:
    disk = _disk(tmp_path)
    # Ganeti's NIC_0_NETWORK_* variables give the defaults ...
    await _run(tmp_path, "create", _spec(disk), [str(disk)],
               NIC_0_NETWORK_SUBNET="192.0.2.0/26", NIC_0_NETWORK_GATEWAY="192.0.2.1")
    assert _read_config(tmp_path, disk) == {
        "disk": "disk0", "hostname": "vm1.example.com", "ip": "192.0.2.20/26",
        "gw": "192.0.2.1"}
    # ... and the OS parameters win over them.
    await _run(tmp_path, "create", _spec(disk, prefix="28", gateway="192.0.2.17",
                                         hostname="tiny1"), [str(disk)],
               NIC_0_NETWORK_SUBNET="192.0.2.0/26", NIC_0_NETWORK_GATEWAY="192.0.2.1")
    assert _read_config(tmp_path, disk) == {
        "disk": "disk0", "hostname": "tiny1", "ip": "192.0.2.20/28", "gw": "192.0.2.17"}
    # Without an IP on the NIC the guest gets no address.
    await _run(tmp_path, "create", _spec(disk, ip=None), [str(disk)])
    assert _read_config(tmp_path, disk) == {"disk": "disk0", "hostname": "vm1.example.com"}


async def test_rename_rewrites_the_host_name(tmp_path: Path) -> None:
    disk = _disk(tmp_path)
    await _run(tmp_path, "create", _spec(disk), [str(disk)])
    log = await _run(tmp_path, "rename", _spec(disk, name="vm2.example.com"), [str(disk)],
                     OLD_INSTANCE_NAME="vm1.example.com")
    assert "renamed vm1.example.com to vm2.example.com" in log
    assert _read_config(tmp_path, disk)["hostname"] == "vm2.example.com"


def test_the_guest_skips_disks_without_the_header(tmp_path: Path) -> None:
    """A blank disk or one holding something else (here: text without the header line)
    configures nothing; the first disk with the header is the one read."""
    blank = _disk(tmp_path)
    other = tmp_path / "other"
    other.write_bytes(b"hostname=evil\nend\n" + b"\0" * 4096)
    good = tmp_path / "good"
    good.write_bytes(f"{tiny_guest.DISK_CONFIG_MAGIC}\nhostname=ok\nNOT A SETTING\nend\n"
                     f"ip=10.0.0.1/8\n".encode())
    assert _read_config(tmp_path, blank, other, tmp_path / "missing") == {}
    assert _read_config(tmp_path, blank, other, good) == {"disk": "good", "hostname": "ok"}


async def test_a_missing_or_absent_disk_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(OsScriptError, match="instance nodisk has no disk"):
        await _run(tmp_path, "create", _spec(None, name="nodisk"), [])
    gone = tmp_path / "gone"
    with pytest.raises(OsScriptError, match=f"disk 0 of vm1.example.com \\({gone}\\) does "
                                            "not exist"):
        await _run(tmp_path, "create", _spec(gone), [str(gone)])
    assert not gone.exists()


async def test_verify_names_the_bad_parameter(tmp_path: Path) -> None:
    os_def, variant = find_os([OS_DIR], "corral-tiny")
    log = tmp_path / "log"
    for params, message in (({"prefix": "33"}, "prefix '33' must be a number from 1 to 32"),
                            ({"prefix": "x"}, "prefix 'x'"),
                            ({"gateway": "192.0.2"}, "gateway '192.0.2' must be an IPv4"),
                            ({"gateway": "192.0.2.256"}, "gateway '192.0.2.256'"),
                            ({"hostname": "a b"}, "hostname 'a b' may hold only")):
        with pytest.raises(OsError, match=message):
            await verify_params(os_def, variant, params, log)
    await verify_params(os_def, variant, {"prefix": "32", "gateway": "192.0.2.1",
                                          "hostname": "tiny-1.example"}, log)
