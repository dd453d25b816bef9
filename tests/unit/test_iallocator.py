"""The iallocator protocol, master side: the input corral builds has the shape Ganeti
3.0 gives its plugins (recorded in tests/data/iallocator by
tests/compat/record_iallocator.py), answers are checked as Ganeti checks them, and
plugins run by name, with arguments, a timeout and Ganeti's error texts."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from corral.config import ConfigStore
from corral.errors import OpExecError, ParameterError
from corral.iallocator import (
    NodeLive,
    PluginRunner,
    allocate_request,
    build_input,
    change_group_request,
    multi_allocate_request,
    node_evacuate_request,
    parse_answer,
    plugin_arguments,
    relocate_request,
    reported_storage,
)
from corral.objects import NIC, Disk, Instance, Node, NodeGroup
from corral.paths import Paths
from tests.unit.config_helpers import new_store

DATA = Path(__file__).resolve().parents[1] / "data" / "iallocator"
MODES = ("allocate", "relocate", "change-group", "node-evacuate", "multi-allocate")


def _recorded(mode: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / f"ganeti-{mode}.json").read_text())
    return data


def _same_shape(ours: Any, theirs: Any, path: str = "$") -> None:
    """``ours`` has ``theirs``'s shape: the same keys, JSON types (numbers count as
    one; a value Ganeti recorded as null accepts anything) and list element shapes."""
    if theirs is None:
        return
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), f"{path}: expected an object, got {ours!r}"
        assert sorted(ours) == sorted(theirs), f"{path}: keys {sorted(ours)} != {sorted(theirs)}"
        for key in theirs:
            _same_shape(ours[key], theirs[key], f"{path}.{key}")
    elif isinstance(theirs, list):
        assert isinstance(ours, list), f"{path}: expected a list, got {ours!r}"
        if theirs and ours:
            for item in ours:
                _same_shape(item, theirs[0], f"{path}[]")
    elif isinstance(theirs, bool):
        assert isinstance(ours, bool), f"{path}: expected a boolean, got {ours!r}"
    elif isinstance(theirs, int | float):
        assert isinstance(ours, int | float) and not isinstance(ours, bool), \
            f"{path}: expected a number, got {ours!r}"
    else:
        assert isinstance(ours, type(theirs)), f"{path}: expected {type(theirs)}, got {ours!r}"


def _by_name(groups: dict[str, Any]) -> dict[str, Any]:
    return {group["name"]: group for group in groups.values()}


def _cluster(tmp_path: Path) -> ConfigStore:
    """The reference recording's cluster, in corral: one node, the default group and an
    empty one, a running file instance and a stopped diskless one."""
    store = new_store(tmp_path / "config.db")
    node = store.all("node")[0]
    with store.transaction() as txn:
        cluster = txn.cluster()
        cluster.file_storage_dir = "/srv/corral/file-storage"
        txn.update(cluster)
        txn.add(NodeGroup(name="compat-ialloc-g1"))
        disk = Disk(dev_type="file", size=1024, nodes=[node.uuid], iv_name="disk/0")
        txn.add(disk)
        txn.add(Instance(name="compat-ialloc-i1", primary_node=node.uuid, os="noop+default",
                         admin_state="up", disk_template="file", disks=[disk.uuid],
                         beparams={"maxmem": 256, "vcpus": 2}, tags=["x1"],
                         nics=[NIC(mac="aa:00:00:0e:2a:78", ip="192.0.2.9")]))
        txn.add(Instance(name="compat-ialloc-i2", primary_node=node.uuid, os="noop+default",
                         disk_template="diskless", nics=[NIC(mac="aa:00:00:61:d0:70")]))
    return store


def _live(store: ConfigStore) -> dict[str, NodeLive]:
    return {node.name: NodeLive(
        info={"memory_total": 24105, "memory_free": 22000, "memory_hv": 256, "cpu_total": 2,
              "cpu_dom0": 2, "storage": {store.cluster.file_storage_dir: {
                  "size": 258019, "free": 79143}}},
        instances={"compat-ialloc-i1": {"memory": 256}}) for node in store.all("node")}


def _request(store: ConfigStore, mode: str) -> dict[str, Any]:
    node = store.all("node")[0]
    alloc = allocate_request(
        name="compat-ialloc-new", disk_template="file",
        disks=[{"size": 1024, "mode": "rw", "vg": None, "name": None},
               {"size": 2048, "mode": "ro", "vg": None, "name": None}],
        nics=[{"mac": "aa:00:00:c0:ff:ee", "ip": "192.0.2.10", "nicparams": {},
               "uuid": "u"}],
        vcpus=2, memory=512, spindle_use=1, os="noop+default", tags=["a", "b"],
        hypervisor="fake")
    if mode == "allocate":
        return alloc
    if mode == "multi-allocate":
        auto = {**alloc, "nics": [{"mac": "auto", "nicparams": {}, "uuid": "u"}]}
        return multi_allocate_request([auto, auto])
    if mode == "relocate":
        return relocate_request(store, store.get("instance", "compat-ialloc-i2"), [node.name])
    if mode == "change-group":
        return change_group_request(["compat-ialloc-i1"],
                                    [store.get("nodegroup", "compat-ialloc-g1").uuid])
    return node_evacuate_request(["compat-ialloc-i2", "compat-ialloc-i1"], "primary-only")


@pytest.mark.parametrize("mode", MODES)
def test_the_input_has_ganetis_shape(tmp_path: Path, mode: str) -> None:
    store = _cluster(tmp_path)
    ours = build_input(store, _live(store), _request(store, mode), disk_template="file")
    theirs = _recorded(mode)
    node = store.all("node")[0].name
    ours = json.loads(json.dumps(ours).replace(node, "<node1>"))
    assert sorted(ours) == sorted(theirs)
    for key in ("version", "cluster_tags", "enabled_hypervisors", "ipolicy", "nodes",
                "instances", "request"):
        _same_shape(ours[key], theirs[key], f"$.{key}")
    _same_shape(_by_name(ours["nodegroups"]), _by_name(theirs["nodegroups"]), "$.nodegroups")
    assert ours["version"] == theirs["version"] == 2
    assert ours["request"]["type"] == theirs["request"]["type"] == mode


def test_the_values_are_the_clusters(tmp_path: Path) -> None:
    store = _cluster(tmp_path)
    data = build_input(store, _live(store), _request(store, "allocate"))
    node = data["nodes"][store.all("node")[0].name]
    # the running instance uses its maximum already; both count as primaries
    assert node["i_pri_memory"] == 256 + 128 and node["i_pri_up_memory"] == 256
    assert node["free_memory"] == 22000 and node["total_memory"] == 24105
    assert node["reserved_memory"] == 24105 - 22000 - 256
    assert node["total_disk"] == 258019 and node["free_disk"] == 79143
    i1 = data["instances"]["compat-ialloc-i1"]
    assert (i1["memory"], i1["vcpus"], i1["disk_space_total"]) == (256, 2, 1024)
    assert i1["nics"][0]["bridge"] == i1["nics"][0]["link"]
    assert data["request"]["disk_space_total"] == 3072
    assert data["ipolicy"] == store.cluster.ipolicy
    # an instance that should run but does not is counted as using its maximum
    down = {name: NodeLive(info=live.info, instances={}) for name, live in
            _live(store).items()}
    node = build_input(store, down, _request(store, "allocate"))["nodes"][node_name(store)]
    assert node["free_memory"] == 22000 - 256


def node_name(store: ConfigStore) -> str:
    return store.all("node")[0].name


def test_the_node_disk_is_the_space_of_the_requests_template(tmp_path: Path) -> None:
    store = _cluster(tmp_path)
    with store.transaction() as txn:
        cluster = txn.cluster()
        cluster.volume_group_name = "xenvg"
        txn.update(cluster)
    plain = reported_storage(store.cluster, "plain")
    assert plain is not None and plain.node_info_args() == {"volume_groups": ["xenvg"]}

    def disk(template: str, vgs: dict[str, Any]) -> tuple[int, int]:
        live = {name: NodeLive(info={**(answer.info or {}), "lvm": {"vgs": vgs}},
                               instances=answer.instances)
                for name, answer in _live(store).items()}
        node = build_input(store, live, _request(store, "allocate"),
                           disk_template=template)["nodes"][node_name(store)]
        return node["total_disk"], node["free_disk"]

    vgs = {"xenvg": {"size": 10240, "free": 4096, "allocatable_free": 3072},
           "othervg": {"size": 1, "free": 1, "allocatable_free": 1}}
    # LVM: the cluster's volume group, free on its allocatable physical volumes
    assert disk("plain", vgs) == (10240, 3072)
    assert disk("file", vgs) == (258019, 79143)
    # Ganeti reports no space for the others (shared and external storage, none)
    assert disk("sharedfile", vgs) == disk("rbd", vgs) == disk("diskless", vgs) == (0, 0)
    # a node without the volume group fits no LVM disk
    assert disk("plain", {"othervg": vgs["othervg"]}) == (0, 0)


def test_offline_and_unasked_nodes_get_their_configuration_only(tmp_path: Path) -> None:
    store = _cluster(tmp_path)
    group = store.all("nodegroup")[0]
    with store.transaction() as txn:
        txn.add(Node(name="node2", primary_ip="192.0.2.2", group=group.uuid, offline=True))
    data = build_input(store, _live(store), _request(store, "allocate"))
    assert set(data["nodes"]["node2"]) == {
        "tags", "primary_ip", "secondary_ip", "offline", "drained", "master_candidate",
        "group", "master_capable", "vm_capable", "ndparams"}
    assert data["nodes"]["node2"]["offline"] is True


# -- answers ---------------------------------------------------------------------


def _data(mode: str, **request: Any) -> dict[str, Any]:
    data = _recorded(mode)
    data["request"].update(request)
    return data


@pytest.mark.parametrize(("text", "mode", "message"), [
    ("garbage", "allocate", "Can't parse iallocator results: Expecting value"),
    ("[1]", "allocate", "Can't parse iallocator results: not a dict"),
    ('{"success": true, "info": "x"}', "allocate",
     "Can't parse iallocator results: missing key 'result'"),
    ('{"info": "x", "result": []}', "allocate",
     "Can't parse iallocator results: missing key 'success'"),
    ('{"success": true, "info": "x", "result": ["a", "b"]}', "allocate",
     "iallocator returned invalid number of nodes (2), required 1"),
    ('{"success": true, "info": "x", "result": "node1"}', "allocate",
     "iallocator returned invalid result, expected a list of node names"),
    ('{"success": true, "info": "x", "result": [1]}', "relocate",
     "iallocator returned invalid result"),
    ('{"success": true, "info": "x", "result": [[], []]}', "node-evacuate",
     "iallocator returned invalid result"),
    ('{"success": true, "info": "x", "result": [[["i", "g"]], [], []]}', "change-group",
     "iallocator returned invalid result"),
    ('{"success": true, "info": "x", "result": [[], [["i", 3]], []]}', "node-evacuate",
     "iallocator returned invalid result"),
    ('{"success": true, "info": "x", "result": [[], [], [[{"OP_ID": "OP_INSTANCE_REMOVE"}]]]}',
     "node-evacuate", "iallocator returned invalid result, expected jobs of opcodes "
     "OP_INSTANCE_FAILOVER, OP_INSTANCE_MIGRATE"),
    ('{"success": true, "info": "x", "result": [[["i1", "n"]], []]}', "multi-allocate",
     "iallocator returned invalid result"),
    ('{"success": true, "info": "x", "result": [[["i1", ["n"]]]]}', "multi-allocate",
     "iallocator returned invalid result"),
])
def test_malformed_answers_are_refused(text: str, mode: str, message: str) -> None:
    with pytest.raises(OpExecError) as err:
        parse_answer(text, _recorded(mode))
    assert err.value.message.startswith(message), err.value.message


def test_good_answers() -> None:
    answer = parse_answer('{"success": false, "info": "FailMem: 3", "result": []}',
                          _recorded("allocate"))
    assert (answer.success, answer.info) == (False, "FailMem: 3")
    # an old plugin's "nodes" is its result
    assert parse_answer('{"success": true, "info": "", "nodes": ["<node1>"]}',
                        _recorded("allocate")).result == ["<node1>"]
    evac = [[["compat-ialloc-i1", "default", ["<node1>"]]], [["compat-ialloc-i2", None]],
            [[{"OP_ID": "OP_INSTANCE_MIGRATE", "instance_name": "compat-ialloc-i1"}]]]
    assert parse_answer(json.dumps({"success": True, "info": "", "result": evac}),
                        _recorded("node-evacuate")).result == evac
    multi = [[["compat-ialloc-m1", ["<node1>"]]], ["compat-ialloc-m2"]]
    assert parse_answer(json.dumps({"success": True, "info": "", "result": multi}),
                        _recorded("multi-allocate")).result == multi


def test_a_relocation_stays_in_the_instances_groups() -> None:
    data = _recorded("relocate")
    default = next(iter(data["nodegroups"]))
    other = "0000-other"
    data["nodegroups"][other] = {**data["nodegroups"][default], "name": "far"}
    data["nodes"]["node9"] = {**data["nodes"]["<node1>"], "group": other}
    assert parse_answer('{"success": true, "info": "", "result": ["<node1>"]}', data).success
    with pytest.raises(OpExecError, match=r"Groups of nodes returned by iallocator \(default, "
                                          r"far\) differ from original groups \(default\)"):
        parse_answer('{"success": true, "info": "", "result": ["node9"]}', data)


# -- running plugins --------------------------------------------------------------


def _plugin(root: Path, name: str, body: str) -> Path:
    directory = root / "srv" / "corral" / "iallocators"
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / name
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return script


def _run(root: Path, name: str, params: dict[str, Any] | None = None,
         timeout: float = 10.0) -> str:
    runner = PluginRunner(Paths(root))
    return asyncio.run(runner.run(name, {"request": {"type": "allocate"}},
                                  search_path=["/srv/corral/iallocators"],
                                  params=params or {}, timeout=timeout))


def test_a_plugin_reads_its_input_file_and_gets_the_parameters(tmp_path: Path) -> None:
    _plugin(tmp_path, "echo", 'printf \'{"file": "%s", "args": "%s", "input": %s}\' '
                              '"$1" "$2 $3" "$(cat "$1")"\n')
    answer = json.loads(_run(tmp_path, "echo", {"max-cpu": 4, "no-capacity-checks": None}))
    assert answer["input"] == {"request": {"type": "allocate"}}
    assert answer["args"] == "--max-cpu=4 --no-capacity-checks"
    assert not os.path.exists(answer["file"])  # the input file is gone afterwards
    assert plugin_arguments({"a": "1", "b": None, "c": True, "d": False}) == [
        "--a=1", "--b", "--c"]


def test_a_missing_plugin_is_named_with_the_search_path(tmp_path: Path) -> None:
    with pytest.raises(OpExecError) as err:
        _run(tmp_path, "nosuch")
    assert err.value.message == (
        "Failure while running the iallocator script: iallocator module 'nosuch' not found "
        "in the search path\nsearched: /srv/corral/iallocators")
    with pytest.raises(ParameterError, match="invalid iallocator name"):
        _run(tmp_path, "../etc/passwd")


def test_a_failing_plugin_is_quoted(tmp_path: Path) -> None:
    _plugin(tmp_path, "broken", "echo 'no data file' >&2\nexit 3\n")
    with pytest.raises(OpExecError) as err:
        _run(tmp_path, "broken")
    assert err.value.message == (
        "Failure while running the iallocator script: iallocator module 'broken' failed: "
        "exited with exit code 3, output 'no data file'")


def test_a_slow_plugin_is_stopped(tmp_path: Path) -> None:
    marker = tmp_path / "still-running"
    _plugin(tmp_path, "slow", f"sleep 30\ntouch {marker}\n")
    with pytest.raises(OpExecError, match=r"'slow' did not answer within 0\.5 seconds; it was "
                                          "stopped"):
        _run(tmp_path, "slow", timeout=0.5)
    time.sleep(0.2)
    assert not marker.exists()


def test_the_builtin_allocator_runs_in_a_thread() -> None:
    seen: list[Any] = []

    def answer(data: dict[str, Any]) -> dict[str, Any]:
        seen.append(data)
        return {"success": True, "info": "built in", "result": ["n1"]}

    runner = PluginRunner(builtin=answer)
    text = asyncio.run(runner.run("corral", {"request": {}}, search_path=[], params={},
                                  timeout=5))
    assert json.loads(text)["info"] == "built in" and seen == [{"request": {}}]

    def broken(data: dict[str, Any]) -> dict[str, Any]:
        raise KeyError("nodes")

    with pytest.raises(OpExecError, match="built-in allocator 'corral' failed: KeyError"):
        asyncio.run(PluginRunner(builtin=broken).run("corral", {}, search_path=[], params={},
                                                     timeout=5))


def test_a_changed_object_is_described_anew(tmp_path: Path) -> None:
    """Entries of unchanged instances are reused between requests; a change of the
    instance, its disks, its node's group or the cluster shows at once."""
    store = _cluster(tmp_path)
    request = _request(store, "allocate")
    first = build_input(store, _live(store), request)["instances"]["compat-ialloc-i1"]
    again = build_input(store, _live(store), request)["instances"]["compat-ialloc-i1"]
    assert again is first
    with store.transaction() as txn:
        inst = txn.get("instance", "compat-ialloc-i1")
        inst.beparams = {**inst.beparams, "vcpus": 4}
        txn.update(inst)
    assert build_input(store, _live(store), request)["instances"][
        "compat-ialloc-i1"]["vcpus"] == 4
    with store.transaction() as txn:
        disk = txn.get("disk", store.get("instance", "compat-ialloc-i1").disks[0])
        disk.size = 2048
        txn.update(disk)
    assert build_input(store, _live(store), request)["instances"][
        "compat-ialloc-i1"]["disk_space_total"] == 2048
    with store.transaction() as txn:
        group = txn.get("nodegroup", "default")
        group.beparams = {"maxmem": 512}
        txn.update(group)
    data = build_input(store, _live(store), request)
    assert data["instances"]["compat-ialloc-i2"]["memory"] == 512
    assert data["instances"]["compat-ialloc-i1"]["memory"] == 256  # its own value
