"""Cluster-wide operations: query the cluster, change its parameters.

The logic here is pure: it reads a configuration snapshot and changes a private copy
of the :class:`~corral.objects.Cluster`; persisting is the caller's business. Field
names of :class:`ClusterSetParams` are those of Ganeti's ``OP_CLUSTER_SET_PARAMS`` so
that RAPI ``/2/modify`` bodies map onto it one to one.
"""

from __future__ import annotations

import asyncio
import copy
import platform
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from corral import CONFIG_SCHEMA_VERSION, LUXI_VERSION, __version__, uidpool
from corral.cmdlib.base import LogicalUnit
from corral.cmdlib.common import check_hv_on_nodes, check_hv_syntax
from corral.cmdlib.config_files import config_files, online_nodes, send_config_files, warn_missing
from corral.cmdlib.disk_layout import check_access_in_use
from corral.cmdlib.ipolicy import group_ipolicy, warn_new_violations
from corral.config.replica import snapshot_args
from corral.errors import OpPrereqError, OsNotFoundError, ParameterError, UnknownParameterError
from corral.impexp.compression import check_tool_name
from corral.objects import Cluster, Instance, Node, params
from corral.objects.ipolicy import disk_templates_not_enabled, group_policy, updated_policy
from corral.objects.params import HV_PARAMS, ParamSpec
from corral.opcodes import ListChange, OpClusterQuery, OpClusterRedistConf, OpClusterSetParams
from corral.paths import Paths
from corral.rpc.chunks import call_in_parts
from corral.rpc.protocol import RpcResult

if TYPE_CHECKING:
    pass

__all__ = [
    "OS_API_VERSION",
    "ClusterSetParams",
    "LUClusterQuery",
    "LUClusterSetParams",
    "apply_cluster_params",
    "check_disabled_in_use",
    "cluster_info",
    "updated_os_hvp",
    "updated_osparams",
]

#: The newest OS definition API version corral implements.
OS_API_VERSION = 20

_MAC_PREFIX_RE = re.compile(r"^[0-9a-f]{2}:[0-9a-f]{2}:[0-9a-f]{2}$")



#: What ``gnt-cluster modify`` and RAPI ``/2/modify`` ask for: the opcode itself.
ClusterSetParams = OpClusterSetParams


def _reset_aware_update(
    family: str, specs: dict[str, ParamSpec], current: dict[str, Any], changes: dict[str, Any]
) -> dict[str, Any]:
    """Cluster level: validated changes applied; ``None``/``default`` restores the default."""
    checked = params.validate_params(family, specs, changes)
    result = dict(current)
    for name, value in checked.items():
        result[name] = specs[name].default if value is None else value
    return result


def _check_choices(what: str, values: list[str], valid: tuple[str, ...]) -> None:
    if not values:
        raise ParameterError(f"at least one {what} must be enabled; valid: {', '.join(valid)}")
    for value in values:
        if value not in valid:
            raise ParameterError(f"unknown {what} '{value}'; valid ones: {', '.join(valid)}")
    if len(set(values)) != len(values):
        raise ParameterError(f"{what} list has duplicates: {', '.join(values)}")


def _check_positive(name: str, value: int) -> int:
    if value < 1:
        raise ParameterError(f"{name} must be at least 1, got {value}")
    return value


def _check_abs_path(name: str, value: str) -> str:
    if not value.startswith("/"):
        raise ParameterError(f"{name} must be an absolute path, got {value!r}")
    return value


def _apply_list_changes(what: str, current: list[str], changes: list[ListChange]) -> list[str]:
    result = list(current)
    for action, name in changes:
        if action == "add":
            if name not in result:
                result.append(name)
        elif name in result:
            result.remove(name)
        else:
            raise ParameterError(f"cannot remove '{name}' from the {what} list: it is not there")
    return result


def _os_state_changes(what: str, current: list[str], changes: list[ListChange]
                      ) -> list[str]:
    """``hidden_os``/``blacklisted_os`` after ``changes``. These states are per OS, not
    per variant (design 2.2): adding an ``OS+VARIANT`` is refused; removing one is
    allowed, so an entry an older configuration holds can be cleared."""
    for action, name in changes:
        if action == "add" and "+" in name:
            base = name.partition("+")[0]
            raise ParameterError(
                f"cannot add '{name}' to the {what} list: OS states are per OS and "
                f"apply to all its variants; give the OS name '{base}'")
    return _apply_list_changes(what, current, changes)


def _dict_changes(prefix: str, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One ``path: old -> new`` line per leaf that differs (nested dicts recursed)."""
    lines: list[str] = []
    for key in sorted(old.keys() | new.keys()):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        if isinstance(before, dict) and isinstance(after, dict):
            lines.extend(_dict_changes(f"{prefix}/{key}", before, after))
        else:
            lines.append(f"{prefix}/{key}: {before} -> {after}")
    return lines


def _check_os_name(name: str) -> None:
    if not name or name.count("+") > 1 or name.startswith("+") or name.endswith("+"):
        raise ParameterError(
            f"invalid OS name {name!r}: expected 'os' or 'os+variant'"
        )


def _filled_cluster_hv(cluster: Cluster, hv: str, os_name: str | None = None
                       ) -> dict[str, Any]:
    """``hv``'s parameters as the cluster (and OS ``os_name``) fill them."""
    layers = [cluster.hvparams.get(hv, {})]
    if os_name is not None:
        layers.append(cluster.os_hvp.get(os_name, {}).get(hv, {}))
    return params.fill_params(params.defaults(HV_PARAMS[hv]), *layers)


def _filled_os_hvp(cluster: Cluster, changes: dict[str, dict[str, dict[str, Any] | None]]
                   ) -> list[tuple[str, dict[str, Any]]]:
    """The filled parameters of each OS and hypervisor that ``changes`` set."""
    return [(hv, _filled_cluster_hv(cluster, hv, os_name))
            for os_name, hvs in sorted(changes.items())
            for hv, values in sorted(hvs.items()) if values is not None]


def updated_os_hvp(
    current: dict[str, dict[str, dict[str, Any]]],
    changes: dict[str, dict[str, dict[str, Any] | None]],
) -> dict[str, dict[str, dict[str, Any]]]:
    """Per-OS hypervisor parameters after ``changes`` (Ganeti's ``os_hvp`` form).

    ``{os: {hv: None}}`` drops the OS's overrides for ``hv``; inside a hypervisor's
    dict a value of ``None`` or ``"default"`` drops one override. Hypervisor
    parameters are checked as instance-level ones (global-only ones are refused,
    since they would differ per instance). OSes left without overrides are dropped.
    """
    result = {os_name: {hv: dict(v) for hv, v in hvs.items()}
              for os_name, hvs in current.items()}
    for os_name, hvs in changes.items():
        _check_os_name(os_name)
        target = result.setdefault(os_name, {})
        for hv, values in hvs.items():
            if hv not in HV_PARAMS:
                raise UnknownParameterError(
                    f"unknown hypervisor '{hv}' in OS hypervisor parameters of {os_name}; "
                    f"valid ones: {', '.join(sorted(HV_PARAMS))}"
                )
            if values is None:
                target.pop(hv, None)
                continue
            checked = params.validate_params(
                f"{hv} hypervisor (OS {os_name})", HV_PARAMS[hv], values, instance_level=True
            )
            merged = params.update_params(target.get(hv, {}), checked)
            if merged:
                target[hv] = merged
            else:
                target.pop(hv, None)
        if not target:
            del result[os_name]
    return result


def updated_osparams(
    current: dict[str, dict[str, Any]], changes: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Cluster-level OS parameters after ``changes``: per ``os`` or ``os+variant``, a
    value of ``None`` or ``"default"`` removes the parameter; an OS left without any
    parameter is dropped (Ganeti's rules). Names must be lower-case identifiers."""
    result = {os_name: dict(values) for os_name, values in current.items()}
    for os_name, values in changes.items():
        _check_os_name(os_name)
        target = result.setdefault(os_name, {})
        for name, value in values.items():
            if not re.match(r"^[a-z0-9_]+$", name):
                raise ParameterError(
                    f"invalid OS parameter name {name!r} for {os_name}: use lower-case "
                    "letters, digits and '_'"
                )
            if value is None or value == params.VALUE_DEFAULT:
                target.pop(name, None)
            else:
                target[name] = value
        if not target:
            del result[os_name]
    return result


def apply_cluster_params(cluster: Cluster, change: ClusterSetParams) -> list[str]:
    """Validate ``change`` and apply it to ``cluster`` (a private copy) in place.

    Returns one line per changed setting, ``"name: old -> new"`` (``"beparams/default/
    maxmem: 128 -> 1024"`` inside parameter families), for the job log
    and for ``--dry-run``. Raises :class:`ParameterError` (nothing applied to the
    caller's config, since it only holds a copy) when any part is invalid.
    """
    changed: list[str] = []

    def setattr_logged(name: str, value: Any, shown: Callable[[Any], Any] = str) -> None:
        old = getattr(cluster, name)
        if old != value:
            if isinstance(old, dict) and isinstance(value, dict):
                changed.extend(_dict_changes(name, old, value))
            else:
                changed.append(f"{name}: {shown(old)} -> {shown(value)}")
            setattr(cluster, name, value)

    if change.hvparams is not None:
        hvparams = {hv: dict(values) for hv, values in cluster.hvparams.items()}
        for hv, values in change.hvparams.items():
            if hv not in HV_PARAMS:
                raise UnknownParameterError(
                    f"unknown hypervisor '{hv}' in hypervisor parameters; "
                    f"valid ones: {', '.join(sorted(HV_PARAMS))}"
                )
            hvparams[hv] = _reset_aware_update(
                f"{hv} hypervisor", HV_PARAMS[hv], hvparams.get(hv, {}), values
            )
            check_hv_syntax(hv, params.fill_params(params.defaults(HV_PARAMS[hv]), hvparams[hv]))
        setattr_logged("hvparams", hvparams)
    if change.beparams is not None:
        current = cluster.beparams.get("default", {})
        new_be = _reset_aware_update("backend", params.BE_PARAMS, current, change.beparams)
        if new_be["minmem"] > new_be["maxmem"]:
            raise ParameterError(
                f"backend parameter minmem ({new_be['minmem']}) must not exceed "
                f"maxmem ({new_be['maxmem']})"
            )
        setattr_logged("beparams", {**cluster.beparams, "default": new_be})
    if change.nicparams is not None:
        current = cluster.nicparams.get("default", {})
        new_nic = _reset_aware_update("NIC", params.NIC_PARAMS, current, change.nicparams)
        setattr_logged("nicparams", {**cluster.nicparams, "default": new_nic})
    if change.ndparams is not None:
        setattr_logged(
            "ndparams",
            _reset_aware_update("node", params.ND_PARAMS, cluster.ndparams, change.ndparams),
        )
    if change.diskparams is not None:
        diskparams = {dt: dict(values) for dt, values in cluster.diskparams.items()}
        for template, values in change.diskparams.items():
            if template not in params.DISK_PARAMS:
                raise UnknownParameterError(
                    f"unknown disk template '{template}' in disk parameters; "
                    f"valid ones: {', '.join(params.DISK_TEMPLATES)}"
                )
            diskparams[template] = _reset_aware_update(
                f"{template} disk", params.DISK_PARAMS[template],
                diskparams.get(template, {}), values,
            )
        setattr_logged("diskparams", diskparams)
    if change.enabled_hypervisors is not None:
        _check_choices("hypervisor", change.enabled_hypervisors, params.HYPERVISORS)
        setattr_logged("enabled_hypervisors", list(change.enabled_hypervisors), ",".join)
    if change.vg_name is not None:
        setattr_logged("volume_group_name", change.vg_name)
    if change.enabled_disk_templates is not None:
        _check_choices("disk template", change.enabled_disk_templates, params.DISK_TEMPLATES)
        setattr_logged("enabled_disk_templates", list(change.enabled_disk_templates), ",".join)
    if "plain" in cluster.enabled_disk_templates and not cluster.volume_group_name:
        raise ParameterError(
            "disk template 'plain' is enabled but no LVM volume group is set; "
            "give one with --vg-name or disable 'plain'"
        )
    for name in ("candidate_pool_size", "max_running_jobs", "max_tracked_jobs",
                 "job_archive_age"):
        value = getattr(change, name)
        if value is not None:
            setattr_logged(name, _check_positive(name, value))
    if change.mac_prefix is not None:
        prefix = change.mac_prefix.lower()
        if not _MAC_PREFIX_RE.match(prefix):
            raise ParameterError(
                f"invalid MAC prefix {change.mac_prefix!r}: expected three hex octets "
                "like aa:00:00"
            )
        setattr_logged("mac_prefix", prefix)
    if change.master_netdev is not None:
        setattr_logged("master_netdev", change.master_netdev)
    pool = cluster.uid_pool
    if change.uid_pool is not None:
        uidpool.check_uid_pool(change.uid_pool)
        pool = uidpool.normalize_uid_pool(change.uid_pool)
    if change.add_uids is not None:
        pool = uidpool.add_to_uid_pool(pool, change.add_uids)
    if change.remove_uids is not None:
        pool = uidpool.remove_from_uid_pool(pool, change.remove_uids)
    setattr_logged("uid_pool", pool, uidpool.format_uid_pool)
    if change.default_iallocator is not None:
        names = [n.strip() for n in change.default_iallocator.split(",") if n.strip()]
        setattr_logged("default_iallocators", names, ",".join)
    if change.default_iallocator_params is not None:
        # replaced whole, as in Ganeti; a key given as None/"default" is left out
        setattr_logged("default_iallocator_params", {
            key: value for key, value in change.default_iallocator_params.items()
            if value is not None and value != params.VALUE_DEFAULT})
    if change.compression_tools is not None:
        for tool in change.compression_tools:
            check_tool_name(tool)
        setattr_logged("compression_tools", list(change.compression_tools), ", ".join)
    if change.file_storage_dir is not None:
        value = _check_abs_path("file storage dir", change.file_storage_dir)
        setattr_logged("file_storage_dir", value)
    if change.shared_file_storage_dir is not None:
        value = _check_abs_path("shared file storage dir", change.shared_file_storage_dir)
        setattr_logged("shared_file_storage_dir", value)
    if change.os_search_path is not None:
        paths = [_check_abs_path("OS search path entry", p) for p in change.os_search_path]
        setattr_logged("os_search_path", paths, ",".join)
    if change.iallocator_search_path is not None:
        paths = [_check_abs_path("iallocator search path entry", p)
                 for p in change.iallocator_search_path]
        setattr_logged("iallocator_search_path", paths, ",".join)
    if change.iallocator_timeout is not None:
        setattr_logged("iallocator_timeout", float(change.iallocator_timeout))
    if change.ipolicy is not None:
        setattr_logged("ipolicy", updated_policy(cluster.ipolicy, change.ipolicy, group=False))
    if change.extstorage_search_path is not None:
        paths = [_check_abs_path("ExtStorage search path entry", p)
                 for p in change.extstorage_search_path]
        setattr_logged("extstorage_search_path", paths, ",".join)
    if change.os_hvp is not None:
        setattr_logged("os_hvp", updated_os_hvp(cluster.os_hvp, change.os_hvp))
        for hv, filled in _filled_os_hvp(cluster, change.os_hvp):
            check_hv_syntax(hv, filled)
    if change.osparams is not None:
        setattr_logged("osparams", updated_osparams(cluster.osparams, change.osparams))
    if change.hidden_os is not None:
        setattr_logged(
            "hidden_os", _os_state_changes("hidden OS", cluster.hidden_os, change.hidden_os),
            ",".join,
        )
    if change.blacklisted_os is not None:
        value = _os_state_changes(
            "blacklisted OS", cluster.blacklisted_os, change.blacklisted_os
        )
        setattr_logged("blacklisted_os", value, ",".join)
    return changed


def check_disabled_in_use(old: Cluster, new: Cluster, instances: Iterable[Instance]) -> None:
    """Refuse to disable a disk template or a hypervisor that instances still use,
    naming them, as Ganeti refuses to disable a disk template in use.

    An instance without disks uses the ``diskless`` template. (Ganeti 3.0 lets a
    hypervisor in use be disabled and only ``gnt-cluster verify`` notices; corral
    refuses that too: such instances could not be started or created alike.)
    """
    templates = set(old.enabled_disk_templates) - set(new.enabled_disk_templates)
    hypervisors = set(old.enabled_hypervisors) - set(new.enabled_hypervisors)
    if not templates and not hypervisors:
        return
    users: dict[tuple[str, str], list[str]] = {}
    for inst in instances:
        template = inst.disk_template if inst.disks else "diskless"
        if template in templates:
            users.setdefault(("disk template", template), []).append(inst.name)
        if inst.hypervisor in hypervisors:
            users.setdefault(("hypervisor", inst.hypervisor), []).append(inst.name)
    for (what, name), names in sorted(users.items()):
        shown = "\n * ".join(sorted(names))
        raise OpPrereqError(
            f"Cannot disable {what} '{name}', because there is at least one instance using "
            f"it:\n * {shown}\nremove or change these instances first, or keep {name} "
            "enabled")


#: This machine's architecture as Ganeti reports it; computed once, because
#: ``platform.architecture()`` runs the ``file`` program (1.5 ms per /2/info otherwise).
_ARCHITECTURE = [platform.architecture()[0], platform.machine()]


def cluster_info(cluster: Cluster, master_name: str, config_serial: int) -> dict[str, Any]:
    """The answer of luxi ``QueryClusterInfo`` / RAPI ``/2/info`` (Ganeti's keys)."""
    enabled = cluster.enabled_hypervisors
    return {
        "software_version": __version__,
        "protocol_version": LUXI_VERSION,
        "config_version": CONFIG_SCHEMA_VERSION,
        "os_api_version": OS_API_VERSION,
        "export_version": 0,
        "vcs_version": f"corral {__version__}",
        "architecture": list(_ARCHITECTURE),
        "name": cluster.name,
        "uuid": cluster.uuid,
        "master": master_name,
        "default_hypervisor": cluster.default_hypervisor,
        "enabled_hypervisors": enabled,
        "hvparams": {hv: cluster.hvparams.get(hv, {}) for hv in enabled},
        "os_hvp": cluster.os_hvp,
        "beparams": cluster.beparams,
        "osparams": cluster.osparams,
        "nicparams": cluster.nicparams,
        "ndparams": cluster.ndparams,
        "diskparams": cluster.diskparams,
        "candidate_pool_size": cluster.candidate_pool_size,
        "max_running_jobs": cluster.max_running_jobs,
        "max_tracked_jobs": cluster.max_tracked_jobs,
        "job_archive_age": cluster.job_archive_age,
        "mac_prefix": cluster.mac_prefix,
        "master_netdev": cluster.master_netdev,
        "volume_group_name": cluster.volume_group_name,
        "file_storage_dir": cluster.file_storage_dir,
        "shared_file_storage_dir": cluster.shared_file_storage_dir,
        "ctime": cluster.ctime,
        "mtime": cluster.mtime,
        "serial_no": cluster.serial_no,
        "config_serial": config_serial,
        "tags": sorted(cluster.tags),
        "uid_pool": [list(r) for r in cluster.uid_pool],
        "default_iallocator": ",".join(cluster.default_iallocators),
        "default_iallocators": cluster.default_iallocators,
        "default_iallocator_params": cluster.default_iallocator_params,
        "compression_tools": cluster.compression_tools,
        "hidden_os": cluster.hidden_os,
        "blacklisted_os": cluster.blacklisted_os,
        "enabled_disk_templates": cluster.enabled_disk_templates,
        "os_search_path": cluster.os_search_path,
        "iallocator_search_path": cluster.iallocator_search_path,
        "iallocator_timeout": cluster.iallocator_timeout,
        "ipolicy": cluster.ipolicy,
        "aggregates": cluster.aggregates,
        "extstorage_search_path": cluster.extstorage_search_path
        or list(Paths.DEFAULT_EXTSTORAGE_SEARCH_PATH),
    }


class LUClusterQuery(LogicalUnit[OpClusterQuery]):
    """``OP_CLUSTER_QUERY``: the cluster's settings, as ``QueryClusterInfo`` gives them."""

    OP_ID = "OP_CLUSTER_QUERY"
    USES_BGL = False

    async def execute(self) -> dict[str, Any]:
        """Read the settings from the configuration."""
        store = self.master.store
        return cluster_info(store.cluster, store.master_name, store.serial)


class LUClusterRedistConf(LogicalUnit[OpClusterRedistConf]):
    """``OP_CLUSTER_REDIST_CONF``: push the whole configuration to the master candidates
    and the ancillary files to every online node (``gnt-cluster redistribute-conf``);
    the files made from the configuration (the uid pool) also to the master.

    Replication keeps candidates in step by itself; this is the explicit resync (a
    replica damaged by hand, files changed on the master). Nodes that fail are
    reported in the job log and in the result; the others are done.
    """

    OP_ID = "OP_CLUSTER_REDIST_CONF"

    async def execute(self) -> dict[str, Any]:
        """Snapshot to the candidates, files to everyone."""
        store = self.master.store
        master = store.cluster.master_node
        nodes = [n for n in store.all("node") if not n.offline and n.uuid != master]
        candidates = [n for n in nodes if n.master_candidate]
        files = self.master.ancillary_files()
        failed: dict[str, str] = {}
        if candidates:
            snapshot = snapshot_args(store)

            async def replicate(node: Node) -> RpcResult:
                async def call(args: dict[str, Any]) -> RpcResult:
                    return (await self.master.rpc.call([node], "config_replicate", args)
                            )[node.name]
                return await call_in_parts(call, snapshot)

            answers = await asyncio.gather(*map(replicate, candidates))
            failed.update({r.node: r.error.message for r in answers if r.error})

        def for_node(known: bool) -> Callable[[Node], dict[str, Any]]:
            def args(node: Node) -> dict[str, Any]:
                return {"files": [{k: v for k, v in f.items() if k != "candidates_only"}
                                  for f in files if ("name" in f) is known
                                  and (node.master_candidate or not f.get("candidates_only"))]}
            return args

        # The cluster's own files first, then the user list's, which a node accepts
        # only when its own list names them: a refusal there keeps the first.
        for known in (True, False):
            if nodes and any(("name" in f) is known for f in files):
                results = await self.master.rpc.call(nodes, "upload_files", for_node(known))
                for name, result in results.items():
                    if result.error is not None:
                        failed.setdefault(name, result.error.message)
        # The files made from the configuration go to the master as well.
        for name, message in (await send_config_files(self.master,
                                                      online_nodes(self.master))).items():
            failed.setdefault(name, message)
        for name, message in sorted(failed.items()):
            self.feedback(f"Warning: node {name}: {message}")
        done = sorted(n.name for n in nodes if n.name not in failed)
        names = [f.get("name") or f.get("path") for f in files]
        names += [f["name"] for f in config_files(store.cluster)]
        self.feedback(f"Configuration serial {store.serial} and {len(names)} file(s) "
                      f"distributed to {len(done)} node(s)")
        return {"serial": store.serial, "nodes": done, "failed": failed, "files": names}


class LUClusterSetParams(LogicalUnit[OpClusterSetParams]):
    """``OP_CLUSTER_SET_PARAMS``: change cluster parameters (``gnt-cluster modify``).

    Returns ``{"changes": [...], "serial": n, "dry_run": bool}``; with ``dry_run``
    everything is checked and nothing committed.
    """

    OP_ID = "OP_CLUSTER_SET_PARAMS"
    REQ_BGL = True

    async def execute(self) -> dict[str, Any]:
        """Apply the changes to a copy of the cluster and commit them."""
        store = self.master.store
        if self.op.osparams:
            await self._validate_osparams()
        if self.op.hvparams or self.op.os_hvp or self.op.enabled_hypervisors:
            await self._validate_hvparams()
        if self.op.vg_name:
            from corral.cmdlib.storage import check_vg_on_nodes
            await check_vg_on_nodes(self.master, self.op.vg_name)
        old_pool = store.cluster.uid_pool
        async with store.transaction() as txn:
            cluster = txn.cluster()
            changes = apply_cluster_params(cluster, self.op)
            check_disabled_in_use(store.cluster, cluster, store.all("instance"))
            if self.op.ipolicy is not None or self.op.enabled_disk_templates is not None:
                disk_templates_not_enabled(cluster.ipolicy, cluster.enabled_disk_templates)
            if cluster.ipolicy != store.cluster.ipolicy:
                warn_new_violations(store, [
                    (group, group_ipolicy(store, group),
                     group_policy(cluster.ipolicy, group.ipolicy))
                    for group in store.all("nodegroup")], self.feedback)
            if self.op.diskparams is not None:
                check_access_in_use(store, cluster.diskparams)
            if self.op.dry_run or not changes:
                txn.discard()
                return {"changes": changes, "serial": store.serial, "dry_run": self.op.dry_run}
            txn.update(cluster)
        for change in changes:
            self.feedback(change)
        self.master.cluster_changed(store.cluster)
        dirs = [(kind, getattr(store.cluster, attr)) for kind, attr in (
            ("file", "file_storage_dir"), ("sharedfile", "shared_file_storage_dir"))
            if getattr(self.op, attr) is not None]
        if dirs:
            from corral.cmdlib.storage import create_storage_dirs
            await create_storage_dirs(self.master, self.feedback, dirs)
        if store.cluster.uid_pool != old_pool:
            failed = await send_config_files(self.master, online_nodes(self.master))
            warn_missing(failed, self.feedback)
        return {"changes": changes, "serial": store.serial, "dry_run": False}

    async def _validate_hvparams(self) -> None:
        """Have every online vm_capable node check the new parameters of each enabled
        hypervisor whose parameters change or that becomes enabled, cluster-wide and
        per OS (Ganeti's ``ValidateParameters``; see
        :func:`~corral.cmdlib.common.check_hv_on_nodes`)."""
        store, op = self.master.store, self.op
        new = copy.deepcopy(store.cluster)
        apply_cluster_params(new, op)  # refuses bad values before asking nodes
        enabled = set(new.enabled_hypervisors)
        changed = (set(op.hvparams or {}) | (enabled - set(store.cluster.enabled_hypervisors)))
        checks = [(hv, _filled_cluster_hv(new, hv)) for hv in sorted(changed & enabled)]
        checks += [(hv, filled) for hv, filled in _filled_os_hvp(new, op.os_hvp or {})
                   if hv in enabled]
        nodes = [n for n in store.all("node") if n.vm_capable]
        for hv, filled in checks:
            await check_hv_on_nodes(self.master, nodes, hv, filled)

    async def _validate_osparams(self) -> None:
        """Run each changed OS's ``verify`` with its new parameters on the master node.

        As Ganeti does for cluster-level parameters, an OS the master node does not
        have is not an error (it is reported in the job log); a failing ``verify`` is.
        """
        store = self.master.store
        cluster = store.cluster
        assert self.op.osparams is not None
        new = updated_osparams(cluster.osparams, self.op.osparams)
        master = store.get("node", cluster.master_node)
        for os_name in sorted(self.op.osparams):
            base = os_name.partition("+")[0]
            filled = {**new.get(base, {}), **(new.get(os_name, {}) if os_name != base else {})}
            if not filled:
                continue
            results = await self.master.rpc.call(
                [master], "os_validate",
                {"name": os_name, "osparams": filled,
                 "search_path": list(cluster.os_search_path)},
            )
            try:
                results[master.name].get(f"checking the parameters of OS {os_name}")
            except OsNotFoundError as err:
                self.feedback(f"OS parameters of {os_name} not checked: {err.message}")
