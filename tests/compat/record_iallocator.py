"""Record the input Ganeti 3.0 gives an iallocator plugin, for every request type (run
by hand against the reference cluster, never in CI).

    python tests/compat/record_iallocator.py

Installs a plugin ``compat-ialloc-dump`` in Ganeti's ``/usr/lib/ganeti/iallocators``
that keeps a copy of each input and answers from a file, creates the objects it needs
(``compat-ialloc-...``), makes Ganeti run the plugin for ``allocate`` (instance
create), ``relocate`` (failover without a target), ``change-group``,
``node-evacuate`` and ``multi-allocate`` (RAPI multi-alloc), and writes each input,
normalised, to ``tests/data/iallocator/ganeti-<type>.json``. Instances other helpers
keep on the shared reference cluster are left out of the data. Everything it created
is removed again, also when a step fails.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "iallocator"
PLUGIN_DIR = Path("/usr/lib/ganeti/iallocators")
PLUGIN = "compat-ialloc-dump"
PREFIX = "compat-ialloc-"
RAPI = "https://127.0.0.1:5080"
RAPI_AUTH = "gntadmin:gntpass"


def gnt(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """One of Ganeti's tools."""
    proc = subprocess.run([f"/usr/sbin/{argv[0]}", *argv[1:]], capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=300)
    if check and proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{proc.stdout}{proc.stderr}")
    return proc


def rapi(method: str, path: str, body: Any) -> Any:
    out = subprocess.run(["curl", "-sk", "-u", RAPI_AUTH, "-X", method, "-H",
                          "Content-Type: application/json", "-d", json.dumps(body),
                          f"{RAPI}{path}"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


@contextlib.contextmanager
def plugin(spool: Path) -> Iterator[None]:
    script = PLUGIN_DIR / PLUGIN
    script.write_text(
        "#!/bin/sh\n"
        f"cp \"$1\" {spool}/input-$(date +%s%N).json\n"
        f"cat {spool}/answer.json\n")
    script.chmod(0o755)
    try:
        yield
    finally:
        script.unlink(missing_ok=True)


def answer(spool: Path, result: Any) -> None:
    (spool / "answer.json").write_text(json.dumps(
        {"success": True, "info": "recorded", "result": result}))


def last_input(spool: Path) -> dict[str, Any]:
    inputs = sorted(spool.glob("input-*.json"))
    if not inputs:
        raise SystemExit("the plugin was not run")
    data: dict[str, Any] = json.loads(inputs[-1].read_text())
    for path in inputs:
        path.unlink()
    return data


def normalise(data: dict[str, Any], node: str) -> dict[str, Any]:
    """Only this recorder's instances; the node's name as ``<node1>``."""
    data["instances"] = {k: v for k, v in data["instances"].items() if k.startswith(PREFIX)}
    data["nodegroups"] = {k: v for k, v in data["nodegroups"].items()
                          if v["name"] == "default" or v["name"].startswith(PREFIX)}
    text = json.dumps(data, indent=1, sort_keys=False).replace(node, "<node1>")
    result: dict[str, Any] = json.loads(text)
    request = result["request"]
    if "instances" in request and request["type"] == "node-evacuate":
        request["instances"] = [i for i in request["instances"] if i.startswith(PREFIX)]
    return result


def clean(node: str) -> None:
    for inst in (f"{PREFIX}i1", f"{PREFIX}i2"):
        gnt("gnt-instance", "remove", "-f", inst, check=False)
    gnt("gnt-group", "remove", f"{PREFIX}g1", check=False)
    del node


def main() -> None:
    node = gnt("gnt-cluster", "getmaster").stdout.strip()
    OUT.mkdir(parents=True, exist_ok=True)
    spool = Path(tempfile.mkdtemp(prefix="compat-ialloc."))
    spool.chmod(0o755)
    common = ["-o", "noop+default", "--no-ip-check", "--no-name-check"]
    try:
        with plugin(spool):
            clean(node)
            gnt("gnt-instance", "add", "-n", node, "-t", "file", "--disk", "0:size=1G",
                "-B", "maxmem=256,vcpus=2", "--net", "0:ip=192.0.2.9", "--tags", "x1",
                *common, f"{PREFIX}i1")
            gnt("gnt-instance", "add", "-n", node, "-t", "diskless", "--no-start", *common,
                f"{PREFIX}i2")
            gnt("gnt-group", "add", f"{PREFIX}g1")
            recorded: dict[str, dict[str, Any]] = {}

            answer(spool, [node])
            gnt("gnt-instance", "add", "--dry-run", "-I", PLUGIN, "-t", "file", "--disk",
                "0:size=1G", "--disk", "1:size=2G,mode=ro", "-B", "maxmem=512,vcpus=2",
                "--net", "0:mac=aa:00:00:c0:ff:ee,ip=192.0.2.10", "--tags", "a,b", *common,
                f"{PREFIX}new")
            recorded["allocate"] = last_input(spool)

            gnt("gnt-instance", "failover", "-f", "-I", PLUGIN, f"{PREFIX}i2", check=False)
            recorded["relocate"] = last_input(spool)

            answer(spool, [[], [], []])
            gnt("gnt-instance", "change-group", "-I", PLUGIN, "--to", f"{PREFIX}g1",
                f"{PREFIX}i1")
            recorded["change-group"] = last_input(spool)

            answer(spool, [[], [[f"{PREFIX}i1", "recorded only"]], []])
            gnt("gnt-node", "evacuate", "-f", "-p", "-I", PLUGIN, node, check=False)
            recorded["node-evacuate"] = last_input(spool)

            answer(spool, [[[f"{PREFIX}m1", [node]]], [f"{PREFIX}m2"]])
            inst = {"mode": "create", "disk_template": "file", "disks": [{"size": 1024}],
                    "nics": [{}],
                    "os": "noop+default", "hypervisor": "fake", "name_check": False,
                    "ip_check": False,
                    "beparams": {"maxmem": 128}}
            job = rapi("POST", "/2/instances-multi-alloc?dry-run=1", {
                "iallocator": PLUGIN, "instances": [
                    {**inst, "name": f"{PREFIX}m1"}, {**inst, "name": f"{PREFIX}m2"}]})
            gnt("gnt-job", "wait", str(job))
            recorded["multi-allocate"] = last_input(spool)
    finally:
        clean(node)
        shutil.rmtree(spool, ignore_errors=True)
    for mode, data in recorded.items():
        path = OUT / f"ganeti-{mode}.json"
        path.write_text(json.dumps(normalise(data, node), indent=1) + "\n")
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.exit(main())
