"""Instances on the 3-node testbed, driven through gnt-instance and gnt-os as an
administrator would: real master and node daemons, the fake hypervisor, file disks
and real OS definitions (the bundled ``corral-ext4`` formats its disk with mkfs)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from corral import daemons
from corral.paths import Paths
from corral.utils.process import running_pid
from tests.conftest import BIN, TestbedHandle

DATA = Path(__file__).resolve().parents[1] / "data" / "os"


def node_paths(testbed: TestbedHandle, index: int) -> Paths:
    """Paths of testbed node ``index`` (1-based)."""
    return Paths(Path(testbed.state["nodes"][index - 1]["root"]))


def install_os(testbed: TestbedHandle, source: Path, name: str | None = None) -> None:
    """Copy an OS definition into every node's OS directory."""
    for index in range(1, len(testbed.state["nodes"]) + 1):
        target = node_paths(testbed, index).node_path("/srv/corral/os") / (name or source.name)
        shutil.copytree(source, target)


def disk_files(testbed: TestbedHandle, index: int) -> list[Path]:
    """The file disks on node ``index``."""
    root = node_paths(testbed, index).node_path("/srv/corral/file-storage")
    return sorted(p for p in root.rglob("*") if p.is_file())


def hostname_in(disk: Path) -> str:
    """What the bundled OS wrote into the disk's /etc/hostname (read with debugfs)."""
    proc = subprocess.run(["debugfs", "-R", "cat /etc/hostname", str(disk)],
                          capture_output=True, text=True, check=True)
    return proc.stdout.strip()


def list_instances(testbed: TestbedHandle, fields: str) -> list[list[str]]:
    """``gnt-instance list`` rows, split on the separator."""
    out = testbed.run("gnt-instance", "list", "--no-headers", "--separator", "|", "-o",
                      fields).stdout
    return [line.split("|") for line in out.splitlines() if line]


def fake_state(testbed: TestbedHandle, index: int) -> list[str]:
    """Names of the instances the fake hypervisor runs on node ``index``."""
    state = node_paths(testbed, index).hypervisor_state_dir / "fake"
    return sorted(p.stem for p in state.glob("*.json")) if state.exists() else []


@pytest.mark.shared_testbed
def test_file_instance_lifecycle(testbed: TestbedHandle) -> None:
    """Create with the bundled OS, start, reboot, stop, rename, remove."""
    testbed.run("gnt-instance", "add", "-t", "file", "-o", "corral-ext4+default", "-n",
                "node2.testbed", "--disk", "0:size=64M", "--net", "0:mode=bridged,link=br0",
                "--reason", "first instance", "web1.testbed")
    [disk] = disk_files(testbed, 2)
    assert disk.stat().st_size == 64 * 1024 * 1024
    assert hostname_in(disk) == "web1.testbed"
    assert disk_files(testbed, 3) == []
    rows = list_instances(testbed, "name,pnode,status,disk_template,os,disk.sizes")
    assert rows == [["web1.testbed", "node2.testbed", "running", "file", "corral-ext4+default",
                     "64"]]
    assert fake_state(testbed, 2) == ["web1.testbed"]

    testbed.run("gnt-instance", "reboot", "web1.testbed")
    testbed.run("gnt-instance", "shutdown", "--reason", "maintenance", "web1.testbed")
    assert list_instances(testbed, "name,status,admin_state") == [
        ["web1.testbed", "ADMIN_down", "down"]]
    assert fake_state(testbed, 2) == []
    info = testbed.run("gnt-instance", "info", "web1.testbed").stdout
    assert "maintenance" in info

    testbed.run("gnt-instance", "rename", "web1.testbed", "web2.testbed")
    assert hostname_in(disk) == "web2.testbed"
    uuid = list_instances(testbed, "uuid")[0][0]
    # Names or UUIDs work wherever a name does.
    testbed.run("gnt-instance", "startup", uuid)
    by_uuid = testbed.run("gnt-instance", "list", "--no-headers", "-o", "name", uuid).stdout
    assert by_uuid.split() == ["web2.testbed"]
    assert fake_state(testbed, 2) == ["web2.testbed"]
    testbed.run("gnt-instance", "remove", "-f", "web2.testbed")
    assert list_instances(testbed, "name") == []
    assert disk_files(testbed, 2) == []
    assert fake_state(testbed, 2) == []


@pytest.mark.shared_testbed
def test_dry_run_and_bad_input_change_nothing(testbed: TestbedHandle) -> None:
    """Dry runs and refused creates leave no instance, disk or lock behind."""
    dry = testbed.run("gnt-instance", "add", "-t", "file", "-o", "corral-ext4+default", "-n",
                      "node2.testbed", "--disk", "0:size=16M", "--dry-run", "dry.testbed")
    assert dry.returncode == 0
    unknown = testbed.run("gnt-instance", "add", "-t", "file", "-o", "no-such-os", "-n",
                          "node2.testbed", "--disk", "0:size=16M", "x.testbed", check=False)
    assert unknown.returncode != 0
    assert "corral-ext4" in unknown.stderr  # the error lists the OSes there are
    variant = testbed.run("gnt-instance", "add", "-t", "file", "-o", "corral-ext4+nope", "-n",
                          "node2.testbed", "--disk", "0:size=16M", "x.testbed", check=False)
    assert variant.returncode != 0 and "minimal" in variant.stderr
    assert list_instances(testbed, "name") == []
    assert disk_files(testbed, 2) == []


def test_os_environment_and_parameter_overrides(testbed: TestbedHandle, tmp_path: Path
                                                ) -> None:
    """The API 20 environment is complete; OS parameters override in the order
    instance > OS+variant > OS."""
    install_os(testbed, DATA / "dumpenv")
    dump = tmp_path / "env.txt"
    testbed.run("gnt-os", "modify", "-O", f"dump_file={dump},color=os", "dumpenv")
    # A parameter the OS does not declare is refused at the cluster level too.
    refused = testbed.run("gnt-os", "modify", "-O", "colour=os", "dumpenv", check=False)
    assert refused.returncode == 1 and "colour" in refused.stderr
    variant = testbed.run("gnt-os", "list", "--no-headers").stdout.split()
    dumpenv_variants = [v for v in variant if v.startswith("dumpenv+")]
    assert dumpenv_variants, variant
    chosen = dumpenv_variants[0]
    testbed.run("gnt-os", "modify", "-O", "color=variant", chosen)
    testbed.run("gnt-instance", "add", "-t", "file", "-o", chosen, "-n", "node3.testbed",
                "--disk", "0:size=8M", "--disk", "1:size=4M,mode=ro",
                "--net", "0:mac=aa:00:00:11:22:33,ip=192.0.2.10,mode=routed,link=100",
                "--net", "1:mode=bridged,link=br7",
                "-B", "vcpus=2,maxmem=96,minmem=64", "--no-start", "envtest.testbed")
    env = dict(line.split("=", 1) for line in dump.read_text().splitlines() if "=" in line)
    paths = node_paths(testbed, 3)
    assert env["OS_API_VERSION"] == "20"
    assert env["INSTANCE_NAME"] == "envtest.testbed"
    assert env["INSTANCE_OS"] == chosen and env["OS_NAME"] == "dumpenv"
    assert env["OS_VARIANT"] == chosen.split("+", 1)[1]
    assert env["HYPERVISOR"] == "fake"
    assert env["DISK_COUNT"] == "2"
    assert env["DISK_0_PATH"].startswith(str(paths.node_path("/srv/corral/file-storage")))
    assert Path(env["DISK_0_PATH"]).stat().st_size == 8 * 1024 * 1024
    assert (env["DISK_0_ACCESS"], env["DISK_1_ACCESS"]) == ("rw", "ro")
    assert env["NIC_COUNT"] == "2"
    assert env["NIC_0_MAC"] == "aa:00:00:11:22:33" and env["NIC_0_IP"] == "192.0.2.10"
    assert (env["NIC_0_MODE"], env["NIC_0_LINK"]) == ("routed", "100")
    assert (env["NIC_1_MODE"], env["NIC_1_LINK"]) == ("bridged", "br7")
    assert env["NIC_1_MAC"].startswith("aa:00:00:")
    assert env["INSTANCE_BE_vcpus"] == "2" and env["INSTANCE_BE_maxmem"] == "96"
    assert env["DISK_1_SIZE"] == "4"
    assert any(k.startswith("INSTANCE_HV_") for k in env)
    assert env["OSP_COLOR"] == "variant"
    assert env["DEBUG_LEVEL"] == "0"

    # The instance's own value wins over the variant's and the OS's.
    testbed.run("gnt-instance", "reinstall", "-f", "-O", "color=instance", "envtest.testbed")
    env = dict(line.split("=", 1) for line in dump.read_text().splitlines() if "=" in line)
    assert env["OSP_COLOR"] == "instance"


@pytest.mark.shared_testbed
def test_failing_os_script_leaves_nothing(testbed: TestbedHandle, tmp_path: Path) -> None:
    """A failing create script fails the job with its last output lines; the disks
    it was given are removed and the configuration is unchanged."""
    install_os(testbed, DATA / "dumpenv")
    proc = testbed.run("gnt-instance", "add", "-t", "file", "-o", "dumpenv+alpha", "-n",
                       "node2.testbed", "--disk", "0:size=8M", "-O",
                       f"fail=create,dump_file={tmp_path / 'env.txt'}", "broken.testbed",
                       check=False)
    assert proc.returncode != 0
    assert "node2.testbed" in proc.stderr
    assert "create" in proc.stderr
    assert list_instances(testbed, "name") == []
    assert disk_files(testbed, 2) == []
    logs = list(node_paths(testbed, 2).os_log_dir.glob("*broken.testbed*"))
    assert logs, "the script's output is logged per instance"


def test_hidden_and_blacklisted_os(testbed: TestbedHandle) -> None:
    """Hidden OSes are listed only when asked; blacklisted ones refuse new installs
    but still allow reinstall and rename."""
    testbed.run("gnt-instance", "add", "-t", "file", "-o", "corral-ext4+default", "-n",
                "node1.testbed", "--disk", "0:size=16M", "--no-start", "old.testbed")
    testbed.run("gnt-os", "modify", "--hidden", "yes", "corral-ext4")
    assert "corral-ext4" not in testbed.run("gnt-os", "list").stdout
    assert "corral-ext4" in testbed.run("gnt-os", "list", "--hidden").stdout
    testbed.run("gnt-os", "modify", "--hidden", "no", "--blacklisted", "yes", "corral-ext4")
    refused = testbed.run("gnt-instance", "add", "-t", "file", "-o", "corral-ext4+default", "-n",
                          "node1.testbed", "--disk", "0:size=16M", "new.testbed", check=False)
    assert refused.returncode != 0 and "blacklisted" in refused.stderr
    testbed.run("gnt-instance", "reinstall", "-f", "old.testbed")
    testbed.run("gnt-instance", "rename", "old.testbed", "older.testbed")
    assert [r[0] for r in list_instances(testbed, "name")] == ["older.testbed"]


def test_migrate_failover_and_move(testbed: TestbedHandle) -> None:
    """sharedfile and diskless instances migrate and fail over; file disks move by
    copying their data to the other node. (No NICs: the default one is bridged to a
    bridge the test host does not have, and a target without it is refused.)"""
    testbed.run("gnt-instance", "add", "-t", "sharedfile", "-o", "corral-ext4+default", "-n",
                "node1.testbed", "--disk", "0:size=16M", "--no-nics", "shared.testbed")
    testbed.run("gnt-instance", "migrate", "-f", "-n", "node2.testbed", "shared.testbed")
    assert list_instances(testbed, "name,pnode,status") == [
        ["shared.testbed", "node2.testbed", "running"]]
    assert fake_state(testbed, 2) == ["shared.testbed"] and fake_state(testbed, 1) == []
    testbed.run("gnt-instance", "failover", "-f", "-n", "node3.testbed", "shared.testbed")
    assert list_instances(testbed, "pnode,status") == [["node3.testbed", "running"]]

    testbed.run("gnt-instance", "add", "-t", "file", "-o", "corral-ext4+default", "-n",
                "node2.testbed", "--disk", "0:size=16M", "--no-nics", "--no-start",
                "mover.testbed")
    refused = testbed.run("gnt-instance", "migrate", "-f", "-n", "node3.testbed",
                          "mover.testbed", check=False)
    assert refused.returncode != 0
    testbed.run("gnt-instance", "move", "-f", "-n", "node3.testbed", "mover.testbed")
    assert disk_files(testbed, 2) == []
    [moved] = disk_files(testbed, 3)
    assert hostname_in(moved) == "mover.testbed"
    rows = {r[0]: r[1] for r in list_instances(testbed, "name,pnode")}
    assert rows["mover.testbed"] == "node3.testbed"


def test_modify_and_disks(testbed: TestbedHandle) -> None:
    """Parameters, OS parameters (with -key removal), disks and NICs change."""
    testbed.run("gnt-instance", "add", "-t", "file", "-o", "corral-ext4+default", "-n",
                "node2.testbed", "--disk", "0:size=16M", "--no-start", "mod.testbed")
    testbed.run("gnt-instance", "modify", "-B", "vcpus=3", "mod.testbed")
    testbed.run("gnt-instance", "grow-disk", "mod.testbed", "0", "16M")
    testbed.run("gnt-instance", "modify", "--disk", "add:size=8M", "mod.testbed")
    testbed.run("gnt-instance", "modify", "--net", "add:mode=routed,ip=192.0.2.77,link=5",
                "mod.testbed")
    rows = list_instances(testbed, "be/vcpus,disk.sizes,nic.ips")
    # As in Ganeti's gnt-instance, list values are comma-joined and a NIC without an IP
    # shows as None.
    assert rows == [["3", "32,8", "None,192.0.2.77"]]
    sizes = sorted(p.stat().st_size for p in disk_files(testbed, 2))
    assert sizes == [8 << 20, 32 << 20]
    refused = testbed.run("gnt-instance", "modify", "-H", "migration_mode=non-live",
                          "mod.testbed", check=False)
    assert refused.returncode != 0 and "global" in refused.stderr
    activated = testbed.run("gnt-instance", "activate-disks", "mod.testbed").stdout
    assert "node2.testbed" in activated
    testbed.run("gnt-instance", "deactivate-disks", "mod.testbed")


def test_kill_noded_during_create(testbed: TestbedHandle, tmp_path: Path) -> None:
    """kill -9 of the node daemon while the OS script runs: the job fails naming the
    node, no instance is configured and the node's locks are free again."""
    slow = tmp_path / "slowos"
    shutil.copytree(DATA / "dumpenv", slow)
    create = slow / "create"
    create.write_text("#!/bin/sh\nsleep 30\n")
    create.chmod(0o755)
    install_os(testbed, slow)
    paths = node_paths(testbed, 3)
    proc = subprocess.Popen(
        [str(BIN / "gnt-instance"), "add", "-t", "file", "-o", "slowos+alpha", "-n",
         "node3.testbed", "--disk", "0:size=8M", "victim.testbed"],
        env=testbed.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not any(paths.os_log_dir.glob("*victim*")) and time.monotonic() < deadline:
            time.sleep(0.1)
        pid = running_pid(paths.pid_file("noded"))
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert "node3.testbed" in err
    assert list_instances(testbed, "name") == []
    locks = testbed.run("gnt-debug", "locks", "--no-headers", "-o", "name,owner").stdout
    assert "job/" not in locks
    # The node comes back and works.
    daemons.start(paths)
    testbed.run("gnt-instance", "add", "-t", "diskless", "-n", "node3.testbed",
                "--no-install", "--no-start", "after.testbed")
    assert [r[0] for r in list_instances(testbed, "name")] == ["after.testbed"]

