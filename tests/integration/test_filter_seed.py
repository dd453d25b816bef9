"""Job filters as seeds 000 and 001 describe them, on a real testbed.

Every example rule of seed 000 is added as the seed writes it and judged against jobs
submitted through ``gnt-*`` (``--reason``) and RAPI (``?reason=``), so their reason
trails hold everything corral adds (``gnt:client:…``, ``gnt:opcode:…``), not just the
user's text. Whether a job is held is read from the queue (``status`` ``queued`` and
``paused_by`` the rule), never from timing. Then the trails a filter rule itself
carries: RAPI bodies may not use ``gnt:`` sources (seed 001), and no entry is dropped.
"""

from __future__ import annotations

import json
import time
import uuid as uuid_module
from typing import Any
from urllib.parse import quote

import pytest

from corral.errors import ParameterError
from corral.luxi import Client
from tests.conftest import TestbedHandle
from tests.integration.test_rapi import Rapi

pytestmark = pytest.mark.integration

FINAL = ("success", "error", "canceled")
MAINTENANCE = "maintenance pink bunny"

#: Seed 000's examples, verbatim.
DRAIN = {"priority": 0, "predicates": [["jobid", [">", "id", "watermark"]]],
         "action": "REJECT"}
NOT_MAINTENANCE = {"priority": 1,
                   "predicates": [["jobid", [">", "id", "watermark"]],
                                  ["reason", ["!", ["=~", "reason", MAINTENANCE]]]],
                   "action": "PAUSE"}
NO_CREATE = {"priority": 1, "predicates": [["opcode", ["=", "OP_ID", "OP_INSTANCE_CREATE"]]],
             "action": "REJECT"}


def _rapi(testbed: TestbedHandle) -> Rapi:
    state = testbed.state["rapi"]
    return Rapi(state["url"], state["ca"], "admin", state["password"])


def _delay(tb: TestbedHandle, *args: str) -> int:
    """``gnt-debug delay --submit`` (its trail: --reason, gnt-debug's own entry)."""
    proc = tb.run("gnt-debug", "delay", "--submit", "--print-jobid", *args, "0")
    return int(proc.stdout.splitlines()[0])


def _tag(api: Rapi, tag: str, reason: str | None = None) -> int:
    """``PUT /2/tags?tag=…[&reason=…]``: a cluster tag job submitted through RAPI."""
    query = f"tag={tag}" + (f"&reason={quote(reason)}" if reason is not None else "")
    return int(api.ok("PUT", f"/2/tags?{query}"))


def _add_rule(tb: TestbedHandle, rule: dict[str, Any]) -> str:
    return tb.run("gnt-filter", "add", "--priority", str(rule["priority"]), "--action",
                  rule["action"], "--predicates", json.dumps(rule["predicates"])).stdout.strip()


def _jobs(tb: TestbedHandle, *job_ids: int) -> dict[int, tuple[str, str]]:
    """(status, paused_by) of each job, as ``gnt-job list`` shows them."""
    out = tb.run("gnt-job", "list", "--no-headers", "--separator", "|", "-o",
                 "id,status,paused_by", *map(str, job_ids)).stdout
    rows = [line.split("|") for line in out.splitlines()]
    return {int(jid): (status, paused_by) for jid, status, paused_by in rows}


def _final(api: Rapi, job_id: int, within: float = 15.0) -> str:
    deadline = time.monotonic() + within
    while (status := api.ok("GET", f"/2/jobs/{job_id}")["status"]) not in FINAL:
        assert time.monotonic() < deadline, f"job {job_id} is still {status} after {within}s"
        time.sleep(0.05)
    return str(status)


def _rejected(api: Rapi, job_id: int, rule: str) -> None:
    """The job was canceled at submission by ``rule``: nothing ran, the result names it."""
    job = api.ok("GET", f"/2/jobs/{job_id}")
    assert (job["status"], job["start_ts"]) == ("canceled", None), job
    assert job["opresult"] == [f"Job canceled by filter rule {rule}"], job


def _sources(api: Rapi, job_id: int) -> list[str]:
    return [entry[0] for entry in api.ok("GET", f"/2/jobs/{job_id}")["ops"][0]["reason"]]


def test_seed_filter_examples_with_cli_and_rapi_trails(testbed: TestbedHandle) -> None:
    api = _rapi(testbed)

    # "Pausing all new jobs not belonging to a specific maintenance", posted verbatim.
    pink = api.ok("POST", "/2/filters", NOT_MAINTENANCE)
    other_cli = _delay(testbed)
    routine_cli = _delay(testbed, "--reason", "routine")
    other_rapi = _tag(api, "other")
    routine_rapi = _tag(api, "routine", "routine")
    maint_cli = _delay(testbed, "--reason", MAINTENANCE)
    maint_rapi = _tag(api, "pink", MAINTENANCE)
    assert _final(api, maint_cli) == "success"
    assert _final(api, maint_rapi) == "success"
    # Their trails also hold corral's own entries, which do not mention the maintenance.
    assert _sources(api, maint_cli) == ["user", "gnt:client:gnt-debug", "gnt:opcode:test_delay"]
    assert _sources(api, maint_rapi) == ["user", "gnt:client:rapi:tags",
                                         "gnt:library:rlib2:tags", "gnt:opcode:tags_set"]
    held = (other_cli, routine_cli, other_rapi, routine_rapi)
    assert _jobs(testbed, *held) == dict.fromkeys(held, ("queued", pink))
    api.ok("DELETE", f"/2/filters/{pink}")
    assert [_final(api, job) for job in held] == ["success"] * 4
    assert testbed.run("gnt-cluster", "list-tags").stdout.split() == ["other", "pink", "routine"]

    # A job held by a later rule, to see the drain leave jobs below its watermark alone.
    hold = _add_rule(testbed, {"priority": 5, "action": "PAUSE",
                               "predicates": [["reason", ["=", "reason", "held"]]]})
    held_delay = _delay(testbed, "--reason", "held")

    # Draining the queue: new jobs get ids and end canceled at once, naming the rule,
    # from the CLI and from RAPI (seed 000: entering the queue is filtered like being
    # in it; Ganeti cancels them the same way).
    drain = _add_rule(testbed, DRAIN)
    refused = testbed.run("gnt-debug", "delay", "--reason", MAINTENANCE, "0", check=False)
    assert refused.returncode == 1 and drain in refused.stderr, refused.stderr
    _rejected(api, _tag(api, "drained", MAINTENANCE), drain)
    assert _jobs(testbed, held_delay) == {held_delay: ("queued", hold)}

    # Soft draining: the same rule with PAUSE; new jobs are accepted and held.
    testbed.run("gnt-filter", "replace", drain, "--priority", "0", "--action", "PAUSE",
                "--predicates", json.dumps(DRAIN["predicates"]))
    soft_cli = _delay(testbed, "--reason", MAINTENANCE)
    soft_rapi = _tag(api, "soft", MAINTENANCE)
    assert _jobs(testbed, held_delay, soft_cli, soft_rapi) == {
        held_delay: ("queued", hold), soft_cli: ("queued", drain), soft_rapi: ("queued", drain)}
    testbed.run("gnt-filter", "delete", drain)
    assert _final(api, soft_cli) == _final(api, soft_rapi) == "success"

    # Canceling all queued instance creations and disallowing new such jobs.
    create = ["gnt-instance", "add", "-t", "file", "-o", "corral-ext4", "-n", "node2.testbed",
              "--disk", "0:size=16M", "--no-start"]
    queued = testbed.run(*create, "--submit", "--print-jobid", "--reason", "held",
                         "c1.testbed")
    create_job = int(queued.stdout.splitlines()[0])
    assert _jobs(testbed, create_job) == {create_job: ("queued", hold)}
    no_create = api.ok("POST", "/2/filters", NO_CREATE)
    assert _final(api, create_job) == "canceled"
    assert _jobs(testbed, held_delay) == {held_delay: ("queued", hold)}, "not a creation"
    refused = testbed.run(*create, "c2.testbed", check=False)
    assert refused.returncode != 0 and no_create in refused.stderr, refused.stderr
    _rejected(api, int(api.ok("POST", f"/2/instances?reason={quote(MAINTENANCE)}", {
        "__version__": 1, "mode": "create", "name": "c3.testbed", "disk_template": "file",
        "disks": [{"size": 16}], "nics": [], "os": "corral-ext4", "pnode": "node2.testbed",
        "start": False})), no_create)
    assert _final(api, _delay(testbed)) == "success"
    assert testbed.run("gnt-instance", "list", "--no-headers", "-o", "name").stdout == ""


def test_filter_trails_from_outside(testbed: TestbedHandle) -> None:
    api = _rapi(testbed)
    given = [["user", "ticket 7", 1_700_000_000_000_000_000],
             ["other-app:maint-tool", "drain rack 4", 1_700_000_000_000_000_001]]
    body = {"priority": 3, "predicates": [], "action": "CONTINUE"}

    # Reserved sources in a RAPI body are refused, naming the entry; nothing is stored.
    existing = str(uuid_module.uuid4())
    for entry in (["gnt:client:gnt-filter", "add", 2], ["gnt:opcode:test_delay", "", 2],
                  ["gnt:client", "not the library's", 2], ["gnt:client:rapi:filters", "", 2]):
        for method, path in (("POST", "/2/filters"), ("PUT", f"/2/filters/{existing}")):
            status, answer, _ = api.request(method, path, {**body, "reason": [*given, entry]})
            assert status == 400, (method, entry, answer)
            assert f"reason trail entry 2 {entry!r}" in answer["message"], answer
            assert "'user'" in answer["message"], "says what is accepted"
    assert api.ok("GET", "/2/filters") == []

    # A valid trail is stored exactly as given, then reason= and RAPI's own entry.
    uuid = api.ok("POST", f"/2/filters?reason={quote('why')}", {**body, "reason": given})
    trail = api.ok("GET", f"/2/filters/{uuid}")["reason_trail"]
    assert trail[:2] == given
    assert [entry[:2] for entry in trail[2:]] == [["user", "why"], ["gnt:client:rapi:filters", ""],
                                                  ["gnt:library:rlib2:filters", ""]]

    # Ganeti's RAPI client library appends ["gnt:client", "", now]: kept, under RAPI's source.
    assert api.ok("PUT", f"/2/filters/{uuid}",
                  {**body, "reason": [*given, ["gnt:client", "", 5]]}) == uuid
    trail = api.ok("GET", f"/2/filters/{uuid}")["reason_trail"]
    assert trail[:3] == [*given, ["gnt:client:rapi-client", "", 5]]
    assert [entry[:2] for entry in trail[3:]] == [["gnt:client:rapi:filters_uuid", ""],
                                                  ["gnt:library:rlib2:filters_uuid", ""]]

    # Over luxi the CLI's own gnt:client: entry is legitimate; gnt:opcode: is refused.
    added = testbed.run("gnt-filter", "add", "--reason", "cli rule").stdout.strip()
    info = testbed.run("gnt-filter", "info", added).stdout
    assert "'user', 'cli rule'" in info and "'gnt:client:gnt-filter', 'add'" in info, info
    with Client(testbed.paths.master_socket) as client:
        forged = ["gnt:opcode:test_delay", "job=1;index=0", 3]
        with pytest.raises(ParameterError, match=r"entry 0 \['gnt:opcode:test_delay'"):
            client.call("ReplaceFilter", None, 0, [], "CONTINUE", [forged])
    assert sorted(f["uuid"] for f in api.ok("GET", "/2/filters?bulk=1")) == sorted([uuid, added])
