"""``gnt-job``: list, inspect, follow, cancel, reprioritise and archive jobs."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import click

from corral import __version__
from corral.cli.common import CorralGroup, get_client
from corral.cli.jobs import (
    EXIT_CONFIRMATION,
    Formatter,
    LuxiCaller,
    StdioReporter,
    exit_with,
    format_log_message,
    format_query,
    format_timestamp,
    generic_list,
    list_fields_command,
    parse_job_ids,
    parse_timespec,
    poll_job,
)
from corral.cli.options import (
    FieldSelection,
    common_list_options,
    force_option,
    priority_option,
    resolve_fields,
    yes_do_it_option,
)
from corral.cli.output import format_info
from corral.cli.prompt import ask_user
from corral.errors import CorralError, NotFoundError, ParameterError, failure_text
from corral.jobs.status import FINAL_STATUSES, PENDING_STATUSES
from corral.qlang import make_simple_filter

__all__ = ["DEFAULT_FIELDS", "main"]

TOOL = "gnt-job"

#: ``gnt-job list`` columns without ``-o`` (Ganeti's).
DEFAULT_FIELDS = ("id", "status", "summary")

#: What ``info`` asks for, in Ganeti's order.
_INFO_FIELDS = ["id", "status", "ops", "opresult", "opstatus", "oplog", "opstart", "opexec",
                "opend", "received_ts", "start_ts", "end_ts"]


def _timestamps(value: Any) -> str:
    return str([format_timestamp(ts) for ts in value or ()])


#: Per-field formatting of job lists (Ganeti's): summaries joined by commas,
#: opcode timestamps as a list of formatted times.
LIST_FORMAT: dict[str, Formatter] = {
    "status": str,
    "summary": lambda value: ",".join(value),
    "opstart": _timestamps,
    "opexec": _timestamps,
    "opend": _timestamps,
}


def _status_filter(statuses: Collection[str] | None) -> list[Any] | None:
    return make_simple_filter("status", sorted(statuses or ()))


def _status_choice(*flags: str) -> Callable[[Any], Any]:
    """Mutually exclusive status-selecting flags (``--pending`` ...) → ``status_filter``.

    The parameter is the set of job statuses the flag selects, or None.
    """
    def convert(ctx: click.Context, param: click.Parameter,
                value: str | None) -> frozenset[str] | None:
        return None if value is None else _STATUS_SELECTIONS[value][0]

    def decorate(func: Any) -> Any:
        for flag in reversed(flags):
            func = click.option(f"--{flag}", "status_filter", flag_value=flag, default=None,
                                callback=convert, help=_STATUS_SELECTIONS[flag][1])(func)
        return func
    return decorate


#: The status-selecting flags: statuses selected and help text (Ganeti's sets).
_STATUS_SELECTIONS: dict[str, tuple[frozenset[str], str]] = {
    "pending": (PENDING_STATUSES, "Select jobs pending execution or being canceled."),
    "queued": (frozenset({"queued"}), "Select queued jobs only."),
    "waiting": (frozenset({"waiting"}), "Select waiting jobs only."),
    "running": (frozenset({"running"}), "Show jobs currently running only."),
    "error": (frozenset({"error"}), "Show failed jobs only."),
    "finished": (FINAL_STATUSES, "Show finished jobs only."),
}

_verbose_option = click.option("-v", "--verbose", is_flag=True,
                               help="Verbose marks for missing values, e.g. (unavail).")


@click.group(cls=CorralGroup)
@click.version_option(__version__, prog_name=TOOL)
def cli() -> None:
    """Job queue: list, info, watch, wait, cancel, change-priority, archive."""


@cli.command("list")
@common_list_options
@_verbose_option
@click.option("-F", "--filter", "force_filter", is_flag=True,
              help="Treat the argument as a filter, e.g. 'status == \"error\"'.")
@_status_choice("pending", "running", "error", "finished")
@click.option("--archived", is_flag=True,
              help="Include archived jobs in the list (adds the 'archived' column).")
@click.argument("jobs", nargs=-1, metavar="<job-id>")
def list_(jobs: tuple[str, ...], output: FieldSelection | None, no_headers: bool,
          separator: str | None, units: str | None, as_json: bool, verbose: bool,
          force_filter: bool, status_filter: frozenset[str] | None, archived: bool) -> None:
    """List jobs (all, or the JOB ids or a filter given); default columns id, status, summary."""
    fields = resolve_fields(output, DEFAULT_FIELDS)
    if archived and "archived" not in fields:
        fields.append("archived")
    with get_client() as client:
        code = generic_list(
            client, "job", fields, jobs, namefield="id", numeric=True,
            force_filter=force_filter, qfilter=_status_filter(status_filter),
            separator=separator, no_headers=no_headers, units=units, verbose=verbose,
            as_json=as_json, overrides=LIST_FORMAT,
        )
    exit_with(code)


cli.add_command(list_fields_command("job", "jobs", lambda: get_client()))


def _delta(start: Any, end: Any) -> float:
    return float(end[0] - start[0]) + float(end[1] - start[1]) / 1e6


def _job_timestamp(name: str, ts: Any, prior: Any = None) -> tuple[str, str, str]:
    if ts is None:
        return (name, "unknown (None)", "job_timestamp")
    delta = f" (delta {_delta(prior, ts):.6f}s)" if prior is not None else ""
    return (name, f"{format_timestamp(ts)}{delta}", "job_timestamp")


def _op_timestamp(name: str, ts: Any) -> tuple[str, str, str]:
    text = format_timestamp(ts) if isinstance(ts, list | tuple) else "N/A"
    return (name, text, "opcode_timestamp")


def _job_layout(row: list[Any]) -> list[tuple[Any, ...]]:
    """One job in ``gnt-job info``'s layout (Ganeti's keys and order)."""
    (job_id, status, ops, opresult, opstatus, oplog, opstart, opexec, opend,
     received, started, ended) = row
    info: list[tuple[Any, ...]] = [
        ("Job ID", job_id),
        ("Status", status),
        _job_timestamp("Received", received),
        _job_timestamp("Processing start", started, received),
        _job_timestamp("Processing end", ended, started),
    ]
    if ended is not None and received is not None:
        info.append(("Total processing time", f"{_delta(received, ended):.6f} seconds"))
    else:
        info.append(("Total processing time", "N/A"))
    opcodes = []
    for op, result, op_status, log, s_ts, x_ts, e_ts in zip(
        ops, opresult, opstatus, oplog, opstart, opexec, opend, strict=False
    ):
        entries = [
            [("Time", format_timestamp(log_ts)),
             ("Content", (serial, log_type, format_log_message(log_type, message)))]
            for serial, log_ts, log_type, message in log
        ]
        opcodes.append([
            ("Opcode", op["OP_ID"]),
            ("Status", op_status),
            _op_timestamp("Processing start", s_ts),
            _op_timestamp("Execution start", x_ts),
            _op_timestamp("Processing end", e_ts),
            ("Input fields", op),
            ("Result", result),
            ("Execution log", entries),
        ])
    info.append(("Opcodes", opcodes))
    return info


@cli.command()
@click.argument("jobs", nargs=-1, required=True)
def info(jobs: tuple[str, ...]) -> None:
    """Show the details of each JOB: times, opcodes with parameters, results and logs."""
    ids = parse_job_ids(jobs)
    qfilter = make_simple_filter("id", ids)
    with get_client() as client:
        response = client.call("Query", "job", _INFO_FIELDS, qfilter)
    found: dict[int, list[Any]] = {}
    for row in response["data"]:
        if row[0][0] == 0 and row[1][0] == 0:
            found[row[0][1]] = [value for _, value in row]
    layouts = [_job_layout(found[i]) for i in ids if i in found]
    if layouts:
        click.echo(format_info(layouts))
    missing = [str(i) for i in ids if i not in found]
    if missing:
        raise NotFoundError(
            f"job {', '.join(missing)} not found; see 'gnt-job list' (archived jobs "
            "need 'gnt-job list --archived')"
        )


def _follow(job: str, quiet: bool) -> None:
    (job_id,) = parse_job_ids([job])
    with get_client() as client:
        try:
            poll_job(client, job_id, StdioReporter(quiet=quiet))
        except NotFoundError as err:  # Ganeti's JobLost
            click.echo(f"Job {job_id} failed: Error checking job status: {err.message}",
                       err=True)
            exit_with(1)
        except CorralError as err:
            click.echo(f"Job {job_id} failed: {failure_text(err)}", err=True)
            exit_with(err.exit_code)


@cli.command()
@click.argument("job")
def watch(job: str) -> None:
    """Follow JOB and print its log messages as they arrive, until it ends."""
    title = f"Output from job {job} follows"
    click.echo(title)
    click.echo("-" * len(title))
    _follow(job, quiet=False)


@cli.command()
@click.argument("job")
def wait(job: str) -> None:
    """Wait for JOB to end without printing its messages; fail if the job failed."""
    _follow(job, quiet=True)


def _multi_job_action(
    client: LuxiCaller, jobs: tuple[str, ...], status_filter: frozenset[str] | None,
    force: bool, question: str, action: Callable[[int], Any],
) -> int:
    """Apply ``action`` to the jobs named or selected by status (never both)."""
    if bool(jobs) == (status_filter is not None):
        raise ParameterError(
            "Either a status filter or job ID(s) must be specified and never both\n"
            "give job ids or a status selection (--pending, --queued, --waiting)"
        )
    if status_filter is not None:
        response = client.call("Query", "job", ["id", "status", "summary"],
                               _status_filter(status_filter))
        ids = [row[0][1] for row in response["data"]]
        if not ids:
            raise NotFoundError("no jobs with the requested status were found")
        if not force:
            for line in format_query(response, overrides=LIST_FORMAT):
                click.echo(line)
            if not ask_user(question):
                return EXIT_CONFIRMATION
    else:
        ids = parse_job_ids(jobs)
    code = 0
    for job_id in ids:
        success, message = action(job_id)
        if not success:
            code = 1
        click.echo(message)
    return code


@cli.command()
@force_option
@click.option("--kill", is_flag=True, help="Kill running jobs too (needs --yes-do-it).")
@_status_choice("pending", "queued", "waiting")
@yes_do_it_option
@click.argument("jobs", nargs=-1)
def cancel(jobs: tuple[str, ...], force: bool, kill: bool,
           status_filter: frozenset[str] | None, yes_do_it: bool) -> None:
    """Cancel jobs that have not started running (JOB ids or a status selection)."""
    if kill and not yes_do_it:
        raise ParameterError("the --kill option must be confirmed with --yes-do-it")
    name = "KILL" if kill else "Cancel"
    with get_client() as client:
        code = _multi_job_action(
            client, jobs, status_filter, force, f"{name} job(s) listed above?",
            lambda job_id: client.call("CancelJob", job_id, kill),
        )
    exit_with(code)


@cli.command("change-priority")
@priority_option
@force_option
@_status_choice("pending", "queued", "waiting")
@click.argument("jobs", nargs=-1)
def change_priority(jobs: tuple[str, ...], priority: int | None, force: bool,
                    status_filter: frozenset[str] | None) -> None:
    """Change the priority of jobs that have not finished (--priority low|normal|high)."""
    if priority is None:
        click.echo("--priority option must be given.", err=True)
        exit_with(1)
        return
    with get_client() as client:
        code = _multi_job_action(
            client, jobs, status_filter, force, "Change priority of job(s) listed above?",
            lambda job_id: client.call("ChangeJobPriority", job_id, priority),
        )
    exit_with(code)


@cli.command()
@click.argument("jobs", nargs=-1, required=True)
def archive(jobs: tuple[str, ...]) -> None:
    """Move finished JOBs to the archive (they leave the default 'list')."""
    ids = parse_job_ids(jobs)
    code = 0
    with get_client() as client:
        for job_id in ids:
            if not client.call("ArchiveJob", job_id):
                click.echo(f"Failed to archive job with ID '{job_id}'", err=True)
                code = 1
    exit_with(code)


@cli.command()
@click.argument("age")
def autoarchive(age: str) -> None:
    """Archive finished jobs older than AGE (e.g. 30s, 1d, 4w), or 'all'."""
    seconds = -1 if age == "all" else parse_timespec(age)
    with get_client() as client:
        archived, left = client.call("AutoArchiveJobs", seconds, 30.0)
    click.echo(f"Archived {archived} jobs, {left} unchecked left")


cli.add_command(info, "show")


def main() -> None:
    """Entry point of ``gnt-job``."""
    cli(prog_name=TOOL)


if __name__ == "__main__":
    main()
