"""``gnt-cluster search-tags`` and ``gnt-debug submit-job`` against a fake master: the
jobs they submit, what they print and their exit codes (Ganeti's)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.cli import gnt_cluster, gnt_debug, jobs, tags
from corral.errors import OpPrereqError, ParameterError
from tests.unit.test_cli_instance_os import FakeMaster, run


@pytest.fixture
def master(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., FakeMaster]]:
    def install(**kwargs: Any) -> FakeMaster:
        fake = FakeMaster(**kwargs)
        for module in (gnt_cluster, gnt_debug, jobs, tags):
            monkeypatch.setattr(module, "get_client", lambda *a, **k: fake)
        return fake
    yield install


# -- search-tags ---------------------------------------------------------------------------

def test_search_tags_prints_sorted_path_tag_lines(master: Callable[..., FakeMaster]) -> None:
    fake = master(results={"OP_TAGS_SEARCH": [
        ["/nodegroup/default", "web"], ["/instances/web2", "web"], ["/cluster", "webfarm"],
        ["/instances/web10", "web"]]})
    result = run(gnt_cluster.cli, "search-tags", "--priority", "high", "web")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        "/cluster webfarm", "/instances/web10 web", "/instances/web2 web",
        "/nodegroup/default web"]
    (op,) = fake.ops
    assert op["OP_ID"] == "OP_TAGS_SEARCH" and op["pattern"] == "web"
    assert op["priority"] == -10
    assert op["reason"][-1][:2] == ["gnt:client:gnt-cluster", "search-tags"]


def test_search_tags_finding_nothing_exits_1(master: Callable[..., FakeMaster]) -> None:
    master(results={"OP_TAGS_SEARCH": []})
    result = run(gnt_cluster.cli, "search-tags", "zzz")
    assert (result.exit_code, result.stdout, result.stderr) == (1, "", "")


def test_search_tags_bad_pattern_is_the_jobs_error(master: Callable[..., FakeMaster]) -> None:
    master(errors={"OP_TAGS_SEARCH": ParameterError("Invalid search pattern '(': missing )")})
    result = run(gnt_cluster.cli, "search-tags", "(")
    assert result.exit_code == 1 and "Invalid search pattern '('" in result.stderr


# -- submit-job ----------------------------------------------------------------------------

def _write(path: Path, data: Any) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def test_submit_job_one_job_per_file_and_repeats(master: Callable[..., FakeMaster],
                                                 tmp_path: Path) -> None:
    fake = master()
    one = _write(tmp_path / "one.json", [{"OP_ID": "OP_TEST_DELAY", "duration": 1,
                                          "reason": [["me", "why", 1]]}])
    two = _write(tmp_path / "two.json", [{"OP_ID": "OP_TEST_DELAY", "duration": 2},
                                         {"OP_ID": "OP_TEST_DELAY", "duration": 3}])
    result = run(gnt_debug.cli, "submit-job", "-v", "--job-repeat", "2", "--op-repeat", "2",
                 "--priority", "low", "--dry-run", one, two)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "Submitted jobs 1, 2, 3, 4",
        f"Waiting for job 1 for file {one}/0 ...",
        f"Waiting for job 2 for file {two}/0 ...",
        f"Waiting for job 3 for file {one}/1 ...",
        f"Waiting for job 4 for file {two}/1 ...",
    ]
    assert [[op["duration"] for op in job] for job in fake.jobs] == [
        [1, 1], [2, 3, 2, 3], [1, 1], [2, 3, 2, 3]]
    op = fake.jobs[0][0]
    assert op["priority"] == 10 and op["dry_run"] is True
    # The file's reason trail is kept and the command's entry added after it.
    assert op["reason"][0] == ["me", "why", 1]
    assert op["reason"][1][:2] == ["gnt:client:gnt-debug", "submit-job"]
    assert [name for name, _ in fake.calls].count("SubmitManyJobs") == 1


def test_submit_job_each_and_timing(master: Callable[..., FakeMaster], tmp_path: Path) -> None:
    fake = master()
    one = _write(tmp_path / "one.json", [{"OP_ID": "OP_TEST_DELAY", "duration": 1}])
    result = run(gnt_debug.cli, "submit-job", "--each", "--timing-stats", one, one)
    lines = result.stdout.splitlines()
    assert lines[:3] == ["Loading...", "Submitting...", "Executing..."]
    assert lines[3:5] == [f"Waiting for job {n} for file {one}/0 ..." for n in (1, 2)]
    assert lines[5:7] == ["C:op        2", "C:job       2"]
    assert [line.split()[0] for line in lines[7:]] == ["T:submit", "T:exec", "T:total"]
    assert [name for name, _ in fake.calls].count("SubmitJob") == 2
    assert "SubmitManyJobs" not in [name for name, _ in fake.calls]


def test_submit_job_failed_job_is_reported_but_exits_0(master: Callable[..., FakeMaster],
                                                       tmp_path: Path) -> None:
    master(errors={"OP_TEST_DELAY": OpPrereqError("Duration must be greater than zero")})
    one = _write(tmp_path / "one.json", [{"OP_ID": "OP_TEST_DELAY", "duration": 0}])
    result = run(gnt_debug.cli, "submit-job", one)
    assert result.exit_code == 0  # as Ganeti's
    assert result.stderr == (f"Job 1 for file {one}/0 has failed: Failure: Duration must be "
                             "greater than zero\n")


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "is not valid JSON"),
    ('{"OP_ID": "OP_TEST_DELAY"}', "must hold a non-empty JSON list of opcodes"),
    ("[]", "must hold a non-empty JSON list of opcodes"),
    ('[{"duration": 1}]', "opcode 0 in"),
])
def test_submit_job_refuses_bad_files_before_submitting(
        master: Callable[..., FakeMaster], tmp_path: Path, content: str, message: str) -> None:
    fake = master()
    good = _write(tmp_path / "good.json", [{"OP_ID": "OP_TEST_DELAY", "duration": 1}])
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    result = run(gnt_debug.cli, "submit-job", good, str(bad))
    assert result.exit_code == 1 and message in result.stderr and str(bad) in result.stderr
    assert fake.jobs == []  # nothing half done
    missing = run(gnt_debug.cli, "submit-job", str(tmp_path / "nope.json"))
    assert missing.exit_code == 1 and "cannot read opcode file" in missing.stderr
