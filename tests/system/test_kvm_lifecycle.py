"""The kvm hypervisor's life cycle with real qemu guests (TCG) on a 2-node testbed,
driven through the gnt-* tools: boot, state from QMP, reboots, ACPI shutdown, a qemu
killed behind corral's back (and started again by the watcher), a guest that powers
itself off under ``user_shutdown``, a noded killed and restarted, and bad input that
must leave nothing behind."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from corral import daemons
from corral.hypervisor.kvm.monitor import qmp_command
from corral.paths import Paths
from corral.testbed.guest import MARKER, TICK
from corral.utils.process import running_pid
from tests.conftest import BIN, run_tool
from tests.system.conftest import KvmTestbed

pytestmark = pytest.mark.system

NODE = "node2.testbed"


def _node_paths(kvm_testbed: KvmTestbed) -> Paths:
    return kvm_testbed.node_paths()[1]


def _marker_count(kvm_testbed: KvmTestbed, name: str) -> int:
    return kvm_testbed.console(name).count(MARKER)


def test_boot_reboots_and_acpi_shutdown(kvm_testbed: KvmTestbed) -> None:
    """The guest boots to its marker and is listed running from QMP; a hard and a soft
    reboot each boot it again (the counter starts over); ``gnt-instance shutdown``
    powers it off by ACPI and it is ADMIN_down with no qemu left."""
    name = "life.testbed"
    kvm_testbed.add(name, node=NODE)
    kvm_testbed.wait_console(name, MARKER)
    assert kvm_testbed.instances()[name] == {
        "status": "running", "oper_state": "Y", "pnode": NODE}
    first_pid = kvm_testbed.qemu_pid(name)
    assert first_pid

    for kind in ("hard", "soft"):
        since = len(kvm_testbed.console(name))
        kvm_testbed.run("gnt-instance", "reboot", "--type", kind, name)
        up = kvm_testbed.wait_console(name, re.escape(MARKER), since=since)
        kvm_testbed.wait_console(name, re.escape(TICK) + r"1\b", since=up.end())
        assert kvm_testbed.instances()[name]["status"] == "running"
    # hard resets the same qemu; soft (as Ganeti) powers off and starts qemu again
    assert kvm_testbed.qemu_pid(name) not in (0, first_pid)

    since = len(kvm_testbed.console(name))
    kvm_testbed.run("gnt-instance", "shutdown", "--timeout", "60", name)
    assert "corral-tiny-guest: down" in kvm_testbed.console(name)[since:]
    assert kvm_testbed.instances()[name]["status"] == "ADMIN_down"
    assert kvm_testbed.qemu_pid(name) == 0
    assert kvm_testbed.runtime(name) is None  # runtime files removed


def test_killed_qemu_is_error_down(kvm_testbed: KvmTestbed) -> None:
    """A qemu killed behind corral's back makes the instance ERROR_down, and its
    runtime files go; a start brings it back."""
    name = "killed.testbed"
    kvm_testbed.add(name, node=NODE)
    pid = kvm_testbed.qemu_pid(name)
    assert pid
    os.kill(pid, signal.SIGKILL)
    kvm_testbed.wait_status(name, "ERROR_down")
    assert kvm_testbed.instances()[name]["oper_state"] == "N"
    assert kvm_testbed.runtime(name) is None
    kvm_testbed.run("gnt-instance", "startup", name)
    assert kvm_testbed.instances()[name]["status"] == "running"
    kvm_testbed.run("gnt-instance", "remove", "-f", name)
    assert kvm_testbed.qemu_pid(name) == 0


def test_guest_powering_off_under_user_shutdown_is_user_down(kvm_testbed: KvmTestbed) -> None:
    """With ``user_shutdown`` a guest that powers itself off (its ACPI power button,
    pressed straight through QMP) stays a qemu in state shutdown: USER_down. A startup
    boots it again in a fresh qemu; a shutdown through corral ends it."""
    name = "user.testbed"
    kvm_testbed.add(name, node=NODE, hvparams="user_shutdown=true")
    kvm_testbed.wait_console(name, MARKER)
    runtime = kvm_testbed.runtime(name)
    assert runtime is not None

    async def press_until_off() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            await qmp_command(runtime.qmp_socket, "system_powerdown")
            await asyncio.sleep(2)
            status = await qmp_command(runtime.qmp_socket, "query-status")
            if status["status"] == "shutdown":
                return
        raise AssertionError("the guest did not power off within 60 s")

    asyncio.run(press_until_off())
    kvm_testbed.wait_status(name, "USER_down")
    off_pid = kvm_testbed.qemu_pid(name)
    assert off_pid  # -no-shutdown: qemu waits
    # starting it again ends that qemu and boots a fresh one
    since = len(kvm_testbed.console(name))
    kvm_testbed.run("gnt-instance", "startup", name)
    kvm_testbed.wait_console(name, re.escape(MARKER), since=since)
    assert kvm_testbed.qemu_pid(name) not in (0, off_pid)
    assert kvm_testbed.instances()[name]["status"] == "running"
    kvm_testbed.run("gnt-instance", "shutdown", name)
    assert kvm_testbed.qemu_pid(name) == 0
    assert kvm_testbed.instances()[name]["status"] == "ADMIN_down"


def test_noded_kill_9_and_restart_finds_the_guest(kvm_testbed: KvmTestbed) -> None:
    """qemu is not noded's child: killing noded with SIGKILL leaves the guest running,
    and the restarted noded lists it running again, the same qemu, still counting."""
    name = "survivor.testbed"
    kvm_testbed.add(name, node=NODE)
    pid = kvm_testbed.qemu_pid(name)
    paths = _node_paths(kvm_testbed)
    noded = running_pid(paths.pid_file("noded"))
    assert noded is not None
    os.kill(noded, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while running_pid(paths.pid_file("noded")) == noded and time.monotonic() < deadline:
        time.sleep(0.05)
    assert kvm_testbed.qemu_pid(name) == pid
    daemons.start(paths)
    kvm_testbed.wait_status(name, "running")
    assert kvm_testbed.qemu_pid(name) == pid
    since = len(kvm_testbed.console(name))
    kvm_testbed.wait_console(name, re.escape(TICK) + r"\d+", since=since)
    kvm_testbed.run("gnt-instance", "remove", "-f", name)
    assert kvm_testbed.qemu_pid(name) == 0


def test_noded_killed_during_a_start_loses_no_guest(kvm_testbed: KvmTestbed,
                                                  tmp_path: Path) -> None:
    """noded killed with SIGKILL while qemu is starting (a slow qemu wrapper gives the
    time): the start job fails, but the qemu that comes up is found by the restarted
    noded, listed running as the configuration wants, and stops cleanly."""
    qemu = shutil.which("qemu-system-x86_64")
    assert qemu is not None
    wrapper = tmp_path / "slow-qemu"
    spawned = tmp_path / "spawned"
    wrapper.write_text(f"#!/bin/sh\n: > {spawned}\nsleep 3\nexec {qemu} \"$@\"\n")
    wrapper.chmod(0o755)
    name = "midstart.testbed"
    kvm_testbed.add(name, "--no-start", node=NODE, hvparams=f"kvm_path={wrapper}")
    paths = _node_paths(kvm_testbed)
    noded = running_pid(paths.pid_file("noded"))
    assert noded is not None
    starting = subprocess.Popen(
        [str(BIN / "gnt-instance"), "startup", name], env=kvm_testbed.env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Killed once noded has run the (slow) qemu, not before: a noded killed before
        # it ran qemu started nothing, and the instance is rightly ERROR_down.
        deadline = time.monotonic() + 60
        while not spawned.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert spawned.exists(), "noded did not run qemu within 60 s"
        os.kill(noded, signal.SIGKILL)
        starting.communicate(timeout=120)
    finally:
        if starting.poll() is None:
            starting.kill()
    assert starting.returncode != 0
    daemons.start(paths)
    kvm_testbed.wait_status(name, "running")
    kvm_testbed.wait_console(name, MARKER)
    pid = kvm_testbed.qemu_pid(name)
    assert pid
    kvm_testbed.run("gnt-instance", "remove", "-f", name)
    assert kvm_testbed.qemu_pid(name) == 0
    assert kvm_testbed.runtime(name) is None


def test_bad_input_fails_naming_it_and_leaves_nothing(kvm_testbed: KvmTestbed) -> None:
    """A kernel that does not exist: the start fails naming the file. An option qemu
    refuses: the error quotes qemu. Neither leaves a qemu or runtime files."""
    missing = "/nonexistent/corral/vmlinuz"
    name = "nokernel.testbed"
    proc = kvm_testbed.add(name, node=NODE, hvparams=f"kernel_path={missing}", check=False)
    assert proc.returncode != 0
    assert missing in proc.stderr
    # as in Ganeti, the startup marked it up before it failed: it should run and does not
    assert kvm_testbed.instances()[name]["status"] == "ERROR_down"
    assert kvm_testbed.runtime(name) is None

    name = "badopt.testbed"
    proc = kvm_testbed.add(name, node=NODE, hvparams="kvm_extra=-no-such-option",
                           check=False)
    assert proc.returncode != 0
    assert "-no-such-option" in proc.stderr and "invalid option" in proc.stderr
    assert kvm_testbed.runtime(name) is None
    assert kvm_testbed.qemu_pid(name) == 0


def test_watcher_restarts_a_killed_kvm_guest(kvm_testbed: KvmTestbed) -> None:
    """A qemu killed behind corral's back is started again by one ``corral-watcher``
    pass on the master and the guest boots; its node keeps the restart's reason trail
    (``gnt:watcher`` first), mond reports it running with that trail and the node's
    metrics count the qemu process's CPU time."""
    name = "watched.testbed"
    kvm_testbed.add(name, node=NODE)
    pid = kvm_testbed.qemu_pid(name)
    assert pid
    os.kill(pid, signal.SIGKILL)  # the test's own guest, by its pid
    kvm_testbed.wait_status(name, "ERROR_down")
    since = len(kvm_testbed.console(name))

    master_root = kvm_testbed.state["nodes"][0]["root"]
    run_tool(["corral-watcher"], {**os.environ, "CORRAL_ROOT": master_root})
    kvm_testbed.wait_status(name, "running")
    kvm_testbed.wait_console(name, re.escape(MARKER), since=since)
    assert kvm_testbed.qemu_pid(name) not in (0, pid)

    node = kvm_testbed.node_paths()[1]
    trail = json.loads((node.instance_reason_dir / name).read_text())
    assert trail[0][:2] == ["gnt:watcher", f"Restarting instance {name}"]
    assert trail[-1][0] == "gnt:daemon:noded:start"

    ip, port = kvm_testbed.state["nodes"][1]["ip"], kvm_testbed.state["ports"]["mond"]
    with urllib.request.urlopen(f"http://{ip}:{port}/1/report/instance/inst-status-kvm",
                                timeout=10) as answer:
        report = json.loads(answer.read())
    [entry] = [i for i in report["data"]["instances"] if i["name"] == name]
    assert (entry["adminState"], entry["actualState"]) == ("up", "running")
    assert entry["state_reason"] == trail and entry["status"]["code"] == 0
    with urllib.request.urlopen(f"http://{ip}:{port}/metrics", timeout=10) as answer:
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in text_string_to_metric_families(answer.read().decode())
                   for s in family.samples}
    labels = (("hypervisor", "kvm"), ("instance", name))
    assert samples[("corral_instance_up", labels)] == 1
    assert samples[("corral_instance_cpu_seconds_total", labels)] > 0
    assert samples[("corral_instance_memory_bytes", labels)] > 0
    kvm_testbed.run("gnt-instance", "remove", "-f", name)
    assert not Path(node.instance_reason_dir / name).exists()
