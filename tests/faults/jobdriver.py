"""Small luxi helpers the network, disk and clock fault tests drive the cluster with."""

from __future__ import annotations

import time
from typing import Any

from corral.luxi import Client
from tests.faults.invariants import FaultCluster, Ledger

__all__ = ["Outcome", "create_op", "job_log", "job_status", "remove_op", "run_job", "submit",
           "wait_job"]

_FINAL = ("success", "error", "canceled")

#: A finished job: its status and each opcode's result (an error's text for a failure).
Outcome = tuple[str, list[Any]]


def _reason(what: str) -> list[list[Any]]:
    return [["gnt:client:faults", what, time.time_ns()]]


def submit(cluster: FaultCluster, ledger: Ledger, *ops: dict[str, Any]) -> int:
    """Submit one job of ``ops`` (each gets the suite's reason entry); its id, which
    the ledger records as acknowledged."""
    body = [{**op, "reason": _reason(op["OP_ID"])} for op in ops]
    with cluster.client() as client:
        job_id = int(client.call("SubmitJob", body))
    ledger.submitted(job_id)
    return job_id


def wait_job(cluster: FaultCluster, ledger: Ledger, job_id: int,
             timeout: float = 120.0) -> Outcome:
    """Wait for job ``job_id`` to finish; record a success in the ledger."""
    deadline = time.monotonic() + timeout
    with cluster.client() as client:
        while True:
            status, results = _status(client, job_id)
            if status in _FINAL:
                if status == "success":
                    ledger.succeeded(job_id)
                return status, results
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} still {status} after {timeout:g} s")
            time.sleep(0.05)


def _status(client: Client, job_id: int) -> tuple[str, list[Any]]:
    (row,) = client.call("QueryJobs", [job_id], ["status", "opresult"])
    return row[0], row[1]


def run_job(cluster: FaultCluster, ledger: Ledger, *ops: dict[str, Any],
            timeout: float = 120.0) -> Outcome:
    """Submit a job and wait for its end."""
    return wait_job(cluster, ledger, submit(cluster, ledger, *ops), timeout)


def job_status(cluster: FaultCluster, job_id: int) -> str:
    """Job ``job_id``'s status now."""
    with cluster.client() as client:
        return str(_status(client, job_id)[0])


def job_log(cluster: FaultCluster, job_id: int) -> list[str]:
    """The messages of job ``job_id``'s log so far."""
    with cluster.client() as client:
        (row,) = client.call("QueryJobs", [job_id], ["oplog"])
    return [str(entry[3]) for op_log in row[0] or [] for entry in op_log]


def create_op(name: str, node: str) -> dict[str, Any]:
    """Creating a stopped diskless instance ``name`` on ``node`` (fake hypervisor)."""
    return {"OP_ID": "OP_INSTANCE_CREATE", "instance_name": name, "mode": "create",
            "disk_template": "diskless", "os_type": "corral-tiny", "no_install": True,
            "start": False, "pnode": node, "nics": [], "disks": [], "name_check": False,
            "ip_check": False, "hypervisor": "fake"}


def remove_op(name: str) -> dict[str, Any]:
    """Removing instance ``name``."""
    return {"OP_ID": "OP_INSTANCE_REMOVE", "instance_name": name, "shutdown_timeout": 10}
