"""The in-process node transport holds the master to the node daemons' contract: the
real procedures, the wire's encoding, the wire's errors."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from corral.cmdlib.base import LogicalUnit
from corral.config import ConfigStore
from corral.errors import (
    CorralError,
    HypervisorError,
    InternalError,
    NodeUnreachableError,
    ParameterError,
)
from corral.objects import Node
from corral.opcodes import OpTestDelay
from tests.unit.config_helpers import new_store
from tests.unit.lu_helpers import LocalRpc, make_processor, run_op


@pytest.fixture
def store(tmp_path: Path) -> ConfigStore:
    store = new_store(tmp_path / "config.db")
    group = store.all("nodegroup")[0]
    with store.transaction() as txn:
        txn.add(Node(name="node2", primary_ip="192.0.2.2", group=group.uuid))
    return store


def _call(rpc: LocalRpc, procedure: str, args: dict[str, Any],
          nodes: tuple[str, ...] = ("node1",)) -> dict[str, Any]:
    targets = [rpc.store.get("node", name) for name in nodes]
    return asyncio.run(rpc.call(targets, procedure, args))


def test_a_misspelled_argument_fails_as_between_daemons(store: ConfigStore,
                                                        tmp_path: Path) -> None:
    rpc = LocalRpc(store, tmp_path)
    result = _call(rpc, "instance_info", {"hypervisor": "fake", "instnace": "web1"})["node1"]
    assert isinstance(result.error, ParameterError)
    assert "unknown argument 'instnace'" in result.error.message
    with pytest.raises(ParameterError, match="instance_info failed on node node1"):
        result.get("instance_info")
    answer = _call(rpc, "instance_info", {"hypervisor": "fake", "instance": "web1"})
    assert answer["node1"].payload is None  # not running there: the real answer


def test_a_misspelled_procedure_lists_the_real_ones(store: ConfigStore,
                                                    tmp_path: Path) -> None:
    result = _call(LocalRpc(store, tmp_path), "instance_strat", {})["node1"]
    assert isinstance(result.error, ParameterError)
    assert "unknown procedure 'instance_strat'" in result.error.message
    assert "instance_start" in result.error.message


def test_a_mistyped_argument_is_refused(store: ConfigStore, tmp_path: Path) -> None:
    rpc = LocalRpc(store, tmp_path)
    result = _call(rpc, "blockdev_grow", {"disk": {"uuid": "d", "index": 0, "size": 1,
                                                   "dev_type": "file",
                                                   "logical_id": ["loop", "/srv/x"]},
                                          "amount": "10"})["node1"]
    assert isinstance(result.error, ParameterError)
    assert "argument 'amount': expected `int`, got `str`" in result.error.message


def test_arguments_and_results_cross_the_wire_as_json(store: ConfigStore,
                                                      tmp_path: Path) -> None:
    rpc = LocalRpc(store, tmp_path)
    # What JSON cannot carry is a master-side bug, as with the HTTP client (asked of
    # the transport itself: the master's argument check refuses it before that).
    with pytest.raises(InternalError, match="cannot be sent as JSON"):
        asyncio.run(rpc.nodes.call([("node1", "192.0.2.1", 1811)], "instance_list",
                                   {"hypervisors": [object()]}))
    # Tuples arrive as lists, as a node daemon decodes them.
    _call(rpc, "instance_list", {"hypervisors": ("fake",)})
    assert rpc.calls[-1].args == {"hypervisors": ["fake"]}


def test_each_node_has_its_own_places(store: ConfigStore, tmp_path: Path) -> None:
    rpc = LocalRpc(store, tmp_path)
    node1, node2 = rpc.nodes.paths("node1"), rpc.nodes.paths("node2")
    assert node1.root != node2.root and tmp_path in node1.root.parents
    disk: dict[str, Any] = {"uuid": "d1", "index": 0, "size": 4, "dev_type": "file",
            "logical_id": ["loop", "/srv/corral/file-storage/i1/d1.disk0"]}
    created = _call(rpc, "blockdev_create", {"disk": disk})["node1"].get("create")
    assert Path(created["path"]) == node1.node_path(disk["logical_id"][1])
    assert Path(created["path"]).stat().st_size == 4 << 20
    assert not node2.node_path(disk["logical_id"][1]).exists()


def test_faults_are_explicit_overrides(store: ConfigStore, tmp_path: Path) -> None:
    rpc = LocalRpc(store, tmp_path)
    rpc.down.add("node2")

    def no_memory(node: Node, args: Any) -> Any:
        raise HypervisorError(f"not enough memory on {node.name}")

    rpc.handlers["instance_start"] = no_memory
    answers = _call(rpc, "version", {}, nodes=("node1", "node2"))
    assert answers["node1"].payload["rpc_version"] == 1
    assert isinstance(answers["node2"].error, NodeUnreachableError)
    spec = {"name": "web1", "uuid": "u1", "hypervisor": "fake", "disks": [], "nics": []}
    started = _call(rpc, "instance_start", {"instance": spec})["node1"]
    # The error keeps its class across the wire form.
    assert type(started.error) is HypervisorError
    assert started.error.message == "not enough memory on node1"


class _MisspellingUnit(LogicalUnit[OpTestDelay]):
    """A unit with a typo in its RPC arguments: FakeRpc accepted it."""

    async def execute(self) -> Any:
        node = self.master.store.get("node", "node1")
        results = await self.master.rpc.call([node], "instance_shutdown",
                                             {"instance_name": "web1"})
        return results["node1"].get("shutdown")


def test_a_logical_unit_calling_with_a_wrong_argument_fails(store: ConfigStore,
                                                            tmp_path: Path) -> None:
    processor, _ctx = make_processor(store, LocalRpc(store, tmp_path))
    processor.units = {**processor.units, OpTestDelay.OP_ID: _MisspellingUnit}
    with pytest.raises(CorralError, match="unknown argument 'instance_name'"):
        run_op(processor, {"OP_ID": "OP_TEST_DELAY", "duration": 0})
