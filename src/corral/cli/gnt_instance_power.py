"""``gnt-instance startup``, ``shutdown`` and ``reboot``: one instance or many at once.

Each takes instance names, or a selector (``--all``, ``--node``, ``--tags``, ...; see
:mod:`corral.cli.selection`) and runs one job per instance. When more than one
instance is affected, or a selector other than names was used, the command first
asks on the terminal, listing the instances (Ganeti's rules; without a terminal the
answer is no and the command exits with 1) unless ``--force-multiple`` is given.
The jobs' output is Ganeti's (see :mod:`corral.cli.jobset`); any failed job makes
the exit code 1.

:mod:`corral.cli.gnt_instance` adds these commands (and the aliases ``start`` and
``stop``) to the tool.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from corral.cli.common import get_client, reason_trail
from corral.cli.jobs import exit_with, make_op
from corral.cli.jobset import run_jobs
from corral.cli.keyval import KeyValDict
from corral.cli.options import (
    KeyValType,
    dry_run_option,
    force_option,
    print_jobid_option,
    priority_option,
    reason_option,
    submit_option,
)
from corral.cli.prompt import confirm_operation
from corral.cli.selection import SelectionMode, expand_instances, selection_options
from corral.objects.params import BE_PARAMS, validate_params

__all__ = [
    "DEFAULT_SHUTDOWN_TIMEOUT", "backend_overrides", "reboot", "run_many", "shutdown", "startup",
]

TOOL = "gnt-instance"

#: Ganeti's default shutdown timeout, seconds.
DEFAULT_SHUTDOWN_TIMEOUT = 120

F = TypeVar("F", bound=Callable[..., Any])


def _job_options(func: F) -> F:
    """``--submit``, ``--print-jobid``, ``--priority``, ``--reason``, ``--dry-run``.

    ``--print-jobid`` is accepted, as by Ganeti, and changes nothing: these commands
    print every job id anyway.
    """
    for decorator in (dry_run_option, reason_option, priority_option, print_jobid_option,
                      submit_option):
        func = decorator(func)
    return func


def _ignore_offline_option(func: F) -> F:
    return click.option("--ignore-offline", "ignore_offline", is_flag=True,
                        help="Ignore offline nodes and do as much as possible.")(func)


def backend_overrides(values: KeyValDict | None) -> dict[str, Any] | None:
    """``-B`` values checked and typed here, as Ganeti's client does (sizes become MiB;
    ``-key`` and ``key=default`` become None: back to the default)."""
    if values is None:
        return None
    return validate_params("backend", BE_PARAMS, values, instance_level=True)


def run_many(verb: str, op_id: str, names: Sequence[str], selection: SelectionMode,
             build: Callable[[str], dict[str, Any]], *, force_multiple: bool,
             submit_only: bool, priority: int | None, reason: str | None,
             dry_run: bool) -> None:
    """Select the instances, confirm if needed, run one ``op_id`` job per instance.

    ``build(name)`` gives the opcode's fields for one instance; the exit code is 1
    when the user declines or any job fails.
    """
    with get_client() as client:
        chosen = expand_instances(client, selection, names)
        if not chosen:  # only --all on a cluster without instances
            # Ganeti's words, whatever the command: scripts may look for them.
            click.echo("Cluster is empty, no instances to shutdown")
            return
        several = selection is not SelectionMode.INSTANCES or len(chosen) > 1
        if several and not force_multiple and not confirm_operation(chosen, "instances",
                                                                    verb):
            exit_with(1)
        trail = reason_trail(TOOL, verb, reason)
        jobs = [(name, [make_op(op_id, build(name), trail=trail, priority=priority,
                                dry_run=dry_run)]) for name in chosen]
        ok = run_jobs(client, jobs, wait=not submit_only, verbose=several)
    exit_with(0 if ok else 1)


@click.command()
@force_option
@selection_options
@_job_options
@click.option("-H", "--hypervisor-parameters", "hvparams", type=KeyValType(), default=None,
              help="Hypervisor parameters for this start only: key=val,...")
@click.option("-B", "--backend-parameters", "beparams", type=KeyValType(), default=None,
              help="Backend parameters for this start only: key=val,...")
@_ignore_offline_option
@click.option("--no-remember", is_flag=True,
              help="Start it but keep its configured state (down).")
@click.option("--paused", "startup_paused", is_flag=True, help="Start the instance paused.")
@click.argument("names", nargs=-1)
def startup(names: tuple[str, ...], selection: SelectionMode, force: bool,
            force_multiple: bool, hvparams: KeyValDict | None, beparams: KeyValDict | None,
            startup_paused: bool, no_remember: bool, ignore_offline: bool, submit_only: bool,
            print_jobid: bool, priority: int | None, reason: str | None,
            dry_run: bool) -> None:
    """Start instances: those NAMES, or those a selector chooses."""
    be_checked = backend_overrides(beparams)

    def build(name: str) -> dict[str, Any]:
        body: dict[str, Any] = {"instance_name": name, "force": force,
                                "ignore_offline_nodes": ignore_offline,
                                "no_remember": no_remember, "startup_paused": startup_paused}
        if hvparams:
            body["hvparams"] = dict(hvparams)
        if beparams:
            body["beparams"] = be_checked
        return body
    run_many("startup", "OP_INSTANCE_STARTUP", names, selection, build,
             force_multiple=force_multiple, submit_only=submit_only, priority=priority,
             reason=reason, dry_run=dry_run)


@click.command()
@force_option
@selection_options
@click.option("--timeout", "timeout", type=click.IntRange(min=0),
              default=DEFAULT_SHUTDOWN_TIMEOUT, show_default=True,
              help="Seconds to wait for a clean shutdown before forcing it.")
@_job_options
@_ignore_offline_option
@click.option("--no-remember", is_flag=True,
              help="Stop it but keep its configured state (up).")
@click.argument("names", nargs=-1)
def shutdown(names: tuple[str, ...], selection: SelectionMode, force: bool,
             force_multiple: bool, timeout: int, no_remember: bool, ignore_offline: bool,
             submit_only: bool, print_jobid: bool, priority: int | None,
             reason: str | None, dry_run: bool) -> None:
    """Stop instances: those NAMES, or those a selector chooses."""
    def build(name: str) -> dict[str, Any]:
        return {"instance_name": name, "force": force, "timeout": timeout,
                "ignore_offline_nodes": ignore_offline, "no_remember": no_remember}
    run_many("shutdown", "OP_INSTANCE_SHUTDOWN", names, selection, build,
             force_multiple=force_multiple, submit_only=submit_only, priority=priority,
             reason=reason, dry_run=dry_run)


@click.command()
@selection_options
@click.option("-t", "--type", "reboot_type", type=click.Choice(["soft", "hard", "full"]),
              default="hard", show_default=True,
              help="soft: inside the guest; hard: restart the VM; full: stop and start.")
@click.option("--ignore-secondaries", is_flag=True,
              help="Ignore errors from secondary nodes (full reboot).")
@click.option("--shutdown-timeout", "shutdown_timeout", type=click.IntRange(min=0),
              default=DEFAULT_SHUTDOWN_TIMEOUT, show_default=True,
              help="Seconds to wait for the instance to shut down.")
@_job_options
@click.argument("names", nargs=-1)
def reboot(names: tuple[str, ...], selection: SelectionMode, force_multiple: bool,
           reboot_type: str, ignore_secondaries: bool, shutdown_timeout: int,
           submit_only: bool, print_jobid: bool, priority: int | None, reason: str | None,
           dry_run: bool) -> None:
    """Reboot instances: those NAMES, or those a selector chooses."""
    def build(name: str) -> dict[str, Any]:
        return {"instance_name": name, "reboot_type": reboot_type,
                "ignore_secondaries": ignore_secondaries,
                "shutdown_timeout": shutdown_timeout}
    run_many("reboot", "OP_INSTANCE_REBOOT", names, selection, build,
             force_multiple=force_multiple, submit_only=submit_only, priority=priority,
             reason=reason, dry_run=dry_run)
