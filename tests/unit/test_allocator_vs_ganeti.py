"""corral's htools and allocator print what Ganeti's print on the same clusters.

``tests/data/allocator/figures.json`` holds what Ganeti 3.0's hbal, hspace, hinfo,
hcheck and hail printed on generated clusters (recorded by
``tests/data/allocator/record.py``); here corral's tools run on the same files and
their output, exit code and answers must be the same, to the byte, except where
corral deliberately differs (listed in :data:`DIFFERENT`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).resolve().parent.parent / "data" / "allocator"
FIGURES = json.loads((DATA / "figures.json").read_text())

#: Requests whose answer corral gives differently, and why.
DIFFERENT: dict[str, str] = {}


def _recorded_requests() -> dict[str, dict[str, Any]]:
    """The requests hail answered, rebuilt as the recording script built them (some
    change the cluster too: shared storage, exclusive storage)."""
    spec = importlib.util.spec_from_file_location("allocator_record", DATA / "record.py")
    assert spec is not None and spec.loader is not None
    record = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(record)
    base = json.loads((DATA / "c10.request.json").read_text())
    requests: dict[str, dict[str, Any]] = record._requests(base)
    return requests


REQUESTS = _recorded_requests()


def run_tool(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[str, str, int]:
    """Run one of corral's htools in this process; its stdout, stderr and exit code."""
    from corral.cli.htools import hail, hbal, hcheck, hinfo, hspace

    mains = {"hbal": hbal.main, "hspace": hspace.main, "hinfo": hinfo.main,
             "hcheck": hcheck.main, "hail": hail.main}
    monkeypatch.chdir(DATA)
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            mains[argv[0]](argv[1:])
        except SystemExit as exc:
            code = int(exc.code or 0)
    return out.getvalue(), err.getvalue(), code


@pytest.mark.parametrize("name", sorted(FIGURES["tools"]))
def test_tool_prints_what_ganeti_prints(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = FIGURES["tools"][name]
    stdout, stderr, code = run_tool(expected["argv"], monkeypatch)
    assert stdout == expected["stdout"]
    assert stderr == expected["stderr"]
    assert code == expected["rc"]


@pytest.mark.parametrize("name", sorted(FIGURES["hail"]))
def test_answer_is_hails(name: str) -> None:
    from corral.allocator.iallocator import answer

    case = FIGURES["hail"][name]
    request = REQUESTS[name]
    assert request["request"] == case["request"]
    expected = json.loads(case["answer"]["stdout"])
    got = answer(request)
    if name in DIFFERENT:
        assert got != expected, DIFFERENT[name]
        return
    assert got == expected


def test_hail_executable_answers_from_a_file(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    case = FIGURES["hail"]["alloc-drbd"]
    request = json.loads((DATA / "c10.request.json").read_text())
    request["request"] = case["request"]
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request))
    stdout, _, code = run_tool(["hail", str(path)], monkeypatch)
    assert code == 0
    # hail's compact JSON, key for key
    assert stdout == case["answer"]["stdout"]


def test_hail_refuses_a_file_that_is_not_a_request(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"request": {"type": "allocate"}}))
    stdout, stderr, code = run_tool(["hail", str(path)], monkeypatch)
    assert code == 1 and stdout == ""
    assert stderr.startswith("Error: invalid iallocator message: key 'nodegroups'")
    _, stderr, code = run_tool(["hail"], monkeypatch)
    assert (code, stderr) == (1, "Error: This program needs an input file.\n")


def _answer(name: str) -> dict[str, Any]:
    answer: dict[str, Any] = json.loads(FIGURES["hail"][name]["answer"]["stdout"])
    return answer


def test_recorded_answers_cover_every_request_type() -> None:
    kinds = {case["request"]["type"] for case in FIGURES["hail"].values()}
    assert kinds == {"allocate", "relocate", "node-evacuate", "change-group",
                     "multi-allocate", "allocate-secondary"}
    assert _answer("alloc-too-big")["success"] is False
