"""Configurations that cannot work are refused on the 3-node testbed, with a message
saying what was wrong and what is accepted, and nothing changed (issue 23)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import TestbedHandle
from tests.integration.test_instances import list_instances, node_paths

FIELDS = "name,pnode,status,disk_template,be/maxmem,be/minmem,be/vcpus,disk.sizes,nic.links"


def refused(testbed: TestbedHandle, *args: str) -> subprocess.CompletedProcess[str]:
    """Run a command that must fail with exit code 1 (Ganeti's failure code)."""
    proc = testbed.run(*args, check=False)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    return proc


def add(testbed: TestbedHandle, name: str, *args: str, template: str = "diskless",
        node: str = "node1.testbed") -> None:
    """An instance without an OS install (fast), not started."""
    extra = ("--disk", "0:size=8M") if template != "diskless" else ()
    testbed.run("gnt-instance", "add", "-t", template, "--no-install", "-n", node,
                "--no-start", *extra, *args, name)


def test_backend_parameters_out_of_range(testbed: TestbedHandle) -> None:
    for value in ("vcpus=0", "vcpus=-1"):
        proc = refused(testbed, "gnt-instance", "add", "-t", "diskless", "--no-install",
                       "-n", "node1.testbed", "-B", value, "bad.testbed")
        assert "out of range; accepted: 1 or more" in proc.stderr
    # beyond the instance policy's 32 GiB: refused by the policy, then (ignoring it) by
    # the nodes' memory
    proc = refused(testbed, "gnt-instance", "add", "-t", "diskless", "--no-install", "-n",
                   "node1.testbed", "-B", "memory=64T", "bad.testbed")
    assert "violates policy: memory-size value 67108864 is not in range" in proc.stderr
    proc = refused(testbed, "gnt-instance", "add", "-t", "diskless", "--no-install", "-n",
                   "node1.testbed", "-B", "memory=64T", "--ignore-ipolicy", "bad.testbed")
    assert "more memory than any node of group" in proc.stderr
    assert "accepted: at most" in proc.stderr
    assert list_instances(testbed, "name") == []

    add(testbed, "be.testbed")
    before = list_instances(testbed, FIELDS)
    for value, message in (("vcpus=0", "accepted: 1 or more"),
                           ("maxmem=64T", "more memory than any node"),
                           ("memory=64T", "more memory than any node")):
        proc = refused(testbed, "gnt-instance", "modify", "--ignore-ipolicy", "-B", value,
                       "be.testbed")
        assert message in proc.stderr
    assert list_instances(testbed, FIELDS) == before

    # The legacy alias sets both.
    testbed.run("gnt-instance", "modify", "-B", "memory=256M", "be.testbed")
    assert list_instances(testbed, "be/maxmem,be/minmem") == [["256", "256"]]

    info = testbed.run("gnt-cluster", "info").stdout
    proc = refused(testbed, "gnt-cluster", "modify", "-B", "vcpus=0")
    assert "'vcpus': 0 is out of range" in proc.stderr
    assert testbed.run("gnt-cluster", "info").stdout == info


def test_disabling_what_instances_use(testbed: TestbedHandle) -> None:
    add(testbed, "light.testbed")
    add(testbed, "filer.testbed", template="file")
    info = testbed.run("gnt-cluster", "info").stdout
    proc = refused(testbed, "gnt-cluster", "modify", "--enabled-disk-templates", "file")
    assert "Cannot disable disk template 'diskless'" in proc.stderr
    assert "light.testbed" in proc.stderr
    proc = refused(testbed, "gnt-cluster", "modify", "--enabled-disk-templates",
                   "diskless,sharedfile")
    assert "Cannot disable disk template 'file'" in proc.stderr
    assert "filer.testbed" in proc.stderr
    proc = refused(testbed, "gnt-cluster", "modify", "--enabled-hypervisors", "kvm")
    assert "Cannot disable hypervisor 'fake'" in proc.stderr
    assert "filer.testbed" in proc.stderr and "light.testbed" in proc.stderr
    assert testbed.run("gnt-cluster", "info").stdout == info


def test_moves_to_a_node_lacking_what_the_instance_needs(testbed: TestbedHandle) -> None:
    # A bridge that exists on no node.
    add(testbed, "bridged.testbed", "--net", "0:mode=bridged,link=corral-nobr0")
    before = list_instances(testbed, FIELDS)
    for verb in ("migrate", "failover"):
        proc = refused(testbed, "gnt-instance", verb, "-f", "-n", "node2.testbed",
                       "bridged.testbed")
        assert "node node2.testbed" in proc.stderr
        assert "missing bridges corral-nobr0" in proc.stderr
    add(testbed, "filebr.testbed", "--net", "0:mode=bridged,link=corral-nobr0",
        template="file")
    proc = refused(testbed, "gnt-instance", "move", "-f", "-n", "node3.testbed",
                   "filebr.testbed")
    assert "missing bridges corral-nobr0" in proc.stderr

    # Node 3 loses the shared file storage (its mount).
    add(testbed, "shared.testbed", "--no-nics", template="sharedfile")
    before = list_instances(testbed, FIELDS)
    link = node_paths(testbed, 3).node_path("/srv/corral/shared-file-storage")
    target = link.readlink()
    link.unlink()
    try:
        for verb in ("migrate", "failover"):
            proc = refused(testbed, "gnt-instance", verb, "-f", "-n", "node3.testbed",
                           "shared.testbed")
            assert "node node3.testbed" in proc.stderr
            assert "not found in the shared file storage" in proc.stderr
    finally:
        link.symlink_to(target, target_is_directory=True)
    assert list_instances(testbed, FIELDS) == before
    testbed.run("gnt-instance", "failover", "-f", "-n", "node3.testbed", "shared.testbed")


def test_removing_the_last_disk_needs_allow_diskless(testbed: TestbedHandle) -> None:
    add(testbed, "onedisk.testbed", template="file")
    before = list_instances(testbed, FIELDS)
    proc = refused(testbed, "gnt-instance", "modify", "--disk", "0:remove", "onedisk.testbed")
    assert "without disks" in proc.stderr and "--allow-diskless" in proc.stderr
    assert list_instances(testbed, FIELDS) == before
    testbed.run("gnt-instance", "modify", "--allow-diskless", "--disk", "0:remove",
                "onedisk.testbed")
    assert list_instances(testbed, "disk_template") == [["diskless"]]


@pytest.mark.shared_testbed
def test_secondary_ip_on_a_single_homed_cluster(testbed: TestbedHandle) -> None:
    before = testbed.run("gnt-node", "list", "--no-headers", "-o", "name,pip,sip").stdout
    proc = refused(testbed, "gnt-node", "modify", "-s", "127.0.9.2", "node2.testbed")
    assert "single-homed" in proc.stderr and "--force" in proc.stderr
    proc = refused(testbed, "gnt-node", "modify", "--force", "-s", "127.0.9.2",
                   "node2.testbed")
    assert "single-homed" in proc.stderr
    after = testbed.run("gnt-node", "list", "--no-headers", "-o", "name,pip,sip").stdout
    assert after == before




def free_file_storage(testbed: TestbedHandle) -> int:
    """MiB free for an unprivileged writer in node 1's file storage directory."""
    st = os.statvfs(disk_root(testbed))
    return st.f_bavail * st.f_frsize // (1024 * 1024)


def disk_root(testbed: TestbedHandle) -> Path:
    return node_paths(testbed, 1).node_path("/srv/corral/file-storage")


@pytest.mark.shared_testbed
def test_file_disks_larger_than_the_free_storage(testbed: TestbedHandle) -> None:
    files = sorted(p for p in disk_root(testbed).rglob("*") if p.is_file())
    # within the instance policy (at most 1 TiB a disk) but beyond the free space
    big = free_file_storage(testbed) * 2
    assert big <= 1048576, "the test file system has more than 512 GiB free"
    proc = refused(testbed, "gnt-instance", "add", "-t", "file", "--no-install", "-n",
                   "node1.testbed", "--disk", f"0:size={big}M", "huge.testbed")
    assert f"disk 0 ({big} MiB) of instance huge.testbed needs more space than node " \
        "node1.testbed has free in /srv/corral/file-storage:" in proc.stderr
    assert "--ignore-ipolicy" in proc.stderr
    # Two disks that fit one by one but not together (the sparse files would).
    part = free_file_storage(testbed) * 3 // 5
    proc = refused(testbed, "gnt-instance", "add", "-t", "file", "--no-install", "-n",
                   "node1.testbed", "--disk", f"0:size={part}M", "--disk",
                   f"1:size={part}M", "pair.testbed")
    assert f"disks 0, 1 (together {2 * part} MiB) of instance pair.testbed need" in proc.stderr
    assert list_instances(testbed, "name") == []
    assert sorted(p for p in disk_root(testbed).rglob("*") if p.is_file()) == files

    # Past the check, the node itself refuses a file larger than its file system.
    proc = refused(testbed, "gnt-instance", "add", "-t", "file", "--no-install", "-n",
                   "node1.testbed", "--ignore-ipolicy", "--disk", "0:size=1000T",
                   "huge.testbed")
    assert "in total" in proc.stderr and "--ignore-ipolicy" not in proc.stderr
    assert list_instances(testbed, "name") == []
    assert sorted(p for p in disk_root(testbed).rglob("*") if p.is_file()) == files

    add(testbed, "grow.testbed", template="file")
    before = list_instances(testbed, FIELDS)
    files = sorted(p for p in disk_root(testbed).rglob("*") if p.is_file())
    proc = refused(testbed, "gnt-instance", "modify", "--disk", f"add:size={big}M",
                   "grow.testbed")
    assert f"disk 1 ({big} MiB) of instance grow.testbed needs more space than node " \
        "node1.testbed has free in /srv/corral/file-storage:" in proc.stderr
    assert "--force" in proc.stderr
    part = free_file_storage(testbed) * 3 // 5
    proc = refused(testbed, "gnt-instance", "modify", "--disk", f"add:size={part}M",
                   "--disk", f"add:size={part}M", "grow.testbed")
    assert f"disks 1, 2 (together {2 * part} MiB) of instance grow.testbed need" \
        in proc.stderr
    assert list_instances(testbed, FIELDS) == before
    assert sorted(p for p in disk_root(testbed).rglob("*") if p.is_file()) == files

    # Forced, the sparse files are made.
    testbed.run("gnt-instance", "modify", "--force", "--disk", f"add:size={part}M",
                "--disk", f"add:size={part}M", "grow.testbed")
    assert list_instances(testbed, "disk.sizes") == [[f"8,{part},{part}"]]
