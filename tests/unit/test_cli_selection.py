"""Choosing many instances (cli/selection.py), asking about them (cli/prompt.py) and
running one job each (cli/jobset.py): the pure logic, and the texts Ganeti 3.0 prints."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click
import pytest
from click.testing import CliRunner

from corral.cli import gnt_instance, gnt_instance_power, prompt
from corral.cli.jobset import run_jobs
from corral.cli.prompt import ask_user, confirm_operation
from corral.cli.selection import (
    SelectionMode,
    check_selection,
    expand_instances,
    pick_instances,
    selection_options,
    selection_query,
)
from corral.errors import OpExecError, OpPrereqError, to_wire

M = SelectionMode

NODES: list[dict[str, Any]] = [
    {"name": "node2", "pinst_list": ["web2", "db1"], "sinst_list": ["web1"], "tags": ["rack2"]},
    {"name": "node1", "pinst_list": ["web1"], "sinst_list": ["db1"], "tags": ["rack1", "ssd"]},
    {"name": "node3", "pinst_list": [], "sinst_list": None, "tags": []},
]
INSTANCES: list[dict[str, Any]] = [
    {"name": "web2", "tags": ["web"]},
    {"name": "db1", "tags": ["db", "prod"]},
    {"name": "web1", "tags": ["web", "prod"]},
]


# -- what the arguments may be --------------------------------------------------------


@pytest.mark.parametrize(("mode", "names", "message"), [
    (M.CLUSTER, ["web1"], "Cluster filter mode takes no arguments"),
    (M.INSTANCES, [], "No instance names passed"),
    (M.INSTANCES_BY_TAGS, [], "No instance tags passed"),
    (M.NODES, [], "No node names passed"),
    (M.NODES_PRI, [], "No node names passed"),
    (M.NODES_SEC, [], "No node names passed"),
    (M.NODES_BY_TAGS, [], "No node tags passed"),
    (M.NODES_PRI_BY_TAGS, [], "No node tags passed"),
    (M.NODES_SEC_BY_TAGS, [], "No node tags passed"),
])
def test_arguments_that_do_not_fit_the_mode_are_refused(
    mode: SelectionMode, names: list[str], message: str,
) -> None:
    with pytest.raises(OpPrereqError) as caught:
        check_selection(mode, names)
    assert caught.value.message == message
    assert caught.value.exit_code == 1


def test_fitting_arguments_pass() -> None:
    check_selection(M.CLUSTER, [])
    for mode in M:
        if mode is not M.CLUSTER:
            check_selection(mode, ["x"])


def test_queries_ask_for_names_or_everything() -> None:
    assert selection_query(M.INSTANCES, ["a"]) == (
        "instance", ["name", "tags"], ["|", ["|", ["=", "name", "a"], ["=", "uuid", "a"]]])
    assert selection_query(M.CLUSTER, []) == ("instance", ["name", "tags"], None)
    assert selection_query(M.INSTANCES_BY_TAGS, ["t"])[2] is None
    resource, fields, qfilter = selection_query(M.NODES_SEC, ["n1", "n2"])
    assert (resource, fields) == ("node", ["name", "pinst_list", "sinst_list", "tags"])
    assert qfilter == ["|", ["|", ["=", "name", "n1"], ["=", "uuid", "n1"]],
                       ["|", ["=", "name", "n2"], ["=", "uuid", "n2"]]]
    assert selection_query(M.NODES_BY_TAGS, ["t"])[2] is None


# -- what the answer selects ----------------------------------------------------------


@pytest.mark.parametrize(("mode", "names", "expected"), [
    (M.CLUSTER, [], ["db1", "web1", "web2"]),
    (M.INSTANCES, ["web2", "db1"], ["db1", "web1", "web2"]),  # sorted, as the rows come
    (M.INSTANCES_BY_TAGS, ["prod"], ["db1", "web1"]),
    (M.INSTANCES_BY_TAGS, ["web", "db"], ["db1", "web1", "web2"]),
    (M.INSTANCES_BY_TAGS, ["none"], []),
])
def test_instance_modes(mode: SelectionMode, names: list[str], expected: list[str]) -> None:
    assert pick_instances(mode, names, INSTANCES) == expected


@pytest.mark.parametrize(("mode", "names", "expected"), [
    # node by node in name order; primaries of all nodes, then secondaries; each once
    (M.NODES, [], ["web1", "db1", "web2"]),
    (M.NODES_PRI, [], ["web1", "db1", "web2"]),
    (M.NODES_SEC, [], ["db1", "web1"]),
    (M.NODES_BY_TAGS, ["ssd"], ["web1", "db1"]),
    (M.NODES_PRI_BY_TAGS, ["rack2", "rack1"], ["web1", "db1", "web2"]),
    (M.NODES_SEC_BY_TAGS, ["rack2"], ["web1"]),
    (M.NODES_SEC_BY_TAGS, ["nothing"], []),
])
def test_node_modes(mode: SelectionMode, names: list[str], expected: list[str]) -> None:
    assert pick_instances(mode, names, NODES) == expected


class FakeMaster:
    """Answers Query with fixed rows (the filter is the master's business)."""

    def __init__(self) -> None:
        self.queries: list[tuple[Any, ...]] = []

    def call(self, method: str, *args: Any) -> Any:
        assert method == "Query"
        self.queries.append(args)
        rows = NODES if args[0] == "node" else INSTANCES
        return {"fields": [], "data": [[[0, row.get(f)] if row.get(f) is not None else [3, None]
                                        for f in args[1]] for row in rows]}


def test_expand_asks_the_master_and_refuses_an_empty_choice() -> None:
    master = FakeMaster()
    assert expand_instances(master, M.NODES_PRI, ["node1"]) == ["web1", "db1", "web2"]
    assert master.queries[0][0] == "node"
    with pytest.raises(OpPrereqError, match=r"^Selection filter does not match any instances$"):
        expand_instances(master, M.INSTANCES_BY_TAGS, ["nothing"])
    with pytest.raises(OpPrereqError, match="No instance names passed"):
        expand_instances(master, M.INSTANCES, [])
    assert len(master.queries) == 2  # refused before asking


def test_empty_cluster_is_not_an_error() -> None:
    class Empty:
        def call(self, method: str, *args: Any) -> Any:
            return {"fields": [], "data": []}
    assert expand_instances(Empty(), M.CLUSTER, []) == []


# -- the options ----------------------------------------------------------------------


@click.command()
@selection_options
@click.argument("names", nargs=-1)
def _show(names: tuple[str, ...], selection: SelectionMode, force_multiple: bool) -> None:
    click.echo(" ".join([selection.value, str(force_multiple), *names]))


@pytest.mark.parametrize(("args", "expected"), [
    ([], "instances False"),
    (["a"], "instances False a"),
    (["--all"], "cluster False"),
    (["--node", "n1"], "nodes False n1"),
    (["--primary", "n1"], "nodes-pri False n1"),
    (["--secondary", "n1"], "nodes-sec False n1"),
    (["--node-tags", "t"], "nodes-by-tags False t"),
    (["--pri-node-tags", "t"], "nodes-pri-by-tags False t"),
    (["--sec-node-tags", "t"], "nodes-sec-by-tags False t"),
    (["--tags", "t"], "instances-by-tags False t"),
    (["--tags", "--instance", "a"], "instances False a"),
    (["--node", "--all", "--force-multiple"], "cluster True"),  # the last one wins
    (["--all", "--node", "n1"], "nodes False n1"),
])
def test_selector_options(args: list[str], expected: str) -> None:
    result = CliRunner().invoke(_show, args, catch_exceptions=False)
    assert result.exit_code == 0
    assert result.output == expected + "\n"


# -- the question ---------------------------------------------------------------------


class FakeTerminal:
    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.shown = ""

    def write(self, text: str) -> None:
        self.shown += text

    def readline(self) -> str:
        return self.answers.pop(0) if self.answers else ""


def test_confirmation_text_is_ganetis() -> None:
    tty = FakeTerminal("n\n")
    assert confirm_operation(["web1", "web2"], "instances", "shutdown", tty) is False
    assert tty.shown == ("The shutdown will operate on 2 instances.\n"
                         "Do you want to continue?\n"
                         "Affected instances:\n"
                         "  web1\n"
                         "  web2\n"
                         "y/[n]/?: ")
    assert confirm_operation(["web1"], "instances", "startup", FakeTerminal("Y\n")) is True


def test_help_and_unknown_answers_ask_again_and_end_of_input_is_no() -> None:
    tty = FakeTerminal("?\n", "yes\n", "y\n")
    assert confirm_operation(["a"], "instances", "reboot", tty) is True
    question = "The reboot will operate on 1 instances.\nDo you want to continue?\n" \
               "Affected instances:\n  a\ny/[n]/?: "
    assert tty.shown == (question + " y - Yes, execute the reboot\n"
                         " n - No, abort the reboot\n\n" + question + question)
    assert confirm_operation(["a"], "instances", "reboot", FakeTerminal()) is False


def test_more_than_twenty_are_listed_on_request() -> None:
    names = [f"inst{i:02d}" for i in range(21)]
    tty = FakeTerminal("v\n", "y\n")
    assert confirm_operation(names, "instances", "startup", tty) is True
    first, second = tty.shown.split("y/v/[n]/?: ")
    assert first == "The startup will operate on 21 instances.\nDo you want to continue?\n"
    assert second.startswith(first + "Affected instances:\n  inst00\n")
    assert second.endswith("  inst20\ny/[n]/?: ")


def test_long_lines_are_wrapped_at_70() -> None:
    tty = FakeTerminal("n\n")
    ask_user("word " * 30, terminal=tty)
    assert all(len(line) <= 70 for line in tty.shown.splitlines())


def test_without_a_terminal_the_answer_is_the_last_choice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    @contextmanager
    def none() -> Iterator[None]:
        yield None
    monkeypatch.setattr(prompt, "open_tty", none)
    assert confirm_operation(["a", "b"], "instances", "startup") is False
    assert ask_user("?", [("y", 1, "one"), ("x", 2, "two")]) == 2


def test_opening_a_missing_terminal_gives_none(tmp_path: Any) -> None:
    with prompt.open_tty(str(tmp_path / "no-such-tty")) as tty:
        assert tty is None


# -- one job per instance -------------------------------------------------------------


class JobMaster:
    """Jobs 10, 11, ...; those named in ``fail`` end in an error, ``refuse`` are refused."""

    def __init__(self, fail: tuple[str, ...] = (), refuse: tuple[str, ...] = ()) -> None:
        self.fail, self.refuse = fail, refuse
        self.names: dict[int, str] = {}

    def call(self, method: str, *args: Any) -> Any:
        if method == "SubmitManyJobs":
            answer: list[list[Any]] = []
            for ops in args[0]:
                name = ops[0]["instance_name"]
                if name in self.refuse:
                    answer.append([False, f"refused {name}"])
                    continue
                job_id = 10 + len(self.names)
                self.names[job_id] = name
                answer.append([True, job_id])
            return answer
        if method == "WaitForJobChange":
            return [["success"], []]
        if method == "QueryJobs":
            name = self.names[args[0][0]]
            if name in self.fail:
                return [["error", ["error"], [to_wire(OpExecError(f"{name} broke"))]]]
            return [["success", ["success"], [None]]]
        raise AssertionError(method)


def _jobs(*names: str) -> list[tuple[str, list[dict[str, Any]]]]:
    return [(n, [{"OP_ID": "OP_INSTANCE_STARTUP", "instance_name": n}]) for n in names]


def test_jobs_waited_for_print_ganetis_lines(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_jobs(JobMaster(), _jobs("a", "b")) is True
    out, err = capsys.readouterr()
    assert out == ("Submitted jobs 10, 11\nWaiting for job 10 for a ...\n"
                   "Waiting for job 11 for b ...\n")
    assert err == ""
    assert run_jobs(JobMaster(fail=("a",)), _jobs("a"), verbose=False) is False
    out, err = capsys.readouterr()
    assert out == "Waiting for job 10 for a ...\n"
    assert err == "Job 10 for a has failed: Failure: command execution error:\na broke\n"


def test_jobs_submitted_only_print_id_and_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_jobs(JobMaster(refuse=("b",)), _jobs("a", "b", "c"), wait=False) is False
    out, err = capsys.readouterr()
    assert out == "10: a\n11: c\n"
    assert err == "Failure for b: refused b\n"


def test_a_refused_submission_is_reported_and_the_rest_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_jobs(JobMaster(refuse=("a",)), _jobs("a", "b")) is False
    out, err = capsys.readouterr()
    assert out == "Submitted jobs 10\nWaiting for job 10 for b ...\n"
    assert err == "Failed to submit job for a: refused a\n"


def test_commands_are_registered_with_their_aliases() -> None:
    for name, command in (("startup", gnt_instance_power.startup),
                          ("start", gnt_instance_power.startup),
                          ("shutdown", gnt_instance_power.shutdown),
                          ("stop", gnt_instance_power.shutdown),
                          ("reboot", gnt_instance_power.reboot)):
        assert gnt_instance.cli.commands[name] is command
