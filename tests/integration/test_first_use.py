"""What a first-time user meets: the README's demo lines, tools that come later, the
join token on a fresh node, short answers to typos, and `make demo` run twice."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.paths import Paths
from corral.utils.process import stop_daemon
from tests.conftest import BIN, TestbedHandle, run_tool

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _readme_section(title: str) -> str:
    text = (REPO / "README.md").read_text()
    section = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    return section


def _shell_lines(section: str) -> list[str]:
    """The lines of the section's ``sh`` blocks, continuation lines joined."""
    lines: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        lines += block.replace("\\\n", " ").splitlines()
    return [line for line in lines if line.strip()]


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A new directory with a short path, removed afterwards: the README's lines reach
    the master's socket through it, and a Unix socket's path is at most 107 bytes
    (pytest's own temporary directories are deeper under pytest-xdist)."""
    with tempfile.TemporaryDirectory(prefix="cfu-") as name:
        yield Path(name)


def test_readme_demo_lines_run_as_written(testbed: TestbedHandle, short_dir: Path) -> None:
    """Run the README's lines in a directory whose .demo is the fixture's testbed and
    whose .venv is this one; `make demo` and `make demo-down` are the fixture's job."""
    lines = _shell_lines(_readme_section("Using the demo cluster"))
    assert lines[0] == "make demo" and lines[-1] == "make demo-down"
    assert any(line.startswith("export CORRAL_ROOT=$PWD/.demo/node1") for line in lines)
    assert not any("../" in line for line in lines)
    workdir = short_dir / "tree"
    workdir.mkdir()
    (workdir / ".demo").symlink_to(testbed.dir)
    (workdir / ".venv").symlink_to(BIN.parent)
    script = "set -e\n" + "\n".join(line for line in lines if not line.startswith("make "))
    env = {k: v for k, v in os.environ.items() if k not in ("CORRAL_ROOT", "VIRTUAL_ENV")}
    env["PATH"] = "/usr/bin:/bin"
    proc = subprocess.run(["bash", "-c", script], cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Cluster name: cluster.testbed" in proc.stdout
    assert "node1.testbed\n" in proc.stdout  # getmaster on node2
    info = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert info["name"] == "cluster.testbed"
    assert testbed.state["rapi"]["ca"].endswith("node1/var/lib/corral/rapi.pem")


def test_readme_has_no_links_outside_the_tree() -> None:
    text = (REPO / "README.md").read_text()
    assert "../" not in text


def test_gnt_backup_outside_a_cluster_says_so(tmp_path: Path) -> None:
    """gnt-backup, the last tool that used to say "a later release", is a real client
    now: outside a cluster it fails as every gnt-* tool does, and its help lists
    Ganeti's subcommands."""
    assert (BIN / "gnt-backup").exists(), "gnt-backup is no console script of this install"
    env = {**os.environ, "CORRAL_ROOT": str(tmp_path)}
    proc = run_tool(["gnt-backup", "list"], env, check=False)
    assert proc.returncode == 1
    assert "Cluster not initialized or this machine is not part of a cluster" in proc.stderr
    assert "later release" not in proc.stderr
    helped = run_tool(["gnt-backup", "--help"], env)
    for command in ("export", "import", "list", "remove"):
        assert command in helped.stdout


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def test_daemons_start_on_a_fresh_node_prints_the_token(tmp_path: Path) -> None:
    paths = Paths(tmp_path / "fresh")
    paths.ensure_dirs()
    host = "127.0.1.77"
    paths.noded_settings.write_text(json.dumps({"bind": host, "port": _free_port(host)}))
    mond_settings = paths.data_dir / "mond.json"
    mond_settings.write_text(json.dumps({"bind": host, "port": _free_port(host)}))
    env = {**os.environ, "CORRAL_ROOT": str(paths.root)}
    try:
        proc = run_tool(["corral-daemons", "start"], env)
        match = re.search(r"^join token: (\S+)$", proc.stdout, re.M)
        assert match, proc.stdout
        assert match.group(1) == paths.join_token.read_text().strip()
        assert "gnt-node add" in proc.stdout
        assert "corral-mond: running" in proc.stdout
        # a monitoring daemon that cannot start does not keep the node from starting
        stop_daemon(paths.pid_file("mond"))
        stop_daemon(paths.pid_file("noded"))
        with socket.socket() as busy:
            busy.bind((host, 0))
            busy.listen()
            mond_settings.write_text(json.dumps({"bind": host,
                                                 "port": busy.getsockname()[1]}))
            proc = run_tool(["corral-daemons", "start"], env)
        assert "corral-noded: running" in proc.stdout
        assert "corral-mond: not started (the node works without it)" in proc.stderr
    finally:
        stop_daemon(paths.pid_file("mond"))
        stop_daemon(paths.pid_file("noded"))


@pytest.mark.shared_testbed
def test_typos_get_the_nearest_names_not_all_of_them(testbed: TestbedHandle) -> None:
    proc = testbed.run("gnt-cluster", "modify", "-H", "kvm:kernel_pat=/x", check=False)
    assert proc.returncode == 1
    assert "did you mean 'kernel_path'" in proc.stderr and "vnc_tls" not in proc.stderr
    assert "'gnt-cluster info' lists all" in proc.stderr
    proc = testbed.run("gnt-instance", "list", "-o", "nme", check=False)
    assert proc.returncode == 14
    assert proc.stderr.splitlines() == [
        "Warning: Queried for unknown fields nme",
        proc.stderr.splitlines()[1]]
    assert "did you mean 'name'?" in proc.stderr
    assert "'gnt-instance list-fields' lists all" in proc.stderr
    proc = testbed.run("gnt-node", "list", "-F", "nmae == 1", check=False)
    assert proc.returncode == 14
    assert "did you mean 'name'" in proc.stderr and "vm_capable" not in proc.stderr


@pytest.mark.shared_testbed
def test_make_demo_refuses_to_replace_a_running_demo(testbed: TestbedHandle) -> None:
    """With a demo up and no terminal, `make demo` refuses at once; the demo lives on."""
    proc = subprocess.run(["make", "-s", "demo", f"DEMO={testbed.dir}"], cwd=REPO,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0
    assert "run 'make demo-down' first" in proc.stderr
    assert testbed.run("gnt-cluster", "getmaster").stdout == "node1.testbed\n"
