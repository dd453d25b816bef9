"""``gnt-cluster verify-disks``: which instances' disks need activating, which are lost.

As Ganeti's: the command submits ``OP_CLUSTER_VERIFY_DISKS``, which submits one job
per node group; it waits for them (``Submitted jobs N, M``, ``Waiting for job N
...``), then, per group, reports the nodes that could not tell, activates the disks
of the instances that need it (``Activating disks for instance 'X'``), lists the
missing volumes and says what to do. Exit code 1 when a node could not tell, a
volume is missing, an activation failed or a job failed; 0 otherwise. A cluster
without instances submits no job and prints nothing.

:mod:`corral.cli.gnt_cluster` adds the command to the tool.
"""

from __future__ import annotations

from typing import Any

import click

from corral.cli.common import get_client, reason_trail
from corral.cli.jobs import LuxiCaller, exit_with, make_op, poll_job, submit_and_wait
from corral.cli.options import priority_option, reason_option
from corral.errors import CorralError, failure_text

__all__ = ["verify_disks"]

TOOL = "gnt-cluster"


def _volume(text: str) -> str:
    """How Ganeti prints a missing volume: ``/dev/vg/lv``; corral's paths as they are."""
    return text if text.startswith("/") else f"/dev/{text}"


def _wait(client: LuxiCaller, submitted: list[list[Any]]) -> list[tuple[bool, Any]]:
    """Wait for the submitted jobs, printing Ganeti's lines; per job: succeeded, and
    its results or its error text."""
    job_ids = [value for ok, value in submitted if ok]
    if job_ids:
        click.echo(f"Submitted jobs {', '.join(str(j) for j in job_ids)}")
    outcome: list[tuple[bool, Any]] = []
    for ok, value in submitted:
        if not ok:
            outcome.append((False, value))
            continue
        click.echo(f"Waiting for job {value} ...")
        try:
            outcome.append((True, poll_job(client, int(value))))
        except CorralError as err:
            outcome.append((False, err.message))
    return outcome


def _activate(client: LuxiCaller, name: str, reason: str | None,
              priority: int | None) -> int:
    click.echo(f"Activating disks for instance '{name}'")
    op = make_op("OP_INSTANCE_ACTIVATE_DISKS", {"instance_name": name},
                 trail=reason_trail(TOOL, "verify-disks", reason), priority=priority)
    try:
        submit_and_wait(client, [op])
    except CorralError as err:
        click.echo(f"Error activating disks for instance {name}: {failure_text(err)}",
                   err=True)
        return err.exit_code
    return 0


def _report(client: LuxiCaller, result: list[Any], reason: str | None,
            priority: int | None) -> int:
    """Act on one group's answer; its exit code."""
    bad_nodes, instances, missing = result
    code = 0
    for node, text in sorted(bad_nodes.items()):
        click.echo(f"Error gathering data on node {node}: {str(text)[-400:]}")
        code = 1
        click.echo("You need to fix these nodes first before fixing instances")
    for name in instances:
        if name not in missing:
            code |= _activate(client, name, reason, priority)
    if missing:
        for name, volumes in sorted(missing.items()):
            if all(node in bad_nodes for node, _vol in volumes):
                click.echo(f"Instance {name} cannot be verified as it lives on broken "
                           "nodes")
                continue
            click.echo(f"Instance {name} has missing logical volumes:")
            for node, volume in sorted(volumes):
                broken = "broken node " if node in bad_nodes else ""
                click.echo(f"\t{broken}{node} {_volume(volume)}")
        click.echo("You need to replace or recreate disks for all the above instances if "
                   "this message persists after fixing broken nodes.")
        code = 1
    elif not instances:
        click.echo("No disks need to be activated.")
    return code


@click.command("verify-disks")
@priority_option
@click.option("-g", "--node-group", "nodegroup", metavar="<nodegroup>",
              help="Node group (name or uuid)")
@reason_option
def verify_disks(priority: int | None, nodegroup: str | None, reason: str | None) -> None:
    """Does a check on the cluster disk status"""
    params: dict[str, Any] = {}
    if nodegroup is not None:
        params["group_name"] = nodegroup
    op = make_op("OP_CLUSTER_VERIFY_DISKS", params,
                 trail=reason_trail(TOOL, "verify-disks", reason), priority=priority)
    code = 0
    with get_client() as client:
        results = submit_and_wait(client, [op])
        assert results is not None
        submitted = list((results[0] or {}).get("jobs") or [])
        for ok, value in _wait(client, submitted):
            if not ok:
                click.echo(f"Job failed: {value}")
                code = 1
                continue
            code |= _report(client, value[0], reason, priority)
    if code:
        exit_with(code)
