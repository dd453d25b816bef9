"""gnt-* tools run on a node that is not the master (another node's CORRAL_ROOT)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import TestbedHandle, run_tool

# Every test shares the module's testbed: _node3_candidate_again undoes the one change
# they make.
pytestmark = [pytest.mark.integration, pytest.mark.shared_testbed]

NOT_MASTER = ("This is not the master node, please connect to node 'node1.testbed' and "
              "rerun the command")


@pytest.fixture(autouse=True)
def _node3_candidate_again(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test on the shared testbed, even a failed one, make node3 a master
    candidate again, as the testbed came up (tests here demote it)."""
    if (request.node.get_closest_marker("shared_testbed") is None
            or "testbed" not in request.fixturenames):
        yield
        return
    testbed: TestbedHandle = request.getfixturevalue("testbed")
    yield
    role = testbed.run("gnt-node", "list", "--no-headers", "-o", "role",
                       "node3.testbed").stdout.strip()
    if role != "C":
        testbed.run("gnt-node", "modify", "-C", "yes", "node3.testbed")
    assert testbed.run("gnt-node", "list", "--no-headers", "-o", "role",
                       "node3.testbed").stdout.strip() == "C"


def _env(testbed: TestbedHandle, node: int) -> dict[str, str]:
    return {**testbed.env, "CORRAL_ROOT": testbed.state["nodes"][node - 1]["root"]}


def test_getmaster_answers_on_candidates_and_non_candidates(testbed: TestbedHandle) -> None:
    testbed.run("gnt-node", "modify", "-C", "no", "node3.testbed")
    roles = testbed.run("gnt-node", "list", "--no-headers", "-o", "name,role").stdout.split()
    assert roles == ["node1.testbed", "M", "node2.testbed", "C", "node3.testbed", "R"]
    for node in (1, 2, 3):
        proc = run_tool(["gnt-cluster", "getmaster"], _env(testbed, node))
        assert proc.stdout == "node1.testbed\n", node


def test_a_command_off_the_master_names_the_master(testbed: TestbedHandle) -> None:
    testbed.run("gnt-node", "modify", "-C", "no", "node3.testbed")
    for node, args in ((2, ["gnt-node", "list"]), (3, ["gnt-instance", "list"]),
                       (2, ["gnt-cluster", "modify", "-B", "vcpus=2"])):
        proc = run_tool(args, _env(testbed, node), check=False)
        assert proc.returncode == 1, (node, args, proc.stderr)
        assert proc.stderr == ("Failure: prerequisites not met for this operation:\n"
                               f"error type: wrong_input, error details:\n{NOT_MASTER}\n"), (
            node, args)
        assert proc.stdout == ""


def test_a_machine_in_no_cluster_says_so(tmp_path: Path) -> None:
    env = {**os.environ, "CORRAL_ROOT": str(tmp_path / "nowhere")}
    for args in (["gnt-cluster", "getmaster"], ["gnt-node", "list"]):
        proc = run_tool(args, env, check=False)
        assert proc.returncode == 1
        assert proc.stderr == ("Failure: prerequisites not met for this operation:\n"
                               "error type: wrong_input, error details:\n"
                               "Cluster not initialized or this machine is not part "
                               "of a cluster\n")


def test_master_ping_off_the_master_exits_1_quietly(testbed: TestbedHandle) -> None:
    proc = run_tool(["gnt-cluster", "master-ping"], _env(testbed, 2), check=False)
    assert proc.returncode == 1 and proc.stderr == ""
