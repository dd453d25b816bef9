"""Configurations that cannot work are refused on the 3-node testbed, with a message
saying what was wrong and what is accepted, and nothing changed (issue 23)."""

from __future__ import annotations

import subprocess

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
    proc = refused(testbed, "gnt-instance", "add", "-t", "diskless", "--no-install", "-n",
                   "node1.testbed", "-B", "memory=64T", "bad.testbed")
    assert "more memory than any node of group" in proc.stderr
    assert "accepted: at most" in proc.stderr
    assert list_instances(testbed, "name") == []

    add(testbed, "be.testbed")
    before = list_instances(testbed, FIELDS)
    for value, message in (("vcpus=0", "accepted: 1 or more"),
                           ("maxmem=64T", "more memory than any node"),
                           ("memory=64T", "more memory than any node")):
        proc = refused(testbed, "gnt-instance", "modify", "-B", value, "be.testbed")
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


def test_secondary_ip_on_a_single_homed_cluster(testbed: TestbedHandle) -> None:
    before = testbed.run("gnt-node", "list", "--no-headers", "-o", "name,pip,sip").stdout
    proc = refused(testbed, "gnt-node", "modify", "-s", "127.0.9.2", "node2.testbed")
    assert "single-homed" in proc.stderr and "--force" in proc.stderr
    proc = refused(testbed, "gnt-node", "modify", "--force", "-s", "127.0.9.2",
                   "node2.testbed")
    assert "single-homed" in proc.stderr
    after = testbed.run("gnt-node", "list", "--no-headers", "-o", "name,pip,sip").stdout
    assert after == before


