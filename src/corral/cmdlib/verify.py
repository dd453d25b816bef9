"""``gnt-cluster verify``: the job that submits the checks, and the configuration check.

``OP_CLUSTER_VERIFY`` checks nothing itself: as Ganeti's, it submits one job with
``OP_CLUSTER_VERIFY_CONFIG`` and one ``OP_CLUSTER_VERIFY_GROUP`` job per node group
(named by UUID), each depending on the first, all carrying its reason trail, priority
and reporting options; its result is ``{"jobs": [[true, id], ...]}``. With a
``group_name`` only that group's job is submitted (an unknown group fails that job).

``OP_CLUSTER_VERIFY_CONFIG`` reads one configuration snapshot (no lock: the store
hands out a consistent model, and the check awaits nothing while it reads) and asks
the master node about its certificates. The node groups' checks are in
:mod:`corral.cmdlib.verify_group`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from corral.cmdlib.base import LogicalUnit
from corral.cmdlib.common import check_hv_syntax, fill_hvparams
from corral.cmdlib.verify_findings import Findings
from corral.config.invariants import check as check_invariants
from corral.config.model import Change, Model
from corral.config.store import ConfigStore
from corral.errors import CorralError
from corral.objects import params
from corral.objects.params import HV_PARAMS
from corral.objects.verify_codes import ERROR, WARNING, Severity
from corral.opcodes import OpClusterVerify, OpClusterVerifyConfig, OpClusterVerifyGroup
from corral.opcodes.base import OpCode

__all__ = [
    "CERT_ERROR_DAYS",
    "CERT_WARN_DAYS",
    "NODE_MAX_CLOCK_SKEW",
    "LUClusterVerify",
    "LUClusterVerifyConfig",
    "certificate_finding",
    "config_problems",
    "format_time",
    "hypervisor_problems",
]

#: Ganeti's limits: a certificate is an error this many days before it expires...
CERT_ERROR_DAYS = 7
#: ... and a warning this many days before.
CERT_WARN_DAYS = 30
#: Seconds a node's clock may differ from the master's (Ganeti's value); also the
#: margin certificate checks give for clock differences.
NODE_MAX_CLOCK_SKEW = 150.0

#: The certificates of the master node the configuration check looks at, and whether
#: a missing one is an error (the RAPI certificate exists only where RAPI was set up).
MASTER_CERTIFICATES: dict[str, bool] = {
    "ca_cert": True, "node_cert": True, "master_client_cert": True, "rapi_cert": False,
}


class LUClusterVerify(LogicalUnit[OpClusterVerify]):
    """``OP_CLUSTER_VERIFY``: submit the configuration job and one job per group."""

    OP_ID = "OP_CLUSTER_VERIFY"
    USES_BGL = False

    async def execute(self) -> dict[str, Any]:
        """Submit the jobs; their ids (or why one was refused) as Ganeti answers them."""
        op = self.op
        if op.dry_run:
            return {"jobs": []}
        inherited: dict[str, Any] = {
            "reason": list(op.reason), "priority": op.priority,
            "comment": f"Submitted by {op.OP_ID}",
            "debug_simulate_errors": op.debug_simulate_errors,
            "error_codes": op.error_codes, "ignore_errors": list(op.ignore_errors),
            "verbose": op.verbose,
        }
        jobs: list[list[OpCode]] = []
        if op.group_name:
            groups = [op.group_name]
        else:
            jobs.append([OpClusterVerifyConfig(**inherited)])
            groups = [group.uuid for group in self.master.store.all("nodegroup")]
        for group in groups:
            depends: list[tuple[int, list[Any]]] | None = (
                [(-len(jobs), [])] if jobs and not op.group_name else None)
            jobs.append([OpClusterVerifyGroup(
                group_name=group, skip_checks=list(op.skip_checks),
                verify_clutter=op.verify_clutter, depends=depends, **inherited)])
        submitted = await self.master.submit_jobs(jobs)
        return {"jobs": [[ok, value] for ok, value in submitted]}


# -- the configuration -------------------------------------------------------------------


def _invariants(store: ConfigStore) -> list[str]:
    """What the commit-time invariants say of the whole configuration, checked afresh
    (they hold unless the model drifted from what was committed)."""
    changes = {obj.uuid: Change(kind, None, obj)
               for kind in ("cluster", "nodegroup", "node", "disk", "network", "instance",
                            "filter")
               for obj in store.all(kind)}
    try:
        check_invariants(Model(), changes)
    except CorralError as err:
        return [err.message]
    return []


def _candidates(store: ConfigStore) -> list[str]:
    cluster = store.cluster
    nodes = store.all("node")
    problems = []
    master = store.find("node", cluster.master_node)
    if master is None:
        problems.append(f"the master node {cluster.master_node} is not in the configuration")
    else:
        if not master.master_candidate:
            problems.append("Master node is not a master candidate")
        if master.offline:
            problems.append("Master node is marked offline")
    eligible = [n for n in nodes if n.master_capable and not n.offline and not n.drained]
    target = min(cluster.candidate_pool_size, len(eligible))
    actual = sum(1 for n in nodes if n.master_candidate)
    if actual < target:
        problems.append(f"Not enough master candidates: actual {actual}, target {target}")
    for node in nodes:
        flags = (node.master_candidate, node.drained, node.offline)
        if sum(flags) > 1:
            problems.append(f"Node {node.name} state is invalid: master_candidate="
                            f"{flags[0]}, drain={flags[1]}, offline={flags[2]}")
    return problems


def _instances(store: ConfigStore) -> list[str]:
    cluster = store.cluster
    problems = []
    ports: dict[int, list[str]] = {}
    for inst in store.all("instance"):
        if inst.hypervisor not in cluster.enabled_hypervisors:
            problems.append(f"instance {inst.name} uses hypervisor {inst.hypervisor}, which "
                            f"is not enabled (enabled: {', '.join(cluster.enabled_hypervisors)})")
        template = inst.disk_template if inst.disks else "diskless"
        if template not in cluster.enabled_disk_templates:
            problems.append(f"instance {inst.name} uses disk template {template}, which is "
                            "not enabled (enabled: "
                            f"{', '.join(cluster.enabled_disk_templates)})")
        wrong = []
        for index, uuid in enumerate(inst.disks):
            disk = store.find("disk", uuid)
            if disk is not None and disk.iv_name != f"disk/{index}":
                wrong.append(f"name of disk {index} should be 'disk/{index}', but is "
                             f"'{disk.iv_name}'")
        if wrong:
            problems.append(f"Instance '{inst.name}' has wrongly named disks: "
                            f"{'; '.join(wrong)}")
        if inst.network_port is not None:
            ports.setdefault(inst.network_port, []).append(inst.name)
    for port, names in sorted(ports.items()):
        if len(names) > 1:
            problems.append(f"tcp/udp port {port} has duplicates: "
                            f"{', '.join(f'{n}/network port' for n in names)}")
    return problems


def _serials(store: ConfigStore) -> list[str]:
    problems = []
    for kind in ("cluster", "nodegroup", "node", "disk", "network", "instance", "filter"):
        for obj in store.all(kind):
            if obj.serial_no < 1:
                name = getattr(obj, "name", None) or obj.uuid
                problems.append(f"{kind} {name} has serial number {obj.serial_no}; serial "
                                "numbers start at 1")
    return problems


def _parameters(store: ConfigStore) -> list[str]:
    """Cluster-level parameter families checked against their specifications."""
    cluster = store.cluster
    problems = []
    families: list[tuple[str, Mapping[str, params.ParamSpec], Mapping[str, Any]]] = [
        ("backend", params.BE_PARAMS, cluster.beparams.get("default", {})),
        ("NIC", params.NIC_PARAMS, cluster.nicparams.get("default", {})),
        ("node", params.ND_PARAMS, cluster.ndparams),
    ]
    for family, specs, values in families:
        try:
            params.validate_params(family, specs, values)
        except CorralError as err:
            problems.append(f"cluster {family} parameters: {err.message}")
    return problems


def config_problems(store: ConfigStore) -> list[str]:
    """Everything wrong with the configuration itself, one sentence each."""
    return [*_invariants(store), *_candidates(store), *_instances(store), *_serials(store),
            *_parameters(store)]


def hypervisor_problems(store: ConfigStore) -> list[str]:
    """The filled hypervisor parameters that do not hold together: the cluster's of
    every enabled hypervisor, each OS's own and each instance with its own (Ganeti's
    syntax check)."""
    cluster = store.cluster
    checks: list[tuple[str, str, dict[str, Any]]] = []
    for hv in cluster.enabled_hypervisors:
        if hv in HV_PARAMS:
            checks.append(("cluster", hv, params.fill_params(
                params.defaults(HV_PARAMS[hv]), cluster.hvparams.get(hv, {}))))
    for os_name, hvs in sorted(cluster.os_hvp.items()):
        for hv, values in sorted(hvs.items()):
            if hv in HV_PARAMS and values:
                checks.append((f"os {os_name}", hv, params.fill_params(
                    params.defaults(HV_PARAMS[hv]), cluster.hvparams.get(hv, {}), values)))
    for inst in store.all("instance"):
        if inst.hvparams and inst.hypervisor in HV_PARAMS and store.find(
                "node", inst.primary_node) is not None:
            checks.append((f"instance {inst.name}", inst.hypervisor,
                           fill_hvparams(store, inst)))
    problems = []
    for source, hv, filled in checks:
        try:
            check_hv_syntax(hv, filled)
        except CorralError as err:
            problems.append(f"hypervisor {hv} parameters syntax check (source {source}): "
                            f"{err.message}")
    return problems


def format_time(seconds: float) -> str:
    """A time as Ganeti's messages show it (``YYYY-MM-DD HH:MM:SS``, local time)."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


def certificate_finding(path: str, info: Mapping[str, Any] | None, now: float, *,
                        required: bool = True) -> tuple[Severity, str] | None:
    """What is wrong with the certificate a node described as ``info`` (None: the file
    is missing) at ``now``: Ganeti's limits and wording, or None when it is fine."""
    if info is None or info.get("missing"):
        if not required:
            return None
        return (ERROR, f"Failed to load X509 certificate {path}: the file does not exist")
    if "error" in info:
        return (ERROR, f"Failed to load X509 certificate {path}: {info['error']}")
    not_before, not_after = float(info["not_before"]), float(info["not_after"])
    now += NODE_MAX_CLOCK_SKEW
    prefix = f"While verifying {path}: "
    if not_after < now - NODE_MAX_CLOCK_SKEW:
        return (ERROR, f"{prefix}Certificate is expired (valid from "
                       f"{format_time(not_before)} to {format_time(not_after)})")
    if not_before > now:
        return (WARNING, f"{prefix}Certificate not yet valid (valid from "
                         f"{format_time(not_before)})")
    days = int((not_after - now) / 86400)
    if days <= CERT_ERROR_DAYS:
        return (ERROR, f"{prefix}Certificate expires in about {days} days")
    if days <= CERT_WARN_DAYS:
        return (WARNING, f"{prefix}Certificate expires in about {days} days")
    return None


class LUClusterVerifyConfig(LogicalUnit[OpClusterVerifyConfig]):
    """``OP_CLUSTER_VERIFY_CONFIG``: the configuration's consistency, the master's
    certificates, the hypervisor parameters, dangling references."""

    OP_ID = "OP_CLUSTER_VERIFY_CONFIG"
    USES_BGL = False

    async def execute(self) -> bool:
        """Run the checks; True when no error was found."""
        store = self.master.store
        found = Findings(self.op, self.feedback)
        found.step("* Verifying cluster config")
        found.report_all("ECLUSTERCFG", None, config_problems(store))
        if found.simulate:
            found.report("ECLUSTERCFG", None, "(simulated) configuration problem")
        # Everything else reads a snapshot taken now; the certificates come later.
        dangling_nodes = [n for n in store.all("node")
                          if store.find("nodegroup", n.group) is None]
        dangling_instances = [i for i in store.all("instance")
                              if store.find("node", i.primary_node) is None]
        hv_problems = hypervisor_problems(store)
        master = store.find("node", store.cluster.master_node)

        found.step("* Verifying cluster certificate files")
        await self._certificates(found, master)

        found.step("* Verifying hypervisor parameters")
        found.report_all("ECLUSTERCFG", None, hv_problems)

        found.step("* Verifying all nodes belong to an existing group")
        on_node = {n.uuid: [i.name for i in store.all("instance") if i.primary_node == n.uuid]
                   for n in dangling_nodes}
        found.report_if(dangling_nodes, "ECLUSTERDANGLINGNODES", None, (
            "the following nodes (and their instances) belong to a non existing group: "
            + ", ".join(f"{n.name} ({', '.join(on_node[n.uuid])})" for n in dangling_nodes)))
        found.report_if(dangling_instances, "ECLUSTERDANGLINGINST", None, (
            "the following instances have a non-existing primary-node: "
            + ", ".join(i.name for i in dangling_instances)))
        return not found.bad

    async def _certificates(self, found: Findings, master: Any) -> None:
        if master is None:
            found.report("ECLUSTERCERT", None, "the master node is not in the "
                         "configuration: its certificates cannot be checked")
            return
        result = (await self.master.rpc.call(
            [master], "node_verify", {"certificates": list(MASTER_CERTIFICATES)},
            timeout=30.0))[master.name]
        if result.error is not None:
            found.report("ECLUSTERCERT", None, f"cannot check the certificates of the "
                         f"master node {master.name}: {result.error.message}")
            return
        certificates = result.payload.get("certificates") or {}
        if "error" in certificates:
            found.report("ECLUSTERCERT", None, f"cannot check the certificates of the "
                         f"master node {master.name}: {certificates['error']}")
            return
        now = time.time()
        for name, required in MASTER_CERTIFICATES.items():
            info = certificates.get(name)
            path = str(info["path"]) if info else name
            finding = certificate_finding(path, info, now, required=required)
            if finding is not None:
                found.report("ECLUSTERCERT", None, finding[1], severity=finding[0])
            elif found.simulate:
                found.report("ECLUSTERCERT", None, f"(simulated) {path}")
