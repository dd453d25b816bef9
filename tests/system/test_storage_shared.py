"""Real guests (qemu under TCG) on shared storage: an rbd disk in a real single-node Ceph
reached through qemu's librbd (``access=userspace``), and an ext disk of the shipped
corral-file provider; both live-migrate and fail over between the testbed's two nodes
without their data being copied.

The module starts one Ceph (:mod:`corral.testbed.ceph`: monitor, manager, an OSD on a
file, in a temporary directory, killed by pid and removed afterwards whatever happened)
and shares the system conftest's 2-node kvm testbed; every node gets the Ceph's
configuration as its ``/etc/ceph/ceph.conf``.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import msgspec
import pytest

from corral.objects.specs import DiskSpec
from corral.paths import Paths
from corral.storage.base import DiskMissingError
from corral.storage.rbd import RbdStorage
from corral.testbed import ceph as testbed_ceph
from corral.testbed import guest as tiny_guest
from tests.system.conftest import KvmTestbed
from tests.system.test_kvm_migration import TICK, _console, _runtime, _ticks, _wait_console

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def _ceph_starting(tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[Future[testbed_ceph.CephCluster]]:
    """A single-node Ceph for the module, with the pool ``rbd``, starting in a thread
    while the kvm testbed comes up (each takes seconds)."""
    missing = testbed_ceph.missing_binaries()
    if missing:
        pytest.fail(f"Ceph is not installed ({', '.join(missing)} missing): run 'make sysdeps'")
    directory = tmp_path_factory.mktemp("ceph") / "cluster"
    with ThreadPoolExecutor(max_workers=1) as pool:
        starting = pool.submit(testbed_ceph.start, directory)
        try:
            yield starting
        finally:
            with contextlib.suppress(Exception):
                starting.result()
            testbed_ceph.stop(directory)
    assert not directory.exists()


@pytest.fixture(scope="module")
def ceph(_ceph_starting: Future[testbed_ceph.CephCluster]) -> testbed_ceph.CephCluster:
    """The module's Ceph, once it answers."""
    return _ceph_starting.result()


@pytest.fixture(scope="module")
def cluster(_ceph_starting: Future[testbed_ceph.CephCluster], kvm_testbed: KvmTestbed,
            ceph: testbed_ceph.CephCluster) -> KvmTestbed:
    """The kvm testbed using the Ceph, with rbd (userspace access) and ext enabled and
    migrations at loopback speed."""
    for node in kvm_testbed.state["nodes"]:
        testbed_ceph.install_conf(ceph, Path(node["root"]))
    templates = ",".join([*kvm_testbed.info()["enabled_disk_templates"], "rbd", "ext"])
    kvm_testbed.run("gnt-cluster", "modify", "--enabled-disk-templates", templates,
                    "--ipolicy-disk-templates", templates, "-D", "rbd:access=userspace",
                    "-H", "kvm:migration_bandwidth=1000,migration_downtime=30")
    return kvm_testbed


def _pnode(testbed: KvmTestbed, name: str) -> str:
    return testbed.run("gnt-instance", "list", "--no-headers", "-o", "pnode", name).stdout.strip()


def _logical_id(testbed: KvmTestbed, name: str) -> tuple[str, str]:
    info = testbed.run("gnt-instance", "info", name).stdout
    found = re.search(r"logical_id: \['([^']+)', '([^']+)'\]", info)
    assert found is not None, info
    return found.group(1), found.group(2)


def _images(ceph: testbed_ceph.CephCluster) -> list[str]:
    return sorted(ceph.run("rbd", "ls", "-p", ceph.pool).stdout.split())


def _config_block(hostname: str) -> bytes:
    text = f"{tiny_guest.DISK_CONFIG_MAGIC}\nhostname={hostname}\nend\n".encode()
    return text.ljust(4096, b"\0")


def _migrate_live(testbed: KvmTestbed, name: str, source: int, target: int) -> str:
    """Migrate ``name`` live; check that it went on counting on the target, without a
    boot there. The job's output."""
    before = _ticks(_console(testbed, source, name))
    seen = len(_console(testbed, target, name))  # the log is kept over earlier runs
    proc = testbed.run("gnt-instance", "migrate", "-f", "-n", f"node{target}.testbed", name)
    out = proc.stdout + proc.stderr
    assert f"instance {name} migrated to node node{target}.testbed" in out
    assert "copying" not in out and "creating disk" not in out, out
    assert _pnode(testbed, name) == f"node{target}.testbed"
    _wait_console(testbed, target, name, TICK.pattern, since=seen)
    arrived = _console(testbed, target, name)[seen:]
    assert tiny_guest.MARKER not in arrived
    assert _ticks(arrived)[0] >= before[-1]
    return out


def test_a_guest_on_an_rbd_disk_migrates_and_fails_over_without_copying(
        cluster: KvmTestbed, ceph: testbed_ceph.CephCluster, tmp_path: Path) -> None:
    tb, name = cluster, "rbd1.testbed"
    images = _images(ceph)
    tb.add(name, "-t", "rbd", "--disk", "0:size=64M", "--no-start", node="node1.testbed")
    try:
        driver, image = _logical_id(tb, name)
        assert driver == "rbd" and re.fullmatch(r"[0-9a-f-]{36}\.rbd\.disk0", image)
        assert _images(ceph) == sorted([*images, image])
        # Give the guest its host name in the image itself: it reads it at boot, so
        # seeing it proves the guest reads its disk from Ceph.
        block = tmp_path / "block"
        block.write_bytes(_config_block("from-ceph"))
        os.truncate(block, 64 << 20)
        ceph.run("rbd", "rm", "--no-progress", "-p", ceph.pool, image)
        ceph.run("rbd", "import", "--no-progress", "-p", ceph.pool, str(block), image)
        tb.run("gnt-instance", "startup", name)
        _wait_console(tb, 1, name, r"hostname from-ceph")
        _wait_console(tb, 1, name, r"tick 1\b")
        command = _runtime(tb, 1, name).read().command
        drives = [arg for arg in command if "node-name=disk-" in arg]
        assert len(drives) == 1 and "file.driver=rbd" in drives[0], drives
        assert f"file.image={image}" in drives[0] and "file.conf=" in drives[0]

        _migrate_live(tb, name, 1, 2)
        assert not _runtime(tb, 1, name).dir.exists()
        target = [a for a in _runtime(tb, 2, name).read().command if "node-name=disk-" in a]
        node2_conf = str(Path(tb.state["nodes"][1]["root"]) / "etc" / "ceph" / "ceph.conf")
        assert target == [re.sub(r"file\.conf=.*", f"file.conf={node2_conf}", drives[0])]
        assert _images(ceph) == sorted([*images, image])  # the same image, no copy

        # A second rbd disk plugged into the running guest: qemu opens it itself too.
        seen = len(_console(tb, 2, name))
        added = tb.run("gnt-instance", "modify", "--hotplug", "--disk", "add:size=16M", name)
        assert "disk/1 -> hotplug:done" in added.stdout
        _wait_console(tb, 2, name, r"disks vda vdb\b", seen)
        images2 = _images(ceph)
        assert len(images2) == len(images) + 2

        tb.run("gnt-instance", "grow-disk", name, "0", "32M")
        size = ceph.run("rbd", "info", "--format", "json", "-p", ceph.pool, image).stdout
        assert '"size":100663296' in size.replace(" ", "")

        # With the hot-plugged disk it migrates back: the target lays its qemu out as
        # the source's (each disk in the same PCI slot), or qemu refuses the guest.
        _migrate_live(tb, name, 2, 1)
        tb.run("gnt-instance", "failover", "-f", "-n", "node2.testbed", name)
        assert _pnode(tb, name) == "node2.testbed"
        assert not _runtime(tb, 1, name).dir.exists()
        again = [a for a in _runtime(tb, 2, name).read().command if "node-name=disk-" in a]
        assert len(again) == 2 and again[0] == target[0], again  # the same images
        assert _images(ceph) == images2
    finally:
        tb.run("gnt-instance", "remove", "-f", "--shutdown-timeout=0", name, check=False)
    assert _images(ceph) == images


def test_a_guest_on_an_ext_disk_is_installed_and_migrates(cluster: KvmTestbed) -> None:
    tb, name = cluster, "ext1.testbed"
    tb.run("gnt-instance", "add", "-t", "ext", "--disk", "0:size=16M,provider=corral-file",
           "-o", "corral-tiny", "-H", "kvm", "-B", "maxmem=128,minmem=128", "--no-nics",
           "--no-name-check", "--no-ip-check", "-n", "node1.testbed", name)
    try:
        _provider, volume = _logical_id(tb, name)
        image = Path(tb.state["dir"]) / "ext-volumes" / volume
        # corral-tiny's create script wrote the block through DISK_0_PATH, the volume.
        assert image.read_bytes().startswith(_config_block(name)[:40])
        _wait_console(tb, 1, name, rf"hostname {re.escape(name)}")
        _wait_console(tb, 1, name, r"tick 1\b")
        _migrate_live(tb, name, 1, 2)
        assert image.stat().st_size == 16 << 20
    finally:
        tb.run("gnt-instance", "remove", "-f", "--shutdown-timeout=0", name, check=False)
    assert not image.exists()


@pytest.mark.skipif(Path("/sys/module/rbd").exists(),
                    reason="this host has the kernel's rbd module: kernelspace access works")
def test_kernelspace_access_without_the_kernel_module_says_so(
        cluster: KvmTestbed, ceph: testbed_ceph.CephCluster) -> None:
    tb, name = cluster, "rbdk.testbed"
    images = _images(ceph)
    tb.run("gnt-instance", "add", "-t", "rbd", "--disk", "0:size=8M,access=kernelspace",
           "--no-install", "-o", "corral-ext4", "-H", "fake", "--no-nics", "--no-name-check",
           "--no-ip-check", "-n", "node1.testbed", name)
    try:
        proc = tb.run("gnt-instance", "activate-disks", name, check=False)
        assert proc.returncode != 0
        assert "cannot map rbd image" in proc.stderr
        assert "use the disk parameter access=userspace" in proc.stderr
    finally:
        tb.run("gnt-instance", "remove", "-f", "--shutdown-timeout=0", name, check=False)
    assert _images(ceph) == images


async def test_the_rbd_driver_on_a_node_against_ceph(ceph: testbed_ceph.CephCluster,
                                                    tmp_path: Path) -> None:
    paths = Paths(tmp_path / "node")
    testbed_ceph.install_conf(ceph, paths.root)
    driver = RbdStorage(paths)
    disk = DiskSpec(uuid="u", index=0, dev_type="rbd", size=16,
                    logical_id=["rbd", "corral-driver-test.rbd.disk0"],
                    params={"pool": ceph.pool, "access": "userspace"})
    await driver.create(disk)
    try:
        conf = paths.node_path("/etc/ceph/ceph.conf")
        assert await driver.assemble(disk) == \
            f"rbd:{ceph.pool}/corral-driver-test.rbd.disk0:conf={conf}"
        await driver.grow(disk, 16)
        grown = msgspec.structs.replace(disk, size=32)
        info = await driver.info(grown)
        assert info["size"] == 32
        data = b"corral on ceph".ljust(1 << 20, b"\0")

        async def chunks() -> AsyncIterator[bytes]:
            yield data

        assert await driver.write(grown, chunks()) == len(data)
        read = b"".join([c async for c in await driver.read(grown, chunk=1 << 16)])
        assert read == data
        assert await driver.snapshot(grown, "before", 32) == [
            "rbd", "corral-driver-test.rbd.disk0@before"]
        snaps = ceph.run("rbd", "snap", "ls", "-p", ceph.pool,
                         "corral-driver-test.rbd.disk0").stdout
        assert "before" in snaps
    finally:
        await driver.remove(disk)  # with its snapshot
    assert "corral-driver-test.rbd.disk0" not in _images(ceph)
    await driver.remove(disk)  # already gone: fine
    with pytest.raises(DiskMissingError, match="has no rbd image"):
        await driver.info(disk)
