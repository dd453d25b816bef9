"""The bundled ``corral-tiny`` OS definition on a kvm testbed: ``gnt-instance add`` with
the OS install writes the host name and address on the instance's disk, and the tiny
guest booted by qemu shows them on its serial console; a rename rewrites them; an
instance without a disk is refused by the OS with a message saying why."""

from __future__ import annotations

import re

import pytest

from corral.testbed import guest as tiny_guest
from tests.system.conftest import KvmTestbed

pytestmark = pytest.mark.system

NODE = "node1.testbed"


def test_the_os_install_configures_the_guest(kvm_testbed: KvmTestbed) -> None:
    """The add installs corral-tiny on the disk; the guest reads it at boot: its host
    name is the instance's, its address the NIC's, its gateway the OS parameter's. A
    rename (instance stopped) runs the OS's rename, and the next boot shows the new name.
    """
    name = "tinyos1.testbed"
    kvm_testbed.run("gnt-instance", "add", "-t", "file", "-o", "corral-tiny", "-H", "kvm",
                    "-n", NODE, "--disk", "0:size=16M", "-B", "maxmem=128M,minmem=128M",
                    "--net", "0:mode=routed,link=100,ip=192.0.2.77", "-O",
                    "gateway=192.0.2.1,prefix=25", "--no-name-check", "--no-ip-check", name)
    kvm_testbed.wait_console(name, re.escape(tiny_guest.MARKER))
    console = kvm_testbed.console(name)
    assert (f"corral-tiny-guest: config from vda: hostname={name} ip=192.0.2.77/25 "
            "gw=192.0.2.1\r\n") in console
    assert f"corral-tiny-guest: hostname {name}\r\n" in console
    # The address is on the guest's NIC, a tap routed to it on the node (the net part).
    assert "corral-tiny-guest: eth0 192.0.2.77/25\r\n" in console

    kvm_testbed.run("gnt-instance", "shutdown", "--timeout", "0", name)
    kvm_testbed.run("gnt-instance", "rename", name, "tinyos2.testbed")
    kvm_testbed.run("gnt-instance", "startup", "tinyos2.testbed")
    kvm_testbed.wait_console("tinyos2.testbed", re.escape(tiny_guest.MARKER))
    console = kvm_testbed.console("tinyos2.testbed")
    assert "corral-tiny-guest: hostname tinyos2.testbed\r\n" in console
    kvm_testbed.run("gnt-instance", "remove", "-f", "--shutdown-timeout", "0",
                    "tinyos2.testbed")


def test_an_instance_without_a_disk_is_refused_by_the_os(kvm_testbed: KvmTestbed) -> None:
    """corral-tiny needs a disk for the configuration: the add fails saying so, and
    neither the instance nor a qemu is left."""
    proc = kvm_testbed.run("gnt-instance", "add", "-t", "diskless", "-o", "corral-tiny",
                           "-H", "kvm", "-n", NODE, "--no-nics", "-B",
                           "maxmem=64M,minmem=64M", "--no-name-check", "--no-ip-check",
                           "nodisk.testbed", check=False)
    assert proc.returncode != 0
    assert "instance nodisk.testbed has no disk" in proc.stderr, proc.stderr
    listed = kvm_testbed.run("gnt-instance", "list", "--no-headers", "-o", "name").stdout
    assert "nodisk.testbed" not in listed
    assert kvm_testbed.runtime("nodisk.testbed") is None
