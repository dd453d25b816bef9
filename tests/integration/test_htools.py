"""The htools on a corral testbed: hbal reads the cluster through luxi and moves
instances with jobs (-X), leaving a better score; hspace, hinfo and hcheck read it
through luxi, hscan and hbal -m through RAPI.

The instances are diskless and stopped (fake hypervisor): hbal fails them over to
the nodes it chose, which is quick. One shared testbed; the test removes what it
created."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import TestbedHandle

pytestmark = [pytest.mark.integration, pytest.mark.shared_testbed]

NAMES = [f"hb{i}.testbed" for i in range(1, 6)]


def _score_line(out: str) -> tuple[float, float]:
    match = re.search(r"Cluster score improved from ([0-9.]+) to ([0-9.]+)", out)
    assert match, out
    return float(match.group(1)), float(match.group(2))


def _pnodes(testbed: TestbedHandle) -> dict[str, str]:
    out = testbed.run("gnt-instance", "list", "--no-headers", "-o", "name,pnode").stdout
    return dict(line.split() for line in out.splitlines())


def test_hbal_moves_piled_instances_with_jobs(testbed: TestbedHandle) -> None:
    for pos, name in enumerate(NAMES, start=1):
        testbed.run("gnt-instance", "add", "-t", "diskless", "--no-install", "--no-start",
                    "--no-nics", "-n", "node1.testbed", "-B",
                    f"maxmem={pos * 256}M,minmem={pos * 256}M", name)
    try:
        assert set(_pnodes(testbed).values()) == {"node1.testbed"}
        # a job filter refuses to move the instance hbal moves second: it stops there
        # and says which move was made
        plan = testbed.run("hbal", "-L").stdout
        order = re.findall(r"^\s+\d+\. (\S+) ", plan, re.MULTILINE)
        assert len(order) >= 2, plan
        rule = testbed.run("gnt-filter", "add", "--action", "REJECT", "--predicates",
                           f'[["opcode", ["=", "instance_name", "{order[1]}.testbed"]]]'
                           ).stdout.strip()
        try:
            stopped = testbed.run("hbal", "-L", "-X", check=False)
        finally:
            testbed.run("gnt-filter", "delete", rule)
        assert stopped.returncode == 1, stopped.stdout + stopped.stderr
        assert f"Moves done: {order[0]}.testbed (job " in stopped.stdout
        assert "Not all jobs completed successfully" in stopped.stderr
        moved = _pnodes(testbed)
        assert moved[f"{order[0]}.testbed"] != "node1.testbed"
        assert moved[f"{order[1]}.testbed"] == "node1.testbed"
        # the rest of the way
        done = testbed.run("hbal", "-L", "-X")
        before, after = _score_line(done.stdout)
        assert after < before
        assert "Got job IDs" in done.stdout
        spread = _pnodes(testbed)
        assert set(spread.values()) == {"node1.testbed", "node2.testbed", "node3.testbed"}
        again = testbed.run("hbal", "-L").stdout
        assert "Nothing to do" in again or "No solution found" in again
    finally:
        for name in NAMES:
            testbed.run("gnt-instance", "remove", "-f", name, check=False)


def test_tools_read_the_testbed_through_luxi_and_rapi(testbed: TestbedHandle,
                                                      tmp_path: Path) -> None:
    info = testbed.run("hinfo", "-L").stdout
    assert "Loaded 3 nodes, 0 instances, 1 node group" in info
    assert re.search(r"^Cluster score: [0-9.]+$", info, re.MULTILINE)
    space = testbed.run("hspace", "-L", "--machine-readable", "--standard-alloc=1024,512,1",
                        "--tiered-alloc=1024,512,1", "--disk-template=diskless", "-l",
                        "12").stdout
    assert "HTS_CLUSTER_NODES=3" in space and "HTS_ALLOC_INSTANCES=12" in space
    assert space.endswith("HTS_OK=1\n")
    check = testbed.run("hcheck", "-L", "--machine-readable", check=False)
    assert "HCHECK_INIT_CLUSTER_N1_FAIL=0" in check.stdout
    rapi = testbed.state["rapi"]
    url = rapi["url"].replace("https://", f"https://{rapi['user']}:{rapi['password']}@")
    scan = testbed.run("hscan", "-d", str(tmp_path), "--no-headers", url)
    assert scan.stdout.split()[1:3] == ["3", "0"], scan.stdout
    [data] = tmp_path.glob("*.data")
    listed = testbed.run("hinfo", "-t", str(data)).stdout
    assert "Loaded 3 nodes, 0 instances, 1 node group" in listed
    data.unlink()   # named after the URL, password included
    balanced = testbed.run("hbal", "-m", url)
    assert balanced.stdout == "Cluster is empty, exiting.\n"
