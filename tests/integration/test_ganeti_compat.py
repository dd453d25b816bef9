"""The Ganeti compatibility suite replayed against corral (docs/compat.md).

Every case of tests/data/ganeti-compat/cases.json that was recorded from a real Ganeti
3.0 cluster runs once, in order, against one single-node testbed that holds the same
objects the recorder created; each case is then one test comparing what corral did
with what Ganeti did, after the same normalisation. A case annotated ``deliberate`` in
differences.json passes and is reported; one annotated ``pending`` (another part of
the work is making it match) is an expected failure. The end of the module prints one
table: per tool, the cases that match, differ deliberately, are pending or fail.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.compat.common import (
    Rapi,
    case_group,
    load_cases,
    load_differences,
    load_recorded,
)
from tests.compat.corral_side import (
    Verdict,
    corral_side,
    run_case,
    set_up,
    summary,
    verdict,
)
from tests.conftest import assert_no_daemons, run_testbed

pytestmark = pytest.mark.integration

CASES = load_cases()
RECORDED = load_recorded()
DIFFERENCES = load_differences()


def _param(case: dict[str, Any]) -> Any:
    note = DIFFERENCES.get(case["id"])
    marks = []
    if note is not None and "pending" in note:
        marks.append(pytest.mark.xfail(
            strict=False, reason=f"pending ({note['pending']}): {note.get('what', '')}"))
    return pytest.param(case["id"], id=case["id"], marks=marks)


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory,
           request: pytest.FixtureRequest) -> Iterator[dict[str, Verdict]]:
    """Run every recorded case in order against one testbed; the verdicts by case id.
    The testbed is stopped afterwards even when something failed."""
    directory: Path = tmp_path_factory.mktemp("compat") / "tb"
    proc = run_testbed("up", "--nodes", "1", "--dir", str(directory))
    verdicts: dict[str, Verdict] = {}
    problems: list[str] = []
    try:
        assert proc.returncode == 0, proc.stderr
        state = json.loads((directory / "testbed.json").read_text())
        side = corral_side(state)
        env = {**os.environ, **state["env"]}
        problems = set_up(side, env)
        rapi = Rapi(side)
        for case in CASES:
            recorded = RECORDED.get(case["id"])
            if recorded is None:
                continue
            note = DIFFERENCES.get(case["id"])
            try:
                observed = run_case(side, rapi, case, env)
            except Exception as err:  # one broken case must not hide the others' results
                verdicts[case["id"]] = Verdict(case["id"], case_group(case), "failing",
                                               [f"the replay raised {err!r}"], note)
                continue
            verdicts[case["id"]] = verdict(case, recorded, observed, note)
        yield verdicts
    finally:
        run_testbed("down", "--dir", str(directory))
        assert_no_daemons(directory)
        _report(request.config, problems, list(verdicts.values()))


def _report(config: pytest.Config, problems: list[str], verdicts: list[Verdict]) -> None:
    """Print the summary table on the terminal, past pytest's output capture."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or not verdicts:
        return
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        reporter.write_line("")
        reporter.write_sep("-", "Ganeti compatibility suite (docs/compat.md)")
        for line in [*(f"set-up: {p}" for p in problems), *summary(verdicts)]:
            reporter.write_line(line)


@pytest.mark.parametrize("case_id", [_param(c) for c in CASES])
def test_case(replay: dict[str, Verdict], case_id: str) -> None:
    """corral answers the case as Ganeti did, or differs as annotated."""
    if case_id not in replay:
        pytest.skip("not recorded from Ganeti yet (run tests/compat/record.py)")
    result = replay[case_id]
    if result.kind == "deliberate":
        return
    assert not result.problems, f"{case_id} differs from Ganeti:\n" + "\n".join(
        result.problems)
