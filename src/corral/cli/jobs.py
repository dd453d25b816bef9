"""Jobs and queries as the gnt-* tools see them: submit, follow, list.

Two halves, both shaped by what Ganeti's tools print, because administrators'
scripts read that output:

- **Jobs.** :func:`make_op` builds an opcode in Ganeti's dict form with the
  command's reason trail and priority; :func:`submit_and_wait` submits it and either
  prints ``JobID: N`` (``--submit``) or follows the job with ``WaitForJobChange``,
  printing each job log message as ``<ctime> <message>`` on stdout, and returns the
  opcode results or raises the failed opcode's error.
- **Queries.** :func:`generic_list` turns positional names and ``-F`` into a filter,
  runs a luxi ``Query`` and prints the table (:func:`format_query`) with Ganeti's
  per-kind formatting and its marks for values that are not normal.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import click

from corral.cli.common import get_client, reason_trail
from corral.cli.options import no_headers_option, separator_option
from corral.cli.output import effective_units, format_bool, format_table, format_unit
from corral.errors import (
    CorralError,
    MasterUnreachableError,
    NotMasterError,
    ParameterError,
    ProtocolError,
    did_you_mean,
)
from corral.jobs.follow import JOB_RESULT_FIELDS, JobFollower, job_results
from corral.jobs.status import job_error
from corral.qlang import make_filter

__all__ = [
    "EXIT_CONFIRMATION",
    "EXIT_UNKNOWN_FIELD",
    "FIELD_KIND_NAMES",
    "WFJC_TIMEOUT",
    "Formatter",
    "LuxiCaller",
    "StdioReporter",
    "build_name_filter",
    "exit_with",
    "format_log_message",
    "format_query",
    "format_result_status",
    "format_time",
    "format_timestamp",
    "generic_list",
    "generic_list_fields",
    "job_error",
    "make_op",
    "parse_job_ids",
    "parse_timespec",
    "poll_job",
    "submit_and_wait",
]

#: Exit code of a list command that was asked for a field that does not exist.
EXIT_UNKNOWN_FIELD = 14
#: Exit code when the user declined a confirmation question.
EXIT_CONFIRMATION = 13

#: Seconds one ``WaitForJobChange`` call may wait; below the luxi client's timeout.
WFJC_TIMEOUT = 20.0

#: The "Type" column of ``list-fields`` (Ganeti's words for each field kind).
FIELD_KIND_NAMES: dict[str, str] = {
    "unknown": "Unknown",
    "text": "Text",
    "bool": "Boolean",
    "number": "Number",
    "float": "Floating-point number",
    "unit": "Storage size",
    "timestamp": "Timestamp",
    "other": "Custom",
}

# Result statuses of a query value (Ganeti's RS_*): 0 is a normal value; the others
# print as (short, verbose) marks instead of the value.
_RS_NORMAL = 0
_RS_UNKNOWN = 1
_RESULT_MARKS: dict[int, tuple[str, str]] = {
    1: ("??", "(unknown)"),
    2: ("?", "(nodata)"),
    3: ("-", "(unavail)"),
    4: ("*", "(offline)"),
}


class LuxiCaller(Protocol):
    """What the helpers need of a luxi client: ``call(method, *args)``."""

    def call(self, method: str, *args: Any) -> Any:
        """Call ``method`` on the master daemon and return its result."""
        ...


# -- opcodes and submission ----------------------------------------------------------


def make_op(
    op_id: str,
    params: Mapping[str, Any],
    *,
    trail: list[list[Any]],
    priority: int | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """An opcode in Ganeti's dict form with the command's generic options applied.

    ``priority`` and ``dry_run`` are only set when given, so the opcode's defaults
    apply otherwise (as Ganeti's ``SetGenericOpcodeOpts`` does).
    """
    op: dict[str, Any] = {"OP_ID": op_id, **params, "reason": trail}
    if priority is not None:
        op["priority"] = priority
    if dry_run:
        op["dry_run"] = True
    return op


def format_time(seconds: float, usecs: int | None = None) -> str:
    """Local time as ``YYYY-MM-DD HH:MM:SS[.uuuuuu]``, Ganeti's ``FormatTime``."""
    text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))
    if usecs is not None:
        text += f".{int(usecs):06d}"
    return text


def format_timestamp(ts: Any) -> str:
    """A ``[seconds, microseconds]`` pair as text; ``?`` for anything else (as Ganeti)."""
    if not isinstance(ts, list | tuple) or len(ts) != 2:
        return "?"
    return format_time(ts[0], ts[1])


def _merge_time(ts: Any) -> float:
    if isinstance(ts, list | tuple) and len(ts) == 2:
        return float(ts[0]) + float(ts[1]) / 1e6
    return float(ts)


def format_log_message(log_type: str, message: Any) -> str:
    """A job log message as text; non-"message" entries are converted with ``str``."""
    text = message if log_type == "message" and isinstance(message, str) else str(message)
    # Keep control characters from reaching the terminal (Ganeti's SafeEncode).
    return "".join(
        ch if ch in "\n\t" or (ch.isprintable() and ch != "\x7f") else f"\\x{ord(ch):02x}"
        for ch in text
    )


@dataclass
class StdioReporter:
    """Prints a followed job's progress as Ganeti's tools do.

    Log messages go to stdout as ``<ctime> <message>``; a job that has not changed
    for a while is reported once on stderr as waiting in the queue or for locks.
    With ``quiet`` nothing is printed (``gnt-job wait``).
    """

    quiet: bool = False
    _told: set[str] = field(default_factory=set)

    def log_message(self, job_id: int, serial: int, timestamp: Any, log_type: str,
                    message: Any) -> None:
        """Print one job log entry."""
        if self.quiet:
            return
        stamp = time.ctime(_merge_time(timestamp))
        click.echo(f"{stamp} {format_log_message(log_type, message)}")

    def not_changed(self, job_id: int, status: str | None) -> None:
        """Say once why a job is not progressing."""
        if self.quiet or status is None or status in self._told:
            return
        if status == "queued":
            click.echo(f"Job {job_id} is waiting in queue", err=True)
        elif status == "waiting":
            click.echo(f"Job {job_id} is trying to acquire all necessary locks", err=True)
        else:
            return
        self._told.add(status)


def poll_job(client: LuxiCaller, job_id: int, reporter: StdioReporter | None = None) -> list[Any]:
    """Follow ``job_id`` until it ends; return its opcode results or raise its error.

    Every log message is printed exactly once (see :class:`JobFollower`).
    """
    report = reporter or StdioReporter()
    follower = JobFollower(job_id)
    while not follower.finished:
        entries = follower.update(
            _follow(client, job_id, "WaitForJobChange", *follower.request(WFJC_TIMEOUT)))
        if entries is None:
            report.not_changed(job_id, follower.status)
            continue
        for serial, timestamp, log_type, message in entries:
            report.log_message(job_id, serial, timestamp, log_type, message)
    return job_results(job_id, client.call("QueryJobs", [job_id], list(JOB_RESULT_FIELDS)))


#: How long a command following a job waits for the master daemon to come back, or
#: for the master role to show up on another node, after losing it (seconds).
RECONNECT_WAIT = 30.0


def _follow(client: LuxiCaller, job_id: int, method: str, *args: Any) -> Any:
    """``client.call(method, *args)`` while following ``job_id``, surviving the loss of
    the master daemon: a planned master failover hands unfinished jobs to the new
    master and stops this one. Reconnecting then either works (the daemon restarted
    here) or says the master is another node: the job goes on there, and the error
    says how to follow it. Gives up after :data:`RECONNECT_WAIT` seconds."""
    try:
        return client.call(method, *args)
    except (MasterUnreachableError, ProtocolError) as err:
        lost: CorralError = err
    deadline = time.monotonic() + RECONNECT_WAIT
    while True:
        close = getattr(client, "close", None)
        if close is not None:
            close()
        try:
            return client.call(method, *args)
        except NotMasterError as err:
            raise NotMasterError(
                f"job {job_id} is not finished and the master daemon here stopped: "
                f"{err.message}. The job continues there; follow it with 'gnt-job watch "
                f"{job_id}' on that node") from None
        except (MasterUnreachableError, ProtocolError) as err:
            lost = err
        if time.monotonic() >= deadline:
            raise MasterUnreachableError(
                f"lost the master daemon while following job {job_id}: {lost.message}; "
                f"the job may still run: 'gnt-job info {job_id}' on the master node tells"
            ) from None
        time.sleep(1.0)


def submit_and_wait(
    client: LuxiCaller,
    ops: Sequence[Mapping[str, Any]],
    *,
    submit_only: bool = False,
    print_jobid: bool = False,
    reporter: StdioReporter | None = None,
) -> list[Any] | None:
    """Submit one job; with ``submit_only`` print ``JobID: N`` and return None.

    Otherwise follow the job (see :func:`poll_job`) and return its opcode results.
    ``print_jobid`` prints the bare id first on stdout, for scripts.
    """
    job_id = int(client.call("SubmitJob", [dict(op) for op in ops]))
    if print_jobid:
        click.echo(str(job_id))
    if submit_only:
        click.echo(f"JobID: {job_id}", err=True)
        return None
    return poll_job(client, job_id, reporter)


def submit_op(
    tool: str,
    verb: str,
    op_id: str,
    params: Mapping[str, Any],
    *,
    reason: str | None = None,
    priority: int | None = None,
    submit_only: bool = False,
    print_jobid: bool = False,
    dry_run: bool = False,
) -> Any:
    """Submit one opcode as one job from ``tool``'s ``verb`` and follow it.

    The opcode carries the tool's reason trail (plus ``reason`` as a user entry);
    returns the opcode's result, or None with ``submit_only``.
    """
    op = make_op(op_id, dict(params), trail=reason_trail(tool, verb, reason),
                 priority=priority, dry_run=dry_run)
    with get_client() as client:
        results = submit_and_wait(client, [op], submit_only=submit_only,
                                  print_jobid=print_jobid)
    return None if results is None else results[0]


def parse_job_ids(args: Iterable[str]) -> list[int]:
    """Job ids from the command line; a bad one is a :class:`ParameterError`."""
    ids = []
    for arg in args:
        try:
            ids.append(int(arg))
        except ValueError:
            raise ParameterError(
                f"invalid job id '{arg}': job ids are whole numbers"
            ) from None
    return ids


_TIMESPEC_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_timespec(text: str) -> int:
    """Seconds in ``N`` or ``N`` followed by s, m, h, d or w (Ganeti's time spec)."""
    if not text:
        raise ParameterError("empty time specification; use N[s|m|h|d|w]")
    multiplier = _TIMESPEC_UNITS.get(text[-1], 1)
    number = text[:-1] if text[-1] in _TIMESPEC_UNITS else text
    if not number.isdigit():
        raise ParameterError(
            f"invalid time specification '{text}'; use a whole number with an optional "
            "suffix s, m, h, d or w (e.g. 4w)"
        )
    return int(number) * multiplier


# -- queries -------------------------------------------------------------------------

#: A column formatter: value -> text. Overrides are given per field name.
Formatter = Callable[[Any], str]


def format_result_status(status: int, verbose: bool = False) -> str:
    """The mark Ganeti prints for a value that is not normal (``-``, or ``(unavail)``)."""
    try:
        short, long = _RESULT_MARKS[status]
    except KeyError:
        raise ValueError(f"unknown result status {status}") from None
    return long if verbose else short


def _kind_formatter(kind: str, units: str) -> tuple[Formatter, bool]:
    """(formatter, align right) for a field kind."""
    if kind == "bool":
        return (lambda v: format_bool(bool(v))), False
    if kind in ("number", "float"):
        return str, True
    if kind == "unit":
        return (lambda v: format_unit(v, units) if isinstance(v, int | float) else str(v)), True
    if kind == "timestamp":
        def fmt(value: Any) -> str:
            if isinstance(value, list | tuple):
                return format_timestamp(value)
            if isinstance(value, int | float):
                return format_time(value)
            return "N/A"
        return fmt, False
    return str, False


def format_query(
    response: Mapping[str, Any],
    *,
    separator: str | None = None,
    no_headers: bool = False,
    units: str | None = None,
    verbose: bool = False,
    overrides: Mapping[str, Formatter] | None = None,
) -> list[str]:
    """A luxi ``Query`` answer as table lines, the way Ganeti's list commands print it.

    Numbers and sizes are right-aligned; booleans print Y/N; sizes follow
    ``--units`` (``h``, or ``m`` with a separator); values that are not normal print
    Ganeti's marks (``??``, ``?``, ``-``, ``*``; with ``verbose`` ``(unknown)``,
    ``(nodata)``, ``(unavail)``, ``(offline)``).
    """
    unit = effective_units(units, separator)
    fields = response["fields"]
    formatters: list[Formatter] = []
    numeric: list[int] = []
    for index, fdef in enumerate(fields):
        fmt, right = _kind_formatter(str(fdef.get("kind", "other")), unit)
        if overrides and fdef["name"] in overrides:
            fmt, right = overrides[fdef["name"]], False
        formatters.append(fmt)
        if right:
            numeric.append(index)
    rows = []
    for row in response["data"]:
        cells = []
        for (status, value), fmt in zip(row, formatters, strict=True):
            if status == _RS_NORMAL:
                cells.append(fmt(value))
            else:
                cells.append(format_result_status(status, verbose))
        rows.append(cells)
    headers = [str(fdef.get("title") or fdef["name"]) for fdef in fields]
    return format_table(headers, rows, separator=separator, no_headers=no_headers,
                        numeric_columns=numeric)


def _unknown_fields(response: Mapping[str, Any]) -> list[str]:
    return [str(f["name"]) for f in response["fields"] if f.get("kind") == "unknown"]


def _warn_unknown_fields(client: LuxiCaller, resource: str, unknown: list[str]) -> None:
    """Ganeti's warning, then corral's hint: the nearest known fields (asked for only
    now, on this error path) and the command that lists them all."""
    from corral.qlang.fields import LIST_FIELDS_COMMANDS

    click.echo(f"Warning: Queried for unknown fields {', '.join(unknown)}", err=True)
    known = [str(f["name"]) for f in client.call("QueryFields", resource, None)["fields"]]
    hint = did_you_mean(unknown, known, noun="known fields",
                        listing=LIST_FIELDS_COMMANDS.get(resource))
    click.echo(f"Hint: {hint}", err=True)


def build_name_filter(
    names: Sequence[str], *, namefield: str = "name", force_filter: bool = False,
    numeric: bool = False,
) -> list[Any] | None:
    """The query filter for a list command's arguments, by Ganeti's rules.

    With ``-F`` (``force_filter``), or one argument that contains a filter
    character (space, quote, ``=``, ``<``, ``>``, ``!``, ``~``, ``(`` ...), the
    argument is parsed as a filter in the text form. Otherwise the names become
    ``name == a or name == b ...``; ``*`` and ``?`` glob within one DNS label;
    ``numeric`` names (job ids) are compared as numbers.
    """
    return make_filter(list(names), force_filter=force_filter, namefield=namefield,
                       isnumeric=numeric)


def _and(*filters: list[Any] | None) -> list[Any] | None:
    present = [f for f in filters if f]
    if not present:
        return None
    if len(present) == 1:
        return present[0]
    return ["&", *present]


def generic_list(
    client: LuxiCaller,
    resource: str,
    fields: Sequence[str],
    names: Sequence[str] = (),
    *,
    namefield: str = "name",
    numeric: bool = False,
    force_filter: bool = False,
    qfilter: list[Any] | None = None,
    separator: str | None = None,
    no_headers: bool = False,
    units: str | None = None,
    verbose: bool = False,
    as_json: bool = False,
    overrides: Mapping[str, Formatter] | None = None,
) -> int:
    """Run ``Query(resource, fields, filter)`` and print it; return the exit code.

    The filter is the names' filter (:func:`build_name_filter`) and ``qfilter``
    together. Unknown fields print a warning on stderr and give exit code 14, as
    Ganeti. ``as_json`` prints corral's own form: a JSON list with one object per
    row mapping field name to value, ``null`` where the value is not normal.
    """
    name_filter = build_name_filter(names, namefield=namefield, force_filter=force_filter,
                                    numeric=numeric)
    response = client.call("Query", resource, list(fields), _and(name_filter, qfilter))
    unknown = _unknown_fields(response)
    if unknown:
        _warn_unknown_fields(client, resource, unknown)
    if as_json:
        names_out = [f["name"] for f in response["fields"]]
        rows = [
            {name: (value if status == _RS_NORMAL else None)
             for name, (status, value) in zip(names_out, row, strict=True)}
            for row in response["data"]
        ]
        from corral import serializer  # msgspec: only when JSON is read or written
        click.echo(serializer.dumps_pretty(rows))
    else:
        for line in format_query(response, separator=separator, no_headers=no_headers,
                                 units=units, verbose=verbose, overrides=overrides):
            click.echo(line)
    if unknown or any(cell[0] == _RS_UNKNOWN for row in response["data"] for cell in row):
        return EXIT_UNKNOWN_FIELD
    return 0


def generic_list_fields(
    client: LuxiCaller, resource: str, fields: Sequence[str], *,
    separator: str | None = None, no_headers: bool = False,
) -> int:
    """``list-fields``: name, type, title and description of the resource's fields."""
    response = client.call("QueryFields", resource, list(fields) or None)
    unknown = _unknown_fields(response)
    if unknown:
        _warn_unknown_fields(client, resource, unknown)
    rows = [
        [f["name"], FIELD_KIND_NAMES.get(str(f.get("kind")), str(f.get("kind"))),
         f.get("title", ""), f.get("doc", "")]
        for f in response["fields"]
    ]
    for line in format_table(["Name", "Type", "Title", "Description"], rows,
                             separator=separator, no_headers=no_headers):
        click.echo(line)
    return EXIT_UNKNOWN_FIELD if unknown else 0


def list_fields_command(
    resource: str, noun: str, connect: Callable[[], Any]
) -> click.Command:
    """The ``list-fields [FIELD...]`` command of a tool listing ``resource`` items.

    ``connect()`` opens the tool's luxi client (a context manager).
    """

    @click.command("list-fields")
    @no_headers_option
    @separator_option
    @click.argument("fields", nargs=-1)
    def list_fields(fields: tuple[str, ...], no_headers: bool, separator: str | None) -> None:
        with connect() as client:
            code = generic_list_fields(client, resource, fields, separator=separator,
                                       no_headers=no_headers)
        exit_with(code)

    list_fields.help = f"List the fields {noun} have (all, or those named)."
    return list_fields


def exit_with(code: int) -> None:
    """Leave the command with ``code`` unless it is 0."""
    if code:
        sys.exit(code)
