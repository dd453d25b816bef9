"""ExtStorage on a testbed (fake hypervisor): gnt-storage, instances on ext disks through
their whole life with every script's environment checked, a provider script that fails,
the shipped corral-file provider under a real OS installation, and RAPI.

The test provider (tests/data/extstorage/corral-envdump) records each script run in a
``calls.log`` next to it on the node that ran it; it is installed on every node of the
module's shared testbed, with the ext template enabled, and both are taken away again
at the module's end.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.paths import Paths
from tests.conftest import TestbedHandle, run_tool
from tests.integration.test_rapi import _client

pytestmark = [pytest.mark.integration, pytest.mark.shared_testbed]

ENVDUMP = Path(__file__).resolve().parents[1] / "data" / "extstorage" / "corral-envdump"
PROVIDER_DIR = "/srv/corral/extstorage"
SHELL_VARS = {"PWD", "SHLVL", "_", "OLDPWD"}
#: The variables each action gets besides VOL_NAME and EXTP_* (Ganeti 3.0, recorded in
#: tests/data/extstorage/ganeti-3.0-recorded.md), VOL_CNAME only for a named disk.
ACTION_VARS = {
    "create": {"VOL_SIZE", "VOL_UUID", "VOL_CNAME"},
    "setinfo": {"VOL_METADATA", "VOL_UUID", "VOL_CNAME"},
    "attach": {"VOL_UUID", "VOL_CNAME"},
    "open": {"VOL_OPEN_EXCLUSIVE", "VOL_UUID", "VOL_CNAME"},
    "close": {"VOL_UUID", "VOL_CNAME"},
    "detach": {"VOL_UUID", "VOL_CNAME"},
    "remove": {"VOL_UUID", "VOL_CNAME"},
    "grow": {"VOL_SIZE", "VOL_NEW_SIZE", "VOL_UUID", "VOL_CNAME"},
}

Call = tuple[str, str, dict[str, str]]  # node, action, environment


@pytest.fixture(scope="module")
def ext_cluster(_module_testbed: TestbedHandle) -> Iterator[TestbedHandle]:
    """The shared testbed with the test provider on every node and ext enabled."""
    testbed = _module_testbed
    copies = []
    volumes = Path(testbed.state["dir"]) / "envdump-volumes"  # shared by the nodes
    volumes.mkdir()
    for node in testbed.state["nodes"]:
        target = Paths(Path(node["root"])).node_path(PROVIDER_DIR) / "corral-envdump"
        shutil.copytree(ENVDUMP, target)
        (target / "volumes").symlink_to(volumes, target_is_directory=True)
        copies.append(target)
    before = testbed.info()["enabled_disk_templates"]
    # Enabled and allowed by the instance policy (Ganeti's rule: enabling does not allow).
    with_ext = ",".join([*before, "ext"])
    testbed.run("gnt-cluster", "modify", "--enabled-disk-templates", with_ext,
                "--ipolicy-disk-templates", with_ext)
    try:
        yield testbed
    finally:
        testbed.run("gnt-cluster", "modify", "--enabled-disk-templates", ",".join(before),
                    "--ipolicy-disk-templates", ",".join(before), check=False)
        for copy in copies:
            shutil.rmtree(copy, ignore_errors=True)


def _logs(testbed: TestbedHandle) -> list[tuple[str, Path]]:
    return [(node["name"], Paths(Path(node["root"])).node_path(PROVIDER_DIR)
             / "corral-envdump" / "calls.log") for node in testbed.state["nodes"]]


def _forget_calls(testbed: TestbedHandle) -> None:
    """Start the test provider's records afresh (tests run one after the other)."""
    for _node, log in _logs(testbed):
        log.unlink(missing_ok=True)


def _calls(testbed: TestbedHandle) -> list[Call]:
    """Every script run of the test provider since :func:`_forget_calls`, in the order
    they ran (by the time the script recorded, on one machine)."""
    calls: list[tuple[float, str, str, dict[str, str]]] = []
    for name, log in _logs(testbed):
        if not log.exists():
            continue
        for line in log.read_text().splitlines():
            if line.startswith("=== "):
                words = line.split()
                calls.append((float(words[2].removeprefix("at=")), name, words[1], {}))
            elif "=" in line and calls:
                key, _, value = line.partition("=")
                if key not in SHELL_VARS:
                    calls[-1][3][key] = value
    return [(node, action, env) for _at, node, action, env in sorted(calls,
                                                                     key=lambda c: c[0])]


def _volumes(testbed: TestbedHandle) -> list[str]:
    directory = Path(testbed.state["dir"]) / "envdump-volumes"
    return sorted(p.name for p in directory.iterdir())


def _disk_ids(testbed: TestbedHandle, name: str) -> list[tuple[str, str, str]]:
    """``(provider, volume, uuid)`` of each disk of instance ``name``."""
    out = testbed.run("gnt-instance", "list", "--no-headers", "--separator=|", "-o",
                      "disk.uuids", name).stdout.strip()
    uuids = out.split(",")
    info = testbed.run("gnt-instance", "info", name).stdout
    ids = re.findall(r"logical_id: \['([^']+)', '([^']+)'\]", info)
    return [(provider, volume, uuid) for (provider, volume), uuid in zip(ids, uuids,
                                                                          strict=True)]


def test_gnt_storage_diagnose_and_info_follow_ganeti(ext_cluster: TestbedHandle) -> None:
    testbed = ext_cluster
    nodes = [n["name"] for n in testbed.state["nodes"]]
    out = testbed.run("gnt-storage", "diagnose").stdout
    block = out[out.index("Provider: corral-envdump\n"):].split("\n\n")[0]
    roots = [Path(n["root"]) for n in testbed.state["nodes"]]
    assert block.splitlines() == [
        "Provider: corral-envdump", "---",
        *(f"  Node: {name}, status: valid (path: {Paths(root).node_path(PROVIDER_DIR)}"
          "/corral-envdump) [parameters: fail, colour]" for name, root in zip(nodes, roots,
                                                                             strict=True)),
        "  --", "  For nodegroup: default --> valid"]
    info = testbed.run("gnt-storage", "info", "corral-envdump", "nosuch").stdout
    assert info == ("corral-envdump:\n  - Valid for nodegroups:\n      default\n"
                    "  - Supported parameters:\n"
                    "      fail: Name of an action whose script fails on purpose\n"
                    "      colour: A parameter that is only passed on\n\n"
                    "nosuch: Not Found\n\n")
    # One node's copy loses a script: invalid there, so for its group.
    grow = Paths(roots[1]).node_path(PROVIDER_DIR) / "corral-envdump" / "grow"
    grow.rename(grow.with_name("grow.off"))
    try:
        out = testbed.run("gnt-storage", "diagnose").stdout
        info = testbed.run("gnt-storage", "info", "corral-envdump").stdout
    finally:
        grow.with_name("grow.off").rename(grow)
    assert (f"  Node: {nodes[1]}, status: invalid - File 'grow' under path "
            f"'{grow.parent}' is missing (ENOENT) (path: {grow.parent}) [no parameters]") in out
    assert "  For nodegroup: default --> invalid" in out
    assert info == "corral-envdump:\n  - Invalid for all nodegroups\n\n"
    usage = testbed.run("gnt-storage", "diagnose", "extra", check=False)
    assert usage.returncode != 0


def test_an_instance_on_ext_disks_through_its_life(ext_cluster: TestbedHandle) -> None:
    testbed = ext_cluster
    node1, node2 = (n["name"] for n in testbed.state["nodes"][:2])
    name = "ext-life.testbed"
    _forget_calls(testbed)
    testbed.run("gnt-instance", "add", "-t", "ext", "--no-install", "-H", "fake",
                "--no-nics", "-n", node1, "-o", "corral-ext4+default",
                "--disk", "0:size=16M,provider=corral-envdump,colour=blue,name=d0",
                "--disk", "1:size=8M,provider=corral-envdump", name)
    try:
        disks = _disk_ids(testbed, name)
        assert [d[1] for d in disks] == [f"{disks[0][2]}.ext.disk0", f"{disks[1][2]}.ext.disk1"]
        testbed.run("gnt-instance", "startup", name)
        testbed.run("gnt-instance", "grow-disk", name, "0", "8M")
        testbed.run("gnt-instance", "migrate", "-f", "-n", node2, name)
        testbed.run("gnt-instance", "failover", "-f", "-n", node1, name)
        testbed.run("gnt-instance", "shutdown", name)
        testbed.run("gnt-instance", "rename", name, "ext-life2.testbed")
        name = "ext-life2.testbed"
    finally:
        testbed.run("gnt-instance", "remove", "-f", name)
    calls = _calls(testbed)
    by_volume = {volume: (uuid, index) for index, (_p, volume, uuid) in enumerate(disks)}
    for node, action, env in calls:
        uuid, index = by_volume[env["VOL_NAME"]]
        extp = {"EXTP_PROVIDER": "corral-envdump", "EXTP_ACCESS": "kernelspace"}
        if index == 0:
            extp["EXTP_COLOUR"] = "blue"
        wanted = ACTION_VARS[action] - (set() if index == 0 else {"VOL_CNAME"})
        assert set(env) == {"PATH", "LC_ALL", "VOL_NAME", *extp, *wanted}, (node, action, env)
        assert {k: env[k] for k in extp} == extp
        assert env["VOL_UUID"] == uuid
        if index == 0:
            assert env["VOL_CNAME"] == "d0"
    disk0 = disks[0][1]
    steps: list[tuple[str, str, str | None]] = []
    for node, action, env in calls:
        step = (node, action, env.get("VOL_OPEN_EXCLUSIVE", env.get("VOL_METADATA",
                                                                  env.get("VOL_NEW_SIZE"))))
        # attach is idempotent (the interface asks it to be): a look at a disk's status
        # before a start may attach it once more, which changes nothing.
        if env["VOL_NAME"] == disk0 and not (action == "attach" and steps
                                             and steps[-1] == step):
            steps.append(step)
    n1, n2 = node1, node2
    assert steps == [
        (n1, "create", None), (n1, "setinfo", "originstname+ext-life.testbed"),
        # startup: attached and opened for this node alone
        (n1, "attach", None), (n1, "open", "True"),
        (n1, "grow", "24"),
        # migrate: both nodes open it, not exclusively; then the source lets go
        (n1, "open", "False"), (n2, "attach", None), (n2, "open", "False"),
        (n1, "close", None), (n2, "open", "True"), (n1, "detach", None),
        # failover: the old node closes and detaches, the new one attaches and opens
        (n2, "close", None), (n2, "detach", None),
        (n1, "attach", None), (n1, "open", "True"),
        # shutdown deactivates; rename sets the new name and runs the OS rename script
        # on the disks; remove detaches and removes
        (n1, "detach", None), (n1, "setinfo", "originstname+ext-life2.testbed"),
        (n1, "attach", None), (n1, "open", "True"), (n1, "detach", None),
        (n1, "detach", None), (n1, "remove", None),
    ]
    assert _volumes(testbed) == []


def test_a_failing_script_fails_the_job_and_leaves_nothing(ext_cluster: TestbedHandle) -> None:
    testbed = ext_cluster
    node1 = testbed.state["nodes"][0]["name"]
    _forget_calls(testbed)
    proc = testbed.run("gnt-instance", "add", "-t", "ext", "--no-install", "--no-nics",
                       "-H", "fake", "-n", node1, "-o", "corral-ext4+default",
                       "--disk", "0:size=8M,provider=corral-envdump",
                       "--disk", "1:size=8M,provider=corral-envdump,fail=create",
                       "ext-fail.testbed", check=False)
    assert proc.returncode == 1
    assert "External storage's create script failed (exited with exit code 3)" in proc.stderr
    quoted = proc.stderr[proc.stderr.index("last lines of output"):].splitlines()[1:]
    assert "noise line 6" in quoted[0]
    assert quoted[-1].startswith("failing create on purpose")
    assert "noise line 5" not in proc.stderr
    listed = testbed.run("gnt-instance", "list", "--no-headers", "-o", "name").stdout.split()
    assert "ext-fail.testbed" not in listed
    assert _volumes(testbed) == []
    actions = [(action, env["VOL_NAME"].rsplit(".", 1)[1])
               for _node, action, env in _calls(testbed)]
    assert actions == [("create", "disk0"), ("setinfo", "disk0"), ("create", "disk1"),
                       ("detach", "disk0"), ("remove", "disk0")]


def test_corral_file_holds_an_installed_os(ext_cluster: TestbedHandle) -> None:
    testbed = ext_cluster
    node1 = testbed.state["nodes"][0]["name"]
    name = "ext-os.testbed"
    testbed.run("gnt-instance", "add", "-t", "ext", "--no-nics", "-H", "fake", "-n", node1,
                "-o", "corral-ext4+default", "--no-start",
                "--disk", "0:size=32M,provider=corral-file", name)
    try:
        (_provider, volume, _uuid), = _disk_ids(testbed, name)
        volumes = Path(testbed.state["dir"]) / "ext-volumes"
        image = volumes / volume
        hostname = subprocess.run(["debugfs", "-R", "cat /etc/hostname", str(image)],
                                  capture_output=True, text=True, check=True).stdout
        assert hostname.strip() == name
        assert (volumes / f"{volume}.info").read_text() == f"originstname+{name}\n"
        testbed.run("gnt-instance", "grow-disk", name, "0", "16M")
        assert image.stat().st_size == 48 << 20
    finally:
        testbed.run("gnt-instance", "remove", "-f", name)
    assert not image.exists()


def test_rapi_creates_ext_disks_with_provider_parameters(ext_cluster: TestbedHandle) -> None:
    testbed = ext_cluster
    api = _client(testbed)
    _forget_calls(testbed)
    body: dict[str, Any] = {
        "__version__": 1, "mode": "create", "name": "ext-rapi.testbed", "disk_template": "ext",
        "disks": [{"size": 8, "provider": "corral-envdump", "colour": "green"}], "nics": [],
        "os": "corral-ext4+default", "no_install": True, "start": False,
        "pnode": testbed.state["nodes"][0]["name"], "hypervisor": "fake"}
    job = api.wait(api.ok("POST", "/2/instances", body))
    assert job["status"] == "success", job
    try:
        inst = api.ok("GET", "/2/instances/ext-rapi.testbed")
        assert inst["disk_template"] == "ext"
        created = [env for _node, action, env in _calls(testbed) if action == "create"]
        assert created[0]["EXTP_COLOUR"] == "green"
        refused = {**body, "name": "ext-rapi2.testbed",
                   "disks": [{"size": 8, "provider": "corral-envdump",
                              "access": "userspace"}]}
        job = api.wait(api.ok("POST", "/2/instances", refused))
        assert job["status"] == "error"
        assert "Selected hypervisor (fake) cannot be used with userspace disk access param" \
            in json.dumps(job["opresult"])
    finally:
        run_tool(["gnt-instance", "remove", "-f", "ext-rapi.testbed"], testbed.env)


def test_userspace_access_is_refused_where_the_hypervisor_cannot_use_it(
        ext_cluster: TestbedHandle) -> None:
    testbed = ext_cluster
    name = "ext-access.testbed"
    proc = testbed.run("gnt-instance", "add", "-t", "ext", "--no-install", "--no-nics",
                       "-H", "fake", "-n", testbed.state["nodes"][0]["name"], "-o",
                       "corral-ext4+default", "--disk",
                       "0:size=8M,provider=corral-envdump,access=userspace", name,
                       check=False)
    assert proc.returncode == 1
    assert "Selected hypervisor (fake) cannot be used with userspace disk access param" \
        in proc.stderr
    testbed.run("gnt-instance", "add", "-t", "ext", "--no-install", "--no-nics", "-H", "fake",
                "-n", testbed.state["nodes"][0]["name"], "-o", "corral-ext4+default",
                "--disk", "0:size=8M,provider=corral-envdump", name)
    try:
        proc = testbed.run("gnt-cluster", "modify", "-D", "ext:access=userspace", check=False)
        assert proc.returncode == 1
        assert (f"Instance {name}: cannot use 'userspace' access setting with fake "
                "hypervisor and ext disk type.") in proc.stderr
        assert testbed.info()["diskparams"]["ext"]["access"] == "kernelspace"
        proc = testbed.run("gnt-group", "modify", "-D", "ext:access=userspace", "default",
                           check=False)
        assert proc.returncode == 1
        assert f"Instance {name}: cannot use 'userspace' access" in proc.stderr
        groups = testbed.run("gnt-group", "list", "--no-headers", "-o", "custom_diskparams",
                             "default").stdout
        assert "userspace" not in groups
    finally:
        testbed.run("gnt-instance", "remove", "-f", name)
