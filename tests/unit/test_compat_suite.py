"""The Ganeti compatibility suite's own machinery: normalisation, shape comparison,
verdicts, and the consistency of its data files (docs/compat.md)."""

from __future__ import annotations

from tests.compat.common import (
    CASES_FILE,
    Side,
    checks,
    compare,
    compare_shape,
    job_ids_in,
    load_cases,
    load_differences,
    load_recorded,
    normalise,
    rapi_observation,
    shape,
)
from tests.compat.corral_side import summary, verdict

GANETI = Side("ganeti", {"cluster": "cluster.ganeti.test", "node1": "vm.ganeti.test",
                         "node1_short": "vm", "os": "noop+default"}, "", "", "")
CORRAL = Side("corral", {"cluster": "cluster.testbed", "node1": "node1.testbed",
                         "node1_short": "node1", "os": "corral-ext4+default"}, "", "", "")


def test_both_sides_normalise_to_the_same_text() -> None:
    ganeti = ("Waiting for job 812 for compat-inst1 ...\n"
              "Node           Pinst Memory\nvm.ganeti.test     3   128M\n"
              "uuid 6911c0b6-ab5d-4429-beea-f157850979ad on vm, kvm stays")
    corral = ("Waiting for job 7 for compat-inst1 ...\n"
              "Node          Pinst Memory\nnode1.testbed    3   512M\n"
              "uuid a2661d67-946c-488c-a2b0-e79635457b32 on node1, kvm stays")
    assert normalise(ganeti, GANETI) == normalise(corral, CORRAL)
    assert "kvm" in normalise(ganeti, GANETI)  # a short name is replaced as a word only
    assert normalise("vm.ganeti.test", GANETI) == "<node1>"


def test_different_words_stay_different() -> None:
    assert normalise("Failure: prerequisites not met", GANETI) != \
        normalise("Failure: node not found", CORRAL)


def test_job_ids_found_in_cli_output() -> None:
    assert job_ids_in("JobID: 12\n") == [12]
    assert job_ids_in("15: compat-inst1\n16: compat-inst2") == [15, 16]
    assert job_ids_in("17\n") == [17]
    assert job_ids_in("Waiting for job 3 ...") == []


def test_shape_comparison_allows_extra_keys_but_not_missing_ones() -> None:
    want = shape({"name": "x", "ctime": 1.5, "nics": [{"ip": None}]})
    assert compare_shape(want, shape({"name": "y", "ctime": 2, "nics": [{"ip": "1"}],
                                      "extra": True})) == []
    problems = compare_shape(want, shape({"name": "y", "nics": []}))
    assert any("missing keys ['ctime']" in p for p in problems)
    assert any("empty list, expected non-empty" in p for p in problems)
    assert compare_shape("int", "str") == ['$: int expected, got "str"']


def test_a_job_id_keeps_its_type_in_the_shape() -> None:
    observed = rapi_observation(200, 812, GANETI, "success")
    assert observed["shape"] == "int" and observed["body"] == "<job>"
    assert rapi_observation(200, "7", CORRAL, "success")["shape"] == "str"


def test_verdicts_follow_the_annotations() -> None:
    case = {"id": "x.y", "tool": "gnt-x", "argv": []}
    want = {"exit": 1, "stdout_head": "", "stderr_head": "Failure: a"}
    same, other = dict(want), {**want, "exit": 2}
    assert verdict(case, want, same, None).kind == "match"
    assert verdict(case, want, other, None).kind == "failing"
    assert verdict(case, want, other, {"deliberate": "why"}).kind == "deliberate"
    assert verdict(case, want, other, {"pending": "cli", "what": "w"}).kind == "pending"
    assert verdict(case, want, same, {"pending": "cli", "what": "w"}).kind == "stale-pending"
    lines = summary([verdict(case, want, same, {"deliberate": "why"})])
    assert any("no longer needed" in line for line in lines)
    assert compare(case, want, other) == ["exit: Ganeti 1 != corral 2"]


def test_the_data_files_agree() -> None:
    cases = load_cases()
    ids = [c["id"] for c in cases]
    assert len(ids) == len(set(ids)), "duplicate case ids in " + str(CASES_FILE)
    recorded = load_recorded()
    for case in cases:
        assert ("tool" in case) != ("method" in case), case["id"]
        kind = "cli" if "tool" in case else "rapi"
        aspects = {"cli": {"exit", "stdout_head", "stderr_head", "stdout", "stderr",
                           "job_status"},
                   "rapi": {"status", "shape", "error", "body", "job_status",
                            "fields"}}[kind]
        assert set(checks(case)) <= aspects, case["id"]
        if case["id"] in recorded:
            assert set(checks(case)) <= set(recorded[case["id"]]), case["id"]
    for case_id, note in load_differences().items():
        assert case_id in ids, f"differences.json names an unknown case {case_id}"
        assert ("deliberate" in note) != ("pending" in note), case_id
        if "pending" in note:
            assert note["pending"] in {"cli", "list", "rapi", "net", "lead"}, case_id
            assert note.get("what"), case_id


def test_an_error_may_add_lines_after_ganetis_but_not_change_them() -> None:
    case = {"id": "x", "tool": "gnt-instance", "argv": ["list"], "check": ["stderr"]}
    ganeti = {"stderr": "Failure: prerequisites not met for this operation:\nX not found"}
    hinted = {"stderr": ganeti["stderr"] + "\nknown names: a, b"}
    assert compare(case, ganeti, hinted) == []
    assert compare(case, ganeti, {"stderr": "Failure: prerequisites not met for this "
                                            "operation:\nX not found; known: a"}) != []
    assert compare(case, ganeti, {"stderr": "corral's own first line\n" + ganeti["stderr"]}
                   ) != []
    assert compare(case, ganeti, {"stderr": ""}) != []
