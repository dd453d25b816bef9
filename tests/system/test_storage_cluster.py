"""plain (LVM) and blockdev instances, LVM storage units, on a 2-node testbed, for real on
loop devices.

Each node gets its own volume group (two physical volumes on node1, one on node2),
all of the same name, the cluster's ``--vg-name``; a node's LVM configuration sees
only its own loop devices (:mod:`corral.testbed.loopvg`). This host has no
device-mapper (HOST-FACTS.md): volumes are created, grown, renamed and removed for
real, never activated. So instances are made with ``--no-install`` and not started;
the test of what activation does on such a host checks the refusal, and is skipped
on a host that can activate. Loop devices are real block devices, though: an instance
adopts one (template ``blockdev``, through a name below ``/dev/disk/``) and a real
tiny guest under kvm (TCG) boots from it and reads its settings off it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from corral.paths import Paths
from corral.testbed import guest as tiny_guest
from corral.testbed.loopvg import LoopVolumeGroup, device_mapper_available, lvm_available
from tests.conftest import assert_no_daemons, run_testbed
from tests.system.conftest import KvmTestbed

pytestmark = pytest.mark.system

NODE1, NODE2 = "node1.testbed", "node2.testbed"
OS = "corral-ext4+default"


@dataclass
class LvmCluster:
    """The testbed and the volume group of each node."""

    testbed: KvmTestbed
    vg: str
    groups: dict[str, LoopVolumeGroup]

    def run(self, *args: str, check: bool = True) -> object:
        return self.testbed.run(*args, check=check)

    def out(self, *args: str) -> str:
        return self.testbed.run(*args).stdout

    def lvs(self, node: str, *fields: str) -> dict[str, list[str]]:
        """The node's LVs: {name: [fields]}, through the node's own LVM view."""
        group = self.groups[node]
        text = group.lvm("lvs", "--noheadings", "--separator", "|", "--units", "m",
                         "--nosuffix", "-o", ",".join(("lv_name", *fields)), self.vg).stdout
        return {line.split("|")[0].strip(): [v.strip() for v in line.split("|")[1:]]
                for line in text.splitlines() if line.strip()}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory,
            guest: tiny_guest.TinyGuest) -> Iterator[LvmCluster]:
    reason = lvm_available()
    if reason:
        pytest.skip(reason)
    base = tmp_path_factory.mktemp("lvm")
    directory = base / "tb"
    vg = f"storage-lvm-{uuid.uuid4().hex[:6]}"
    groups: dict[str, LoopVolumeGroup] = {}
    try:
        groups[NODE1] = LoopVolumeGroup.create(base / "vg1", [64, 64], name=vg)
        groups[NODE2] = LoopVolumeGroup.create(base / "vg2", [64], name=vg)
        proc = run_testbed("up", "--nodes", "2", "--dir", str(directory), "--hypervisors",
                           "fake,kvm", "--tiny-guest", str(guest.kernel.parent))
        assert proc.returncode == 0, proc.stderr
        testbed = KvmTestbed(directory, json.loads((directory / "testbed.json").read_text()),
                             guest)
        for index, node in enumerate((NODE1, NODE2)):
            groups[node].install(Paths(Path(testbed.state["nodes"][index]["root"])))
        templates = "plain,file,diskless,blockdev"
        testbed.run("gnt-cluster", "modify", "--vg-name", vg, "--enabled-disk-templates",
                    templates, "--ipolicy-disk-templates", templates)
        yield LvmCluster(testbed, vg, groups)
    finally:
        run_testbed("down", "--dir", str(directory))
        assert_no_daemons(directory)
        for group in groups.values():
            group.destroy()


def rows(text: str) -> list[list[str]]:
    return [line.split("|") for line in text.splitlines() if line]


def test_vg_name_must_exist_on_every_node(cluster: LvmCluster) -> None:
    proc = cluster.testbed.run("gnt-cluster", "modify", "--vg-name", "nosuchvg", check=False)
    assert proc.returncode == 1
    assert f"Error on node '{NODE1}': volume group 'nosuchvg' missing" in proc.stderr
    assert f"its volume groups: {cluster.vg}" in proc.stderr


def test_lvm_storage_units_and_node_free_space(cluster: LvmCluster) -> None:
    vgs = rows(cluster.out("gnt-node", "list-storage", "-t", "lvm-vg", "--no-headers",
                           "--separator=|"))
    assert vgs == [[NODE1, "lvm-vg", cluster.vg, "120", "0", "120", "Y"],
                   [NODE2, "lvm-vg", cluster.vg, "60", "0", "60", "Y"]]
    pvs = rows(cluster.out("gnt-node", "list-storage", "-t", "lvm-pv", "--no-headers",
                           "--separator=|", "-o", "node,name,size,allocatable"))
    expected = [[NODE1, dev, "60", "Y"] for dev in sorted(cluster.groups[NODE1].devices)]
    expected += [[NODE2, cluster.groups[NODE2].devices[0], "60", "Y"]]
    assert pvs == expected
    human = cluster.out("gnt-node", "list-storage", "-t", "lvm-vg", NODE2).splitlines()
    assert re.split(r"\s+", human[1]) == [NODE2, "lvm-vg", cluster.vg, "60M", "0M", "60M", "Y"]
    # plain is the first enabled template: the nodes' free space is their group's.
    nodes = rows(cluster.out("gnt-node", "list", "--no-headers", "--separator=|",
                             "-o", "name,dtotal,dfree"))
    assert nodes == [[NODE1, "120", "120"], [NODE2, "60", "60"]]


def test_a_pv_not_allocatable_is_never_used(cluster: LvmCluster) -> None:
    first, second = sorted(cluster.groups[NODE1].devices)
    cluster.run("gnt-node", "modify-storage", "--allocatable=no", NODE1, "lvm-pv", first)
    try:
        assert rows(cluster.out("gnt-node", "list-storage", "-t", "lvm-pv", "--no-headers",
                                "--separator=|", "-o", "name,allocatable", NODE1)) == [
            [first, "N"], [second, "Y"]]
        refused = cluster.testbed.run(
            "gnt-instance", "add", "-t", "plain", "--no-install", "--no-start", "-o", OS,
            "-n", NODE1, "--disk", "0:size=100M", "big.testbed", check=False)
        assert refused.returncode == 1
        assert (f"Not enough disk space on target node {NODE1} vg {cluster.vg}: required "
                "100 MiB, available 60 MiB") in refused.stderr
        assert cluster.lvs(NODE1) == {}
        cluster.run("gnt-instance", "add", "-t", "plain", "--no-install", "--no-start",
                    "-o", OS, "-n", NODE1, "--disk", "0:size=8M", "--disk", "1:size=8M",
                    "pv.testbed")
        placed = cluster.lvs(NODE1, "devices")
        assert {devices[0].split("(")[0] for devices in placed.values()} == {second}
        volumes = rows(cluster.out("gnt-node", "volumes", "--no-headers", "--separator=|",
                                   NODE1))
        assert sorted(row[1] for row in volumes) == [second, second]
        assert {row[5] for row in volumes} == {"pv.testbed"}
    finally:
        cluster.run("gnt-instance", "remove", "-f", "pv.testbed", check=False)
        cluster.run("gnt-node", "modify-storage", "--allocatable=yes", NODE1, "lvm-pv", first)
    assert cluster.lvs(NODE1) == {}


def test_plain_instance_volumes(cluster: LvmCluster) -> None:
    name = "plain1.testbed"
    cluster.run("gnt-cluster", "modify", "-D", "plain:stripes=2")
    try:
        cluster.run("gnt-instance", "add", "-t", "plain", "--no-install", "--no-start",
                    "-o", OS, "-n", NODE1, "--disk", "0:size=8M", "--disk", "1:size=4M",
                    name)
    finally:
        cluster.run("gnt-cluster", "modify", "-D", "plain:stripes=1")
    try:
        info = json.loads(cluster.out("gnt-instance", "info", "--json", name))[name]
        ids = [disk["logical_id"] for disk in info["disks"]]
        assert [vg for vg, _lv in ids] == [cluster.vg, cluster.vg]
        assert [lv.rsplit(".", 1)[1] for _vg, lv in ids] == ["disk0", "disk1"]
        lvs = cluster.lvs(NODE1, "lv_size", "stripes")
        assert lvs[ids[0][1]] == ["8.00", "2"] and lvs[ids[1][1]][1] == "2"
        shown = cluster.out("gnt-instance", "info", name)
        assert f"logical_id: {cluster.vg}/{ids[0][1]}" in shown
        # The LVs exist but are not active (nothing can be activated without
        # device-mapper): the disk status says so.
        status = rows(cluster.out("gnt-instance", "disk-status", "--no-headers",
                                  "--separator=|", name))
        assert [row[:3] for row in status] == [["disk/0", NODE1, "inactive"],
                                               ["disk/1", NODE1, "inactive"]]
        cluster.run("gnt-instance", "grow-disk", name, "0", "8M")
        assert cluster.lvs(NODE1, "lv_size")[ids[0][1]] == ["16.00"]
        too_much = cluster.testbed.run("gnt-instance", "grow-disk", name, "1", "1G",
                                       check=False)
        assert too_much.returncode == 1 and "MiB free" in too_much.stderr
        bad_vg = cluster.testbed.run(
            "gnt-instance", "add", "-t", "plain", "--no-install", "--no-start", "-o", OS,
            "-n", NODE2, "--disk", "0:size=4M,vg=nosuchvg", "badvg.testbed", check=False)
        assert bad_vg.returncode == 1
        assert (f"Can't compute free disk space on node {NODE2} for vg nosuchvg, result was "
                f"'None'\nvolume group nosuchvg does not exist on node {NODE2}; its volume "
                f"groups: {cluster.vg}") in bad_vg.stderr
    finally:
        cluster.run("gnt-instance", "remove", "-f", name)
    assert cluster.lvs(NODE1) == {}


def test_an_allocator_places_a_plain_instance_where_its_volume_group_has_room(
        cluster: LvmCluster) -> None:
    # node1's volume group has two 64 MiB volumes, node2's one: 80M fits node1 only,
    # as the nodes' volume groups tell the allocator (the request's free_disk).
    add = ["gnt-instance", "add", "-t", "plain", "--no-install", "--no-start", "-o", OS,
           "--disk", "0:size=80M"]
    # With the capacity checks (hail's N+1) the instance fits nowhere: node2 could not
    # take it over if node1 failed.
    refused = cluster.testbed.run(*add, "n1.testbed", check=False)
    assert refused.returncode == 1
    assert ("Can't compute nodes using iallocator 'corral': Request failed: Group default "
            "(preferred): No valid allocation solutions, failure reasons: FailDisk: 1, "
            "FailN1: 1") in refused.stderr
    name = "placed.testbed"
    cluster.run("gnt-cluster", "modify", "--default-iallocator-params", "no-capacity-checks")
    try:
        cluster.run(*add, name)
    finally:
        cluster.run("gnt-cluster", "modify", "--default-iallocator-params",
                    "-no-capacity-checks")
    try:
        assert cluster.out("gnt-instance", "list", "--no-headers", "-o", "pnode",
                           name).strip() == NODE1
    finally:
        cluster.run("gnt-instance", "remove", "-f", name)
    assert cluster.lvs(NODE1) == {}


def test_adopting_an_existing_logical_volume(cluster: LvmCluster) -> None:
    group = cluster.groups[NODE2]
    group.lvm("lvcreate", "-q", "-Wn", "-L", "12m", "-n", "precious", cluster.vg)
    name = "adopted.testbed"
    missing = cluster.testbed.run(
        "gnt-instance", "add", "-t", "plain", "-o", OS, "-n", NODE2, "--no-start",
        "--disk", "0:adopt=nosuchlv", name, check=False)
    assert missing.returncode == 1
    assert f"Missing logical volume(s): {cluster.vg}/nosuchlv" in missing.stderr
    both = cluster.testbed.run(
        "gnt-instance", "add", "-t", "plain", "-o", OS, "-n", NODE2, "--no-start",
        "--disk", "0:adopt=precious,size=1G", name, check=False)
    assert both.returncode == 1
    assert "Only one of 'size' and 'adopt' allowed (disk 0)" in both.stderr
    # The policy is checked with the adopted volume's size, and a refusal leaves it alone.
    cluster.run("gnt-group", "modify", "--ipolicy-bounds-specs",
                "min:cpu-count=1,disk-count=1,disk-size=16M,memory-size=1,nic-count=0,"
                "spindle-use=0/max:cpu-count=8,disk-count=16,disk-size=1T,memory-size=32G,"
                "nic-count=8,spindle-use=12", "default")
    try:
        small = cluster.testbed.run(
            "gnt-instance", "add", "-t", "plain", "-o", OS, "-n", NODE2, "--no-start",
            "--disk", "0:adopt=precious", name, check=False)
    finally:
        cluster.run("gnt-group", "modify", "--ipolicy-bounds-specs", "default", "default")
    assert small.returncode == 1
    assert "violates policy: disk-size/0 value 12 is not in range [16, 1048576]" in small.stderr
    assert set(cluster.lvs(NODE2)) == {"precious"}
    cluster.run("gnt-instance", "add", "-t", "plain", "-o", OS, "-n", NODE2, "--no-start",
                "--disk", "0:adopt=precious", name)
    try:
        info = json.loads(cluster.out("gnt-instance", "info", "--json", name))[name]
        disk = info["disks"][0]
        assert disk["size"] == 12 and disk["logical_id"][1] == f"{disk['uuid']}.disk0"
        assert set(cluster.lvs(NODE2)) == {f"{disk['uuid']}.disk0"}
    finally:
        cluster.run("gnt-instance", "remove", "-f", name)
    assert cluster.lvs(NODE2) == {}


def test_gnt_cluster_verify_checks_the_volume_groups_and_their_volumes(
        cluster: LvmCluster) -> None:
    name = "verified.testbed"
    cluster.run("gnt-instance", "add", "-t", "plain", "--no-install", "--no-start", "-o", OS,
                "-n", NODE2, "--disk", "0:size=4M", name)
    group = cluster.groups[NODE2]
    try:
        [lv] = cluster.lvs(NODE2)
        group.lvm("lvcreate", "-q", "-Wn", "-L", "4m", "-n", "stray", cluster.vg)
        group.lvm("lvremove", "-q", "-f", f"{cluster.vg}/{lv}")
        proc = cluster.testbed.run("gnt-cluster", "verify", "--error-codes", check=False)
        assert proc.returncode != 0
        assert (f"WARNING:ENODEORPHANLV:node:{NODE2}:volume {cluster.vg}/stray is unknown"
                in proc.stdout)
        assert (f"ERROR:EINSTANCEMISSINGDISK:instance:{name}:volume {cluster.vg}/{lv} "
                f"missing on node {NODE2}") in proc.stdout
        assert "ENODELVM" not in proc.stdout
    finally:
        group.lvm("lvremove", "-q", "-f", f"{cluster.vg}/stray", check=False)
        cluster.run("gnt-instance", "remove", "-f", name)


def test_activation_and_verify_disks_without_device_mapper(cluster: LvmCluster) -> None:
    if device_mapper_available():
        pytest.skip("this host has device-mapper: plain instances start here")
    name = "noact.testbed"
    cluster.run("gnt-instance", "add", "-t", "plain", "--no-install", "--no-start",
                "-o", OS, "-n", NODE2, "--disk", "0:size=4M", name)
    try:
        start = cluster.testbed.run("gnt-instance", "startup", name, check=False)
        assert start.returncode == 1 and "cannot activate volumes" in start.stderr
        # Marked up, its disk inactive: verify-disks tries to activate it and says why not.
        verify = cluster.testbed.run("gnt-cluster", "verify-disks", check=False)
        assert verify.returncode == 1
        assert f"Activating disks for instance '{name}'" in verify.stdout
        assert f"Error activating disks for instance {name}" in verify.stderr
        assert "cannot activate volumes" in verify.stderr
        [lv] = cluster.lvs(NODE2)
        cluster.groups[NODE2].lvm("lvremove", "-f", f"{cluster.vg}/{lv}")  # behind our back
        lost = cluster.testbed.run("gnt-cluster", "verify-disks", check=False)
        assert lost.returncode == 1
        assert (f"Instance {name} has missing logical volumes:\n"
                f"\t{NODE2} /dev/{cluster.vg}/{lv}\n") in lost.stdout
        cluster.run("gnt-instance", "shutdown", name)
        cluster.run("gnt-instance", "recreate-disks", name)
        assert set(cluster.lvs(NODE2)) == {lv}
    finally:
        cluster.run("gnt-instance", "remove", "-f", name)


def test_repairing_a_volume_group_after_a_physical_volume_vanished(
        cluster: LvmCluster, tmp_path: Path) -> None:
    group = cluster.groups[NODE1]
    node1 = Paths(Path(cluster.testbed.state["nodes"][0]["root"]))
    extra = group.add_device(64, f"{group.name}-extra.img")
    group.install(node1)
    group.lvm("pvcreate", "-q", extra)
    group.lvm("vgextend", "-q", cluster.vg, extra)
    others = [dev for dev in group.devices if dev != extra]
    for dev in others:
        cluster.run("gnt-node", "modify-storage", "--allocatable=no", NODE1, "lvm-pv", dev)
    name = "lost.testbed"
    cluster.run("gnt-instance", "add", "-t", "plain", "--no-install", "--no-start", "-o", OS,
                "-n", NODE1, "--disk", "0:size=8M", name)
    try:
        for dev in others:
            cluster.run("gnt-node", "modify-storage", "--allocatable=yes", NODE1, "lvm-pv",
                        dev)
        group.detach(extra)  # the physical volume vanishes
        assert rows(cluster.out("gnt-node", "list-storage", "-t", "lvm-vg", "--no-headers",
                                "--separator=|", "-o", "name,status", NODE1)) == [
            [cluster.vg, "1 physical volume(s) missing"]]
        status = rows(cluster.out("gnt-instance", "disk-status", "--no-headers",
                                  "--separator=|", name))
        assert [row[:3] for row in status] == [["disk/0", NODE1, "faulty"]]
        assert "*FAILED* (failed drive?)" in cluster.out("gnt-instance", "info", name)
        repair = cluster.out("gnt-node", "repair-storage", NODE1, "lvm-vg", cluster.vg)
        assert f"Repairing storage unit '{cluster.vg}' on {NODE1} ..." in repair
        vgs = rows(cluster.out("gnt-node", "list-storage", "-t", "lvm-vg", "--no-headers",
                               "--separator=|", "-o", "size,status", NODE1))
        assert vgs == [["120", "ok"]]
        status = rows(cluster.out("gnt-instance", "disk-status", "--no-headers",
                                  "--separator=|", name))
        assert [row[:3] for row in status] == [["disk/0", NODE1, "missing"]]
        cluster.run("gnt-instance", "recreate-disks", name)
        placed = cluster.lvs(NODE1, "devices")
        assert [devices[0].split("(")[0] in others for devices in placed.values()] == [True]
    finally:
        cluster.run("gnt-instance", "remove", "-f", name, check=False)


@pytest.fixture
def adoptable(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A loop device holding the tiny guest's settings block (host name
    ``from-the-device``), and its name below ``/dev/disk/by-id``; both removed after."""
    backing = tmp_path / "adoptable.img"
    block = f"{tiny_guest.DISK_CONFIG_MAGIC}\nhostname=from-the-device\nend\n".encode()
    backing.write_bytes(block.ljust(4096, b"\0"))
    with backing.open("r+b") as handle:
        handle.truncate(16 * 1024 * 1024)
    device = subprocess.run(["losetup", "-f", "--show", str(backing)], check=True,
                            capture_output=True, text=True).stdout.strip()
    by_id = Path("/dev/disk/by-id")
    made = [d for d in (by_id.parent, by_id) if not d.exists()]
    link = by_id / f"storage-lvm-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    try:
        by_id.mkdir(parents=True, exist_ok=True)
        link.symlink_to(device)
        yield device, str(link)
    finally:
        link.unlink(missing_ok=True)
        for directory in reversed(made):
            with contextlib.suppress(OSError):
                directory.rmdir()
        subprocess.run(["losetup", "-d", device], check=False, capture_output=True)


def test_a_guest_boots_from_an_adopted_block_device(
        cluster: LvmCluster, adoptable: tuple[str, str]) -> None:
    device, link = adoptable
    name = "adopted-dev.testbed"
    common = ["-t", "blockdev", "--no-install", "-o", "corral-tiny", "-n", NODE1,
              "-H", "kvm", "-B", "maxmem=128,minmem=128", "--no-nics", "--no-start"]
    for disk, message in (
            (f"0:adopt={device}", f"Device node(s) {device} lie outside /dev/disk/ and "
                                  "cannot be adopted"),
            ("0:adopt=/dev/disk/nosuch", "Missing block device(s): /dev/disk/nosuch"),
            ("0:size=16M", "Disk template blockdev requires disk adoption, but no 'adopt' "
                           "parameter given")):
        refused = cluster.testbed.run("gnt-instance", "add", *common, "--disk", disk, name,
                                      check=False)
        assert refused.returncode == 1 and message in refused.stderr, refused.stderr
    cluster.run("gnt-instance", "add", *common, "--disk", f"0:adopt={link}", name)
    try:
        major_minor = os.stat(device).st_rdev
        info = cluster.out("gnt-instance", "info", name)
        assert (f"on primary: {link} ({os.major(major_minor)}:{os.minor(major_minor)})"
                in info)
        assert "blockdev, size 16M" in info
        grow = cluster.testbed.run("gnt-instance", "grow-disk", name, "0", "1M", check=False)
        assert grow.returncode == 1
        assert "Instance's disk layout blockdev does not support growing" in grow.stderr
        cluster.run("gnt-instance", "startup", name)
        cluster.testbed.wait_console(name, "corral-tiny-guest: hostname from-the-device")
        assert "config from vda" in cluster.testbed.console(name)
        cluster.run("gnt-instance", "shutdown", "--timeout=0", name)
    finally:
        cluster.run("gnt-instance", "remove", "-f", name, check=False)
    # The device is not corral's: removing the instance leaves it as it was.
    with open(device, "rb") as handle:
        assert handle.read(len(tiny_guest.DISK_CONFIG_MAGIC)) == \
            tiny_guest.DISK_CONFIG_MAGIC.encode()
