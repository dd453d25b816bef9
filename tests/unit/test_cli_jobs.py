"""gnt-job, gnt-filter, gnt-debug and the job parts of gnt-cluster against a fake master.

A scripted fake luxi client replaces ``get_client`` in each tool, so these tests
check option parsing, what is sent to the master daemon and what is printed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import click
import pytest
from click.testing import CliRunner

from corral.cli import gnt_cluster, gnt_debug, gnt_filter, gnt_job, tags
from corral.cli import jobs as cli_jobs
from corral.cli.jobs import (
    build_name_filter,
    format_query,
    job_error,
    parse_timespec,
)
from corral.errors import OpPrereqError, ParameterError, to_wire

Handler = Callable[..., Any]


class FakeClient:
    """Records calls; answers each method from a handler or a queue of answers."""

    def __init__(self, handlers: dict[str, Any]) -> None:
        self.handlers = handlers
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def call(self, method: str, *args: Any) -> Any:
        self.calls.append((method, args))
        handler = self.handlers[method]
        if isinstance(handler, list):
            answer = handler.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer
        if callable(handler):
            return handler(*args)
        return handler

    def methods(self) -> list[str]:
        return [method for method, _ in self.calls]

    def args_of(self, method: str) -> tuple[Any, ...]:
        return next(args for m, args in self.calls if m == method)

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., FakeClient]]:
    def install(**handlers: Any) -> FakeClient:
        client = FakeClient(handlers)
        module: ModuleType
        for module in (gnt_job, gnt_filter, gnt_debug, gnt_cluster, cli_jobs, tags):
            monkeypatch.setattr(module, "get_client", lambda *a, **k: client)
        return client

    yield install


def run(group: click.Group, *args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(group, list(args), input=input, catch_exceptions=False)


TS = [1700000000, 250000]
LOG = [1, TS, "message", "Sleeping for 1.0 seconds"]


def _done(status: str = "success", logs: list[Any] | None = None) -> list[Any]:
    return [[status], logs if logs is not None else []]


def _job_handlers(final: list[Any], wfjc: list[Any] | None = None) -> dict[str, Any]:
    return {
        "SubmitJob": 42,
        "WaitForJobChange": wfjc if wfjc is not None else [_done(logs=[LOG])],
        "QueryJobs": [[final]],
    }


# -- submitting and following a job ---------------------------------------------------


def test_delay_submits_test_delay_with_options_and_reason(fake: Any) -> None:
    client = fake(**_job_handlers(["success", ["success"], [None]]))
    result = run(gnt_debug.cli, "delay", "--no-master", "-n", "node1", "-n", "node2",
                 "--repeat", "2", "--priority", "high", "--reason", "testing", "1.5")
    assert result.exit_code == 0, result.output
    (ops,) = client.args_of("SubmitJob")
    (op,) = ops
    assert op["OP_ID"] == "OP_TEST_DELAY"
    assert (op["duration"], op["on_master"], op["on_nodes"], op["repeat"]) == (
        1.5, False, ["node1", "node2"], 2)
    assert op["no_locks"] is False and op["priority"] == -10 and "dry_run" not in op
    assert [entry[:2] for entry in op["reason"]] == [
        ["user", "testing"], ["gnt:client:gnt-debug", "delay"]]
    assert all(isinstance(entry[2], int) for entry in op["reason"])
    # The log message is printed with its time, as Ganeti's tools do.
    stamp = time.ctime(TS[0] + TS[1] / 1e6)
    assert result.stdout == f"{stamp} Sleeping for 1.0 seconds\n"


def test_delay_defaults_follow_ganeti(fake: Any) -> None:
    client = fake(**_job_handlers(["success", ["success"], [None]]))
    assert run(gnt_debug.cli, "delay", "0").exit_code == 0
    (op,) = client.args_of("SubmitJob")[0]
    assert (op["on_master"], op["on_nodes"], op["repeat"], op["no_locks"]) == (True, [], 0, False)
    assert "priority" not in op


@pytest.mark.parametrize("duration", ["-1", "soon"])
def test_delay_refuses_bad_duration(fake: Any, duration: str) -> None:
    client = fake()
    result = CliRunner().invoke(gnt_debug.cli, ["delay", "--", duration])
    # Ganeti's arguments are untyped, so its command refuses a bad one: exit 1
    assert result.exit_code == 1
    assert result.stderr.startswith("Failure: prerequisites not met for this operation:\n"
                                    "error type: wrong_input, error details:\nduration: ")
    assert client.calls == []


def test_submit_prints_job_id_on_stderr_and_does_not_wait(fake: Any) -> None:
    client = fake(**_job_handlers([]))
    result = run(gnt_debug.cli, "delay", "--submit", "1")
    assert result.exit_code == 0
    assert result.stderr == "JobID: 42\n" and result.stdout == ""
    assert client.methods() == ["SubmitJob"]


def test_print_jobid_prints_the_bare_id_first(fake: Any) -> None:
    fake(**_job_handlers(["success", ["success"], [None]]))
    result = run(gnt_debug.cli, "delay", "--print-jobid", "1")
    assert result.stdout.splitlines()[0] == "42"


def test_follow_asks_only_for_new_log_entries(fake: Any) -> None:
    second = [2, TS, "message", "done"]
    client = fake(**_job_handlers(
        ["success", ["success"], [None]],
        wfjc=[[["running"], [LOG]], "nochange", _done(logs=[second])],
    ))
    result = run(gnt_debug.cli, "delay", "1")
    assert result.exit_code == 0
    waits = [args for m, args in client.calls if m == "WaitForJobChange"]
    assert [w[3] for w in waits] == [None, 1, 1]       # prev_log_serial
    assert [w[2] for w in waits] == [None, ["running"], ["running"]]  # prev_job_info
    assert result.stdout.count("Sleeping") == 1 and result.stdout.count("done") == 1


def test_unchanged_queued_job_is_reported_once(fake: Any) -> None:
    fake(**_job_handlers(
        ["success", ["success"], [None]],
        wfjc=[[["queued"], []], "nochange", "nochange", _done()],
    ))
    result = run(gnt_debug.cli, "delay", "1")
    assert result.stderr == "Job 42 is waiting in queue\n"


def test_failed_opcode_error_is_raised_with_its_class(fake: Any) -> None:
    err = to_wire(OpPrereqError("node 'x' is offline"))
    fake(**_job_handlers(["error", ["error"], [err]]))
    result = run(gnt_debug.cli, "delay", "1")
    assert result.exit_code == OpPrereqError.exit_code
    assert result.stderr == ("Failure: prerequisites not met for this operation:\n"
                             "error type: wrong_state, error details:\nnode 'x' is offline\n")


def test_queue_encoded_error_keeps_its_class_and_exit_code(fake: Any) -> None:
    # The job queue stores an opcode's error as [class name, [message]].
    fake(**_job_handlers(["error", ["error"], [["UnknownFieldError", ["no field 'x'"]]]]))
    result = run(gnt_debug.cli, "delay", "1")
    assert result.exit_code == 14
    assert result.stderr.endswith("error type: wrong_input, error details:\nno field 'x'\n")
    assert job_error(1, "error", ["error"], [["SomeGanetiError", ["boom"]]]).code == "exec-error"


def test_partial_failure_names_the_opcode() -> None:
    err = job_error(3, "error", ["success", "error"], [None, "disk full"])
    assert err.message == "partial failure (opcode 1): disk full"
    assert "canceled" in job_error(3, "canceled", ["canceled"], [None]).message


def test_submission_errors_reach_the_user(fake: Any) -> None:
    fake(SubmitJob=[ParameterError("duration: expected a number >= 0")])
    result = run(gnt_debug.cli, "delay", "1")
    assert result.exit_code == 1
    assert result.stderr == ("Failure: prerequisites not met for this operation:\n"
                             "error type: wrong_input, error details:\n"
                             "duration: expected a number >= 0\n")


# -- listing ----------------------------------------------------------------------------

JOB_FIELDS = [
    {"name": "id", "title": "ID", "kind": "number", "doc": "Job ID"},
    {"name": "status", "title": "Status", "kind": "text", "doc": "Job status"},
    {"name": "summary", "title": "Summary", "kind": "other", "doc": "Summary"},
]
JOB_ROWS = [
    [[0, 9], [0, "success"], [0, ["TEST_DELAY(1.0)"]]],
    [[0, 10], [0, "queued"], [0, ["TEST_DELAY(10.0)", "TAGS_SET(a)"]]],
]


def _query(fields: list[dict[str, Any]], rows: list[Any]) -> Callable[..., Any]:
    def answer(what: str, names: list[str], qfilter: Any) -> dict[str, Any]:
        by_name = {f["name"]: i for i, f in enumerate(fields)}
        out_fields, idx = [], []
        for name in names:
            if name in by_name:
                out_fields.append(fields[by_name[name]])
                idx.append(by_name[name])
            else:
                out_fields.append({"name": name, "title": name, "kind": "unknown", "doc": ""})
                idx.append(None)
        data = [[row[i] if i is not None else [1, None] for i in idx] for row in rows]
        return {"fields": out_fields, "data": data}
    return answer


def test_job_list_default_columns_and_layout(fake: Any) -> None:
    client = fake(Query=_query(JOB_FIELDS, JOB_ROWS))
    result = run(gnt_job.cli, "list")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        "ID Status  Summary",
        " 9 success TEST_DELAY(1.0)",
        "10 queued  TEST_DELAY(10.0),TAGS_SET(a)",
    ]
    assert client.args_of("Query") == ("job", ["id", "status", "summary"], None)


def test_job_list_separator_no_headers_and_extended_fields(fake: Any) -> None:
    fields = [*JOB_FIELDS, {"name": "priority", "title": "Priority", "kind": "number"}]
    rows = [[*row, [0, 0]] for row in JOB_ROWS]
    client = fake(Query=_query(fields, rows))
    result = run(gnt_job.cli, "list", "--no-headers", "--separator", "|", "-o", "+priority")
    assert result.stdout.splitlines() == [
        "9|success|TEST_DELAY(1.0)|0", "10|queued|TEST_DELAY(10.0),TAGS_SET(a)|0"]
    assert client.args_of("Query")[1] == ["id", "status", "summary", "priority"]


def test_job_list_ids_and_status_flags_make_the_filter(fake: Any) -> None:
    client = fake(Query=_query(JOB_FIELDS, []))
    run(gnt_job.cli, "list", "--running", "3", "5")
    assert client.args_of("Query")[2] == [
        "&", ["|", ["==", "id", 3], ["==", "id", 5]], ["|", ["==", "status", "running"]]]


def test_job_list_pending_selects_ganeti_pending_statuses(fake: Any) -> None:
    client = fake(Query=_query(JOB_FIELDS, []))
    run(gnt_job.cli, "list", "--pending")
    assert client.args_of("Query")[2] == ["|", ["==", "status", "canceling"],
                                          ["==", "status", "queued"], ["==", "status", "waiting"]]


def _query_fields(names: list[str]) -> dict[str, Any]:
    return {"fields": [{"name": n, "kind": "text"} for n in names]}


def test_job_list_archived_adds_the_column(fake: Any) -> None:
    client = fake(Query=_query(JOB_FIELDS, []), QueryFields=_query_fields(JOB_FIELDS))
    run(gnt_job.cli, "list", "--archived")
    assert client.args_of("Query")[1] == ["id", "status", "summary", "archived"]


def test_job_list_bad_id_is_an_error(fake: Any) -> None:
    client = fake(Query=_query(JOB_FIELDS, []))
    result = run(gnt_job.cli, "list", "seven")
    assert result.exit_code == 1 and "invalid id 'seven'" in result.stderr
    assert client.calls == []


def test_unknown_field_warns_and_exits_14(fake: Any) -> None:
    fake(Query=_query(JOB_FIELDS, JOB_ROWS), QueryFields=_query_fields(JOB_FIELDS))
    result = run(gnt_job.cli, "list", "-o", "id,bogus")
    assert result.exit_code == 14
    assert result.stderr.startswith("Warning: Queried for unknown fields bogus\nHint: ")
    assert result.stdout.splitlines()[1] == " 9 ??"


def test_json_output_maps_fields_to_values(fake: Any) -> None:
    fake(Query=_query(JOB_FIELDS, JOB_ROWS[:1]))
    result = run(gnt_job.cli, "list", "--json")
    import json
    assert json.loads(result.stdout) == [
        {"id": 9, "status": "success", "summary": ["TEST_DELAY(1.0)"]}]


def test_non_normal_values_print_ganeti_marks() -> None:
    response = {
        "fields": [{"name": "name", "title": "Node", "kind": "text"},
                   {"name": "mfree", "title": "MFree", "kind": "unit"},
                   {"name": "offline", "title": "Offline", "kind": "bool"}],
        "data": [[[0, "n1"], [0, 2048], [0, False]],
                 [[0, "n2"], [3, None], [4, None]],
                 [[0, "n3"], [2, None], [1, None]]],
    }
    assert format_query(response) == [
        "Node MFree Offline", "n1    2.0G N", "n2       - *", "n3       ? ??"]
    assert format_query(response, verbose=True, separator=",", no_headers=True) == [
        "n1,2048,N", "n2,(unavail),(offline)", "n3,(nodata),(unknown)"]
    assert format_query(response, units="g", separator=",", no_headers=True)[0] == "n1,2.0,N"


def test_name_filter_rules() -> None:
    assert build_name_filter([]) is None
    assert build_name_filter(["a", "b"]) == ["|", ["==", "name", "a"], ["==", "name", "b"]]
    assert build_name_filter(["web*"]) == ["|", ["=~", "name", r"^web[^.]*(\..*)?$"]]
    assert build_name_filter(["7"], namefield="id", numeric=True) == ["|", ["==", "id", 7]]
    # One argument holding a filter character is parsed as a filter.
    assert build_name_filter(['status == "error"']) == ["==", "status", "error"]
    assert build_name_filter(["id"], force_filter=True) == ["?", "id"]
    with pytest.raises(ParameterError, match="exactly one argument"):
        build_name_filter(["a", "b"], force_filter=True)


def test_list_fields(fake: Any) -> None:
    fake(QueryFields={"fields": JOB_FIELDS})
    result = run(gnt_job.cli, "list-fields", "--separator", ":")
    assert result.stdout.splitlines()[:2] == ["Name:Type:Title:Description",
                                              "id:Number:ID:Job ID"]


# -- gnt-job info, watch, cancel, change-priority, archive ---------------------------

INFO_ROW = [
    [0, 9], [0, "success"],
    [0, [{"OP_ID": "OP_TEST_DELAY", "duration": 1.0,
          "reason": [["gnt:client:gnt-debug", "delay", 1]]}]],
    [0, [None]], [0, ["success"]], [0, [[LOG]]],
    [0, [[1700000000, 0]]], [0, [[1700000000, 100]]], [0, [[1700000001, 0]]],
    [0, [1699999999, 500000]], [0, [1700000000, 0]], [0, [1700000001, 500000]],
]


def test_job_info_layout(fake: Any) -> None:
    fake(Query={"fields": [], "data": [INFO_ROW]})
    result = run(gnt_job.cli, "info", "9")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == "- Job ID: 9"
    assert "  Status: success" in lines
    assert any(ln.startswith("  Processing start: ") and ln.endswith("(delta 0.500000s)")
               for ln in lines)
    assert "  Total processing time: 2.000000 seconds" in lines
    assert "    - Opcode: OP_TEST_DELAY" in lines
    assert "        duration: 1.0" in lines
    assert "          Content: [1, message, Sleeping for 1.0 seconds]" in lines


def test_job_info_unknown_id_is_not_found(fake: Any) -> None:
    fake(Query={"fields": [], "data": []})
    result = run(gnt_job.cli, "info", "77")
    assert result.exit_code == 1
    assert result.stderr.startswith("Failure: prerequisites not met for this operation:\n"
                                    "error type: unknown_entity, error details:\n"
                                    "job 77 not found")


def test_watch_prints_header_and_failure(fake: Any) -> None:
    fake(WaitForJobChange=[_done("error", [LOG])],
         QueryJobs=[[["error", ["error"], ["it broke"]]]])
    result = run(gnt_job.cli, "watch", "42")
    lines = result.stdout.splitlines()
    assert lines[:2] == ["Output from job 42 follows", "--------------------------"]
    assert lines[2].endswith(" Sleeping for 1.0 seconds")
    assert result.stderr == "Job 42 failed: Failure: command execution error:\nit broke\n"
    assert result.exit_code == 1


def test_wait_is_silent(fake: Any) -> None:
    fake(WaitForJobChange=[_done(logs=[LOG])], QueryJobs=[[["success", ["success"], [1]]]])
    result = run(gnt_job.cli, "wait", "42")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")


def test_cancel_ids_prints_each_answer(fake: Any) -> None:
    client = fake(CancelJob=[[True, "Job 5 canceled"], [False, "Job 6 is running"]])
    result = run(gnt_job.cli, "cancel", "5", "6")
    assert result.stdout == "Job 5 canceled\nJob 6 is running\n" and result.exit_code == 1
    assert [a for m, a in client.calls] == [(5, False), (6, False)]


def test_cancel_needs_ids_or_a_selection_not_both(fake: Any) -> None:
    fake()
    ganeti = "Either a status filter or job ID(s) must be specified and never both"
    assert ganeti in run(gnt_job.cli, "cancel").stderr
    assert ganeti in run(gnt_job.cli, "cancel", "--pending", "5").stderr


def test_cancel_kill_needs_confirmation(fake: Any) -> None:
    client = fake()
    result = run(gnt_job.cli, "cancel", "--kill", "5")
    assert result.exit_code == 1 and "--yes-do-it" in result.stderr and client.calls == []


def test_cancel_selection_asks_first(fake: Any) -> None:
    client = fake(Query=_query(JOB_FIELDS, JOB_ROWS[1:]), CancelJob=[[True, "ok"]])
    declined = run(gnt_job.cli, "cancel", "--queued", input="n\n")
    assert declined.exit_code == 13 and "CancelJob" not in client.methods()
    # no terminal: the table is shown, the question is not, and the answer is no
    assert "Cancel job(s) listed above?" not in declined.output
    assert declined.stdout.startswith("ID Status Summary\n")
    assert client.args_of("Query")[2] == ["|", ["==", "status", "queued"]]
    forced = run(gnt_job.cli, "cancel", "--queued", "--force")
    assert forced.stdout == "ok\n" and client.args_of("CancelJob") == (10, False)


def test_change_priority(fake: Any) -> None:
    client = fake(ChangeJobPriority=[[True, "Job 5 priority changed"]])
    missing = run(gnt_job.cli, "change-priority", "5")
    assert missing.exit_code == 1 and missing.stderr == "--priority option must be given.\n"
    result = run(gnt_job.cli, "change-priority", "--priority", "low", "5")
    assert result.exit_code == 0 and client.args_of("ChangeJobPriority") == (5, 10)


def test_archive_and_autoarchive(fake: Any) -> None:
    client = fake(ArchiveJob=[True, False], AutoArchiveJobs=[[3, 1], [0, 0]])
    result = run(gnt_job.cli, "archive", "1", "2")
    assert result.exit_code == 1 and result.stderr == "Failed to archive job with ID '2'\n"
    assert run(gnt_job.cli, "autoarchive", "1d").stdout == "Archived 3 jobs, 1 unchecked left\n"
    run(gnt_job.cli, "autoarchive", "all")
    ages = [a[0] for m, a in client.calls if m == "AutoArchiveJobs"]
    assert ages == [86400, -1]


@pytest.mark.parametrize(("text", "seconds"), [("30", 30), ("2m", 120), ("4w", 2419200)])
def test_timespec(text: str, seconds: int) -> None:
    assert parse_timespec(text) == seconds


@pytest.mark.parametrize("text", ["", "d", "1x", "-1d"])
def test_bad_timespec(text: str) -> None:
    with pytest.raises(ParameterError):
        parse_timespec(text)


# -- gnt-filter ---------------------------------------------------------------------------


def test_filter_add_prints_only_the_uuid(fake: Any) -> None:
    client = fake(ReplaceFilter="u-1")
    result = run(gnt_filter.cli, "add", "--priority", "5", "--action", "RATE_LIMIT 3",
                 "--predicates", '[["jobid", [">", "id", "watermark"]]]',
                 "--reason", "maintenance")
    assert result.exit_code == 0 and result.stdout == "u-1\n"
    uuid, priority, predicates, action, trail = client.args_of("ReplaceFilter")
    assert (uuid, priority, predicates, action) == (
        None, 5, [["jobid", [">", "id", "watermark"]]], ["RATE_LIMIT", 3])
    assert [e[:2] for e in trail] == [["user", "maintenance"], ["gnt:client:gnt-filter", "add"]]


def test_filter_add_defaults(fake: Any) -> None:
    client = fake(ReplaceFilter="u-2")
    run(gnt_filter.cli, "add")
    assert client.args_of("ReplaceFilter")[1:4] == (0, [], "CONTINUE")


def test_filter_bad_json_is_a_usage_error(fake: Any) -> None:
    client = fake()
    result = CliRunner().invoke(gnt_filter.cli, ["add", "--predicates", "[jobid"])
    assert result.exit_code == 2 and "--predicates" in result.output
    assert "not valid JSON" in result.output and client.calls == []


def test_filter_replace_and_delete(fake: Any) -> None:
    client = fake(ReplaceFilter="u-9", DeleteFilter=None)
    assert run(gnt_filter.cli, "replace", "u-9", "--action", "PAUSE").stdout == "u-9\n"
    assert client.args_of("ReplaceFilter")[0] == "u-9"
    assert run(gnt_filter.cli, "delete", "u-9").exit_code == 0
    assert client.args_of("DeleteFilter") == ("u-9",)


def test_filter_info_layout(fake: Any) -> None:
    fake(QueryFilters=[[["u-1", 12, 0, [["jobid", ["<", "id", 3]]], "PAUSE",
                         [["user", "x", 1]]]]])
    result = run(gnt_filter.cli, "info", "u-1")
    assert result.stdout.splitlines() == [
        "UUID: u-1", "  Watermark: 12", "  Priority: 0",
        "  Predicates: [['jobid', ['<', 'id', 3]]]", "  Action: PAUSE",
        "  Reason trail: [['user', 'x', 1]]",
    ]


def test_filter_info_unknown_uuid(fake: Any) -> None:
    fake(QueryFilters=[[None]])
    result = run(gnt_filter.cli, "info", "nope")
    assert result.exit_code == 1 and "filter nope not found" in result.stderr


def test_filter_list_default_columns(fake: Any) -> None:
    client = fake(Query={"fields": [], "data": []})
    run(gnt_filter.cli, "list", "u-1")
    assert client.args_of("Query") == (
        "filter", list(gnt_filter.FILTER_FIELDS), ["|", ["==", "uuid", "u-1"]])


# -- gnt-debug locks ---------------------------------------------------------------------


def test_locks_formats_empty_values_as_dash(fake: Any) -> None:
    fields = [{"name": n, "title": n.capitalize(), "kind": "other"}
              for n in ("name", "mode", "owner", "pending")]
    fields[0]["kind"] = "text"
    rows = [[[0, "cluster/BGL"], [0, "shared"], [0, ["job/1", "job/2"]],
             [0, [["exclusive", ["job/3"]]]]],
            [[0, "instance/a"], [0, None], [0, []], [0, []]]]
    client = fake(Query={"fields": fields, "data": rows})
    result = run(gnt_debug.cli, "locks")
    assert result.stdout.splitlines() == [
        "Name        Mode   Owner       Pending",
        "cluster/BGL shared job/1,job/2 exclusive:job/3",
        "instance/a  -      -           -",
    ]
    assert client.args_of("Query") == ("lock", ["name", "mode", "owner", "pending"], None)


# -- gnt-cluster queue, tags, modify --------------------------------------------------------


def test_queue_commands(fake: Any) -> None:
    client = fake(SetDrainFlag=None, QueryConfigValues=[[True], [False]])
    run(gnt_cluster.cli, "queue", "drain")
    run(gnt_cluster.cli, "queue", "undrain")
    assert [a for m, a in client.calls] == [(True,), (False,)]
    assert run(gnt_cluster.cli, "queue", "info").stdout == "The drain flag is set\n"
    assert run(gnt_cluster.cli, "queue", "info").stdout == "The drain flag is unset\n"


def test_add_tags_with_from_file(fake: Any, tmp_path: Path) -> None:
    client = fake(**_job_handlers(["success", ["success"], [None]]))
    tags = tmp_path / "tags"
    tags.write_text("c\nd\n")
    result = run(gnt_cluster.cli, "add-tags", "--from", str(tags), "a", "b")
    assert result.exit_code == 0
    (op,) = client.args_of("SubmitJob")[0]
    assert (op["OP_ID"], op["kind"], op["tags"]) == ("OP_TAGS_SET", "cluster", ["a", "b", "c", "d"])
    assert op["reason"][-1][:2] == ["gnt:client:gnt-cluster", "add-tags"]


def test_remove_tags_needs_tags(fake: Any) -> None:
    client = fake()
    result = run(gnt_cluster.cli, "remove-tags")
    assert result.exit_code == 1 and "No tags to be removed" in result.stderr
    assert client.calls == []


def test_list_tags_sorted(fake: Any) -> None:
    client = fake(QueryTags=[["zeta", "alpha"]])
    assert run(gnt_cluster.cli, "list-tags").stdout == "alpha\nzeta\n"
    assert client.args_of("QueryTags") == ("cluster", "")


def test_modify_is_a_job_and_prints_changes(fake: Any) -> None:
    result_value = {"changes": ["beparams: vcpus 1 -> 2"], "serial": 3, "dry_run": True}
    client = fake(**_job_handlers(["success", ["success"], [result_value]], wfjc=[_done()]))
    result = run(gnt_cluster.cli, "modify", "-B", "vcpus=2", "--dry-run", "--priority", "low")
    assert result.stdout == "Would change beparams: vcpus 1 -> 2\n"
    (op,) = client.args_of("SubmitJob")[0]
    assert op["OP_ID"] == "OP_CLUSTER_SET_PARAMS" and op["beparams"] == {"vcpus": "2"}
    assert op["dry_run"] is True and op["priority"] == 10
    assert "hvparams" not in op


def test_modify_submit_only(fake: Any) -> None:
    client = fake(**_job_handlers([]))
    result = run(gnt_cluster.cli, "modify", "-C", "4", "--submit")
    assert result.stderr == "JobID: 42\n" and client.methods() == ["SubmitJob"]
