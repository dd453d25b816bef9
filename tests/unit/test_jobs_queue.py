"""The job queue's state machine with a fake executor and a temporary SQLite file."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from corral.errors import JobQueueDrainedError, NotFoundError, OpExecError
from corral.jobs import CRASH_MESSAGE, JobQueue, JobStore, OpContext
from corral.jobs.model import Job, QueuedOpCode, decode_job, job_error, timestamp_now
from corral.jobs.queue import SUBMIT_BATCH
from corral.jobs.recovery import REQUEUED_MESSAGE
from corral.opcodes import OpCode, OpTestDelay, op_to_dict

FINAL = {"success", "error", "canceled"}


class FakeExecutor:
    """Runs opcodes instantly unless told to hold them (before or after ``running``)."""

    def __init__(self) -> None:
        self.started: list[tuple[int, int]] = []
        self.hold_waiting: dict[int, asyncio.Event] = {}
        self.hold_running: dict[int, asyncio.Event] = {}
        #: Holds one opcode (job id, index) before ``running``.
        self.hold_op: dict[tuple[int, int], asyncio.Event] = {}
        #: Set each time that opcode reaches its hold (cleared by the test).
        self.reached_op: dict[tuple[int, int], asyncio.Event] = {}
        self.entered: dict[int, asyncio.Event] = {}
        self.fail: set[tuple[int, int]] = set()
        self.active = 0
        self.max_active = 0
        self.max_active_by_comment: dict[str | None, int] = {}
        self._active_by_comment: dict[str | None, int] = {}

    def entered_event(self, job_id: int) -> asyncio.Event:
        return self.entered.setdefault(job_id, asyncio.Event())

    def hold(self, job_id: int, *, running: bool = False) -> asyncio.Event:
        gates = self.hold_running if running else self.hold_waiting
        return gates.setdefault(job_id, asyncio.Event())

    async def __call__(self, op: OpCode, ctx: OpContext) -> Any:
        self.started.append((ctx.job_id, ctx.index))
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        by_comment = self._active_by_comment
        by_comment[op.comment] = by_comment.get(op.comment, 0) + 1
        self.max_active_by_comment[op.comment] = max(
            self.max_active_by_comment.get(op.comment, 0), by_comment[op.comment])
        try:
            self.entered_event(ctx.job_id).set()
            gate = self.hold_waiting.get(ctx.job_id)
            if gate is not None:
                await gate.wait()
            gate = self.hold_op.get((ctx.job_id, ctx.index))
            if gate is not None:
                self.reached_op.setdefault((ctx.job_id, ctx.index), asyncio.Event()).set()
                await gate.wait()
            ctx.running()
            ctx.feedback(f"op {ctx.index} prio {ctx.priority}")
            gate = self.hold_running.get(ctx.job_id)
            if gate is not None:
                await gate.wait()
            if (ctx.job_id, ctx.index) in self.fail:
                raise OpExecError(f"op {ctx.index} broke")
            return {"index": ctx.index}
        finally:
            self.active -= 1
            by_comment[op.comment] -= 1


@dataclass
class Decision:
    action: str
    rule_uuid: str | None = None
    limit: int | None = None


class Env:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.executor = FakeExecutor()
        self.queue: JobQueue | None = None

    async def open(self, **kwargs: Any) -> JobQueue:
        self.queue = JobQueue(JobStore.open(self.path), self.executor, **kwargs)
        await self.queue.start()
        return self.queue

    async def reopen(self, **kwargs: Any) -> JobQueue:
        assert self.queue is not None
        await self.queue.stop()
        self.executor = FakeExecutor()
        return await self.open(**kwargs)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    env = Env(tmp_path / "jobs.db")
    yield env
    if env.queue is not None:
        await env.queue.stop()


def delay(priority: int = 0, depends: list[tuple[int, list[str]]] | None = None) -> OpTestDelay:
    return OpTestDelay(duration=0, priority=priority, depends=depends)  # type: ignore[arg-type]


async def wait_final(queue: JobQueue, job_id: int) -> str:
    info: list[Any] | None = None
    serial: int | None = None
    while True:
        result = await queue.wait_for_change(job_id, ["status"], info, serial, 5.0)
        assert result != "nochange"
        info, log = result
        if log:
            serial = log[-1][0]
        if info[0] in FINAL:
            return str(info[0])


async def status(queue: JobQueue, job_id: int) -> Any:
    (row,) = await queue.query([job_id], ["status"])
    assert row is not None
    return row[0]


def stored_job(path: Path, job_id: int) -> Job:
    conn = sqlite3.connect(path)
    try:
        (data,) = conn.execute("SELECT data FROM jobs WHERE id=?", (job_id,)).fetchone()
    finally:
        conn.close()
    return decode_job(data)


# -- basic life cycle -----------------------------------------------------------------


async def test_job_runs_to_success_with_ganeti_fields(env: Env) -> None:
    queue = await env.open()
    job_id = await queue.submit([delay(), delay()])
    assert await wait_final(queue, job_id) == "success"
    (row,) = await queue.query(
        [job_id],
        ["id", "status", "opstatus", "opresult", "oplog", "summary", "reason", "received_ts",
         "start_ts", "end_ts", "opstart", "opexec", "opend", "priority", "archived", "paused_by"],
    )
    assert row is not None
    (id_, st, opstatus, opresult, oplog, summary, reason, received, start, end,
     opstart, opexec, opend, prio, archived, paused_by) = row
    assert (id_, st, opstatus) == (job_id, "success", ["success", "success"])
    assert opresult == [{"index": 0}, {"index": 1}]
    assert [[entry[0], entry[2], entry[3]] for log in oplog for entry in log] == [
        [1, "message", "op 0 prio 0"], [2, "message", "op 1 prio 0"]]
    assert all(isinstance(e[1], list) and len(e[1]) == 2 for log in oplog for e in log)
    assert summary == ["TEST_DELAY(0)", "TEST_DELAY(0)"]
    assert reason[1][-1][0] == "gnt:opcode:test_delay"
    assert reason[1][-1][1] == f"job={job_id};index=1"
    assert received <= start <= end
    assert all(ts is not None for ts in opstart + opexec + opend)
    assert (prio, archived, paused_by) == (0, False, None)


async def test_ids_increase_and_survive_reopen(env: Env) -> None:
    queue = await env.open()
    first = await queue.submit([delay()])
    second = await queue.submit([delay()])
    assert second > first
    await wait_final(queue, second)
    assert await queue.archive(second)
    queue = await env.reopen()
    third = await queue.submit([delay()])
    assert third > second


async def test_failed_opcode_fails_the_rest(env: Env) -> None:
    queue = await env.open()
    env.executor.hold(1).clear()
    job_id = await queue.submit([delay(), delay(), delay()])
    env.executor.fail.add((job_id, 1))
    env.executor.hold_waiting[job_id].set()
    assert await wait_final(queue, job_id) == "error"
    (row,) = await queue.query([job_id], ["opstatus", "opresult"])
    assert row is not None
    assert row[0] == ["success", "error", "error"]
    assert row[1][1] == ["OpExecError", ["op 1 broke"]]
    assert row[1][2] == ["OpExecError", ["Preceding opcode failed"]]  # Ganeti's text


async def test_unknown_field_and_unknown_job(env: Env) -> None:
    queue = await env.open()
    assert await queue.query([99], ["id"]) == [None]
    with pytest.raises(Exception, match="nosuchfield"):
        await queue.query([1], ["nosuchfield"])
    with pytest.raises(NotFoundError):
        await queue.wait_for_change(99, ["status"], None, None, 0.1)
    assert await queue.cancel(99) == (False, "Job 99 not found in queue")


# -- scheduling -------------------------------------------------------------------------


async def test_priority_then_id_order(env: Env) -> None:
    queue = await env.open(max_running=1)
    gate = env.executor.hold(1)
    blocker = await queue.submit([delay()])
    await env.executor.entered_event(blocker).wait()
    low = await queue.submit([delay(priority=5)])
    mid1 = await queue.submit([delay()])
    high = await queue.submit([delay(priority=-10)])
    mid2 = await queue.submit([delay()])
    gate.set()
    for job_id in (low, mid1, high, mid2):
        await wait_final(queue, job_id)
    assert [job for job, _ in env.executor.started] == [blocker, high, mid1, mid2, low]


async def test_max_running_bounds_concurrency(env: Env) -> None:
    queue = await env.open(max_running=3)
    gates = [env.executor.hold(job_id) for job_id in range(1, 9)]
    ids = [await queue.submit([delay()]) for _ in range(8)]
    assert ids == list(range(1, 9))
    # every job is held before ctx.running(); only 3 get that far
    for job_id in ids[:3]:
        await env.executor.entered_event(job_id).wait()
    statuses = [row[0] for row in await queue.query(ids, ["status"]) if row]
    assert statuses.count("waiting") == 3 and statuses.count("queued") == 5
    for gate in gates:
        gate.set()
    for job_id in ids:
        assert await wait_final(queue, job_id) == "success"
    assert env.executor.max_active == 3


async def test_set_max_running_starts_more(env: Env) -> None:
    queue = await env.open(max_running=1)
    env.executor.hold(1)
    env.executor.hold(2)
    a = await queue.submit([delay()])
    b = await queue.submit([delay()])
    await env.executor.entered_event(a).wait()
    assert await status(queue, b) == "queued"
    queue.set_max_running(2)
    await env.executor.entered_event(b).wait()
    env.executor.hold(a).set()
    env.executor.hold(b).set()
    assert await wait_final(queue, b) == "success"


# -- dependencies ---------------------------------------------------------------------


async def test_dependency_waits_then_runs(env: Env) -> None:
    queue = await env.open()
    gate = env.executor.hold(1, running=True)
    first = await queue.submit([delay()])
    second = await queue.submit([delay(depends=[(first, ["success"])])])
    await env.executor.entered_event(first).wait()
    assert await status(queue, second) == "queued"
    assert (second, 0) not in env.executor.started
    gate.set()
    assert await wait_final(queue, second) == "success"
    assert env.executor.started.index((first, 0)) < env.executor.started.index((second, 0))


async def test_dependency_with_wrong_final_status_fails(env: Env) -> None:
    queue = await env.open()
    env.executor.fail.add((1, 0))
    first = await queue.submit([delay()])
    second = await queue.submit([delay(depends=[(first, ["success"])])])
    assert await wait_final(queue, second) == "error"
    (row,) = await queue.query([second], ["opresult"])
    assert row is not None
    assert "finished with status 'error', not one of 'success'" in row[0][0][1][0]
    assert (second, 0) not in env.executor.started


async def test_dependency_canceled_cancels_dependent(env: Env) -> None:
    queue = await env.open(max_running=1)
    gate = env.executor.hold(1)
    await queue.submit([delay()])
    first = await queue.submit([delay()])
    second = await queue.submit([delay(depends=[(first, ["success"])])])
    assert (await queue.cancel(first))[0]
    gate.set()
    assert await wait_final(queue, second) == "canceled"


async def test_dependency_on_unknown_job_fails(env: Env) -> None:
    queue = await env.open()
    job_id = await queue.submit([delay(depends=[(500, [])])])
    assert await wait_final(queue, job_id) == "error"


async def test_submit_many_relative_dependencies(env: Env) -> None:
    queue = await env.open()
    results = await queue.submit_many(
        [[delay()], [delay(depends=[(-1, ["success"])])], [delay(depends=[(-5, [])])]]
    )
    assert results[0][0] and results[1][0]
    assert results[2] == (False, "Unable to resolve relative job ID -5")
    first, second = int(results[0][1]), int(results[1][1])
    assert await wait_final(queue, second) == "success"
    (row,) = await queue.query([second], ["ops"])
    assert row is not None
    assert row[0][0]["depends"] == [[first, ["success"]]]


# -- cancel and priority -----------------------------------------------------------------


async def test_cancel_queued_waiting_and_running(env: Env) -> None:
    queue = await env.open(max_running=2)
    env.executor.hold(1)
    gate = env.executor.hold(2, running=True)
    waiting = await queue.submit([delay()])
    running = await queue.submit([delay()])
    queued = await queue.submit([delay()])
    await env.executor.entered_event(waiting).wait()
    await env.executor.entered_event(running).wait()
    assert await status(queue, running) == "running"
    assert await queue.cancel(queued) == (True, f"Job {queued} canceled")
    assert await queue.cancel(waiting) == (True, f"Job {waiting} will be canceled")
    assert await queue.cancel(running) == (
        False, f"Job {running} is no longer waiting in the queue")
    assert await wait_final(queue, queued) == "canceled"
    assert await wait_final(queue, waiting) == "canceled"
    gate.set()
    assert await wait_final(queue, running) == "success"
    assert (queued, 0) not in env.executor.started
    (row,) = await queue.query([waiting], ["opresult"])
    assert row == [["Job canceled by request"]]


async def test_cancel_interrupts_a_running_interruptible_opcode(env: Env) -> None:
    queue = await env.open(max_running=2)
    env.executor.hold(1, running=True)
    interruptible = await queue.submit([OpTestDelay(duration=600, interruptible=True),
                                        delay()])
    await env.executor.entered_event(interruptible).wait()
    assert await status(queue, interruptible) == "running"
    assert await queue.cancel(interruptible) == (True, f"Job {interruptible} will be canceled")
    assert await wait_final(queue, interruptible) == "canceled"
    (row,) = await queue.query([interruptible], ["opstatus", "opresult"])
    assert row == [["canceled", "canceled"], ["Job canceled by request"] * 2]
    assert (interruptible, 1) not in env.executor.started


async def test_change_priority(env: Env) -> None:
    queue = await env.open(max_running=1)
    gate = env.executor.hold(1)
    blocker = await queue.submit([delay()])
    await env.executor.entered_event(blocker).wait()
    a = await queue.submit([delay()])
    b = await queue.submit([delay()])
    ok, message = await queue.change_priority(b, -5)
    assert ok and "changed to -5" in message
    (row,) = await queue.query([b], ["priority", "oppriority"])
    assert row == [-5, [-5]]
    gate.set()
    await wait_final(queue, a)
    assert [job for job, _ in env.executor.started] == [blocker, b, a]
    assert await queue.change_priority(a, 3) == (False, f"Job {a} not found in queue")
    with pytest.raises(Exception, match="priority"):
        await queue.change_priority(a, 50)


# -- filters ---------------------------------------------------------------------------


async def test_reject_at_submit_gives_a_canceled_job(env: Env) -> None:
    queue = await env.open(decider=lambda job_id, ops: Decision("REJECT", "rule-1"))
    job_id = await queue.submit([delay(), delay()])
    fields = ["status", "opstatus", "opresult", "start_ts"]
    result = "Job canceled by filter rule rule-1"
    assert await queue.query([job_id], fields) == [
        ["canceled", ["canceled", "canceled"], [result, result], None]]
    results = await queue.submit_many([[delay()], [delay(depends=[(-1, ["success"])])]])
    assert [ok for ok, _ in results] == [True, True]
    ids = [int(job) for _, job in results]
    assert [await status(queue, job) for job in ids] == ["canceled", "canceled"]
    assert not env.executor.started
    # A client following the job is told why it ended.
    (row,) = await queue.query([job_id], ["status", "opstatus", "opresult"])
    assert job_error(job_id, *row).message == f"job {job_id} was canceled: {result}"
    # Stored: a reopened queue still has them, still canceled.
    reopened = await env.reopen()
    assert [row[0] for row in await reopened.query(None, ["status"])] == ["canceled"] * 3


async def test_pause_holds_then_releases(env: Env) -> None:
    decision = Decision("PAUSE", "pause-rule")
    queue = await env.open(decider=lambda job_id, ops: decision)
    job_id = await queue.submit([delay()])
    assert await queue.query([job_id], ["status", "paused_by"]) == [["queued", "pause-rule"]]
    queue.set_decider(lambda job_id, ops: Decision("ACCEPT"))
    await queue.reevaluate()
    assert await wait_final(queue, job_id) == "success"
    assert await queue.query([job_id], ["paused_by"]) == [[None]]


async def test_reevaluate_reject_cancels_queued_and_paused(env: Env) -> None:
    queue = await env.open(max_running=1)
    gate = env.executor.hold(1, running=True)
    running = await queue.submit([delay()])
    await env.executor.entered_event(running).wait()
    queued = await queue.submit([delay()])
    queue.set_decider(lambda job_id, ops: Decision("REJECT", "no-more"))
    await queue.reevaluate()
    assert await status(queue, queued) == "canceled"
    assert await status(queue, running) == "running"
    gate.set()
    assert await wait_final(queue, running) == "success"
    assert (queued, 0) not in env.executor.started


async def test_pause_running_job_at_opcode_boundary(env: Env) -> None:
    queue = await env.open()
    gate = env.executor.hold(1, running=True)
    job_id = await queue.submit([delay(), delay()])
    await env.executor.entered_event(job_id).wait()
    queue.set_decider(lambda job_id, ops: Decision("PAUSE", "hold-it"))
    await queue.reevaluate()
    gate.set()
    info: list[Any] = ["x"]
    serial = 10
    while info != [["success", "queued"], "hold-it"]:
        result = await queue.wait_for_change(job_id, ["opstatus", "paused_by"], info, serial, 5.0)
        assert result != "nochange"
        info = result[0]
    assert await status(queue, job_id) == "queued"
    assert env.executor.started == [(job_id, 0)]
    queue.set_decider(None)
    await queue.reevaluate()
    assert await wait_final(queue, job_id) == "success"
    assert env.executor.started == [(job_id, 0), (job_id, 1)]


async def test_pause_takes_a_waiting_job_out_of_its_wait(env: Env) -> None:
    # max_running=1: the paused job must give its slot to the next job as well.
    queue = await env.open(max_running=1)
    gate = env.executor.hold(1)
    waiting = await queue.submit([delay()])
    await env.executor.entered_event(waiting).wait()
    other = await queue.submit([delay()])
    assert await status(queue, waiting) == "waiting"
    queue.set_decider(
        lambda job_id, ops: Decision("PAUSE", "hold-it") if job_id == waiting
        else Decision("ACCEPT"))
    await queue.reevaluate()
    assert await wait_final(queue, other) == "success"
    assert env.executor.active == 0  # it left the executor (and so its lock wait)
    (row,) = await queue.query([waiting], ["status", "paused_by", "opstatus", "opstart",
                                           "start_ts", "opresult", "oplog"])
    assert row is not None
    assert row[:6] == ["queued", "hold-it", ["queued"], [None], None, [None]]
    ((_serial, _ts, kind, message),) = row[6][0]
    assert kind == "message" and "Paused by filter rule hold-it" in message
    assert stored_job(env.path, waiting).paused_by == "hold-it"

    env.executor.entered[waiting] = asyncio.Event()
    queue.set_decider(lambda job_id, ops: Decision("RATE_LIMIT", "slow", 5))
    await queue.reevaluate()
    await env.executor.entered_event(waiting).wait()
    gate.set()
    assert await wait_final(queue, waiting) == "success"
    assert env.executor.started == [(waiting, 0), (other, 0), (waiting, 0)]
    (row,) = await queue.query([waiting], ["paused_by", "start_ts"])
    assert row is not None and row[0] is None and row[1] is not None


async def test_pause_while_waiting_keeps_the_opcodes_done(env: Env) -> None:
    queue = await env.open()
    job_id = await queue.submit([delay(), delay()])
    gate = env.executor.hold_op[(job_id, 1)] = asyncio.Event()
    reached = env.executor.reached_op[(job_id, 1)] = asyncio.Event()
    async with asyncio.timeout(5):
        await reached.wait()
    assert await status(queue, job_id) == "waiting"
    queue.set_decider(lambda job_id, ops: Decision("PAUSE", "hold-it"))
    await queue.reevaluate()
    (row,) = await queue.query([job_id], ["status", "opstatus", "opstart", "start_ts"])
    assert row is not None and row[:2] == ["queued", ["success", "queued"]]
    assert row[2][0] is not None and row[2][1] is None and row[3] == row[2][0]
    reached.clear()
    queue.set_decider(None)
    await queue.reevaluate()
    async with asyncio.timeout(5):
        await reached.wait()
    gate.set()
    assert await wait_final(queue, job_id) == "success"
    assert env.executor.started == [(job_id, 0), (job_id, 1), (job_id, 1)]


async def test_a_job_paused_while_waiting_can_be_canceled_and_survives_a_restart(
        env: Env) -> None:
    queue = await env.open()
    env.executor.hold(1)
    env.executor.hold(2)
    first = await queue.submit([delay()])
    second = await queue.submit([delay()])
    await env.executor.entered_event(first).wait()
    await env.executor.entered_event(second).wait()
    queue.set_decider(lambda job_id, ops: Decision("PAUSE", "hold-it"))
    await queue.reevaluate()
    assert await queue.query([first, second], ["status", "paused_by"]) == [
        ["queued", "hold-it"], ["queued", "hold-it"]]
    assert await queue.cancel(first) == (True, f"Job {first} canceled")
    assert await wait_final(queue, first) == "canceled"

    # A master restart finds it queued (not interrupted) and paused while the rule holds.
    queue = await env.reopen(decider=lambda job_id, ops: Decision("PAUSE", "hold-it"))
    assert await queue.query([second], ["status", "paused_by"]) == [["queued", "hold-it"]]
    assert env.executor.started == []
    queue.set_decider(None)
    await queue.reevaluate()
    assert await wait_final(queue, second) == "success"


async def test_rate_limit_bounds_matching_jobs(env: Env) -> None:
    queue = await env.open(
        max_running=10,
        decider=lambda job_id, ops: Decision("RATE_LIMIT", "slow", 2)
        if ops[0]["comment"] == "slow" else Decision("ACCEPT"),
    )
    for job_id in range(1, 6):
        env.executor.hold(job_id)
    slow = [await queue.submit([OpTestDelay(duration=0, comment="slow")]) for _ in range(5)]
    fast = await queue.submit([delay()])
    assert await wait_final(queue, fast) == "success"
    await env.executor.entered_event(slow[0]).wait()
    await env.executor.entered_event(slow[1]).wait()
    statuses = [row[0] for row in await queue.query(slow, ["status"]) if row]
    assert statuses == ["waiting", "waiting", "queued", "queued", "queued"]
    for job_id in slow:
        env.executor.hold(job_id).set()
    for job_id in slow:
        assert await wait_final(queue, job_id) == "success"
    assert env.executor.max_active_by_comment["slow"] == 2


# -- drain, archive ----------------------------------------------------------------------


async def test_drain_refuses_and_persists(env: Env) -> None:
    queue = await env.open()
    await queue.set_drain(True)
    with pytest.raises(JobQueueDrainedError):
        await queue.submit([delay()])
    queue = await env.reopen()
    assert queue.drained
    await queue.set_drain(False)
    assert await wait_final(queue, await queue.submit([delay()])) == "success"


async def test_a_large_submission_lets_the_loop_run_and_a_drain_meanwhile_refuses_it(
        env: Env) -> None:
    queue = await env.open()
    turns = 0

    async def other_client() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(other_client())
    await asyncio.sleep(0)
    before = turns
    results = await queue.submit_many([[delay()] for _ in range(300)])
    assert all(ok for ok, _ in results) and len(results) == 300
    assert turns - before >= 3  # served between batches of the 300
    task.cancel()

    async def drain_soon() -> None:
        await asyncio.sleep(0)
        queue._drained = True  # as set_drain does first, before it stores the flag

    drainer = asyncio.create_task(drain_soon())
    last = int(results[-1][1])
    with pytest.raises(JobQueueDrainedError):
        await queue.submit_many([[delay()] for _ in range(300)])
    await drainer
    # nothing of the refused call exists: no job after the last accepted one
    assert await queue.query([last + 1, last + SUBMIT_BATCH], ["id"]) == [None, None]


async def test_archive_and_auto_archive(env: Env) -> None:
    queue = await env.open()
    ids = [await queue.submit([delay()]) for _ in range(3)]
    for job_id in ids:
        await wait_final(queue, job_id)
    gate = env.executor.hold(99)
    pending = await queue.submit([delay()])
    env.executor.hold_waiting[pending] = gate
    assert await queue.archive(ids[0])
    assert not await queue.archive(ids[0])
    assert await queue.query([ids[0]], ["id", "status", "archived"]) == [
        [ids[0], "success", True]]
    assert await queue.auto_archive(3600, 10) == (0, 0)
    assert await queue.auto_archive(-1, 10) == (2, 0)
    assert [row[0] for row in await queue.query(None, ["id"]) if row] == [pending]
    assert not await queue.archive(pending)
    assert [job.id for job in await queue.jobs()] == [pending]
    every = await queue.jobs(archived=True)
    assert [(job.id, job.archived) for job in every] == [
        (ids[0], True), (ids[1], True), (ids[2], True), (pending, False)]
    result = await queue.wait_for_change(ids[1], ["status", "archived"], None, None, 1.0)
    assert result != "nochange" and result[0] == ["success", True]
    gate.set()


# -- crash recovery ---------------------------------------------------------------------


def _stored(job_id: int, statuses: list[str]) -> Job:
    op = op_to_dict(delay())
    started = (1_700_000_000, 5)
    return Job(
        id=job_id,
        ops=[QueuedOpCode(input=op, summary="TEST_DELAY(0)", status=s,  # type: ignore[arg-type]
                          start_timestamp=None if s == "queued" else started)
             for s in statuses],
        received_timestamp=timestamp_now(),
        start_timestamp=None if set(statuses) == {"queued"} else started,
    )


async def test_crash_recovery(env: Env) -> None:
    """After a crash only the opcode that was executing fails: a job waiting for locks
    runs again, a canceling one ends canceled, queued ones run."""
    store = JobStore.open(env.path)
    for job in (
        _stored(1, ["running", "queued"]),
        _stored(2, ["success", "waiting"]),
        _stored(3, ["queued"]),
        _stored(4, ["success", "queued"]),
        _stored(5, ["canceling"]),
        _stored(6, ["waiting", "queued"]),
        _stored(7, ["success", "running"]),
    ):
        store.new_id()
        store.save(job)
    await store.close()
    queue = await env.open()
    crashed = ["OpExecError", [CRASH_MESSAGE]]
    assert await wait_final(queue, 1) == "error"
    (row,) = await queue.query([1], ["opstatus", "opresult"])
    assert row == [["error", "error"], [crashed, ["OpExecError", ["Preceding opcode failed"]]]]
    assert await wait_final(queue, 7) == "error"
    (row,) = await queue.query([7], ["opstatus", "opresult"])
    assert row is not None and row[0] == ["success", "error"] and row[1][1] == crashed
    for job_id in (2, 3, 4, 6):
        assert await wait_final(queue, job_id) == "success"
    assert await wait_final(queue, 5) == "canceled"
    assert sorted(env.executor.started) == [(2, 1), (3, 0), (4, 1), (6, 0), (6, 1)]
    assert stored_job(env.path, 1).status == "error"
    # The requeued job keeps its start times and its reason trail, and says why it
    # waited twice.
    (row,) = await queue.query([6], ["start_ts", "opstart", "oplog", "reason"])
    assert row is not None
    assert row[0] == [1_700_000_000, 5] and row[1][0] == [1_700_000_000, 5]
    assert row[2][0][0][3] == REQUEUED_MESSAGE
    assert row[3] == [op_to_dict(delay())["reason"]] * 2
    assert await queue.submit([delay()]) == 8


async def test_crash_recovery_requeues_jobs_waiting_for_locks_behind_a_running_one(
        env: Env) -> None:
    """The issue's case: one job running, others waiting for its lock, others queued;
    after the crash only the running one fails and the rest run in their order."""
    store = JobStore.open(env.path)
    for job_id in range(1, 41):
        status = "running" if job_id == 1 else "waiting" if job_id <= 20 else "queued"
        store.new_id()
        store.save(_stored(job_id, [status]))
    await store.close()
    queue = await env.open()
    finals = {job_id: await wait_final(queue, job_id) for job_id in range(1, 41)}
    assert finals == {1: "error", **dict.fromkeys(range(2, 41), "success")}
    assert [job for job, _ in env.executor.started] == list(range(2, 41))


# -- watching and durability ------------------------------------------------------------


async def test_watcher_sees_only_durable_state(env: Env) -> None:
    queue = await env.open()
    gate = env.executor.hold(1, running=True)
    job_id = await queue.submit([delay()])
    seen = []
    info: list[Any] | None = None
    serial: int | None = None
    while True:
        result = await queue.wait_for_change(job_id, ["status"], info, serial, 5.0)
        assert result != "nochange"
        info, log = result
        # whatever a watcher is told is already in the file, for a fresh reader
        assert stored_job(env.path, job_id).status == info[0]
        if log:
            serial = log[-1][0]
            assert stored_job(env.path, job_id).log_serial >= serial
        seen.append(info[0])
        if info[0] == "running":
            gate.set()
        if info[0] in FINAL:
            break
    assert seen[-1] == "success" and "running" in seen


async def test_wait_for_change_timeout_and_change(env: Env) -> None:
    queue = await env.open()
    env.executor.hold(1)
    job_id = await queue.submit([delay()])
    await env.executor.entered_event(job_id).wait()
    result = await queue.wait_for_change(job_id, ["status"], None, None, 1.0)
    assert result == (["waiting"], [])
    assert await queue.wait_for_change(job_id, ["status"], ["waiting"], None, 0.05) == "nochange"
    watcher = asyncio.ensure_future(
        queue.wait_for_change(job_id, ["status"], ["waiting"], None, 5.0))
    await asyncio.sleep(0)
    assert not watcher.done()
    env.executor.hold(1).set()
    result = await watcher
    assert result != "nochange"
    info, log = result
    assert info != ["waiting"]
    assert log and log[0][2:] == ["message", "op 0 prio 0"]
