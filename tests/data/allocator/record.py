"""Record what Ganeti's htools print on generated clusters, for the allocator's tests.

Run on a machine with Ganeti's htools (Debian ``ganeti-htools-3.0``, ``make sysdeps``)
from the top of the tree:

    python3 tests/data/allocator/record.py [--gen /work/shared/tools/htools-data/gen_cluster.py]

It generates (seed 42) the 10- and 100-node clusters (``c10.data``, ``c100.data``)
and the 10-node cluster's iallocator request (``c10.request.json``), derives requests
of every type from it, runs Ganeti's hbal, hspace, hinfo, hcheck and hail on them and
writes what they printed and exited with to ``figures.json``. The tests compare
corral's tools and engine with these; nothing in them is typed by hand.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
HTOOLS = Path("/usr/lib/ganeti/3.0/usr/bin")
HAIL = Path("/usr/lib/ganeti/3.0/usr/lib/ganeti/iallocators/hail")
DEFAULT_GEN = Path("/work/shared/tools/htools-data/gen_cluster.py")

#: Tool runs: name -> argv (the data files are given relative to this directory).
TOOL_RUNS: dict[str, list[str]] = {
    "hbal-c10-g1": ["hbal", "-t", "c10.data", "-G", "group-01", "-C"],
    "hbal-c10-g2-p": ["hbal", "-t", "c10.data", "-G", "group-02", "-C", "-p"],
    "hbal-c10-evac": ["hbal", "-t", "c10.data", "-G", "group-01", "-E", "-O",
                      "node-01-0001", "-C"],
    "hbal-c10-noinst": ["hbal", "-t", "c10.data", "-G", "group-01", "--no-instance-moves",
                        "-l", "4"],
    "hbal-c100-g3-l10": ["hbal", "-t", "c100.data", "-G", "group-03", "-C", "-l", "10"],
    "hbal-c10-nogroup": ["hbal", "-t", "c10.data"],
    "hinfo-c10": ["hinfo", "-t", "c10.data", "-v", "-v", "-v"],
    "hinfo-c100-p": ["hinfo", "-t", "c100.data", "-p"],
    "hcheck-c10-mr": ["hcheck", "-t", "c10.data", "--machine-readable"],
    "hcheck-c100": ["hcheck", "-t", "c100.data", "-l", "5"],
    "hspace-c10-l30-mr": ["hspace", "-t", "c10.data", "--standard-alloc=10240,1024,1",
                          "--tiered-alloc=10240,1024,1", "--disk-template=plain",
                          "--machine-readable", "-l", "30"],
    "hspace-c10-drbd-l20": ["hspace", "-t", "c10.data", "--standard-alloc=10240,2048,2",
                            "--tiered-alloc=20480,4096,2", "-l", "20"],
    # no sizes: tiered allocation from the policy's largest spec (thousands of tiers)
    "hspace-c10-default": ["hspace", "-t", "c10.data", "--machine-readable"],
    "hspace-c10-nocap": ["hspace", "-t", "c10.data", "--standard-alloc=10240,1024,1",
                         "--tiered-alloc=10240,1024,1", "--disk-template=plain",
                         "--no-capacity-checks", "--machine-readable"],
}


def _requests(base: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Requests of every type on the 10-node cluster."""
    def with_request(request: dict[str, Any], mutate: Any = None) -> dict[str, Any]:
        doc = copy.deepcopy(base)
        if mutate is not None:
            mutate(doc)
        doc["request"] = request
        return doc

    insts = base["instances"]
    groups = {g["name"]: uuid for uuid, g in base["nodegroups"].items()}
    drbd = [n for n, i in insts.items() if i["disk_template"] == "drbd"]
    plain = [n for n, i in insts.items() if i["disk_template"] == "plain"]
    on_node = [n for n, i in insts.items() if i["nodes"][0] == "node-01-0001"]
    group2 = [n for n, i in insts.items() if i["nodes"][0].startswith("node-02")]
    alloc = dict(base["request"])
    ded_disks = [{"mode": "rw", "size": 10240, "spindles": 1}]
    ded_plain = {**alloc, "disk_template": "plain", "required_nodes": 1,
                 "disk_space_total": 10240, "disks": ded_disks}

    def dedicated(doc: dict[str, Any]) -> None:
        # every node with exclusive storage (hail then scores by lost allocations),
        # a second min/max pair for a second test instance
        used: dict[str, int] = {}
        for inst in doc["instances"].values():
            for disk in inst["disks"]:
                disk["spindles"] = 1
            for node in inst["nodes"]:
                used[node] = used.get(node, 0) + len(inst["disks"])
        for name, node in doc["nodes"].items():
            node["ndparams"]["exclusive_storage"] = True
            node["total_spindles"] = 12
            node["free_spindles"] = 12 - used.get(name, 0)
        for group in doc["nodegroups"].values():
            pair = copy.deepcopy(group["ipolicy"]["minmax"][0])
            pair["min"].update({"disk-size": 4096, "memory-size": 2048})
            group["ipolicy"]["minmax"].append(pair)

    def dedicated_offline(doc: dict[str, Any]) -> None:
        dedicated(doc)
        for node in doc["nodes"].values():
            if node["group"] == groups["group-02"]:
                node["offline"] = True

    def shared(doc: dict[str, Any]) -> None:
        for name in plain:
            doc["instances"][name]["disk_template"] = "sharedfile"

    out = {
        "alloc-drbd": with_request(alloc),
        "alloc-plain": with_request({**alloc, "disk_template": "plain", "required_nodes": 1,
                                     "disk_space_total": 10240}),
        "alloc-drbd-group2": with_request({**alloc, "group_name": "group-02"}),
        "alloc-too-big": with_request({**alloc, "memory": 1024 * 1024,
                                       "disk_template": "plain", "required_nodes": 1}),
        "alloc-diskless": with_request({**alloc, "disk_template": "diskless", "disks": [],
                                        "required_nodes": 1, "disk_space_total": 0}),
        "relocate": with_request({"type": "relocate", "name": drbd[0], "required_nodes": 1,
                                  "relocate_from": [insts[drbd[0]]["nodes"][1]]}),
        "relocate-bad-node": with_request({"type": "relocate", "name": drbd[0],
                                           "required_nodes": 1,
                                           "relocate_from": [insts[drbd[0]]["nodes"][0]]}),
        "evac-primary": with_request({"type": "node-evacuate", "instances": on_node,
                                      "evac_mode": "primary-only"}),
        "evac-secondary": with_request({"type": "node-evacuate", "instances": on_node,
                                        "evac_mode": "secondary-only"}),
        "evac-all": with_request({"type": "node-evacuate", "instances": on_node[:3],
                                  "evac_mode": "all"}),
        "evac-shared": with_request({"type": "node-evacuate", "instances": plain,
                                     "evac_mode": "primary-only"}, shared),
        "change-group": with_request({"type": "change-group", "instances": group2[:3],
                                      "target_groups": [groups["group-01"]]}),
        "multi-alloc": with_request({"type": "multi-allocate", "instances": [
            {**alloc, "name": f"multi-{n}", "type": None} for n in range(3)]}),
        "alloc-secondary": with_request({"type": "allocate-secondary", "name": plain[0]}),
        "ded-plain": with_request(ded_plain, dedicated),
        "ded-drbd": with_request({**alloc, "disks": ded_disks}, dedicated),
        "ded-group2": with_request({**ded_plain, "group_name": "group-02"}, dedicated),
        "ded-big": with_request({**ded_plain, "memory": 60000}, dedicated),
        "ded-offline": with_request(ded_plain, dedicated_offline),
        "ded-multi": with_request({"type": "multi-allocate", "instances": [
            {**ded_plain, "name": f"multi-{n}", "type": None} for n in range(3)]},
            dedicated),
    }
    for name in ("multi-alloc", "ded-multi"):
        for entry in out[name]["request"]["instances"]:
            entry.pop("type")
    return out


def _run(argv: list[str], cwd: Path) -> dict[str, Any]:
    tool = argv[0]
    binary = HAIL if tool == "hail" else HTOOLS / tool
    proc = subprocess.run([str(binary), *argv[1:]], cwd=cwd, capture_output=True, text=True,
                          timeout=3600, env={**os.environ, "LC_ALL": "C"})
    return {"argv": argv, "stdout": proc.stdout, "stderr": proc.stderr,
            "rc": proc.returncode}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gen", type=Path, default=DEFAULT_GEN,
                        help="the generator of clusters (gen_cluster.py)")
    args = parser.parse_args()
    if not (HTOOLS / "hbal").exists() or not HAIL.exists():
        sys.exit(f"Ganeti's htools are missing ({HTOOLS}, {HAIL}): install "
                 "ganeti-htools-3.0")
    with tempfile.TemporaryDirectory() as tmp:
        for nodes, insts in ((10, 40), (100, 400)):
            subprocess.run([sys.executable, str(args.gen), "--nodes", str(nodes),
                            "--instances", str(insts), "--seed", "42", "--out",
                            f"{tmp}/c{nodes}"], check=True, capture_output=True)
            (HERE / f"c{nodes}.data").write_text(Path(f"{tmp}/c{nodes}.data").read_text())
        base = json.loads(Path(f"{tmp}/c10.alloc-drbd.json").read_text())
    (HERE / "c10.request.json").write_text(json.dumps(base, indent=1, sort_keys=True) + "\n")
    figures: dict[str, Any] = {"tools": {}, "hail": {}}
    for name, argv in TOOL_RUNS.items():
        print(f"running {' '.join(argv)}", flush=True)
        figures["tools"][name] = _run(argv, HERE)
    with tempfile.TemporaryDirectory() as tmp:
        for name, request in _requests(base).items():
            path = Path(tmp) / f"{name}.json"
            path.write_text(json.dumps(request))
            print(f"running hail on {name}", flush=True)
            run = _run(["hail", str(path)], HERE)
            run["argv"] = ["hail", f"{name}.json"]
            figures["hail"][name] = {"request": request["request"], "answer": run}
    (HERE / "figures.json").write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
