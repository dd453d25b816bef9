"""The kvm hypervisor's NIC side without devices: tap names, qemu arguments, the checks
before anything is created, and the hook's environment (Ganeti's names)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from corral.errors import HypervisorError
from corral.hypervisor.kvm import netdev
from corral.objects.specs import InstanceSpec, NicSpec
from corral.paths import Paths

UUID_A = "6f1c2a9e-0b3d-4c5e-8f7a-1b2c3d4e5f60"
UUID_B = "a0b1c2d3-e4f5-4a6b-8c7d-9e0f1a2b3c4d"


def _spec(*nics: NicSpec, **hvparams: object) -> InstanceSpec:
    return InstanceSpec(name="inst1.example.com", uuid="instance-uuid", hypervisor="kvm",
                        hvparams=dict(hvparams), nics=list(nics), tags=["b", "a"])


def _nic(index: int = 0, uuid: str = UUID_A, **kw: object) -> NicSpec:
    return NicSpec(index=index, mac=f"aa:00:00:00:00:0{index}", uuid=uuid, **kw)  # type: ignore[arg-type]


# -- tap names -----------------------------------------------------------------
def test_tap_name_fits_linux_and_is_stable(tmp_path: Path) -> None:
    paths = Paths(tmp_path / "node1")
    name = netdev.tap_name(paths, "instance-uuid", _nic())
    assert len(name) <= 15
    assert name.startswith("tap")
    # the same NIC on the same node: the same name (found again after a restart)
    assert netdev.tap_name(Paths(tmp_path / "node1"), "instance-uuid", _nic()) == name


def test_tap_names_differ_per_node_instance_and_nic(tmp_path: Path) -> None:
    node1, node2 = Paths(tmp_path / "node1"), Paths(tmp_path / "node2")
    names = {
        netdev.tap_name(node1, "instance-uuid", _nic()),
        # a migration's target on the same machine holds a tap for the same NIC
        netdev.tap_name(node2, "instance-uuid", _nic()),
        netdev.tap_name(node1, "other-instance", _nic()),
        netdev.tap_name(node1, "instance-uuid", _nic(1, UUID_B)),
        # NICs without uuid fall back to their index
        netdev.tap_name(node1, "instance-uuid", _nic(0, "")),
        netdev.tap_name(node1, "instance-uuid", _nic(1, "")),
    }
    assert len(names) == 6


# -- qemu arguments --------------------------------------------------------------
def test_netdev_args_name_devices_after_the_nic_uuid() -> None:
    spec = _spec(_nic(0, UUID_A), _nic(1, ""))
    taps = [netdev.Tap(name="tapAAA", nic_index=0), netdev.Tap(name="tapBBB", nic_index=1)]
    assert netdev.netdev_args(spec, taps) == [
        "-netdev", "tap,id=nic-6f1c2a9e-net,ifname=tapAAA,script=no,downscript=no",
        "-device", "virtio-net-pci,id=nic-6f1c2a9e,netdev=nic-6f1c2a9e-net,"
                   "mac=aa:00:00:00:00:00",
        "-netdev", "tap,id=nic-1-net,ifname=tapBBB,script=no,downscript=no",
        "-device", "virtio-net-pci,id=nic-1,netdev=nic-1-net,mac=aa:00:00:00:00:01",
    ]


def test_nic_type_selects_the_qemu_model() -> None:
    spec = _spec(_nic(), nic_type="rtl8139")
    args = netdev.netdev_args(spec, [netdev.Tap(name="tapAAA", nic_index=0)])
    assert args[3].startswith("rtl8139,")
    with pytest.raises(HypervisorError, match=r"unknown nic_type 'virtio'.*paravirtual"):
        netdev.netdev_args(_spec(_nic(), nic_type="virtio"),
                           [netdev.Tap(name="tapAAA", nic_index=0)])


# -- checks before anything is created ---------------------------------------------
def test_check_nics_names_each_problem(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    spec = _spec(
        _nic(0, mode="bridged", link="corral-no-such-br"),
        _nic(1, UUID_B, mode="routed", link="100"),
        _nic(2, "", mode="openvswitch", link="ovs0"),
        _nic(3, "", mode="bridged", link=""),
    )
    problems = netdev.check_nics(paths, spec)
    assert problems[0] == "NIC 0: bridge corral-no-such-br does not exist on this node"
    assert problems[1] == "NIC 1 is routed but has no IP address"
    assert "mode openvswitch is not supported" in problems[2]
    assert "accepted: bridged, routed" in problems[2]
    assert problems[3] == "NIC 3 is bridged but names no bridge (link)"
    # nothing is created for a refused instance: the refusal comes first
    with pytest.raises(HypervisorError, match="bridge corral-no-such-br does not exist"):
        asyncio.run(netdev.setup_taps(paths, spec))


def test_the_hook_takes_over_what_corral_cannot_check(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    hook = netdev.hook_path(paths)
    hook.parent.mkdir(parents=True)
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    spec = _spec(_nic(0, mode="bridged", link="set-up-by-the-hook"),
                 _nic(1, UUID_B, mode="openvswitch", link="ovs0"))
    assert netdev.check_nics(paths, spec) == []
    hook.chmod(0o644)  # not executable: not a hook
    assert len(netdev.check_nics(paths, spec)) == 2


# -- the hook's environment ------------------------------------------------------
def test_hook_environment_has_ganetis_names() -> None:
    nic = _nic(0, mode="bridged", link="br0", ip="192.0.2.10", name="front", vlan=".100")
    env = netdev.hook_environment(_spec(nic), nic, "tap0123456789ab")
    path = env.pop("PATH")
    assert path.endswith(":/sbin:/usr/sbin")
    assert env == {
        "INSTANCE": "inst1.example.com", "MAC": "aa:00:00:00:00:00", "MODE": "bridged",
        "INTERFACE": "tap0123456789ab", "INTERFACE_INDEX": "0", "INTERFACE_UUID": UUID_A,
        "TAGS": "b a", "VLAN": ".100", "IP": "192.0.2.10", "INTERFACE_NAME": "front",
        "LINK": "br0", "BRIDGE": "br0", "ACTION": "up",
    }


def test_hook_environment_leaves_out_what_the_nic_lacks() -> None:
    nic = _nic(2, "", mode="routed", link="")
    env = netdev.hook_environment(_spec(nic), nic, "tapx")
    for key in ("IP", "INTERFACE_NAME", "LINK", "BRIDGE"):
        assert key not in env
    assert env["MODE"] == "routed"
    assert env["INTERFACE_INDEX"] == "2"
    assert env["VLAN"] == ""


# -- VLANs on a bridged NIC ------------------------------------------------------
def test_vlan_notation_follows_ganeti() -> None:
    assert netdev.vlan_commands("tapx", ".100") == [
        ["bridge", "vlan", "add", "dev", "tapx", "vid", "100", "pvid", "untagged", "master"]]
    assert netdev.vlan_commands("tapx", "100:200") == [
        ["bridge", "vlan", "add", "dev", "tapx", "vid", "100", "pvid", "untagged", "master"],
        ["bridge", "vlan", "add", "dev", "tapx", "vid", "200", "master"]]
    assert netdev.vlan_commands("tapx", ":200:300") == [
        ["bridge", "vlan", "add", "dev", "tapx", "vid", "200", "master"],
        ["bridge", "vlan", "add", "dev", "tapx", "vid", "300", "master"]]
    for bad in ("x", "5000", ":", "100::200", "0"):
        with pytest.raises(HypervisorError, match=r"invalid vlan.*1 to 4094"):
            netdev.vlan_commands("tapx", bad)


def test_vlan_needs_a_vlan_aware_bridge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                        ) -> None:
    sys_net = tmp_path / "sys"
    (sys_net / "br0" / "bridge").mkdir(parents=True)
    (sys_net / "br0" / "bridge" / "vlan_filtering").write_text("0\n")
    monkeypatch.setattr(netdev, "SYS_CLASS_NET", sys_net)
    paths = Paths(tmp_path / "root")
    spec = _spec(_nic(0, mode="bridged", link="br0", vlan=".100"))
    (problem,) = netdev.check_nics(paths, spec)
    assert problem.startswith("NIC 0: vlan .100 needs VLAN filtering on bridge br0")
    (sys_net / "br0" / "bridge" / "vlan_filtering").write_text("1\n")
    assert netdev.check_nics(paths, spec) == []
    bad = _spec(_nic(0, mode="bridged", link="br0", vlan="1.5"))
    assert "invalid vlan '1.5'" in netdev.check_nics(paths, bad)[0]
