"""``gnt-debug``: test jobs, jobs from opcode files, and a view of the master daemon's
locks.

``submit-job FILE...`` reads each file, a JSON list of opcodes in dict form, and
submits one job per file (``--op-repeat`` repeats the opcodes within the job,
``--job-repeat`` the whole set of jobs), then waits for them, printing Ganeti's
``Waiting for job N for file FILE/REPEAT ...`` lines. Every file is read and checked
to be a list of opcodes before anything is submitted; the master checks the opcodes'
parameters. As in Ganeti, a failed job is reported on stderr but the command still
exits 0; ``--each`` submits the jobs one call at a time (Ganeti 3.0 fails on it).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from corral import __version__
from corral.cli.common import CorralGroup, get_client, reason_trail
from corral.cli.jobs import (
    Formatter,
    LuxiCaller,
    exit_with,
    generic_list,
    make_op,
    poll_job,
    submit_and_wait,
)
from corral.cli.options import (
    FieldSelection,
    dry_run_option,
    no_headers_option,
    output_fields_option,
    print_jobid_option,
    priority_option,
    reason_option,
    resolve_fields,
    separator_option,
    submit_option,
)
from corral.errors import CorralError, ParameterError
from corral.objects.params import parse_size

__all__ = ["LOCK_FIELDS", "main"]

TOOL = "gnt-debug"

#: ``gnt-debug locks`` columns without ``-o`` (Ganeti's).
LOCK_FIELDS = ("name", "mode", "owner", "pending")


@click.group(cls=CorralGroup)
@click.version_option(__version__, prog_name=TOOL)
def cli() -> None:
    """Debugging aids: delay (a test job), iallocator, submit-job, locks."""


@cli.command()
@click.option("--no-master", "on_master", flag_value=False, default=True,
              help="Do not sleep in the master daemon.")
@click.option("-n", "on_nodes", metavar="NODE", multiple=True,
              help="Also sleep on NODE, in its node daemon; repeatable.")
@click.option("-r", "--repeat", type=click.IntRange(min=0), default=0, show_default=True,
              help="Number of times to repeat the sleep.")
@click.option("-i", "--interruptible", is_flag=True,
              help="Sleep in the master daemon only, interruptible by writing to the Unix "
                   "socket named in the job log (delay-test entry) or by gnt-job cancel.")
@click.option("-l", "--no-locks", is_flag=True,
              help="Do not take locks while sleeping.")
@dry_run_option
@priority_option
@submit_option
@print_jobid_option
@reason_option
@click.argument("duration", type=click.FloatRange(min=0))
def delay(duration: float, on_master: bool, on_nodes: tuple[str, ...], repeat: int,
          interruptible: bool, no_locks: bool, dry_run: bool, priority: int | None,
          submit_only: bool, print_jobid: bool, reason: str | None) -> None:
    """Run a job that sleeps DURATION seconds (OP_TEST_DELAY)."""
    params: dict[str, Any] = {"duration": duration, "on_master": on_master,
                              "on_nodes": list(on_nodes), "repeat": repeat,
                              "no_locks": no_locks}
    if interruptible:
        params["interruptible"] = True
    op = make_op("OP_TEST_DELAY", params, trail=reason_trail(TOOL, "delay", reason),
                 priority=priority, dry_run=dry_run)
    with get_client() as client:
        submit_and_wait(client, [op], submit_only=submit_only, print_jobid=print_jobid)


def read_opcode_file(path: str) -> list[dict[str, Any]]:
    """The opcodes of one ``submit-job`` file: a JSON list of opcode dicts, each with
    its ``OP_ID``; anything else is a :class:`ParameterError` naming the file."""
    from corral import serializer  # msgspec: only when JSON is read or written

    try:
        data = serializer.loads(Path(path).read_bytes())
    except OSError as err:
        raise ParameterError(f"cannot read opcode file {path}: {err.strerror}") from None
    except ValueError as err:
        raise ParameterError(f"opcode file {path} is not valid JSON: {err}") from None
    if not isinstance(data, list) or not data:
        raise ParameterError(f"opcode file {path} must hold a non-empty JSON list of "
                             "opcodes, e.g. [{\"OP_ID\": \"OP_TEST_DELAY\", \"duration\": 1}]")
    for index, op in enumerate(data):
        if not isinstance(op, dict) or not isinstance(op.get("OP_ID"), str):
            raise ParameterError(f"opcode {index} in {path} is not an object with an "
                                 "OP_ID string")
    return data


def _with_options(op: Mapping[str, Any], trail: list[list[Any]], priority: int | None,
                  dry_run: bool) -> dict[str, Any]:
    """``op`` with the command's generic options: its reason trail extended by the
    command's, priority when given, dry run when asked (Ganeti's generic opcode
    options)."""
    result = dict(op)
    result["reason"] = [*(op.get("reason") or []), *trail]
    if priority is not None:
        result["priority"] = priority
    if dry_run:
        result["dry_run"] = True
    return result


def _submit(client: LuxiCaller, jobs: Sequence[tuple[str, list[dict[str, Any]]]],
            each: bool) -> list[tuple[str, int]]:
    """Submit ``jobs`` in one ``SubmitManyJobs`` call, or with ``each`` one
    ``SubmitJob`` call per job; the names and ids of those the master accepted (the
    others are reported on stderr)."""
    if each:
        return [(name, int(client.call("SubmitJob", ops))) for name, ops in jobs]
    answer = client.call("SubmitManyJobs", [ops for _, ops in jobs])
    accepted = []
    for (name, _), (ok, data) in zip(jobs, answer, strict=True):
        if ok:
            accepted.append((name, int(data)))
        else:
            click.echo(f"Failed to submit job for {name}: {data}", err=True)
    return accepted


def _wait_all(client: LuxiCaller, submitted: Sequence[tuple[str, int]]) -> None:
    """Follow each job in turn; a failed one is reported on stderr."""
    for name, job_id in submitted:
        click.echo(f"Waiting for job {job_id} for {name} ...")
        try:
            poll_job(client, job_id)
        except CorralError as err:
            click.echo(f"Job {job_id} for {name} has failed: Failure: {err.message}", err=True)


@cli.command("submit-job")
@click.option("-v", "--verbose", is_flag=True, help="Also print the ids of the jobs submitted.")
@click.option("--op-repeat", "op_repeat", type=click.IntRange(min=1), default=1,
              metavar="N", help="Repeat the opcodes of each file N times within its job.")
@click.option("--job-repeat", "job_repeat", type=click.IntRange(min=1), default=1,
              metavar="N", help="Submit the set of jobs N times.")
@click.option("--timing-stats", is_flag=True,
              help="Print counts and how long submitting and running took.")
@click.option("--each", is_flag=True, help="Submit each job in its own call.")
@dry_run_option
@priority_option
@reason_option
@click.argument("files", nargs=-1, required=True, metavar="OP_LIST_FILE...")
def submit_job(files: tuple[str, ...], verbose: bool, op_repeat: int, job_repeat: int,
               timing_stats: bool, each: bool, dry_run: bool, priority: int | None,
               reason: str | None) -> None:
    """Submit one job per OP_LIST_FILE (a JSON list of opcodes) and wait for them."""
    if timing_stats:
        click.echo("Loading...")
    trail = reason_trail(TOOL, "submit-job", reason)
    loaded = [(path, read_opcode_file(path)) for path in files]
    jobs: list[tuple[str, list[dict[str, Any]]]] = [
        (f"file {path}/{repeat}",
         [_with_options(op, trail, priority, dry_run) for op in ops] * op_repeat)
        for repeat in range(job_repeat) for path, ops in loaded
    ]
    start = time.monotonic()
    if timing_stats:
        click.echo("Submitting...")
    with get_client() as client:
        submitted = _submit(client, jobs, each)
        if verbose and submitted:
            click.echo(f"Submitted jobs {', '.join(str(job_id) for _, job_id in submitted)}")
        executing = time.monotonic()
        if timing_stats:
            click.echo("Executing...")
        _wait_all(client, submitted)
    end = time.monotonic()
    if timing_stats:
        click.echo(f"C:op     {sum(len(ops) for _, ops in jobs):4d}")
        click.echo(f"C:job    {len(jobs):4d}")
        click.echo(f"T:submit {executing - start:4.4f}")
        click.echo(f"T:exec   {end - executing:4.4f}")
        click.echo(f"T:total  {end - start:4.4f}")


_ALLOCATOR_MODES = ("node-evacuate", "relocate", "change-group", "multi-allocate",
                    "allocate-secondary", "allocate")


@cli.command()
@click.option("--dir", "direction", type=click.Choice(["in", "out"]), default="in",
              show_default=True, help="Show the allocator's input (in) or its answer (out).")
@click.option("-I", "--iallocator", metavar="NAME",
              help="The allocator to run (for --dir out): a plugin or 'corral'.")
@click.option("-m", "--mode", type=click.Choice(_ALLOCATOR_MODES), default="relocate",
              show_default=True, help="The request type.")
@click.option("--memory", default="128", show_default=True, metavar="SIZE",
              help="Memory of the instance (MiB or a unit: 1G).")
@click.option("--disks", default="4096,4096", show_default=True, metavar="SIZE,...",
              help="Comma-separated disk sizes (MiB or units).")
@click.option("-t", "--disk-template", metavar="TEMPLATE", help="Disk template.")
@click.option("--nics", default="00:11:22:33:44:55", show_default=True,
              metavar="MAC/IP/BRIDGE,...",
              help="Comma-separated NICs, each mac/ip/bridge (missing parts are none).")
@click.option("-o", "--os-type", "os_type", metavar="OS", help="The instance's OS.")
@click.option("-p", "--vcpus", type=int, default=1, show_default=True,
              help="Virtual CPUs of the instance.")
@click.option("--tags", metavar="TAG,...", help="Comma-separated tags.")
@click.option("--evac-mode", type=click.Choice(["all", "primary-only", "secondary-only"]),
              default="all", show_default=True, help="Node evacuation mode.")
@click.option("--target-groups", multiple=True, metavar="GROUP",
              help="Target group of a change-group request; repeatable.")
@click.option("--spindle-use", type=int, default=1, show_default=True,
              help="Spindles the instance uses.")
@click.option("--count", type=int, default=2, show_default=True,
              help="Instances of a multi-allocate request.")
@dry_run_option
@priority_option
@reason_option
@click.argument("names", nargs=-1, required=True, metavar="INSTANCE_NAME...")
def iallocator(names: tuple[str, ...], direction: str, iallocator: str | None, mode: str,
               memory: str, disks: str, disk_template: str | None, nics: str,
               os_type: str | None, vcpus: int, tags: str | None, evac_mode: str,
               target_groups: tuple[str, ...], spindle_use: int, count: int, dry_run: bool,
               priority: int | None, reason: str | None) -> None:
    """Build an allocator request (OP_TEST_ALLOCATOR) and print its input, or run an
    allocator on it and print the answer as it came."""
    try:
        sizes = [parse_size(size) for size in disks.split(",")]
        memory_mib = parse_size(memory)
    except CorralError as err:
        raise ParameterError(f"Invalid disks or memory parameter: {err.message}") from None
    nic_list = []
    for text in nics.split(","):
        parts = [part or None for part in text.split("/")] + [None, None, None]
        nic_list.append({"mac": parts[0], "ip": parts[1], "bridge": parts[2]})
    params: dict[str, Any] = {
        "direction": direction, "mode": mode, "name": names[0], "instances": list(names),
        "memory": memory_mib, "disks": [{"size": size, "mode": "rw"} for size in sizes],
        "disk_template": disk_template, "nics": nic_list, "os": os_type, "vcpus": vcpus,
        "tags": [t for t in (tags or "").split(",") if t], "iallocator": iallocator,
        "evac_mode": evac_mode, "target_groups": list(target_groups),
        "spindle_use": spindle_use, "count": count}
    op = make_op("OP_TEST_ALLOCATOR", params, trail=reason_trail(TOOL, "iallocator", reason),
                 priority=priority, dry_run=dry_run)
    with get_client() as client:
        results = submit_and_wait(client, [op])
    if results is not None:
        click.echo(str(results[0]))


def _dash_if_empty(fmt: Formatter) -> Formatter:
    return lambda value: fmt(value) if value else "-"


def _pending(value: Any) -> str:
    return ", ".join(f"{mode}:{','.join(map(str, owners))}" for mode, owners in value)


#: Lock columns as Ganeti prints them: "-" when empty, owners comma-separated,
#: pending acquires as "mode:owner,owner".
LOCK_FORMAT: dict[str, Formatter] = {
    "mode": _dash_if_empty(str),
    "owner": _dash_if_empty(lambda v: ",".join(map(str, v))),
    "pending": _dash_if_empty(_pending),
}


@cli.command()
@output_fields_option
@no_headers_option
@separator_option
@click.option("--interval", type=click.IntRange(min=1), default=None,
              help="Repeat every N seconds until interrupted.")
@click.option("-v", "--verbose", is_flag=True,
              help="Verbose marks for missing values, e.g. (unavail).")
def locks(output: FieldSelection | None, no_headers: bool, separator: str | None,
          interval: int | None, verbose: bool) -> None:
    """List the master daemon's locks: name, mode, owners and pending acquires."""
    fields = resolve_fields(output, LOCK_FIELDS)
    with get_client() as client:
        while True:
            code = generic_list(client, "lock", fields, separator=separator,
                                no_headers=no_headers, verbose=verbose, overrides=LOCK_FORMAT)
            if code or not interval:
                break
            click.echo("")
            time.sleep(interval)
    exit_with(code)


def main() -> None:
    """Entry point of ``gnt-debug``."""
    cli(prog_name=TOOL)


if __name__ == "__main__":
    main()
