"""rbd and ext disks without daemons: a request's disk definitions, Ganeti's access rule,
volume names, userspace URIs on the qemu command line and in the OS environment, and the
rbd driver's errors when Ceph cannot be reached (with Ceph's real rbd command)."""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from corral.cmdlib.disk_layout import (
    check_access,
    external_params,
    new_logical_id,
    parse_disks,
)
from corral.errors import BlockDeviceError, HypervisorError, OpPrereqError, ParameterError
from corral.hypervisor.kvm.cmdline import build_command
from corral.hypervisor.kvm.runtime import InstanceRuntime
from corral.hypervisor.kvm.uris import is_uri, protocol_node
from corral.objects.params import HV_PARAMS
from corral.objects.specs import DiskSpec, InstanceSpec
from corral.osapi import build_env, read_os
from corral.paths import Paths
from corral.storage.rbd import RbdStorage, rbd_uri

OS_DIR = Path(__file__).resolve().parents[1] / "data" / "os"


# -- a request's disks ------------------------------------------------------------------------


def test_ext_disks_keep_their_provider_and_its_parameters() -> None:
    disks = parse_disks("ext", [
        {"size": "1G", "provider": "pvdr1", "fromsnap": "s1", "nas_ip": "1.2.3.4"},
        {"size": 5, "provider": "pvdr2", "access": "userspace", "count": 3, "name": "d1"},
    ], default_vg="")
    assert disks[0]["params"] == {"provider": "pvdr1", "fromsnap": "s1",
                                  "nas_ip": "1.2.3.4"}
    assert disks[1]["params"] == {"provider": "pvdr2", "access": "userspace", "count": "3"}
    assert new_logical_id("ext", disks[0], instance_uuid="i", disk_uuid="u1", index=0,
                          storage_dir="") == ["pvdr1", "u1.ext.disk0"]
    assert new_logical_id("rbd", {"params": {}}, instance_uuid="i", disk_uuid="u2", index=3,
                          storage_dir="") == ["rbd", "u2.rbd.disk3"]


@pytest.mark.parametrize(("template", "disk", "message"), [
    ("ext", {"size": 1}, "Missing provider for template 'ext'"),
    ("file", {"size": 1, "provider": "x"},
     "The 'provider' option is only valid for the ext disk template, not file"),
    ("rbd", {"size": 1, "provider": "x"},
     "The 'provider' option is only valid for the ext disk template, not rbd"),
    ("rbd", {"size": 1, "pool": "other"}, r"unknown key\(s\) pool"),
    ("file", {"size": 1, "access": "userspace"}, "'access' is only for the ext and rbd"),
    ("rbd", {"size": 1, "access": "bogus"}, "invalid access 'bogus'; valid: kernelspace, "
                                            "userspace"),
    ("ext", {"size": 1, "provider": "../x"}, "invalid provider"),
    ("ext", {"size": 1, "provider": "p", "bad key": "v"}, "invalid ExtStorage parameter"),
    ("ext", {"size": 1, "provider": "p", "nested": {"a": 1}}, "needs a plain value"),
])
def test_refused_definitions(template: str, disk: dict[str, Any], message: str) -> None:
    with pytest.raises(ParameterError, match=message):
        parse_disks(template, [disk], default_vg="")


def test_external_params_of_templates_without_any() -> None:
    assert external_params("file", {"size": 1}, "disk 0") == {}
    assert external_params("rbd", {"access": "kernelspace"}, "disk 0") == {
        "access": "kernelspace"}


@pytest.mark.parametrize(("hypervisor", "template", "access", "ok"), [
    ("kvm", "rbd", "userspace", True),
    ("kvm", "ext", "userspace", True),
    ("kvm", "rbd", "kernelspace", True),
    ("fake", "rbd", "kernelspace", True),
    ("fake", "rbd", "userspace", False),
    ("fake", "ext", "userspace", False),
])
def test_userspace_access_is_for_kvm_only(hypervisor: str, template: str, access: str,
                                          ok: bool) -> None:
    if ok:
        check_access(hypervisor, template, access)
        return
    with pytest.raises(OpPrereqError, match=rf"^Selected hypervisor \({hypervisor}\) cannot "
                                            f"be used with {access} disk access param$"):
        check_access(hypervisor, template, access)


# -- userspace URIs ------------------------------------------------------------------------------


def test_rbd_uris_become_qemu_rbd_nodes() -> None:
    assert not is_uri("/dev/rbd0")
    assert is_uri("rbd:rbd/img")
    assert protocol_node("rbd:rbd/u.rbd.disk0", "d") == {
        "driver": "rbd", "pool": "rbd", "image": "u.rbd.disk0"}
    uri = rbd_uri("vms", "img", "/etc/ceph:x/ceph.conf")
    assert uri == "rbd:vms/img:conf=/etc/ceph\\:x/ceph.conf"
    assert protocol_node(uri, "d") == {"driver": "rbd", "pool": "vms", "image": "img",
                                       "conf": "/etc/ceph:x/ceph.conf"}
    assert protocol_node("rbd:p/ns/img@snap:id=admin", "d") == {
        "driver": "rbd", "pool": "p", "namespace": "ns", "image": "img", "snapshot": "snap",
        "user": "admin"}


@pytest.mark.parametrize(("uri", "message"), [
    ("rbd:justone", "is not an rbd URI"),
    ("rbd:p/i:mon_host=1.2.3.4", "option 'mon_host=1.2.3.4' .* is not one corral passes"),
    ("gluster://h/v/i", "opens only files, block devices and rbd: URIs .this one is 'gluster'"),
])
def test_uris_qemu_is_not_given(uri: str, message: str) -> None:
    with pytest.raises(HypervisorError, match=message):
        protocol_node(uri, "instance x disk/0")


def test_an_rbd_disk_is_a_raw_node_over_qemus_rbd_driver(tmp_path: Path) -> None:
    filled = {name: spec.default for name, spec in HV_PARAMS["kvm"].items()}
    filled.update(kernel_path="", disk_cache="writeback", disk_aio="native")
    spec = InstanceSpec(name="vm1", uuid="0123", hypervisor="kvm", hvparams=filled,
                        beparams={"maxmem": 128, "minmem": 128, "vcpus": 1},
                        disks=[DiskSpec(uuid="aaaabbbb-1", index=0, dev_type="rbd",
                                        size=64)])
    command = build_command(spec, ["rbd:rbd/aaaabbbb-1.rbd.disk0:conf=/c/ceph.conf"],
                            InstanceRuntime(Paths(tmp_path), "vm1"), binary="/bin/qemu")
    blockdev = command[command.index("-blockdev") + 1]
    assert blockdev == ("driver=raw,node-name=disk-aaaabbbb-drive,file.driver=rbd,"
                        "file.pool=rbd,file.image=aaaabbbb-1.rbd.disk0,"
                        "file.conf=/c/ceph.conf,cache.direct=off")


def test_the_os_scripts_get_a_uri_instead_of_a_path(tmp_path: Path) -> None:
    definition = read_os(OS_DIR / "dumpenv")
    disks = [DiskSpec(uuid="d-0", index=0, dev_type="rbd", size=64, logical_id=["rbd", "x"]),
             DiskSpec(uuid="d-1", index=1, dev_type="ext", size=64,
                      logical_id=["pvdr", "y"])]
    spec = InstanceSpec(name="web1", uuid="u", os="dumpenv", hypervisor="kvm", disks=disks)
    env = build_env(definition, "", spec, ["rbd:rbd/x", "/dev/loop7"])
    assert env["DISK_0_URI"] == "rbd:rbd/x"
    assert "DISK_0_PATH" not in env
    assert env["DISK_1_PATH"] == "/dev/loop7"
    assert "DISK_1_URI" not in env
    assert env["DISK_0_BACKEND_TYPE"] == env["DISK_1_BACKEND_TYPE"] == "block"


# -- rbd when Ceph does not answer -----------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.skipif(shutil.which("rbd") is None, reason="Ceph's rbd command is not installed "
                    "(Debian: ceph-common, which 'make sysdeps' installs)")
async def test_an_unreachable_ceph_is_reported_naming_its_monitor(tmp_path: Path) -> None:
    paths = Paths(tmp_path / "node")
    conf = paths.node_path("/etc/ceph/ceph.conf")
    conf.parent.mkdir(parents=True)
    monitor = f"v2:127.0.0.1:{_closed_port()}"
    conf.write_text(f"[global]\nfsid = 00000000-0000-0000-0000-000000000001\n"
                    f"mon host = {monitor}\nauth client required = none\n"
                    f"log to stderr = false\n")
    driver = RbdStorage(paths)
    driver.mount_timeout = 1
    disk = DiskSpec(uuid="u", index=0, dev_type="rbd", size=64,
                    logical_id=["rbd", "u.rbd.disk0"], params={"pool": "rbd"})
    started = time.monotonic()
    with pytest.raises(BlockDeviceError) as caught:
        await driver.create(disk)
    assert time.monotonic() - started < 30  # not rbd's own five minutes
    message = caught.value.message
    assert message.startswith("disk/0: cannot create rbd image u.rbd.disk0 in pool rbd: the "
                              "Ceph cluster did not answer: no monitor at ")
    assert monitor in message
    assert str(conf) in message


def test_an_rbd_disk_needs_ganetis_logical_id(tmp_path: Path) -> None:
    driver = RbdStorage(Paths(tmp_path))
    bad = DiskSpec(uuid="u", index=2, dev_type="rbd", size=1, logical_id=["x", "y"])
    with pytest.raises(BlockDeviceError, match=r"disk/2 has logical id \['x', 'y'\]"):
        driver._image(bad)
