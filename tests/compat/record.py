"""Record the compatibility cases from a real Ganeti cluster (run by hand, never in CI).

    python tests/compat/record.py [--only ID_PREFIX] [--keep]

Needs Ganeti's ``gnt-*`` tools on this machine (``/usr/sbin``) and its RAPI at
``https://127.0.0.1:5080`` (user ``gntadmin``/``gntpass``; see ``--rapi-*``). It creates
the objects the cases need (named ``compat-...``), runs every case of
``tests/data/ganeti-compat/cases.json`` in order, writes the normalised observations to
``tests/data/ganeti-compat/recorded/<tool>.json`` and removes its objects again, also
when a case fails. Lists in the cases name their objects explicitly, so objects others
create on the same cluster meanwhile never enter the data.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.compat.common import (
    RECORDED_DIR,
    Rapi,
    Side,
    capture,
    case_group,
    checks,
    cli_jobs,
    cli_observation,
    first_line,
    load_cases,
    normalise,
    normalise_json,
    run_rapi_case,
    scrub_times,
)

SBIN = Path("/usr/sbin")
REJECT_REASON = "compat-reject-me"


def gnt(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run one of Ganeti's tools for the set-up."""
    proc = subprocess.run([str(SBIN / argv[0]), *argv[1:]], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300)
    if check and proc.returncode != 0:
        raise SystemExit(f"set-up step {' '.join(argv)} failed:\n{proc.stdout}{proc.stderr}")
    return proc


def reference_side(url: str, user: str, password: str) -> Side:
    """The reference cluster's names, read from it."""
    cluster = gnt("gnt-cluster", "info").stdout
    values = {"cluster": _field(cluster, "Cluster name"), "node1": _field(cluster, "Master node")}
    node = json.loads(subprocess.run(
        ["curl", "-sk", "-u", f"{user}:{password}", f"{url}/2/nodes/{values['node1']}"],
        capture_output=True, text=True, check=True).stdout)
    values["node1_ip"] = node["pip"]
    values["node1_short"] = values["node1"].split(".")[0]
    values["os"] = "noop+default"
    values["rapi"] = url.split("//", 1)[1]
    return Side("ganeti", values, url, user, password)


def _field(text: str, name: str) -> str:
    for line in text.splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    raise SystemExit(f"gnt-cluster info has no {name!r}")


def set_up(side: Side) -> None:
    """Create the objects the cases use (see docs/compat.md)."""
    node = side.values["node1"]
    for name, extra in (("compat-inst1", []), ("compat-inst2", ["--no-start"])):
        gnt("gnt-instance", "add", "-t", "diskless", "-o", "noop+default", "--no-name-check",
            "--no-ip-check", "-n", node, *extra, name)
    gnt("gnt-instance", "add-tags", "compat-inst1", "compat-tag1", "compat-tag2")
    gnt("gnt-group", "add", "compat-grp1")
    gnt("gnt-network", "add", "--network=203.0.113.64/28", "--gateway=203.0.113.65",
        "compat-net1")
    out = gnt("gnt-filter", "add", "--action", "REJECT", "--predicates",
              json.dumps([["reason", ["=", "reason", REJECT_REASON]]])).stdout
    side.values["filter"] = out.strip().splitlines()[-1]


def tear_down() -> None:
    """Remove every ``compat-`` object and the filter scoped to this recorder."""
    names = gnt("gnt-instance", "list", "--no-headers", "-o", "name", check=False).stdout
    for name in names.split():
        if name.startswith("compat-"):
            gnt("gnt-instance", "remove", "-f", name, check=False)
    for tool in ("gnt-group", "gnt-network"):
        for name in gnt(tool, "list", "--no-headers", "-o", "name", check=False).stdout.split():
            if name.startswith("compat-"):
                if tool == "gnt-network":
                    for group in gnt("gnt-group", "list", "--no-headers", "-o", "name",
                                     check=False).stdout.split():
                        gnt("gnt-network", "disconnect", name, group, check=False)
                gnt(tool, "remove", name, check=False)
    rules = gnt("gnt-filter", "list", "--no-headers", "-o", "uuid,reason_trail",
                check=False).stdout
    for line in rules.splitlines():
        if REJECT_REASON in line or "compat-" in line:
            gnt("gnt-filter", "delete", line.split()[0], check=False)
    # a REJECT filter scoped by reason: find it by its predicates too
    rules = gnt("gnt-filter", "list", "--no-headers", "-o", "uuid,predicates",
                check=False).stdout
    for line in rules.splitlines():
        if REJECT_REASON in line or "compat-" in line:
            gnt("gnt-filter", "delete", line.split()[0], check=False)


def run_cli_case(side: Side, rapi: Rapi, case: dict[str, Any]) -> dict[str, Any]:
    """Run one CLI case with Ganeti's tool, no terminal on standard input."""
    argv = [side.fill(a) for a in case["argv"]]
    proc = subprocess.run([str(SBIN / case["tool"]), *argv], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300,
                          env={**os.environ, "LC_ALL": "C.UTF-8"})
    if proc.returncode == 0:
        capture(side, case, proc.stdout)
    statuses = cli_jobs(rapi, case, proc.stdout, proc.stderr)
    return cli_observation(proc.returncode, proc.stdout, proc.stderr, side, statuses)


def renormalise() -> None:
    """Normalise the stored observations again: the rules only ever replace values
    by placeholders, so applying new ones to normalised data is what recording again
    would store (heads are derived from the texts)."""
    side = Side("stored", {}, "", "", "")
    for path in sorted(RECORDED_DIR.glob("*.json")):
        data = json.loads(path.read_text())
        for observed in data["cases"].values():
            for aspect in ("stdout", "stderr"):
                if observed.get(aspect) is not None:
                    observed[aspect] = normalise(observed[aspect], side)
                    observed[aspect + "_head"] = first_line(observed[aspect])
            for aspect in ("body", "fields"):
                if observed.get(aspect) is not None:
                    observed[aspect] = scrub_times(normalise_json(observed[aspect], side))
        path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def main() -> None:
    """Set up, record every case (or those whose id starts with ``--only``), tear down."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rapi-url", default="https://127.0.0.1:5080")
    parser.add_argument("--rapi-user", default="gntadmin")
    parser.add_argument("--rapi-password", default="gntpass")
    parser.add_argument("--only", default="",
                        help="record only cases with one of these id prefixes (comma-separated)")
    parser.add_argument("--keep", action="store_true", help="leave the objects in place")
    parser.add_argument("--renormalise", action="store_true",
                        help="apply the current normalisation to the stored data again "
                             "(after adding a rule; needs no cluster) and stop")
    args = parser.parse_args()
    if args.renormalise:
        renormalise()
        return
    side = reference_side(args.rapi_url, args.rapi_user, args.rapi_password)
    rapi = Rapi(side)
    tear_down()
    recorded: dict[str, dict[str, Any]] = {}
    for path in RECORDED_DIR.glob("*.json"):
        recorded[path.stem] = json.loads(path.read_text())["cases"]
    try:
        set_up(side)
        for case in load_cases():
            if not case["id"].startswith(tuple(args.only.split(","))):
                continue
            if "tool" in case:
                observed = run_cli_case(side, rapi, case)
            else:
                observed = run_rapi_case(rapi, case)
            if case.get("shared"):
                # its output may name what others created on the cluster: keep only
                # what the case compares
                kept = {*checks(case), "exit", "status", "job_status"}
                observed = {k: (v if k in kept else None) for k, v in observed.items()}
            recorded.setdefault(case_group(case), {})[case["id"]] = observed
            print(f"{case['id']}: {observed.get('exit', observed.get('status'))}", flush=True)
    finally:
        if not args.keep:
            tear_down()
    known = {c["id"] for c in load_cases()}
    RECORDED_DIR.mkdir(parents=True, exist_ok=True)
    for group, cases in sorted(recorded.items()):
        current = {k: v for k, v in sorted(cases.items()) if k in known}
        (RECORDED_DIR / f"{group}.json").write_text(json.dumps(
            {"recorded_from": "Ganeti 3.0 (tests/compat/record.py)", "cases": current},
            indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
