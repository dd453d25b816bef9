"""Many jobs from one command: submit them together, then wait for each or list them.

A command acting on many objects (``gnt-instance startup --all``) runs one job per
object, submitted in one ``SubmitManyJobs`` call, and prints what Ganeti's tools
print, which scripts read:

- with ``--submit``: ``<job id>: <name>`` per job on stdout (``Failure for <name>:
  <why>`` on stderr for a job the master refused);
- otherwise ``Submitted jobs 4, 5, 6`` (only when ``verbose``: more than one object
  or a selection other than names), then ``Waiting for job 4 for <name> ...`` per job
  on stdout followed by that job's log, and ``Job 4 for <name> has failed: <Ganeti's
  error text>`` (see :func:`corral.errors.failure_text`) on stderr for each job that
  failed.

:func:`run_jobs` returns whether every job was submitted and succeeded; the commands
exit with 1 otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import click

from corral.cli.jobs import LuxiCaller, StdioReporter, poll_job
from corral.errors import CorralError, failure_text

__all__ = ["run_jobs", "wait_jobs"]


def _for(name: str) -> str:
    return f" for {name}" if name else ""


def run_jobs(client: LuxiCaller, jobs: Sequence[tuple[str, Sequence[Mapping[str, Any]]]],
             *, wait: bool = True, verbose: bool = True,
             reporter: StdioReporter | None = None) -> bool:
    """Submit ``jobs`` (a name and the opcodes of each) and wait for them, or with
    ``wait=False`` only print their ids; True if all were submitted (and succeeded)."""
    answer = client.call("SubmitManyJobs", [[dict(op) for op in ops] for _, ops in jobs])
    submitted = [(name, bool(ok), data)
                 for (name, _), (ok, data) in zip(jobs, answer, strict=True)]
    if not wait:
        for name, ok, data in submitted:
            if ok:
                click.echo(f"{data}: {name}")
            else:
                click.echo(f"Failure for {name}: {data}", err=True)
        return all(ok for _, ok, _ in submitted)
    return all(ok for ok, _ in wait_jobs(client, submitted, verbose=verbose,
                                         reporter=reporter))


def wait_jobs(client: LuxiCaller, submitted: Sequence[tuple[str, bool, Any]], *,
              verbose: bool = True, reporter: StdioReporter | None = None
              ) -> list[tuple[bool, Any]]:
    """Wait for jobs already submitted (``(name, accepted, job id or why not)`` each),
    printing what Ganeti's tools print (see the module doc); per job, whether it was
    submitted and succeeded, and its opcode results (or the error text)."""
    job_ids = [data for _, ok, data in submitted if ok]
    if verbose and job_ids:
        click.echo(f"Submitted jobs {', '.join(str(job_id) for job_id in job_ids)}")
    results: list[tuple[bool, Any]] = []
    for name, ok, data in submitted:
        if not ok:
            click.echo(f"Failed to submit job{_for(name)}: {data}", err=True)
    for name, ok, data in submitted:
        if not ok:
            results.append((False, data))
            continue
        click.echo(f"Waiting for job {data}{_for(name)} ...")
        try:
            results.append((True, poll_job(client, int(data), reporter)))
        except CorralError as err:
            text = failure_text(err)
            click.echo(f"Job {data}{_for(name)} has failed: {text}", err=True)
            results.append((False, text))
    return results
