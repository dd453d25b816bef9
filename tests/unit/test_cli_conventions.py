"""Ganeti's command-line conventions, which administrators' scripts rely on, in every
gnt-* tool: usage and option errors, exit codes, error text, ``--submit`` output and
confirmations without a terminal.

The expected texts were recorded from Ganeti 3.0's tools (``/usr/sbin/gnt-*``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import click
import pytest
from click.testing import CliRunner

from corral.cli import (
    gnt_cluster,
    gnt_debug,
    gnt_filter,
    gnt_group,
    gnt_instance,
    gnt_instance_power,
    gnt_job,
    gnt_node,
    gnt_os,
)
from corral.cli import jobs as cli_jobs
from corral.errors import (
    AlreadyExistsError,
    CorralError,
    JobCanceledError,
    JobQueueDrainedError,
    MasterUnreachableError,
    NotFoundError,
    NotMasterError,
    OpExecError,
    OpPrereqError,
    ParameterError,
    failure_text,
    from_ganeti,
    to_ganeti,
)
from corral.jobs.model import job_error

TOOLS: dict[str, click.Group] = {
    "gnt-cluster": gnt_cluster.cli, "gnt-debug": gnt_debug.cli, "gnt-filter": gnt_filter.cli,
    "gnt-group": gnt_group.cli, "gnt-instance": gnt_instance.cli, "gnt-job": gnt_job.cli,
    "gnt-node": gnt_node.cli, "gnt-os": gnt_os.cli,
}
#: A command of each tool that takes options, for the option error tests.
SOME_COMMAND = {"gnt-cluster": "info", "gnt-debug": "delay", "gnt-filter": "list",
                "gnt-group": "list", "gnt-instance": "list", "gnt-job": "list",
                "gnt-node": "list", "gnt-os": "list"}

PREREQ = "Failure: prerequisites not met for this operation:\n"


def run(tool: str, *args: str) -> Any:
    return CliRunner().invoke(TOOLS[tool], list(args), prog_name=tool, catch_exceptions=False)


# -- the tool's usage ----------------------------------------------------------------


@pytest.mark.parametrize("tool", sorted(TOOLS))
@pytest.mark.parametrize(("args", "code"), [((), 1), (("--help",), 0), (("bogus-cmd",), 1),
                                            (("-h",), 1)])
def test_tool_usage_on_stdout(tool: str, args: tuple[str, ...], code: int) -> None:
    result = run(tool, *args)
    assert result.exit_code == code
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[:4] == [f"Usage: {tool} {{command}} [options...] [argument...]",
                         f"{tool} <command> --help to see details, or man {tool}", "",
                         "Commands:"]
    listed = [line.split(" - ")[0].strip() for line in lines[4:] if " - " in line[:40]]
    assert listed == sorted(listed) and SOME_COMMAND[tool] in listed


def test_usage_lists_commands_not_aliases_and_wraps_their_help() -> None:
    lines = run("gnt-instance").stdout.splitlines()
    names = [line[1:].split(" ")[0] for line in lines[4:] if line[1:2].strip()]
    assert "startup" in names and "start" not in names and "show" not in names
    assert all(len(line) <= 80 for line in lines)
    # continuation lines align with the help text: " NAME(padded to 16) - "
    first = next(i for i, line in enumerate(lines) if line.startswith(" list "))
    assert lines[first].index(" - ") == 17
    assert lines[first + 1].startswith(" " * 20) and lines[first + 1][20] != " "


def test_version() -> None:
    result = run("gnt-node", "--version")
    assert result.exit_code == 0
    assert result.stdout.startswith("gnt-node (corral ") and result.stderr == ""


# -- option errors (optparse's texts, exit 2) -----------------------------------------


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_unknown_option(tool: str) -> None:
    command = SOME_COMMAND[tool]
    result = run(tool, command, "--bogus-option")
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[:2] == ["Usage", "====="]
    assert lines[2].startswith(f"  {tool} {command}")
    assert lines[-1] == f"{tool}: error: no such option: --bogus-option"


@pytest.mark.parametrize(("args", "message"), [
    (("startup", "--priority", "bogus", "x"),
     "option --priority: invalid choice: 'bogus' (choose from 'low', 'normal', 'high')"),
    (("startup", "--priority"), "--priority option requires 1 argument"),
    (("shutdown", "--timeout", "abc", "x"), "option --timeout: invalid integer value: 'abc'"),
])
def test_bad_option_values(args: tuple[str, ...], message: str) -> None:
    result = run("gnt-instance", *args)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.splitlines()[-1] == f"gnt-instance: error: {message}"


def test_bad_key_value_option_names_the_option() -> None:
    result = run("gnt-instance", "modify", "-B", "=1", "x")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1].startswith("gnt-instance: error: option ")


# -- argument counts (Ganeti's check, exit 1) -----------------------------------------


@pytest.mark.parametrize(("tool", "args", "message"), [
    ("gnt-instance", ("rename", "a"), "Command rename expects 2 argument(s)"),
    ("gnt-instance", ("rename", "a", "b", "c"), "Command rename expects 2 argument(s)"),
    ("gnt-instance", ("remove",), "Command remove expects 1 argument(s)"),
    ("gnt-cluster", ("getmaster", "x"), "Command getmaster expects no arguments"),
    ("gnt-group", ("assign-nodes", "g"), "Command assign-nodes expects at least 2 argument(s)"),
])
def test_argument_counts(tool: str, args: tuple[str, ...], message: str) -> None:
    result = run(tool, *args)
    assert (result.exit_code, result.stdout, result.stderr) == (1, "", f"Error: {message}\n")


def test_command_help_is_titled_on_stdout() -> None:
    result = run("gnt-instance", "startup", "--help")
    assert result.exit_code == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[:3] == ["Usage", "=====", "  gnt-instance startup [<names>...]"]
    assert "Options" in lines and lines[lines.index("Options") + 1] == "======="
    assert any(line.startswith("--submit") for line in lines)


# -- error text ------------------------------------------------------------------------


@pytest.mark.parametrize(("error", "text"), [
    (NotFoundError("Instance 'x' not known"),
     PREREQ + "error type: unknown_entity, error details:\nInstance 'x' not known"),
    (AlreadyExistsError("Instance 'x' is already in the cluster"),
     PREREQ + "error type: already_exists, error details:\n"
     "Instance 'x' is already in the cluster"),
    (ParameterError("No instance names passed"),
     PREREQ + "error type: wrong_input, error details:\nNo instance names passed"),
    (OpPrereqError("no good node", ecode="insufficient_resources"),
     PREREQ + "error type: insufficient_resources, error details:\nno good node"),
    (OpExecError("OS validation failed"),
     "Failure: command execution error:\nOS validation failed"),
    (CorralError("anything else"), "Failure: command execution error:\nanything else"),
    (JobQueueDrainedError("the queue is drained; 'gnt-cluster queue undrain' ends it"),
     "Failure: the job queue is marked for drain and doesn't accept new requests\n"
     "the queue is drained; 'gnt-cluster queue undrain' ends it"),
    (JobCanceledError("job 5 was canceled"),
     "Unhandled Ganeti error: Job was canceled\njob 5 was canceled"),
    (NotMasterError("This is not the master node, please connect to node 'n1' and rerun "
                    "the command"),
     PREREQ + "error type: wrong_input, error details:\nThis is not the master node, please "
     "connect to node 'n1' and rerun the command"),
    (MasterUnreachableError("no master daemon on /run/corral/master.sock"),
     "Cannot communicate with the master daemon.\n"
     "Is the process running and listening for connections?\n"
     "no master daemon on /run/corral/master.sock"),
])
def test_failure_text_starts_with_ganetis_lines(error: CorralError, text: str) -> None:
    assert failure_text(error) == text


def test_ganeti_error_code_survives_a_job_result() -> None:
    encoded = ["OpPrereqError", ["Can't find any good node", "insufficient_resources"]]
    err = from_ganeti(encoded)
    assert isinstance(err, OpPrereqError) and to_ganeti(err) == encoded
    assert failure_text(err).splitlines()[1] == (
        "error type: insufficient_resources, error details:")


def test_canceled_job_names_why() -> None:
    err = job_error(7, "canceled", ["canceled"],
                    [["OpExecError", ["rejected by filter 1234 (REJECT)"]]])
    assert isinstance(err, JobCanceledError)
    assert err.message == "job 7 was canceled: rejected by filter 1234 (REJECT)"
    assert job_error(7, "canceled", ["canceled"], [None]).message == "job 7 was canceled"


# -- jobs: --submit, --print-jobid, waiting, failures ---------------------------------


#: The instances the fake master has.
INSTANCES = ("web1", "web2")


def _names_in(qfilter: Any) -> list[str]:
    """The names a query filter compares ``name`` with."""
    if not isinstance(qfilter, list):
        return []
    if qfilter[:2] == ["=", "name"]:
        return [qfilter[2]]
    return [name for part in qfilter[1:] for name in _names_in(part)]


class FakeMaster:
    """Accepts jobs (ids from 40) that end with ``status``; records their opcodes."""

    def __init__(self, status: str = "success", result: Any = None) -> None:
        self.status, self.result = status, result
        self.jobs: list[list[dict[str, Any]]] = []

    def call(self, method: str, *args: Any) -> Any:
        if method == "SubmitJob":
            self.jobs.append(args[0])
            return 39 + len(self.jobs)
        if method == "SubmitManyJobs":
            self.jobs.extend(args[0])
            first = 40 + len(self.jobs) - len(args[0])
            return [[True, first + i] for i in range(len(args[0]))]
        if method == "WaitForJobChange":
            return [[self.status], []]
        if method == "QueryJobs":
            opstatus = "success" if self.status == "success" else self.status
            return [[self.status, [opstatus], [self.result]] for _ in args[0]]
        if method == "Query" and args[0] == "instance":
            named = _names_in(args[2]) or list(INSTANCES)
            return {"fields": [], "data": [[[0, name] if field == "name" else [0, []]
                                            for field in args[1]] for name in named]}
        raise AssertionError(f"unexpected call {method}")

    def __enter__(self) -> FakeMaster:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.fixture
def master(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., FakeMaster]]:
    def install(**kwargs: Any) -> FakeMaster:
        fake = FakeMaster(**kwargs)
        for module in (gnt_instance, gnt_instance_power, gnt_debug, cli_jobs):
            monkeypatch.setattr(module, "get_client", lambda *a, **k: fake)
        return fake
    yield install


def test_submit_prints_job_id_on_stderr(master: Callable[..., FakeMaster]) -> None:
    master()
    result = run("gnt-instance", "remove", "-f", "--submit", "web1")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "JobID: 40\n")
    result = run("gnt-debug", "delay", "--submit", "--print-jobid", "1")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "41\n", "JobID: 41\n")


def test_print_jobid_before_following(master: Callable[..., FakeMaster]) -> None:
    master()
    result = run("gnt-debug", "delay", "--print-jobid", "1")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "40\n", "")


@pytest.mark.parametrize("command", ["startup", "shutdown", "reboot", "reinstall"])
def test_many_instances_path_prints_id_and_name(master: Callable[..., FakeMaster],
                                                 command: str) -> None:
    fake = master()
    extra = ["-f"] if command == "reinstall" else []
    result = run("gnt-instance", command, *extra, "--submit", "web1")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "40: web1\n", "")
    result = run("gnt-instance", command, *extra, "web1")
    assert (result.exit_code, result.stdout, result.stderr) == (
        0, "Waiting for job 41 for web1 ...\n", "")
    assert len(fake.jobs) == 2


def test_canceled_job_exits_1_with_ganetis_words(master: Callable[..., FakeMaster]) -> None:
    master(status="canceled", result=["OpExecError", ["rejected by filter f1"]])
    result = run("gnt-debug", "delay", "1")
    assert result.exit_code == 1
    assert result.stderr == ("Unhandled Ganeti error: Job was canceled\n"
                             "job 40 was canceled: rejected by filter f1\n")
    result = run("gnt-instance", "startup", "web1")
    assert result.exit_code == 1
    assert result.stdout == "Waiting for job 41 for web1 ...\n"
    assert result.stderr.startswith(
        "Job 41 for web1 has failed: Unhandled Ganeti error: Job was canceled\n")


def test_failed_job_exits_1_with_prereq_text(master: Callable[..., FakeMaster]) -> None:
    master(status="error", result=["OpPrereqError", ["Instance 'x' not known",
                                                     "unknown_entity"]])
    result = run("gnt-instance", "remove", "-f", "x")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == (PREREQ + "error type: unknown_entity, error details:\n"
                             "Instance 'x' not known\n")


# -- confirmations without a terminal -------------------------------------------------


@pytest.mark.parametrize("args", [("remove", "web1"), ("migrate", "web1"),
                                  ("failover", "web1"), ("reinstall", "web1"),
                                  ("move", "-n", "node2", "web1"),
                                  ("shutdown", "web1", "web2"), ("startup", "--all")])
def test_no_terminal_declines_silently(master: Callable[..., FakeMaster],
                                       args: tuple[str, ...]) -> None:
    fake = master()
    result = run("gnt-instance", *args)
    assert (result.exit_code, result.stdout, result.stderr) == (1, "", "")
    assert fake.jobs == []


def test_force_skips_the_question(master: Callable[..., FakeMaster]) -> None:
    fake = master()
    assert run("gnt-instance", "remove", "-f", "web1").exit_code == 0
    assert run("gnt-instance", "shutdown", "--force-multiple", "web1", "web2").exit_code == 0
    assert [job[0]["OP_ID"] for job in fake.jobs] == [
        "OP_INSTANCE_REMOVE", "OP_INSTANCE_SHUTDOWN", "OP_INSTANCE_SHUTDOWN"]


def test_destroy_without_yes_do_it_prints_ganetis_sentence_alone() -> None:
    result = run("gnt-cluster", "destroy")
    assert (result.exit_code, result.stdout, result.stderr) == (
        1, "", "Destroying a cluster is irreversible. If you really want destroy this "
               "cluster, supply the --yes-do-it option.\n")


def test_list_takes_default_options_from_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GNT_INSTANCE_LIST", "--no-headers --bogus-option")
    result = run("gnt-instance", "list")
    assert result.exit_code == 2
    assert result.stderr.endswith("gnt-instance: error: no such option: --bogus-option\n")
    # only the commands Ganeti reads a variable for
    monkeypatch.setenv("GNT_INSTANCE_INFO", "--bogus-option")
    assert run("gnt-instance", "info", "--help").exit_code == 0


def test_command_help_description_is_not_indented() -> None:
    lines = run("gnt-cluster", "modify", "--help").stdout.split("Options\n")[0].splitlines()
    assert lines[3:] and not any(line.startswith(" ") for line in lines[4:])


def test_interrupted_command_says_jobs_go_on(master: Callable[..., FakeMaster],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    fake = master()

    def interrupted(method: str, *args: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(fake, "call", interrupted)
    result = run("gnt-debug", "delay", "10")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == ("Aborted. Note that if the operation created any jobs, they "
                             "might have been submitted and will continue to run in the "
                             "background.\n")


def test_long_options_may_be_abbreviated_as_with_optparse(
        master: Callable[..., FakeMaster]) -> None:
    fake = master()
    result = run("gnt-instance", "shutdown", "--force-mult", "--subm", "web1", "web2")
    assert (result.exit_code, result.stdout) == (0, "40: web1\n41: web2\n")
    assert len(fake.jobs) == 2
    ambiguous = run("gnt-instance", "startup", "--forc", "web1")
    assert ambiguous.exit_code == 2
    assert ambiguous.stderr.splitlines()[-1] == (
        "gnt-instance: error: ambiguous option: --forc (--force, --force-multiple?)")
    # after "--" nothing is an option: "--forc" is an instance name here
    named = run("gnt-instance", "startup", "--", "--forc")
    assert (named.exit_code, named.stdout) == (0, "Waiting for job 42 for --forc ...\n")
