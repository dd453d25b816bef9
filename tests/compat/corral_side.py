"""Running the compatibility cases against a corral testbed: its names for the
placeholders, the objects the recorder also creates, the CLI run in-process (click's
runner, with the testbed's environment) or as a process, and the verdict per case.

Used by tests/integration/test_ganeti_compat.py and tests/compat/report.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import traceback
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from tests.compat.common import (
    Rapi,
    Side,
    capture,
    case_group,
    cli_jobs,
    cli_observation,
    compare,
    run_rapi_case,
)

BIN = Path(sys.executable).parent
REJECT_REASON = "compat-reject-me"
#: The OS the cases name as {os}: any valid OS with a variant serves.
CORRAL_OS = "corral-ext4+default"


def corral_side(state: Mapping[str, Any]) -> Side:
    """A testbed's names (from its testbed.json) as placeholder values."""
    master = next(n for n in state["nodes"] if n["master"])
    rapi = state["rapi"]
    values = {"cluster": state["cluster_name"], "node1": master["name"],
              "node1_short": master["name"].split(".")[0], "node1_ip": master["ip"],
              "os": CORRAL_OS, "rapi": rapi["url"].split("//", 1)[1]}
    extra = {master["root"]: "<root>"}
    return Side("corral", values, rapi["url"], rapi["user"], rapi["password"], extra)


def run_process(tool: str, argv: list[str], env: Mapping[str, str]) -> tuple[int, str, str]:
    """Run a tool of this virtualenv as a process, no terminal on standard input."""
    proc = subprocess.run([str(BIN / tool), *argv], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env=dict(env), timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def run_in_process(tool: str, argv: list[str], env: Mapping[str, str]) -> tuple[int, str, str]:
    """Run a tool's console-script entry point in this process, as its process would
    run: ``sys.argv`` set, standard input empty and not a terminal, standard output
    and error captured apart, the exit code from ``SystemExit``."""
    (point,) = entry_points(group="console_scripts", name=tool)
    main = point.load()
    runner = CliRunner()
    with runner.isolation(input="", env=dict(env)) as (out, err, _):
        saved = sys.argv
        sys.argv = [tool, *argv]
        code: int
        try:
            main()
            code = 0
        except SystemExit as stop:
            if stop.code is None:
                code = 0
            elif isinstance(stop.code, int):
                code = stop.code
            else:
                sys.stderr.write(f"{stop.code}\n")
                code = 1
        except Exception:
            sys.stderr.write(traceback.format_exc())
            code = 1
        finally:
            sys.argv = saved
            sys.stdout.flush()
            sys.stderr.flush()
        return code, out.getvalue().decode(errors="replace"), \
            err.getvalue().decode(errors="replace")


def set_up(side: Side, env: Mapping[str, str]) -> list[str]:
    """Create what the recorder creates on Ganeti; what could not be created (corral
    may lack a feature, e.g. networks) is returned rather than raised."""
    node = side.values["node1"]
    problems: list[str] = []
    steps: list[list[str]] = [
        ["gnt-instance", "add", "-t", "diskless", "--no-install", "-o", CORRAL_OS,
         "--no-name-check", "--no-ip-check", "-n", node, "compat-inst1"],
        ["gnt-instance", "startup", "compat-inst1"],
        ["gnt-instance", "add", "-t", "diskless", "--no-install", "-o", CORRAL_OS,
         "--no-name-check", "--no-ip-check", "-n", node, "--no-start", "compat-inst2"],
        ["gnt-instance", "add-tags", "compat-inst1", "compat-tag1", "compat-tag2"],
        ["gnt-group", "add", "compat-grp1"],
        ["gnt-network", "add", "--network=203.0.113.64/28", "--gateway=203.0.113.65",
         "compat-net1"],
    ]
    for step in steps:
        code, out, err = run_process(step[0], step[1:], env)
        if code != 0:
            problems.append(f"{' '.join(step)}: exit {code}: {(out + err).strip()[:300]}")
    code, out, err = run_process("gnt-filter", [
        "add", "--action", "REJECT", "--predicates",
        json.dumps([["reason", ["=", "reason", REJECT_REASON]]])], env)
    if code == 0:
        side.values["filter"] = out.strip().splitlines()[-1]
    else:
        problems.append(f"gnt-filter add: exit {code}: {(out + err).strip()[:300]}")
    return problems


def run_case(side: Side, rapi: Rapi, case: Mapping[str, Any],
             env: Mapping[str, str], processes: bool = False) -> dict[str, Any]:
    """Run one case against corral; its normalised observation. CLI cases run
    in-process unless the case asks for a process or ``processes`` holds."""
    if "tool" not in case:
        return run_rapi_case(rapi, case)
    argv = [side.fill(a) for a in case["argv"]]
    runner = run_process if processes or case.get("subprocess") else run_in_process
    code, out, err = runner(case["tool"], argv, env)
    if code == 0:
        capture(side, case, out)
    return cli_observation(code, out, err, side, cli_jobs(rapi, case, out, err))


@dataclass
class Verdict:
    """How one case came out against the recording and its annotation."""

    case_id: str
    group: str
    kind: str  # match, deliberate, pending, failing, stale-deliberate, stale-pending
    problems: list[str] = field(default_factory=list)
    note: Mapping[str, str] | None = None


def verdict(case: Mapping[str, Any], recorded: Mapping[str, Any],
            observed: Mapping[str, Any], note: Mapping[str, str] | None) -> Verdict:
    """Compare and classify one case."""
    problems = compare(case, recorded, observed)
    group = case_group(case)
    if not problems:
        kind = "match" if note is None else (
            "stale-deliberate" if "deliberate" in note else "stale-pending")
    elif note is None:
        kind = "failing"
    else:
        kind = "deliberate" if "deliberate" in note else "pending"
    return Verdict(str(case["id"]), group, kind, problems, note)


def summary(verdicts: list[Verdict]) -> list[str]:
    """A table of counts per tool, then the annotations that no longer apply."""
    kinds = ("match", "deliberate", "pending", "failing")
    per: dict[str, Counter[str]] = {}
    for v in verdicts:
        key = v.kind.replace("stale-", "") if v.kind.startswith("stale") else v.kind
        per.setdefault(v.group, Counter())[key if not v.kind.startswith("stale") else
                                           "match"] += 1
    width = max((len(g) for g in per), default=5) + 2
    lines = ["tool".ljust(width) + "".join(k.rjust(12) for k in kinds)]
    total: Counter[str] = Counter()
    for group in sorted(per):
        total.update(per[group])
        lines.append(group.ljust(width) + "".join(str(per[group][k]).rjust(12) for k in kinds))
    lines.append("all".ljust(width) + "".join(str(total[k]).rjust(12) for k in kinds))
    deliberate = sum(1 for v in verdicts if v.kind == "deliberate")
    if deliberate:
        lines.append(f"{deliberate} deliberate difference(s), each with its reason in "
                     "tests/data/ganeti-compat/differences.json "
                     "(tests/compat/report.py --kinds deliberate shows them)")
    stale = [v for v in verdicts if v.kind.startswith("stale")]
    if stale:
        lines.append(f"{len(stale)} annotation(s) in differences.json no longer needed "
                     "(the case matches now):")
        lines += [f"  {v.case_id} ({v.kind[6:]})" for v in stale]
    return lines
