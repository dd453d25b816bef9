"""gnt-job, gnt-filter, gnt-debug and gnt-cluster queue/tags against a real testbed.

Jobs are held in the queue with PAUSE filters, never by timing: a job is known to
be held when a later, unfiltered job has already finished.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.luxi import Client
from tests.conftest import TestbedHandle

# Every test shares the module's testbed: _shared_cluster_as_found puts back what they
# change cluster-wide.
pytestmark = [pytest.mark.integration, pytest.mark.shared_testbed]

UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _finish(client: Client, job_id: int, timeout: float = 60) -> None:
    """Wait until job ``job_id`` has ended."""
    deadline = time.monotonic() + timeout
    while client.call("QueryJobs", [job_id], ["status"])[0][0] not in (
            "success", "error", "canceled"):
        assert time.monotonic() < deadline, f"job {job_id} did not end"
        time.sleep(0.05)


@pytest.fixture(autouse=True)
def _shared_cluster_as_found(request: pytest.FixtureRequest) -> Iterator[None]:
    """On the module's shared testbed, put back after each test, even a failed one,
    what the tests here change cluster-wide: filters, the drain flag, cluster tags and
    max_running_jobs; and let every job it left held or running end. Each test then
    starts from the cluster as the shared testbed came up (no filters or tags, queue
    open), as it would on a testbed of its own."""
    if request.node.get_closest_marker("shared_testbed") is None:
        yield
        return
    testbed: TestbedHandle = request.getfixturevalue("testbed")
    with Client(testbed.paths.master_socket) as client:
        info = client.call("QueryClusterInfo")
        before: dict[str, Any] = {
            "filters": {row[0] for row in client.call("QueryFilters", None, ["uuid"])},
            "drained": client.call("QueryConfigValues", ["drain_flag"])[0],
            "tags": set(info["tags"]), "max_running_jobs": info["max_running_jobs"]}
    yield
    with Client(testbed.paths.master_socket) as client:
        for (uuid,) in client.call("QueryFilters", None, ["uuid"]):
            if uuid not in before["filters"]:
                client.call("DeleteFilter", uuid)
        if client.call("QueryConfigValues", ["drain_flag"])[0] != before["drained"]:
            client.call("SetDrainFlag", before["drained"])
        info = client.call("QueryClusterInfo")
        added = sorted(set(info["tags"]) - before["tags"])
        if added:
            _finish(client, client.call("SubmitJob", [
                {"OP_ID": "OP_TAGS_DEL", "kind": "cluster", "tags": added}]))
        if info["max_running_jobs"] != before["max_running_jobs"]:
            _finish(client, client.call("SubmitJob", [
                {"OP_ID": "OP_CLUSTER_SET_PARAMS",
                 "max_running_jobs": before["max_running_jobs"]}]))
        for job_id, status in client.call("QueryJobs", None, ["id", "status"]):
            if status not in ("success", "error", "canceled"):
                _finish(client, job_id)
        info = client.call("QueryClusterInfo")
        assert set(info["tags"]) == before["tags"]
        assert info["max_running_jobs"] == before["max_running_jobs"]


def _submit_delay(tb: TestbedHandle, *args: str, duration: str = "0") -> int:
    """Submit a delay job without waiting; return its id."""
    proc = tb.run("gnt-debug", "delay", "--submit", "--print-jobid", *args, duration)
    job_id = int(proc.stdout.splitlines()[0])
    assert proc.stderr.strip() == f"JobID: {job_id}"
    return job_id


def _field(tb: TestbedHandle, job_id: int, field: str, *extra: str) -> str:
    return tb.run("gnt-job", "list", "--no-headers", "-o", field, *extra,
                  str(job_id)).stdout.strip()


def _pause_filter(tb: TestbedHandle, reason_text: str) -> str:
    predicates = json.dumps([["reason", ["=", "reason", reason_text]]])
    uuid = tb.run("gnt-filter", "add", "--action", "PAUSE", "--predicates", predicates,
                  "--reason", "hold jobs for the test").stdout.strip()
    assert UUID_RE.match(uuid), uuid
    return uuid


def _assert_held(tb: TestbedHandle, job_id: int) -> None:
    """``job_id`` is still queued after a later, unfiltered job has finished."""
    later = _submit_delay(tb)
    tb.run("gnt-job", "wait", str(later))
    assert _field(tb, later, "status") == "success"
    assert _field(tb, job_id, "status") == "queued"


def test_delay_job_shows_in_list_and_info_with_reason_trail(testbed: TestbedHandle) -> None:
    proc = testbed.run("gnt-debug", "delay", "--print-jobid", "--reason", "ticket 17", "0")
    job_id = int(proc.stdout.splitlines()[0])
    rows = testbed.run("gnt-job", "list", "--no-headers", "--separator", "|").stdout
    line = next(ln for ln in rows.splitlines() if ln.split("|")[0] == str(job_id))
    _, status, summary = line.split("|")
    assert status == "success" and summary.startswith("TEST_DELAY(")
    header = testbed.run("gnt-job", "list", str(job_id)).stdout.splitlines()[0]
    assert header.split() == ["ID", "Status", "Summary"]

    info = testbed.run("gnt-job", "info", str(job_id)).stdout
    assert info.startswith(f"- Job ID: {job_id}\n")
    assert "  Status: success" in info
    assert "    - Opcode: OP_TEST_DELAY" in info
    trail_order = [info.index(s) for s in ("ticket 17", "gnt:client:gnt-debug", "delay",
                                           "gnt:opcode:test_delay")]
    assert trail_order == sorted(trail_order)
    assert f"job={job_id};index=0" in info


def test_list_json_and_filter_text(testbed: TestbedHandle) -> None:
    job_id = int(testbed.run("gnt-debug", "delay", "--print-jobid", "0").stdout.split()[0])
    rows = json.loads(testbed.run("gnt-job", "list", "--json", "-o", "id,status").stdout)
    assert {"id": job_id, "status": "success"} in rows
    text = testbed.run("gnt-job", "list", "--no-headers", "-o", "id",
                       "-F", f"id == {job_id}").stdout
    assert text.split() == [str(job_id)]
    unknown = testbed.run("gnt-job", "list", "-o", "id,no_such_field", check=False)
    assert unknown.returncode == 14 and "no_such_field" in unknown.stderr


def test_watch_and_wait_follow_a_job(testbed: TestbedHandle) -> None:
    job_id = _submit_delay(testbed, duration="0.5")
    watched = testbed.run("gnt-job", "watch", str(job_id)).stdout.splitlines()
    title = f"Output from job {job_id} follows"
    assert watched[:2] == [title, "-" * len(title)]
    assert _field(testbed, job_id, "status") == "success"
    assert testbed.run("gnt-job", "wait", str(job_id)).stdout == ""


def test_pause_filter_holds_a_job_until_deleted(testbed: TestbedHandle) -> None:
    uuid = _pause_filter(testbed, "held")
    listed = testbed.run("gnt-filter", "list", "--no-headers", "--separator", "|").stdout
    (row,) = listed.splitlines()
    assert row.split("|")[0] == uuid and "|PAUSE|" in row
    info = testbed.run("gnt-filter", "info", uuid).stdout
    assert info.startswith(f"UUID: {uuid}\n") and "  Action: PAUSE" in info
    assert "hold jobs for the test" in info

    held = _submit_delay(testbed, "--reason", "held")
    _assert_held(testbed, held)
    testbed.run("gnt-filter", "delete", uuid)
    assert testbed.run("gnt-filter", "list", "--no-headers").stdout == ""
    testbed.run("gnt-job", "wait", str(held))
    assert _field(testbed, held, "status") == "success"


def test_cancel_a_queued_job(testbed: TestbedHandle) -> None:
    _pause_filter(testbed, "to-cancel")
    job_id = _submit_delay(testbed, "--reason", "to-cancel")
    _assert_held(testbed, job_id)
    proc = testbed.run("gnt-job", "cancel", str(job_id))
    assert proc.stdout.strip()
    assert _field(testbed, job_id, "status") == "canceled"
    waited = testbed.run("gnt-job", "wait", str(job_id), check=False)
    assert waited.returncode == 1
    assert waited.stderr.startswith(f"Job {job_id} failed: Unhandled Ganeti error: Job was "
                                    "canceled\n"), waited.stderr


def test_change_priority_of_a_held_job(testbed: TestbedHandle) -> None:
    uuid = _pause_filter(testbed, "reprio")
    job_id = _submit_delay(testbed, "--reason", "reprio")
    _assert_held(testbed, job_id)
    assert _field(testbed, job_id, "priority") == "0"
    testbed.run("gnt-job", "change-priority", "--priority", "high", str(job_id))
    assert _field(testbed, job_id, "priority") == "-10"
    testbed.run("gnt-filter", "delete", uuid)
    testbed.run("gnt-job", "wait", str(job_id))


def test_archive_and_autoarchive(testbed: TestbedHandle) -> None:
    first = int(testbed.run("gnt-debug", "delay", "--print-jobid", "0").stdout.split()[0])
    testbed.run("gnt-job", "archive", str(first))
    listed = testbed.run("gnt-job", "list", "--no-headers", "-o", "id").stdout.split()
    assert str(first) not in listed
    # Asked for by id, an archived job is still listed (as Ganeti's are).
    by_id = testbed.run("gnt-job", "list", "--no-headers", "-o", "id,status", str(first)).stdout
    assert by_id.split() == [str(first), "success"]
    archived = testbed.run("gnt-job", "list", "--archived", "--no-headers", "--separator", "|",
                           "-o", "id,archived", str(first)).stdout
    assert archived.strip() == f"{first}|Y"

    second = int(testbed.run("gnt-debug", "delay", "--print-jobid", "0").stdout.split()[0])
    out = testbed.run("gnt-job", "autoarchive", "all").stdout
    assert re.fullmatch(r"Archived [1-9]\d* jobs, \d+ unchecked left\n", out), out
    assert str(second) not in testbed.run("gnt-job", "list", "--no-headers", "-o",
                                          "id").stdout.split()


def test_reject_filter_cancels_the_submitted_job(testbed: TestbedHandle) -> None:
    predicates = json.dumps([["opcode", ["=", "OP_ID", "OP_TEST_DELAY"]]])
    rule = testbed.run("gnt-filter", "add", "--action", "REJECT",
                       "--predicates", predicates).stdout.strip()
    # Waiting for it: the job exists, ended canceled, and the error names the rule.
    proc = testbed.run("gnt-debug", "delay", "--print-jobid", "0", check=False)
    assert proc.returncode == 1 and f"filter rule {rule}" in proc.stderr, proc.stderr
    waited = int(proc.stdout.split()[0])
    # --submit: the id, as for any job; the job is canceled without running.
    submitted = int(testbed.run("gnt-debug", "delay", "--submit", "--print-jobid",
                                "0").stdout.split()[0])
    listed = testbed.run("gnt-job", "list", "--no-headers", "--separator", "|", "-o",
                         "id,status,opresult", str(waited), str(submitted)).stdout
    assert listed.splitlines() == [f"{job}|canceled|['Job canceled by filter rule {rule}']"
                                   for job in (waited, submitted)], listed
    testbed.run("gnt-filter", "delete", rule)


def test_drained_queue_refuses_submission(testbed: TestbedHandle) -> None:
    testbed.run("gnt-cluster", "queue", "drain")
    assert testbed.run("gnt-cluster", "queue", "info").stdout == "The drain flag is set\n"
    proc = testbed.run("gnt-debug", "delay", "0", check=False)
    assert proc.returncode != 0 and "drain" in proc.stderr.lower(), proc.stderr
    testbed.run("gnt-cluster", "queue", "undrain")
    assert testbed.run("gnt-cluster", "queue", "info").stdout == "The drain flag is unset\n"
    testbed.run("gnt-debug", "delay", "0")


def test_cluster_tags(testbed: TestbedHandle, tmp_path: Path) -> None:
    assert testbed.run("gnt-cluster", "list-tags").stdout == ""
    source = tmp_path / "tags"
    source.write_text("from-file\n")
    testbed.run("gnt-cluster", "add-tags", "--from", str(source), "web", "db")
    assert testbed.run("gnt-cluster", "list-tags").stdout == "db\nfrom-file\nweb\n"
    testbed.run("gnt-cluster", "remove-tags", "web", "from-file")
    assert testbed.run("gnt-cluster", "list-tags").stdout == "db\n"
    assert "db" in testbed.info()["tags"]
    empty = testbed.run("gnt-cluster", "add-tags", check=False)
    assert empty.returncode != 0 and "No tags to be added" in empty.stderr


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--predicates", '[["nosuch", ["=", "id", 1]]]'], "nosuch"),
        (["--predicates", '[["jobid", ["~~", "id", 1]]]'], "~~"),
        (["--predicates", '[["jobid", ["=", "no_field", 1]]]'], "no_field"),
        (["--action", "EXPLODE"], "EXPLODE"),
        (["--action", "RATE_LIMIT x"], "RATE_LIMIT"),
        (["--priority", "-1"], "priority"),
    ],
)
def test_bad_filter_is_refused_and_nothing_stored(
    testbed: TestbedHandle, args: list[str], named: str
) -> None:
    proc = testbed.run("gnt-filter", "add", *args, check=False)
    assert proc.returncode != 0
    assert named.lower() in proc.stderr.lower(), proc.stderr
    assert testbed.run("gnt-filter", "list", "--no-headers").stdout == ""


def test_bad_predicates_json_is_a_usage_error(testbed: TestbedHandle) -> None:
    proc = testbed.run("gnt-filter", "add", "--predicates", "[oops", check=False)
    assert proc.returncode == 2 and "--predicates" in proc.stderr
    assert testbed.run("gnt-filter", "list", "--no-headers").stdout == ""


def test_unknown_job_id_is_not_found(testbed: TestbedHandle) -> None:
    for command in ("info", "wait", "watch"):
        proc = testbed.run("gnt-job", command, "99999", check=False)
        assert proc.returncode != 0, command
        assert "99999" in proc.stderr and "not found" in proc.stderr, (command, proc.stderr)
    # list answers every id asked for, in the order asked; an unknown one has "-" values.
    listed = testbed.run("gnt-job", "list", "--no-headers", "99999", "1").stdout.splitlines()
    assert listed[0].split() == ["99999", "-", "-"] and listed[1].split()[0] == "1"


def test_modify_runs_as_a_job_with_submit(testbed: TestbedHandle) -> None:
    proc = testbed.run("gnt-cluster", "modify", "--max-running-jobs", "9", "--submit",
                       "--print-jobid")
    job_id = int(proc.stdout.split()[0])
    testbed.run("gnt-job", "wait", str(job_id))
    assert testbed.info()["max_running_jobs"] == 9
    summary = _field(testbed, job_id, "summary")
    assert summary.startswith("CLUSTER_SET_PARAMS")


def test_debug_locks_lists_columns(testbed: TestbedHandle) -> None:
    out = testbed.run("gnt-debug", "locks").stdout
    assert out.splitlines()[0].split() == ["Name", "Mode", "Owner", "Pending"]


@pytest.mark.parametrize("tool, args, prints", [
    ("gnt-debug", ["delay", "--submit", "0"], True),    # the job id
    ("gnt-debug", ["delay", "0"], False),               # follows the job to its end
    ("gnt-job", ["list"], True),
    ("gnt-instance", ["list"], True),
    ("gnt-node", ["list"], True),
    ("gnt-cluster", ["version"], True),
    ("gnt-cluster", ["info"], True),
    ("gnt-filter", ["list"], True),
])
def test_commands_talk_to_the_master_loading_client_side_modules_only(
        testbed: TestbedHandle, tool: str, args: list[str], prints: bool) -> None:
    # what a command loads until it has its answer from the master (see
    # tests/startup_probe.py): never the master's machinery, which is what made every
    # command start in 0.3-0.9 s
    from tests.startup_probe import edge_entry_points, outside_client_side, probe

    found = probe(edge_entry_points()[tool], [args], env=testbed.env)
    assert found.exits in ([0], [None]), found
    assert (found.output_sizes[0] > 0) == prints
    assert outside_client_side(found.modules) == []
