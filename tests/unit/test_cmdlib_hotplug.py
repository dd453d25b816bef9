"""``modify --hotplug`` on the master: when it is refused, what the primary node is
asked in which order, Ganeti's result entries, and that a failed hotplug leaves the
configuration and the running instance as they were.

The nodes run the real noded procedures over the fake hypervisor (which, like
Ganeti's, cannot hot-plug); a hotplug-capable node is scripted by answering
``hotplug_supported``/``hotplug_device`` and recording the devices it holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from corral.errors import HypervisorError, NodeUnreachableError, OpPrereqError
from corral.objects import NIC, Node

from .config_helpers import snapshot
from .lu_helpers import JobCtx, make_processor, run_op
from .test_cmdlib_instance_change import REASON, Cluster


class HotNode:
    """A scripted primary node that hot-plugs: the devices it runs, by UUID."""

    def __init__(self, cl: Cluster, name: str) -> None:
        inst = cl.instance(name)
        self.devices: set[str] = set(inst.disks) | {n.uuid for n in inst.nics}
        self.steps: list[tuple[str, str, str]] = []
        #: Refuse this many-th hotplug_device call (1-based), like a guest that
        #: never releases a device.
        self.fail_at: int | None = None
        #: What that call raises after the node did the step (default: a refusal
        #: before it did anything).
        self.lost_answer = False
        cl.rpc.handlers["hotplug_supported"] = lambda node, args: None
        cl.rpc.handlers["hotplug_device"] = self._device

    def _device(self, node: Node, args: Mapping[str, Any]) -> Any:
        device = args[args["target"]]
        self.steps.append((args["action"], args["target"], device["uuid"]))
        if self.fail_at == len(self.steps) and self.lost_answer:
            self.devices.add(device["uuid"])
            raise NodeUnreachableError("connection reset by peer")
        if self.fail_at == len(self.steps):
            raise HypervisorError(f"instance web1: the guest did not release "
                                  f"{args['target']}/{device['index']} within 30 seconds")
        if args["action"] == "hotadd":
            assert device["uuid"] not in self.devices
            self.devices.add(device["uuid"])
        elif args["action"] == "hotremove":
            self.devices.remove(device["uuid"])
        return None


@pytest.fixture
def cl(tmp_path: Path) -> Cluster:
    return Cluster(tmp_path)


def _run(cl: Cluster, ctx: JobCtx | None = None, **params: Any) -> Any:
    processor, _ctx = make_processor(cl.store, cl.rpc)
    return run_op(processor, {"OP_ID": "OP_INSTANCE_SET_PARAMS", "reason": REASON,
                              "instance_name": "web1", **params}, ctx)


def test_hotplug_on_a_hypervisor_without_it_is_refused_and_changes_nothing(
        cl: Cluster) -> None:
    cl.add_instance("web1", up=True)
    before = snapshot(cl.store)
    with pytest.raises(OpPrereqError) as err:
        _run(cl, hotplug=True, disks=[["add", -1, {"size": 64}]],
             nics=[["add", -1, {}]])
    assert err.value.message == ("Hotplug is not possible: Hotplug is not supported: "
                                 "Hotplug is not supported by this hypervisor")
    assert snapshot(cl.store) == before
    assert cl.calls("blockdev_create") == []
    assert cl.calls("hotplug_device") == []


def test_hotplug_if_possible_falls_back_to_the_next_start(cl: Cluster) -> None:
    cl.add_instance("web1", up=True)
    ctx = JobCtx()
    result = _run(cl, ctx, hotplug_if_possible=True, disks=[["add", -1, {"size": 64}]])
    assert result == [["disk/1", "add:size=64,mode=rw"]]
    assert " - WARNING: Hotplug is not supported: Hotplug is not supported by this " \
        "hypervisor" in ctx.log
    assert "Modification will take place without hotplugging." in ctx.log
    assert len(cl.instance("web1").disks) == 2
    assert cl.calls("hotplug_device") == []


def test_hotplug_adds_and_removes_devices_then_commits(cl: Cluster) -> None:
    cl.add_instance("web1", disks=2, up=True,
                    nics=[NIC(mac="aa:00:00:00:00:01"), NIC(mac="aa:00:00:00:00:02")])
    old = cl.instance("web1")
    node = HotNode(cl, "web1")
    ctx = JobCtx()
    result = _run(cl, ctx, hotplug=True,
                  disks=[["remove", 0, {}], ["add", -1, {"size": 64}]],
                  nics=[["add", -1, {"mac": "aa:00:00:00:00:09"}], ["remove", 0, {}]])
    new = cl.instance("web1")
    added_disk, added_nic = new.disks[1], new.nics[1]
    assert result == [
        ["disk/0", "remove"], ["disk/0", "hotplug:done"],
        ["disk/1", "add:size=64,mode=rw"], ["disk/1", "hotplug:done"],
        ["nic.2", "add:mac=aa:00:00:00:00:09,ip=None,mode=bridged,link=xen-br0,network=None"],
        ["nic.2", "hotplug:done"],
        ["NIC/0", "remove"], ["NIC/0", "hotplug:done"],
    ]
    assert node.steps == [("hotremove", "disk", old.disks[0]),
                          ("hotadd", "disk", added_disk),
                          ("hotadd", "nic", added_nic.uuid),
                          ("hotremove", "nic", old.nics[0].uuid)]
    assert node.devices == set(new.disks) | {n.uuid for n in new.nics}
    # The node was sent the devices as they are after the change, and the instance
    # as it ran.
    calls = [args for _n, args in cl.calls("hotplug_device")]
    assert calls[1]["disk"]["index"] == 1 and calls[1]["disk"]["size"] == 64
    assert calls[2]["nic"]["mac"] == "aa:00:00:00:00:09"
    assert calls[2]["nic"]["mode"] == "bridged"
    assert all(len(c["instance"]["disks"]) == 2 for c in calls)
    # The removed disk's file goes after the commit.
    [(_node, removed)] = cl.calls("blockdev_remove")
    assert removed["disk"]["uuid"] == old.disks[0]
    assert "Hotplug: adding disk/1 of the running instance" in ctx.log


def test_a_device_the_guest_refuses_undoes_the_hotplug_and_changes_nothing(
        cl: Cluster) -> None:
    cl.add_instance("web1", disks=2, up=True, nics=[NIC(mac="aa:00:00:00:00:01")])
    node = HotNode(cl, "web1")
    devices = set(node.devices)
    node.fail_at = 3
    before = snapshot(cl.store)
    with pytest.raises(HypervisorError, match="did not release nic/0 within 30 seconds"):
        _run(cl, hotplug=True, disks=[["add", -1, {"size": 64}], ["remove", 0, {}]],
             nics=[["remove", 0, {}]])
    assert snapshot(cl.store) == before
    created = cl.calls("blockdev_create")[0][1]["disk"]["uuid"]
    first_disk = cl.instance("web1").disks[0]
    assert node.steps == [("hotadd", "disk", created), ("hotremove", "disk", first_disk),
                          ("hotremove", "nic", cl.instance("web1").nics[0].uuid),
                          ("hotadd", "disk", first_disk), ("hotremove", "disk", created)]
    assert node.devices == devices
    # Only the new disk's file is removed again, never a disk of the configuration.
    assert [a["disk"]["uuid"] for _n, a in cl.calls("blockdev_remove")] == [created]


def test_disk_removal_from_a_running_instance_needs_hotplug(cl: Cluster) -> None:
    cl.add_instance("web1", disks=2, up=True)
    with pytest.raises(OpPrereqError, match="hot-remove them with --hotplug"):
        _run(cl, disks=[["remove", 1, {}]])
    HotNode(cl, "web1")
    assert _run(cl, hotplug=True, disks=[["remove", 1, {}]]) == [
        ["disk/1", "remove"], ["disk/1", "hotplug:done"]]
    assert len(cl.instance("web1").disks) == 1


def test_a_modified_nic_is_replaced_and_put_back_on_failure(cl: Cluster) -> None:
    cl.add_instance("web1", up=True, nics=[NIC(mac="aa:00:00:00:00:01")])
    uuid = cl.instance("web1").nics[0].uuid
    node = HotNode(cl, "web1")
    result = _run(cl, hotplug=True, nics=[["modify", 0, {"mac": "aa:00:00:00:00:05"}]])
    assert result == [["nic.mac/0", "aa:00:00:00:00:05"], ["nic/0", "hotplug:done"]]
    [(_n, args)] = cl.calls("hotplug_device")
    assert (args["action"], args["nic"]["mac"]) == ("hotmod", "aa:00:00:00:00:05")

    node.fail_at = len(node.steps) + 2  # the change works; the next step fails
    before = snapshot(cl.store)
    with pytest.raises(HypervisorError):
        _run(cl, hotplug=True, nics=[["modify", 0, {"mac": "aa:00:00:00:00:06"}],
                                     ["add", -1, {}]])
    assert snapshot(cl.store) == before
    undo = [args for _n, args in cl.calls("hotplug_device")][-1]
    assert (undo["action"], undo["nic"]["uuid"], undo["nic"]["mac"]) == (
        "hotmod", uuid, "aa:00:00:00:00:05")


def test_hotplug_of_a_stopped_instance_is_refused(cl: Cluster) -> None:
    cl.add_instance("web1")

    def supported(node: Node, args: Mapping[str, Any]) -> Any:
        raise HypervisorError("Hotplug is not supported: instance web1 is not running "
                              "on this node")

    cl.rpc.handlers["hotplug_supported"] = supported
    with pytest.raises(OpPrereqError, match="Hotplug is not possible: Hotplug is not "
                                            "supported: instance web1 is not running"):
        _run(cl, hotplug=True, nics=[["add", -1, {}]])
    assert cl.instance("web1").nics == []


def test_a_step_without_answer_is_undone_too(cl: Cluster) -> None:
    """noded died after plugging the device in: the master takes it out again when the
    node answers, and the configuration stays as it was."""
    cl.add_instance("web1", up=True)
    node = HotNode(cl, "web1")
    devices = set(node.devices)
    node.fail_at, node.lost_answer = 1, True
    before = snapshot(cl.store)
    with pytest.raises(NodeUnreachableError):
        _run(cl, hotplug=True, nics=[["add", -1, {}]])
    assert snapshot(cl.store) == before
    assert [action for action, _t, _u in node.steps] == ["hotadd", "hotremove"]
    assert node.devices == devices
