"""A planned master failover as the job queue sees it (:meth:`JobQueue.hand_over`):
new jobs are refused, waiting jobs go back to queued, running opcodes finish, and a
queue opened on the same file (the new master's) runs every job to its end."""

from __future__ import annotations

import asyncio

import pytest

from corral.errors import NotMasterError
from corral.jobs.queue import HANDOVER_INTERRUPTED
from tests.unit.test_jobs_queue import Env, delay, env, status, stored_job, wait_final

__all__ = ["env"]


async def test_handover_finishes_running_opcodes_and_requeues_the_rest(env: Env) -> None:
    queue = await env.open(max_running=2)
    running = env.executor.hold(1, running=True)
    env.executor.hold(2)  # waits for its "locks" until the handover takes it back
    first = await queue.submit([delay(), delay()])
    waiting = await queue.submit([delay()])
    queued = await queue.submit([delay()])
    await env.executor.entered_event(first).wait()
    await env.executor.entered_event(waiting).wait()
    assert [await status(queue, job) for job in (first, waiting, queued)] == [
        "running", "waiting", "queued"]

    handover = asyncio.create_task(queue.hand_over("node2", 30.0))
    await asyncio.sleep(0)
    with pytest.raises(NotMasterError, match=r"master failover is in progress.*node2"):
        await queue.submit([delay()])
    running.set()
    report = await handover
    assert report.unfinished == [first, waiting, queued] and report.interrupted == []
    # The first opcode of the first job is done; nothing else ran or failed.
    assert [op.status for op in stored_job(env.path, first).ops] == ["success", "queued"]
    assert stored_job(env.path, waiting).status == "queued"
    assert stored_job(env.path, queued).status == "queued"

    new_master = await env.reopen()
    for job in (first, waiting, queued):
        assert await wait_final(new_master, job) == "success"
    assert (first, 0) not in env.executor.started  # not run twice
    assert (first, 1) in env.executor.started


async def test_handover_interrupts_only_what_still_runs_after_the_wait(env: Env) -> None:
    queue = await env.open(max_running=1)
    env.executor.hold(1, running=True)  # never released
    stuck = await queue.submit([delay(), delay()])
    later = await queue.submit([delay()])
    await env.executor.entered_event(stuck).wait()
    report = await queue.hand_over("node2", 0.1)
    assert report.interrupted == [stuck] and report.unfinished == [later]
    (row,) = await queue.query([stuck], ["status", "opresult"])
    assert row is not None and row[0] == "error"
    assert row[1][0] == ["OpExecError", [HANDOVER_INTERRUPTED.format(new_master="node2",
                                                                     timeout=0.1)]]
    new_master = await env.reopen()
    assert await wait_final(new_master, later) == "success"
