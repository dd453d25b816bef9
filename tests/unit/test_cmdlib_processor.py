"""The processor and the logical units of this issue, without a daemon: a real
configuration store, a real lock manager and a recording stand-in for the job queue."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from corral.cmdlib import LOGICAL_UNITS, MasterContext, Processor
from corral.cmdlib.query import FILTER_FIELDS, LOCK_FIELDS, resource
from corral.config import ConfigStore
from corral.errors import OpPrereqError, ParameterError
from corral.jobs import JobQueue, JobStore
from corral.locking import LockAttemptStrategy, LockLevel, LockManager
from corral.opcodes import REGISTRY, op_from_dict
from tests.unit.config_helpers import new_store


class Ctx:
    """Records what the processor tells the queue."""

    def __init__(self, job_id: int = 1, priority: int = 0) -> None:
        self.job_id = job_id
        self.index = 0
        self._priority = priority
        self.log: list[str] = []
        self.ran = False

    @property
    def priority(self) -> int:
        return self._priority

    def feedback(self, message: Any, log_type: str = "message") -> None:
        self.log.append(message)

    def running(self) -> None:
        self.ran = True


@pytest.fixture
def store(tmp_path: Path) -> ConfigStore:
    with new_store(tmp_path / "config.db") as opened:
        yield opened


def make(store: ConfigStore) -> tuple[Processor, MasterContext, list[int]]:
    changed: list[int] = []
    locks = LockManager(nodes=[n.name for n in store.all("node")])
    ctx = MasterContext(store=store, locks=locks,
                        cluster_changed=lambda c: changed.append(c.max_running_jobs))
    ctx.queries["filter"] = resource(FILTER_FIELDS, lambda: store.all("filter"))
    ctx.queries["lock"] = resource(LOCK_FIELDS, locks.info)
    fast = lambda: LockAttemptStrategy(first_timeout=0.01, attempts=2, max_pause=0)  # noqa: E731
    return Processor(ctx, LOGICAL_UNITS, strategy=fast), ctx, changed


def run(processor: Processor, data: dict[str, Any], ctx: Ctx | None = None) -> Any:
    return asyncio.run(processor.execute(op_from_dict(data), ctx or Ctx()))


def test_every_registered_opcode_has_a_logical_unit() -> None:
    assert set(LOGICAL_UNITS) == set(REGISTRY)


def test_test_delay_repeats_with_feedback_and_holds_no_lock_afterwards(
        store: ConfigStore) -> None:
    processor, master, _ = make(store)
    ctx = Ctx()
    assert run(processor, {"OP_ID": "OP_TEST_DELAY", "duration": 0, "repeat": 3,
                           "no_locks": False}, ctx) is None
    assert ctx.ran
    assert ctx.log == ["Test delay iteration 0/2", "Test delay iteration 1/2",
                       "Test delay iteration 2/2"]
    assert all(not info.holders for info in master.locks.info())


def test_test_delay_locks_the_master_node_exclusively_while_it_sleeps(
        store: ConfigStore) -> None:
    processor, master, _ = make(store)
    master_name = store.get("node", store.cluster.master_node).name

    async def scenario() -> list[Any]:
        task = asyncio.create_task(processor.execute(
            op_from_dict({"OP_ID": "OP_TEST_DELAY", "duration": 0.2, "no_locks": False}),
            Ctx(job_id=7)))
        await asyncio.sleep(0.05)
        held = [(i.name, i.mode, i.holders) for i in master.locks.info() if i.holders]
        await task
        return held

    held = asyncio.run(scenario())
    assert ("cluster/BGL", "shared", ("job/7",)) in held
    assert (f"node/{master_name}", "exclusive", ("job/7",)) in held


def test_test_delay_refuses_unknown_nodes(store: ConfigStore) -> None:
    processor, _, _ = make(store)
    with pytest.raises(OpPrereqError, match="node 'nosuch' not found"):
        run(processor, {"OP_ID": "OP_TEST_DELAY", "duration": 0, "on_nodes": ["nosuch"]})


def test_a_job_waits_for_locks_another_job_holds(store: ConfigStore) -> None:
    processor, _, _ = make(store)

    async def scenario() -> tuple[bool, bool]:
        first, second = Ctx(job_id=1), Ctx(job_id=2)
        holder = asyncio.create_task(processor.execute(
            op_from_dict({"OP_ID": "OP_CLUSTER_SET_PARAMS", "candidate_pool_size": 3}), first))
        await asyncio.sleep(0)
        # OP_CLUSTER_SET_PARAMS takes the BGL exclusively: the delay waits for it.
        waiter = asyncio.create_task(processor.execute(
            op_from_dict({"OP_ID": "OP_TEST_DELAY", "duration": 0}), second))
        await asyncio.gather(holder, waiter)
        return first.ran, second.ran

    assert asyncio.run(scenario()) == (True, True)
    assert store.cluster.candidate_pool_size == 3


def test_cluster_set_params_commits_reports_and_tells_the_master(store: ConfigStore) -> None:
    processor, _, changed = make(store)
    ctx = Ctx()
    result = run(processor, {"OP_ID": "OP_CLUSTER_SET_PARAMS", "max_running_jobs": 3}, ctx)
    assert result["dry_run"] is False and result["serial"] == store.serial
    assert store.cluster.max_running_jobs == 3
    assert changed == [3]
    assert ctx.log == result["changes"] and result["changes"]


def test_cluster_set_params_dry_run_changes_nothing(store: ConfigStore) -> None:
    processor, _, changed = make(store)
    serial = store.serial
    result = run(processor, {"OP_ID": "OP_CLUSTER_SET_PARAMS", "max_running_jobs": 3,
                             "dry_run": True})
    assert result["dry_run"] is True and result["changes"]
    assert store.serial == serial and store.cluster.max_running_jobs != 3
    assert changed == []


def test_cluster_query_returns_the_settings(store: ConfigStore) -> None:
    processor, _, _ = make(store)
    info = run(processor, {"OP_ID": "OP_CLUSTER_QUERY"})
    assert info["name"] == store.cluster.name and info["config_serial"] == store.serial


def test_tags_set_get_search_delete(store: ConfigStore) -> None:
    processor, _, _ = make(store)
    run(processor, {"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": ["web", "db", "web"]})
    assert run(processor, {"OP_ID": "OP_TAGS_GET", "kind": "cluster"}) == ["db", "web"]
    assert run(processor, {"OP_ID": "OP_TAGS_SEARCH", "pattern": "^w"}) == [["/cluster", "web"]]
    with pytest.raises(OpPrereqError, match="'nosuch' not found"):
        run(processor, {"OP_ID": "OP_TAGS_DEL", "kind": "cluster", "tags": ["db", "nosuch"]})
    assert sorted(store.cluster.tags) == ["db", "web"]  # nothing removed
    run(processor, {"OP_ID": "OP_TAGS_DEL", "kind": "cluster", "tags": ["db"]})
    assert store.cluster.tags == ["web"]


@pytest.mark.parametrize("tag", ["", "has space", "x" * 129, "semi;colon"])
def test_bad_tags_are_refused(store: ConfigStore, tag: str) -> None:
    processor, _, _ = make(store)
    with pytest.raises(ParameterError):
        run(processor, {"OP_ID": "OP_TAGS_SET", "kind": "cluster", "tags": [tag]})
    assert store.cluster.tags == []


def test_generic_query_over_filters_and_locks(store: ConfigStore) -> None:
    processor, _, _ = make(store)
    answer = run(processor, {"OP_ID": "OP_QUERY", "what": "lock", "fields": ["name", "mode"],
                             "qfilter": ["=", "name", "cluster/BGL"]})
    assert answer["data"] == [[[0, "cluster/BGL"], [0, None]]]
    assert [f["name"] for f in answer["fields"]] == ["name", "mode"]
    fields = run(processor, {"OP_ID": "OP_QUERY_FIELDS", "what": "filter"})
    assert [f["name"] for f in fields["fields"]] == sorted(
        ["uuid", "watermark", "priority", "predicates", "action", "reason_trail"])
    with pytest.raises(ParameterError, match="resources: filter, lock"):
        run(processor, {"OP_ID": "OP_QUERY", "what": "nosuch", "fields": ["name"]})


def test_priority_is_passed_to_the_locks(store: ConfigStore) -> None:
    processor, master, _ = make(store)

    async def scenario() -> list[Any]:
        await master.locks.acquire(LockLevel.CLUSTER, ["BGL"], owner="admin")
        task = asyncio.create_task(processor.execute(
            op_from_dict({"OP_ID": "OP_TEST_DELAY", "duration": 0}), Ctx(job_id=3, priority=-5)))
        # wait (at most 5 s, however loaded the machine) until the job queues on the BGL
        for _ in range(500):
            pending = [p for i in master.locks.info() for p in i.pending]
            if pending or task.done():
                break
            await asyncio.sleep(0.01)
        master.locks.release_all(owner="admin")
        await task
        return pending

    pending = asyncio.run(scenario())
    assert [(p.priority, p.owners) for p in pending] == [(-5, ("job/3",))]


class _Decision:
    """A filter decision for the queue (``corral.jobs.filters.Decision`` in the daemon)."""

    def __init__(self, action: str, rule_uuid: str | None = None) -> None:
        self.action, self.rule_uuid, self.limit = action, rule_uuid, None


def test_a_pause_takes_a_job_out_of_the_lock_queue(store: ConfigStore, tmp_path: Path) -> None:
    processor, master, _ = make(store)

    def users() -> list[tuple[str, tuple[str, ...], list[tuple[str, ...]]]]:
        return [(i.name, i.holders, [p.owners for p in i.pending])
                for i in master.locks.info() if i.holders or i.pending]

    async def scenario() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        queue = JobQueue(JobStore.open(tmp_path / "jobs.db"), processor.execute)
        await queue.start()
        try:
            await master.locks.acquire(LockLevel.CLUSTER, ["BGL"], owner="admin")
            job_id = await queue.submit([op_from_dict({"OP_ID": "OP_TEST_DELAY",
                                                       "duration": 0})])
            for _ in range(500):  # in its blocking attempt once it queues for good
                await asyncio.sleep(0.01)
                if any(pending for _, _, pending in users()):
                    break
            seen["waiting"] = (await queue.query([job_id], ["status"]), users())
            queue.set_decider(lambda job_id, ops: _Decision("PAUSE", "hold-it"))
            await queue.reevaluate()
            seen["paused"] = (await queue.query([job_id], ["status", "paused_by"]), users())
            master.locks.release_all(owner="admin")
            await asyncio.sleep(0.05)
            seen["free"] = (await queue.query([job_id], ["status"]), users())
            queue.set_decider(None)
            await queue.reevaluate()
            for _ in range(500):
                await asyncio.sleep(0.01)
                seen["done"] = (await queue.query([job_id], ["status"]), users())
                if seen["done"][0] == [["success"]]:
                    break
        finally:
            await queue.stop()
        return seen

    seen = asyncio.run(scenario())
    assert seen["waiting"] == ([["waiting"]], [("cluster/BGL", ("admin",), [("job/1",)])])
    assert seen["paused"] == ([["queued", "hold-it"]], [("cluster/BGL", ("admin",), [])])
    assert seen["free"] == ([["queued"]], [])
    assert seen["done"] == ([["success"]], [])
