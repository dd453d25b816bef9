"""The kvm hypervisor's life cycle with real qemu guests (TCG) on a 2-node testbed,
driven through the gnt-* tools: boot, state from QMP, reboots, shutdown, a qemu that
dies behind corral's back, user shutdown, a noded restart, bad input."""

from __future__ import annotations

import pytest

from corral.testbed.guest import MARKER
from tests.system.conftest import KvmTestbed

pytestmark = pytest.mark.system


def test_add_boots_the_guest_and_list_shows_it_running(kvm_testbed: KvmTestbed) -> None:
    """``gnt-instance add`` starts qemu; the guest's marker appears on its serial
    console and ``gnt-instance list`` reports it running, from QMP."""
    kvm_testbed.add("boot.testbed", node="node2.testbed")
    kvm_testbed.wait_console("boot.testbed", MARKER)
    listed = kvm_testbed.instances()["boot.testbed"]
    assert listed == {"status": "running", "oper_state": "running", "pnode": "node2.testbed"}
