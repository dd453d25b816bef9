"""gnt-cluster verify's logical units over in-process node daemons: what each breakage
behind the master's back is reported as (code, item, severity), how findings are
written, and the jobs OP_CLUSTER_VERIFY submits."""

from __future__ import annotations

import asyncio
import base64
import re
import shutil
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from corral.cmdlib.verify import certificate_finding, config_problems
from corral.cmdlib.verify_findings import Findings, format_finding
from corral.locking import LockLevel
from corral.noded import procedures
from corral.opcodes import OpClusterVerifyConfig, OpClusterVerifyGroup, OpCode
from tests.unit.instance_helpers import OS_SEARCH, Cluster, open_cluster
from tests.unit.lu_helpers import JobCtx

DAY = 86400.0


@pytest.fixture
def cl(tmp_path: Path) -> Iterator[Cluster]:
    yield from open_cluster(tmp_path)


def findings(log: Sequence[Any]) -> list[tuple[str, str, str, str]]:
    """``(severity, code, item, message)`` of every ``--error-codes`` finding line."""
    found = []
    for line in log:
        text = str(line)
        if text.startswith("  - ") and ":" in text and not text.startswith("  - NOTICE"):
            severity, code, _kind, item, message = text[4:].split(":", 4)
            found.append((severity, code, item, message))
    return found


def verify_group(cl: Cluster, **params: Any) -> tuple[bool, list[tuple[str, str, str, str]],
                                                       JobCtx]:
    job = JobCtx()
    result = cl.run("OP_CLUSTER_VERIFY_GROUP", job, group_name="default", error_codes=True,
                    **params)
    return result, findings(job.log), job


def with_code(found: list[tuple[str, str, str, str]], code: str) -> list[tuple[str, str, str]]:
    return [(sev, item, msg) for sev, c, item, msg in found if c == code]


# -- how findings are written ---------------------------------------------------------


def test_a_finding_has_ganetis_two_forms() -> None:
    assert format_finding("ERROR", "ENODERPC", "node2", "while contacting node: down",
                          error_codes=False) == \
        "  - ERROR: node node2: while contacting node: down"
    assert format_finding("ERROR", "ENODERPC", "node2", "while contacting node: down",
                          error_codes=True) == \
        "  - ERROR:ENODERPC:node:node2:while contacting node: down"
    # a cluster finding has no item: Ganeti prints an empty name, or None
    assert format_finding("ERROR", "ECLUSTERFILECHECK", None, "File x is missing",
                          error_codes=False) == "  - ERROR: cluster : File x is missing"
    assert format_finding("WARNING", "ECLUSTERCFG", None, "m", error_codes=True) == \
        "  - WARNING:ECLUSTERCFG:cluster:None:m"


class _Options:
    def __init__(self, **values: Any) -> None:
        self.debug_simulate_errors = values.get("simulate", False)
        self.error_codes = values.get("codes", False)
        self.ignore_errors = values.get("ignore", [])
        self.verbose = values.get("verbose", False)


def test_an_ignored_code_is_a_warning_and_only_errors_are_bad() -> None:
    lines: list[Any] = []
    found = Findings(_Options(ignore=["ENODETIME"]), lambda m, t="message": lines.append(m))
    found.report("ENODETIME", "node2", "skewed")
    found.report("ENODEORPHANLV", "node2", "volume x is unknown", severity="WARNING")
    assert not found.bad
    assert lines == ["  - WARNING: node node2: skewed",
                     "  - WARNING: node node2: volume x is unknown"]
    found.report("ENODERPC", "node3", "down")
    assert found.bad


def test_simulated_errors_report_checks_that_passed() -> None:
    lines: list[Any] = []
    found = Findings(_Options(simulate=True), lambda m, t="message": lines.append(m))
    assert found.report_if(False, "ENODENET", "node1", "missing bridges: ") is False
    assert lines == ["  - ERROR: node node1: missing bridges: "]
    quiet = Findings(_Options(), lambda m, t="message": lines.append(m))
    quiet.report_if(False, "ENODENET", "node1", "missing bridges: ")
    assert len(lines) == 1


# -- certificates -----------------------------------------------------------------------


def test_certificates_follow_ganetis_limits() -> None:
    now = 1_800_000_000.0

    def cert(days_left: float, since: float = -DAY) -> dict[str, Any]:
        return {"path": "/p", "not_before": now + since, "not_after": now + days_left * DAY}

    assert certificate_finding("/p", cert(400), now) is None
    assert certificate_finding("/p", cert(20), now) == (
        "WARNING", "While verifying /p: Certificate expires in about 19 days")
    assert certificate_finding("/p", cert(5), now) == (
        "ERROR", "While verifying /p: Certificate expires in about 4 days")
    severity, message = certificate_finding("/p", cert(-1, since=-10 * DAY), now) or ("", "")
    assert severity == "ERROR" and "Certificate is expired (valid from" in message
    severity, message = certificate_finding("/p", cert(400, since=DAY), now) or ("", "")
    assert severity == "WARNING" and "Certificate not yet valid" in message
    assert certificate_finding("/p", {"path": "/p", "missing": True}, now) == (
        "ERROR", "Failed to load X509 certificate /p: the file does not exist")
    assert certificate_finding("/p", {"path": "/p", "missing": True}, now,
                               required=False) is None


# -- the configuration ------------------------------------------------------------------


def test_a_sound_configuration_has_no_problems(cl: Cluster) -> None:
    cl.create("web1")
    assert config_problems(cl.store) == []


def test_configuration_problems_are_named(cl: Cluster) -> None:
    cl.create("web1")
    cl.set_node("node1", master_candidate=False)
    cl.set_node("node2", master_candidate=True, offline=True)
    cl.set_cluster(enabled_hypervisors=["kvm"])
    problems = config_problems(cl.store)
    assert "Master node is not a master candidate" in problems
    assert ("Node node2 state is invalid: master_candidate=True, drain=False, "
            "offline=True") in problems
    assert any(p.startswith("instance web1 uses hypervisor fake, which is not enabled")
               for p in problems)


def test_the_config_job_reports_cfg_findings_and_the_masters_certificates(cl: Cluster) -> None:
    cl.set_node("node1", master_candidate=False)
    job = JobCtx()
    assert cl.run("OP_CLUSTER_VERIFY_CONFIG", job, error_codes=True) is False
    found = findings(job.log)
    assert ("ERROR", "ECLUSTERCFG", "None", "Master node is not a master candidate") in found
    # the in-process master node has no certificates: each required one is an error
    certs = with_code(found, "ECLUSTERCERT")
    assert len(certs) == 3 and all("does not exist" in m for _s, _i, m in certs)
    assert [line for line in job.log if line.startswith("*")] == [
        "* Verifying cluster config", "* Verifying cluster certificate files",
        "* Verifying hypervisor parameters",
        "* Verifying all nodes belong to an existing group"]


# -- OP_CLUSTER_VERIFY ------------------------------------------------------------------


def test_verify_submits_the_config_job_and_one_job_per_group(cl: Cluster) -> None:
    submitted: list[Sequence[Sequence[OpCode]]] = []

    async def submit(jobs: Sequence[Sequence[OpCode]]) -> list[tuple[bool, int | str]]:
        submitted.append(jobs)
        return [(True, 10 + n) for n in range(len(jobs))]

    cl.ctx.submit_jobs = submit
    cl.run("OP_GROUP_ADD", group_name="other")
    reason = [["gnt:client:gnt-cluster", "verify", 1]]
    result = cl.run("OP_CLUSTER_VERIFY", reason=reason, priority=5, error_codes=True,
                    ignore_errors=["ENODEN1"], skip_checks=["nplusone_mem"])
    assert result == {"jobs": [[True, 10], [True, 11], [True, 12]]}
    (jobs,) = submitted
    config, *groups = [ops[0] for ops in jobs]
    assert config.OP_ID == "OP_CLUSTER_VERIFY_CONFIG" and config.depends is None
    assert {g.OP_ID for g in groups} == {"OP_CLUSTER_VERIFY_GROUP"}
    assert isinstance(groups[0], OpClusterVerifyGroup)
    assert sorted(g.group_name for g in groups if isinstance(g, OpClusterVerifyGroup)) == \
        sorted(g.uuid for g in cl.store.all("nodegroup"))
    # each group job depends on the configuration job (relative ids, as Ganeti's)
    assert [g.depends for g in groups] == [[(-1, [])], [(-2, [])]]
    for op in (config, *groups):
        assert isinstance(op, OpClusterVerifyConfig | OpClusterVerifyGroup)
        assert op.priority == 5 and op.error_codes and op.ignore_errors == ["ENODEN1"]
        assert op.reason[0] == ("gnt:client:gnt-cluster", "verify", 1)
        assert op.comment == "Submitted by OP_CLUSTER_VERIFY"
    assert all(g.skip_checks == ["nplusone_mem"] for g in groups
               if isinstance(g, OpClusterVerifyGroup))


def test_verify_of_one_group_submits_only_its_job(cl: Cluster) -> None:
    submitted: list[Sequence[Sequence[OpCode]]] = []

    async def submit(jobs: Sequence[Sequence[OpCode]]) -> list[tuple[bool, int | str]]:
        submitted.append(jobs)
        return [(True, 7)]

    cl.ctx.submit_jobs = submit
    assert cl.run("OP_CLUSTER_VERIFY", group_name="nosuchgroup") == {"jobs": [[True, 7]]}
    ((op,),) = submitted[0]
    assert isinstance(op, OpClusterVerifyGroup)
    assert op.group_name == "nosuchgroup" and op.depends is None


def test_an_unknown_group_fails_the_group_job(cl: Cluster) -> None:
    with pytest.raises(Exception, match="Node group 'nosuchgroup' not found"):
        cl.run("OP_CLUSTER_VERIFY_GROUP", group_name="nosuchgroup")


# -- the group: instances ------------------------------------------------------------------


def test_an_admin_up_instance_found_down_is_einstancedown(cl: Cluster) -> None:
    cl.create("web1", disk_template="diskless", disks=[])
    cl.run("OP_INSTANCE_STARTUP", instance_name="web1")
    assert not with_code(verify_group(cl)[1], "EINSTANCEDOWN")
    cl.nodes.stop("node1", "web1")
    result, found, _job = verify_group(cl)
    assert result is False
    assert with_code(found, "EINSTANCEDOWN") == [
        ("ERROR", "web1", "instance not running on its primary node node1")]


def test_an_instance_outside_its_groups_policy_is_a_warning(cl: Cluster) -> None:
    cl.create("web1", beparams={"maxmem": 512, "minmem": 512})
    assert not with_code(verify_group(cl)[1], "EINSTANCEPOLICY")
    policy = cl.store.cluster.ipolicy
    bounds = [{"min": dict(pair["min"]), "max": {**pair["max"], "memory-size": 256}}
              for pair in policy["minmax"]]
    cl.set_cluster(ipolicy={**policy, "minmax": bounds, "disk-templates": ["diskless"]})
    found = verify_group(cl)[1]
    assert with_code(found, "EINSTANCEPOLICY") == [(
        "WARNING", "web1", "Disk template file is not allowed (allowed templates: diskless), "
        f"memory-size value 512 is not in range [{bounds[0]['min']['memory-size']}, 256]")]


def test_an_instance_on_another_node_and_an_unknown_one(cl: Cluster) -> None:
    cl.create("web1", disk_template="diskless", disks=[])
    cl.nodes.start("node3", "web1")
    spec = cl.nodes._spec("web1")
    spec["name"] = "stranger"
    asyncio.run(procedures.dispatch(cl.rpc.nodes.paths("node2"), "instance_start",
                                    {"instance": spec}))
    found = verify_group(cl)[1]
    assert with_code(found, "EINSTANCEWRONGNODE") == [
        ("ERROR", "web1", "instance should not run on node node3")]
    assert with_code(found, "ENODEORPHANINSTANCE") == [
        ("ERROR", "node2", "node is running unknown instance stranger")]


def test_missing_and_orphan_disk_files(cl: Cluster) -> None:
    cl.create("web1")
    disk = cl.store.get("disk", cl.store.get("instance", "web1").disks[0])
    path = disk.logical_id[1]
    local = cl.rpc.nodes.paths("node1").node_path(path)
    local.unlink()
    stray = cl.rpc.nodes.paths("node2").node_path("/srv/corral/file-storage/old/x.disk0")
    stray.parent.mkdir(parents=True)
    stray.write_bytes(b"")
    found = verify_group(cl)[1]
    assert with_code(found, "EINSTANCEMISSINGDISK") == [
        ("ERROR", "web1", f"volume {path} missing on node node1")]
    assert ("WARNING", "node2", "volume /srv/corral/file-storage/old/x.disk0 is unknown") in \
        with_code(found, "ENODEORPHANLV")


def test_an_instance_another_job_holds_is_left_out(cl: Cluster) -> None:
    cl.create("web1", disk_template="diskless", disks=[])
    cl.run("OP_INSTANCE_STARTUP", instance_name="web1")
    cl.nodes.stop("node1", "web1")

    async def held() -> tuple[Any, list[Any], tuple[str, ...]]:
        owner = object()
        await cl.ctx.locks.acquire(LockLevel.INSTANCE, ["web1"], owner=owner)
        job = JobCtx()
        try:
            result = await cl.processor.execute(
                OpClusterVerifyGroup(group_name="default", error_codes=True, verbose=True),
                job)
        finally:
            cl.ctx.locks.release_all(owner=owner)
        return result, job.log, cl.ctx.locks.lockset(LockLevel.INSTANCE).info()[1].holders

    _result, log, holders = asyncio.run(held())
    assert not with_code(findings(log), "EINSTANCEDOWN")
    assert "* Skipping instance web1: another job is working on it" in log
    assert holders == ()  # verify released what it locked


# -- the group: nodes ------------------------------------------------------------------------


def _patched_verify(cl: Cluster, node: str, change: Any) -> None:
    """Answer ``node_verify`` through the real procedure, then let ``change`` alter
    ``node``'s answer (what the real node cannot be made to say here)."""
    paths = cl.rpc.nodes.paths

    async def answer(name: str, args: Mapping[str, Any]) -> Any:
        result = await procedures.dispatch(paths(name), "node_verify", args)
        if name == node:
            change(result)
        return result

    cl.rpc.nodes.overrides["node_verify"] = answer


def test_an_unreachable_node_is_enoderpc_not_a_failed_job(cl: Cluster) -> None:
    cl.create("web1", disk_template="diskless", disks=[], pnode="node2")
    cl.rpc.down.add("node2")
    result, found, _job = verify_group(cl)
    assert result is False
    rpc = with_code(found, "ENODERPC")
    assert rpc[0][:2] == ("ERROR", "node2") and rpc[0][2].startswith("while contacting node:")
    assert ("ERROR", "node2", "instance web1, connection to primary node failed") in rpc


def test_a_skewed_clock_is_enodetime(cl: Cluster) -> None:
    _patched_verify(cl, "node3", lambda r: r.update(time=r["time"] + 600))
    (sev, item, message), = with_code(verify_group(cl)[1], "ENODETIME")
    assert (sev, item) == ("ERROR", "node3")
    assert re.fullmatch(r"Node time diverges by at least (599|600)\.\ds from master node "
                        r"time", message), message


def test_another_software_version_is_a_warning(cl: Cluster) -> None:
    _patched_verify(cl, "node2", lambda r: r["version"].update(version="0.0.1"))
    (sev, item, message), = with_code(verify_group(cl)[1], "ENODEVERSION")
    assert (sev, item) == ("WARNING", "node2")
    assert message.startswith("software version mismatch: master ")
    _patched_verify(cl, "node2", lambda r: r["version"].update(rpc_version=99))
    (sev, _item, message), = with_code(verify_group(cl)[1], "ENODEVERSION")
    assert sev == "ERROR" and message == "incompatible protocol versions: master 1, node 99"


def test_a_changed_distributed_file_is_eclusterfilecheck(cl: Cluster) -> None:
    data = b"secret-key\n"
    for node in ("node1", "node2", "node3", "node4"):
        cl.rpc.nodes.paths(node).confd_hmac_key.write_bytes(data)
    cl.ctx.ancillary_files = lambda: [{"name": "confd_key", "candidates_only": False,
                                       "data": base64.b64encode(data).decode()}]
    assert all("confd.key" not in m
               for _s, _i, m in with_code(verify_group(cl)[1], "ECLUSTERFILECHECK"))
    cl.rpc.nodes.paths("node3").confd_hmac_key.write_bytes(b"other\n")
    cl.rpc.nodes.paths("node4").confd_hmac_key.unlink()
    messages = [m for _s, _i, m in with_code(verify_group(cl)[1], "ECLUSTERFILECHECK")
                if "confd.key" in m]
    assert "File /var/lib/corral/confd.key is missing from node(s) node4" in messages
    assert any(m.startswith("File /var/lib/corral/confd.key found with 2 different checksums")
               and "on node3" in m for m in messages)


def test_nplusone_counts_the_instances_a_node_holds_as_secondary(cl: Cluster) -> None:
    cl.create("web1", beparams={"minmem": 512, "maxmem": 512})
    disk = cl.store.get("disk", cl.store.get("instance", "web1").disks[0])
    node2 = cl.store.get("node", "node2")
    with cl.store.transaction() as txn:  # a secondary, as a mirrored template has
        copy = txn.get("disk", disk.uuid)
        copy.nodes = [*copy.nodes, node2.uuid]
        txn.update(copy)
    _patched_verify(cl, "node2", lambda r: r["memory"].update(memory_free=100))
    (sev, item, message), = with_code(verify_group(cl)[1], "ENODEN1")
    assert (sev, item) == ("ERROR", "node2")
    assert message == ("not enough memory to accomodate instance failovers should node "
                       "node1 fail (512MiB needed, 100MiB available)")
    assert not with_code(verify_group(cl, skip_checks=["nplusone_mem"])[1], "ENODEN1")


def test_an_empty_group_is_skipped(cl: Cluster) -> None:
    cl.run("OP_GROUP_ADD", group_name="empty")
    job = JobCtx()
    assert cl.run("OP_CLUSTER_VERIFY_GROUP", job, group_name="empty") is True
    assert job.log == ["* Verifying group 'empty'", "* Empty node group, skipping verification"]


def test_verify_changes_nothing(cl: Cluster) -> None:
    cl.create("web1")
    before = cl.store.serial
    verify_group(cl)
    assert cl.store.serial == before


def test_os_definitions_differing_between_nodes_are_enodeos(cl: Cluster) -> None:
    assert not with_code(verify_group(cl)[1], "ENODEOS")
    shutil.rmtree(cl.rpc.nodes.paths("node3").node_path(OS_SEARCH) / "plainos")
    cl.rpc.install_os(OS_SEARCH, "corral-ext4", variants=["default"],
                      parameters=["filesystem file system type", "fail fail on purpose"],
                      nodes=["node2"])
    found = with_code(verify_group(cl)[1], "ENODEOS")
    assert ("ERROR", "node3", "OSes present on reference node node1 but missing on this "
            "node: plainos") in found
    assert ("ERROR", "node2", "OS variants list for corral-ext4 differs from reference node "
            "node1: [default] vs. [default, minimal]") in found
    assert len(found) == 2


def test_unreadable_master_copies_are_a_finding_not_a_failed_job(cl: Cluster) -> None:
    def unreadable() -> list[dict[str, Any]]:
        raise PermissionError("[Errno 13] Permission denied: '/var/lib/corral/ca.pem'")

    cl.ctx.ancillary_files = unreadable
    result, found, _job = verify_group(cl)
    assert result is False
    assert ("ERROR", "None", "cannot read the master's copies of the distributed files, they "
            "are not compared: [Errno 13] Permission denied: '/var/lib/corral/ca.pem'") in \
        with_code(found, "ECLUSTERFILECHECK")
