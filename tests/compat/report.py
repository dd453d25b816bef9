"""Print how the current corral differs from the recorded Ganeti behaviour.

    python tests/compat/report.py [--only ID_PREFIX] [--kinds failing,pending,...]
                                  [--suggest]

Starts a single-node testbed of its own (stopped at the end), runs the cases as the
replay test does and prints one line per case that does not simply match: its
verdict, its annotation and the first difference; then the counts per tool.
``--suggest`` prints differences.json entries for the failing cases, to be edited
into a ``deliberate`` reason or the ``pending`` part that fixes them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.compat.common import (
    Rapi,
    load_cases,
    load_differences,
    load_recorded,
)
from tests.compat.corral_side import (
    corral_side,
    run_case,
    set_up,
    summary,
    verdict,
)
from tests.conftest import run_testbed


def main() -> None:
    """Run the cases against a fresh testbed and print the differences."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="cases whose id starts with this")
    parser.add_argument("--kinds", default="failing,pending,deliberate,stale-pending,"
                        "stale-deliberate", help="which verdicts to list")
    parser.add_argument("--suggest", action="store_true",
                        help="print differences.json entries for failing cases")
    parser.add_argument("--processes", action="store_true",
                        help="run every CLI case as a process (to check that running "
                             "them in-process, as the replay test does, is faithful)")
    parser.add_argument("--full", action="store_true", help="every difference, not the first")
    args = parser.parse_args()
    recorded, notes = load_recorded(), load_differences()
    kinds = set(args.kinds.split(","))
    with tempfile.TemporaryDirectory(prefix="corral-compat-") as tmp:
        directory = Path(tmp) / "tb"
        proc = run_testbed("up", "--nodes", "1", "--dir", str(directory))
        if proc.returncode != 0:
            raise SystemExit(proc.stderr)
        try:
            state = json.loads((directory / "testbed.json").read_text())
            side = corral_side(state)
            env = {**os.environ, **state["env"]}
            for problem in set_up(side, env):
                print(f"set-up: {problem}")
            rapi = Rapi(side)
            verdicts = []
            for case in load_cases():
                if case["id"] not in recorded or not case["id"].startswith(args.only):
                    continue
                observed = run_case(side, rapi, case, env, args.processes)
                v = verdict(case, recorded[case["id"]], observed, notes.get(case["id"]))
                verdicts.append(v)
                if v.kind in kinds:
                    label = ""
                    if v.note:
                        label = v.note.get("pending") or "deliberate"
                    shown = v.problems if args.full else v.problems[:1]
                    print(f"{v.kind:<16} {label:<10} {v.case_id}")
                    for problem in shown:
                        print(f"    {problem}")
        finally:
            run_testbed("down", "--dir", str(directory))
    print()
    print("\n".join(summary(verdicts)))
    if args.suggest:
        entries = {v.case_id: {"pending": "?", "what": v.problems[0][:200]}
                   for v in verdicts if v.kind == "failing"}
        print(json.dumps(entries, indent=1))


if __name__ == "__main__":
    main()
