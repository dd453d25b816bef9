"""Named aggregates and a node's aggregates and traits, through their logical units
(``OP_CLUSTER_ADD_AGGREGATE``, ``OP_CLUSTER_REMOVE_AGGREGATE``, ``OP_NODE_SET_PARAMS``
``aggregates``/``traits``) on an in-process cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.errors import AlreadyExistsError, NotFoundError, OpPrereqError, ParameterError

from .config_helpers import snapshot
from .instance_helpers import Cluster

UUID = "33333333-3333-4333-8333-333333333333"


@pytest.fixture
def cl(tmp_path: Path) -> Cluster:
    return Cluster(tmp_path)


def test_add_remove_and_use_named_aggregates(cl: Cluster) -> None:
    new = cl.run("OP_CLUSTER_ADD_AGGREGATE", aggregate_name="rack1")
    assert cl.store.cluster.aggregates == {"rack1": new}
    assert cl.run("OP_CLUSTER_ADD_AGGREGATE", aggregate_name="rack2",
                  aggregate_uuid=UUID.upper()) == UUID
    result = cl.run("OP_NODE_SET_PARAMS", node_name="node1", aggregates=["rack2", "rack1"],
                    traits=["CUSTOM_SSD"])
    assert result == [["aggregates", "rack1,rack2"], ["traits", "CUSTOM_SSD"]]
    node = cl.store.get("node", "node1")
    assert (node.aggregates, node.traits) == (sorted([new, UUID]), ["CUSTOM_SSD"])
    cl.run("OP_NODE_SET_PARAMS", node_name="node1", aggregates=["-rack1", f"+{UUID}"],
           traits=["+HW_CPU_X86_AVX2", "-CUSTOM_SSD"])
    node = cl.store.get("node", "node1")
    assert (node.aggregates, node.traits) == ([UUID], ["HW_CPU_X86_AVX2"])
    with pytest.raises(OpPrereqError, match="aggregate rack2 still has nodes: node1"):
        cl.run("OP_CLUSTER_REMOVE_AGGREGATE", aggregate_name="rack2")
    cl.run("OP_NODE_SET_PARAMS", node_name="node1", aggregates=[])
    cl.run("OP_CLUSTER_REMOVE_AGGREGATE", aggregate_name="rack2")
    assert cl.store.cluster.aggregates == {"rack1": new}


def test_refusals_change_nothing(cl: Cluster) -> None:
    cl.run("OP_CLUSTER_ADD_AGGREGATE", aggregate_name="rack1", aggregate_uuid=UUID)
    before = snapshot(cl.store)
    cases: list[tuple[type[Exception], str, str, dict[str, object]]] = [
        (ParameterError, "invalid aggregate name '1rack'", "OP_CLUSTER_ADD_AGGREGATE",
         {"aggregate_name": "1rack"}),
        (ParameterError, "invalid aggregate UUID 'nope'", "OP_CLUSTER_ADD_AGGREGATE",
         {"aggregate_name": "rack2", "aggregate_uuid": "nope"}),
        (AlreadyExistsError, "aggregate 'rack1' already exists", "OP_CLUSTER_ADD_AGGREGATE",
         {"aggregate_name": "rack1"}),
        (AlreadyExistsError, "'default' is the name of a node group",
         "OP_CLUSTER_ADD_AGGREGATE", {"aggregate_name": "default"}),
        (AlreadyExistsError, f"aggregate UUID {UUID} is already named rack1",
         "OP_CLUSTER_ADD_AGGREGATE", {"aggregate_name": "rack2", "aggregate_uuid": UUID}),
        (NotFoundError, r"aggregate 'rack9' does not exist \(aggregates: rack1\)",
         "OP_CLUSTER_REMOVE_AGGREGATE", {"aggregate_name": "rack9"}),
        (NotFoundError, "aggregates: unknown aggregate 'rack9'", "OP_NODE_SET_PARAMS",
         {"node_name": "node1", "aggregates": ["+rack9"]}),
        (ParameterError, "give either the whole list", "OP_NODE_SET_PARAMS",
         {"node_name": "node1", "aggregates": ["rack1", "-rack1"]}),
        (ParameterError, "invalid trait 'ssd'", "OP_NODE_SET_PARAMS",
         {"node_name": "node1", "traits": ["ssd"]}),
    ]
    for error, message, op_id, params in cases:
        with pytest.raises(error, match=message):
            cl.run(op_id, **params)
    assert snapshot(cl.store) == before
