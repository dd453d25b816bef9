"""The procedures a node daemon runs for the master, one small function each.

Every procedure is ``async (paths, args) -> JSON-able result``. Arguments arrive as
a JSON object and are decoded, strictly, into the procedure's msgspec Struct from
:mod:`corral.rpc.args` (the contract the master builds its calls against) before
the procedure runs; a missing or malformed argument is a
:class:`~corral.errors.ParameterError` naming the procedure and the argument. The
work itself is done by the node-side libraries: :mod:`corral.hypervisor`,
:mod:`corral.storage` and :mod:`corral.osapi`, all asynchronous.

Every OS procedure also takes the optional arguments ``search_path`` (cluster-wide
directories; default :attr:`Paths.DEFAULT_OS_SEARCH_PATH`) and ``force_variant``
(accept a variant the OS does not declare), since a node has no configuration to
read them from.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

import aiohttp

from corral import __version__, hypervisor, osapi, storage
from corral.errors import (
    CorralError,
    HypervisorError,
    InternalError,
    NodeUnreachableError,
    ParameterError,
    RpcError,
)
from corral.hypervisor import Hypervisor
from corral.hypervisor.kvm import KvmHypervisor
from corral.hypervisor.kvm import missing_files as kvm_missing_files
from corral.hypervisor.kvm.security import validate_security_params
from corral.noded import (
    cluster_wide,
    crypto,
    debug,
    exports,
    files,
    instance_status,
    join,
    master_role,
    move_keys,
    replication,
    verify,
    volumes,
)
from corral.noded import impexp as impexp_procs
from corral.noded import storage as storage_procs
from corral.objects.specs import DiskSpec, InstanceSpec
from corral.paths import Paths
from corral.rpc import args as rpc_args
from corral.rpc.args import (
    BlockdevCopyFromArgs,
    BlockdevCreateArgs,
    BlockdevGrowArgs,
    BlockdevRenameArgs,
    BlockdevSnapshotArgs,
    DiskArgs,
    DisksArgs,
    HotplugDeviceArgs,
    HypervisorParamsArgs,
    HypervisorsArgs,
    InstanceArgs,
    InstanceInfoArgs,
    InstanceOsAddArgs,
    InstanceRebootArgs,
    InstanceRunRenameArgs,
    InstanceShutdownArgs,
    InstanceStartArgs,
    MigrationAcceptArgs,
    MigrationFinishArgs,
    MigrationSendArgs,
    NoArgs,
    NodeInfoArgs,
    OsArgs,
    OsGetArgs,
    OsValidateArgs,
    ProcedureArgs,
    WatcherPauseArgs,
)
from corral.rpc.client import decode_answer, node_client_context
from corral.rpc.protocol import RPC_VERSION

__all__ = ["PROCEDURES", "STREAM_DISK_PATH", "Procedure", "dispatch", "open_disk_stream",
           "stream_disk_spec"]

#: A procedure: ``await procedure(paths, args)`` gives the (JSON-able) result.
Procedure = Callable[[Paths, Mapping[str, Any]], Awaitable[Any]]

#: Where a node serves a disk's contents to another node (``?path=<cluster path>``).
STREAM_DISK_PATH = f"/stream/{RPC_VERSION}/disk"

#: How long the target of a disk copy waits for the next bytes from the source.
COPY_READ_TIMEOUT = 120.0

A = TypeVar("A", bound=ProcedureArgs)

log = logging.getLogger(__name__)


def _hv(paths: Paths, name: str) -> Hypervisor:
    return hypervisor.get_hypervisor(name, paths)


def _disks(paths: Paths, disk: DiskSpec) -> storage.BlockDevice:
    return storage.get_block_device(disk.dev_type, paths)


async def _assemble(paths: Paths, disks: list[DiskSpec], *,
                    exclusive: bool = True) -> list[str]:
    """Assemble ``disks`` and open them for I/O (``exclusive`` unless the target of a
    migration shares them with the source); where the instance uses each."""
    where = []
    for disk in disks:
        driver = _disks(paths, disk)
        where.append(await driver.assemble(disk))
        await driver.open(disk, exclusive=exclusive)
    return where


#: Disk types a node attaches to use them (rbd images it maps, ExtStorage volumes): an
#: OS script's run lets go of them again, as Ganeti shuts down the disks it started.
_ATTACHED_TYPES = frozenset({"rbd", "ext"})


async def _release(paths: Paths, disks: list[DiskSpec]) -> None:
    """Shut down the attached disks an OS script used (errors are logged: the script's
    own outcome is what the caller reports)."""
    for disk in disks:
        if disk.dev_type in _ATTACHED_TYPES:
            try:
                await _disks(paths, disk).shutdown(disk)
            except CorralError as err:
                log.warning("cannot release disk/%d after the OS script: %s", disk.index,
                            err.message)


def _hypervisor_names(names: list[str] | None) -> list[str]:
    return list(hypervisor.HYPERVISOR_NAMES) if names is None else names


def _search_path(paths: Paths, a: OsArgs) -> list[Path]:
    return [paths.node_path(p) for p in a.search_path]


async def _find_os(paths: Paths, a: OsArgs, name: str) -> tuple[osapi.OsDefinition, str]:
    """The OS ``name`` along the call's search path; ``force_variant`` accepts an
    undeclared variant. Looking through directories blocks: done in a thread."""
    return await asyncio.to_thread(osapi.find_os, _search_path(paths, a), name,
                                   force_variant=a.force_variant)


# -- node ----------------------------------------------------------------------
async def version(paths: Paths, args: NoArgs) -> Any:
    """The RPC version and corral version of this node."""
    return {"rpc_version": RPC_VERSION, "version": __version__}


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


async def node_info(paths: Paths, args: NodeInfoArgs) -> Any:
    """Memory and CPUs (from the first hypervisor asked about), boot id, and the size
    and free space of each storage directory (a storage directory made on first use
    reports the file system it will be on)."""
    hvs = args.hypervisors or list(hypervisor.HYPERVISOR_NAMES)
    hv_info = await _hv(paths, hvs[0]).node_info()
    cpus = hv_info.get("cpu_count", os.cpu_count() or 1)
    sockets, numa_nodes, boot_id = await asyncio.to_thread(_cpu_topology_and_boot_id)
    info: dict[str, Any] = {
        "memory_total": hv_info["memory_total"],
        "memory_free": hv_info["memory_free"],
        "cpu_count": cpus,
        "cpu_total": cpus,
        "cpu_dom0": cpus,  # the node OS may use every CPU (Ganeti assumes the same)
        "cpu_sockets": sockets,
        "cpu_nodes": numa_nodes,
        "bootid": boot_id,
        "storage": {d: await storage.dir_info(paths.node_path(d), nearest_existing=True)
                    for d in args.storage_dirs},
    }
    if args.volume_groups:
        info["lvm"] = await _lvm_info(paths)
    if "memory_hv" in hv_info:
        info["memory_hv"] = hv_info["memory_hv"]
    return info


async def _lvm_info(paths: Paths) -> dict[str, Any]:
    """Every volume group's size, free space and free space on its allocatable
    physical volumes (MiB), or the error that kept LVM from telling."""
    try:
        groups = await storage.LvmTools(paths).volume_groups()
    except CorralError as err:
        return {"error": err.message}
    return {"vgs": {vg.name: {"size": vg.size, "free": vg.free,
                              "allocatable_free": vg.allocatable_free,
                              "missing_pvs": vg.missing_pvs}
                    for vg in groups}}


def _cpu_topology_and_boot_id() -> tuple[int, int, str]:
    """Physical CPU sockets (``physical id`` in ``/proc/cpuinfo``) and NUMA nodes
    (``/sys/devices/system/node``), at least 1 each when the kernel does not say,
    and the boot id."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        sockets = len({line.split(":", 1)[1].strip() for line in text.splitlines()
                       if line.startswith("physical id")})
    except OSError:
        sockets = 0
    try:
        numa = sum(1 for entry in Path("/sys/devices/system/node").iterdir()
                   if entry.name.startswith("node") and entry.name[4:].isdigit())
    except OSError:
        numa = 0
    return max(1, sockets), max(1, numa), _boot_id()


async def node_leave(paths: Paths, args: NoArgs) -> Any:
    """Forget the cluster; the daemon then goes back to waiting for a join."""
    await asyncio.to_thread(join.leave, paths)
    return None


# -- what an instance needs of a node ------------------------------------------
def _missing_bridges(spec: InstanceSpec) -> list[str]:
    return verify.missing_bridges(nic.link for nic in spec.nics
                                  if nic.mode == "bridged" and nic.link)


def _missing_disks(paths: Paths, spec: InstanceSpec) -> list[str]:
    """Shared disks (``sharedfile``) whose file this node does not see: its shared
    file storage is not there (not mounted) or this node does not allow it."""
    missing: list[str] = []
    for disk in spec.disks:
        if disk.dev_type != "sharedfile":
            continue
        where = disk.logical_id[1] if len(disk.logical_id) == 2 else disk.logical_id
        try:
            found = storage.disk_path(paths, disk).is_file()
        except CorralError as err:
            missing.append(f"disk/{disk.index} ({where}): {err.message}")
            continue
        if not found:
            missing.append(f"disk/{disk.index} ({where}): not found in the "
                           f"shared file storage here")
    return missing


async def instance_check_host(paths: Paths, args: InstanceArgs) -> Any:
    """What of what the instance needs this node lacks, before it is moved here: its
    hypervisor (for kvm also the qemu binary, kernel and initrd its parameters name,
    and the user it runs as, ``security_domain``), the bridges of its bridged NICs, its
    shared disks' files.

    Answers ``{"missing": [one line per lack]}``; empty when the node has it all.
    """
    spec = args.instance
    missing: list[str] = []
    if spec.hypervisor not in hypervisor.HYPERVISOR_NAMES:
        missing.append(f"hypervisor {spec.hypervisor!r} is not available (this node has "
                       f"{', '.join(hypervisor.HYPERVISOR_NAMES)})")
    if spec.hypervisor == KvmHypervisor.name:
        missing.extend(await asyncio.to_thread(kvm_missing_files, spec))
        try:
            validate_security_params(spec.hvparams)
        except CorralError as err:
            missing.append(err.message)
    bridges = await asyncio.to_thread(_missing_bridges, spec)
    if bridges:
        missing.append(f"missing bridges {', '.join(bridges)}")
    missing.extend(await asyncio.to_thread(_missing_disks, paths, spec))
    return {"missing": missing}


async def hypervisor_validate_params(paths: Paths, args: HypervisorParamsArgs) -> Any:
    """Check filled hypervisor parameters against this node (a ``security_domain``
    user exists here, ...) before the master stores them; the error says what is not."""
    await _hv(paths, args.hypervisor).validate_params(args.hvparams)
    return None


# -- hypervisor ----------------------------------------------------------------
async def instance_start(paths: Paths, args: InstanceStartArgs) -> Any:
    """Assemble the instance's disks, then start it."""
    spec = args.instance
    disk_paths = await _assemble(paths, spec.disks)
    await _hv(paths, spec.hypervisor).start(spec, disk_paths, paused=args.startup_paused)
    await instance_status.record_status_change(paths, spec, args.reason, "start")
    return None


async def instance_shutdown(paths: Paths, args: InstanceShutdownArgs) -> Any:
    """Stop the instance; one that does not run here is already stopped. With
    ``forget`` the node then drops its status files (the instance is removed or
    leaves this node), otherwise the trail is kept as its last status change."""
    spec = args.instance
    await _hv(paths, spec.hypervisor).stop(spec.name, timeout=args.timeout)
    if args.forget:
        await instance_status.forget(paths, spec.name)
    else:
        await instance_status.record_status_change(paths, spec, args.reason, "shutdown")
    return None


async def instance_reboot(paths: Paths, args: InstanceRebootArgs) -> Any:
    """Reboot a running instance (soft, hard or full)."""
    spec = args.instance
    disk_paths = await _assemble(paths, spec.disks)
    await _hv(paths, spec.hypervisor).reboot(spec, disk_paths, args.reboot_type,
                                             timeout=args.timeout)
    await instance_status.record_status_change(paths, spec, args.reason, "reboot")
    return None


async def instance_list(paths: Paths, args: HypervisorsArgs) -> Any:
    """Names of the instances running here under the given hypervisors."""
    names: set[str] = set()
    for name in _hypervisor_names(args.hypervisors):
        names.update(await _hv(paths, name).list_instances())
    return sorted(names)


async def instance_info(paths: Paths, args: InstanceInfoArgs) -> Any:
    """One instance's info dict, or ``None`` when it does not run here."""
    return await _hv(paths, args.hypervisor).instance_info(args.instance)


async def all_instances_info(paths: Paths, args: HypervisorsArgs) -> Any:
    """Info dicts of every instance running here under the given hypervisors."""
    result: dict[str, Any] = {}
    for name in _hypervisor_names(args.hypervisors):
        result.update(await _hv(paths, name).all_instances_info())
    return result


async def migration_accept(paths: Paths, args: MigrationAcceptArgs) -> Any:
    """On the target node: get ready to receive the instance (its disks assembled
    here first); the answer says where the disks' data goes when they are mirrored."""
    spec = args.instance
    # The source still does I/O on shared disks until the guest moved.
    disk_paths = await _assemble(paths, spec.disks, exclusive=False)
    return await _hv(paths, spec.hypervisor).accept_migration(
        spec, disk_paths, address=args.address, mirror_disks=args.mirror_disks,
        devices=args.devices)


async def migration_send(paths: Paths, args: MigrationSendArgs) -> Any:
    """On the source node: send the running instance to the target; answers when the
    migration completed (or failed), with the hypervisor's figures."""
    spec = args.instance
    return await _hv(paths, spec.hypervisor).migrate(
        spec, args.target_ip, live=args.live, target_name=args.target_name,
        nbd_port=args.nbd_port)


async def migration_info(paths: Paths, args: InstanceInfoArgs) -> Any:
    """On the source node: the parameters the running instance was started with, for
    the target to start the same machine (read only; ``None`` when not kept)."""
    return await _hv(paths, args.hypervisor).migration_info(args.instance)


async def migration_status(paths: Paths, args: InstanceInfoArgs) -> Any:
    """On the source node: the progress of an outgoing migration (read only)."""
    return await _hv(paths, args.hypervisor).migration_status(args.instance)


async def migration_finish(paths: Paths, args: MigrationFinishArgs) -> Any:
    """On the target node: run the received instance, or drop it after a failure."""
    spec = args.instance
    await _hv(paths, spec.hypervisor).finish_migration(spec, success=args.success)
    if args.success:
        # the instance's status did not change, but this node is its primary now:
        # it keeps the trail of the last change, with its own entry for the move
        await instance_status.record_status_change(paths, spec, args.reason, "migrate")
    return None


async def migration_finish_source(paths: Paths, args: MigrationFinishArgs) -> Any:
    """On the source node: drop the migrated instance's remains, or resume it here
    after a failure."""
    spec = args.instance
    await _hv(paths, spec.hypervisor).finish_migration_source(spec, success=args.success)
    if args.success:
        await instance_status.forget(paths, spec.name)
    return None


async def instance_console(paths: Paths, args: InstanceArgs) -> Any:
    """How to reach the instance's console (Ganeti's console dict)."""
    spec = args.instance
    return await _hv(paths, spec.hypervisor).console(spec)


async def hotplug_supported(paths: Paths, args: InstanceArgs) -> Any:
    """Refuse when devices of the instance cannot be hot-plugged here now (its
    hypervisor cannot, or it does not run here)."""
    spec = args.instance
    try:
        await _hv(paths, spec.hypervisor).hotplug_supported(spec)
    except HypervisorError as err:
        raise HypervisorError(f"Hotplug is not supported: {err.message}") from None
    return None


async def hotplug_device(paths: Paths, args: HotplugDeviceArgs) -> Any:
    """Add, remove or change one disk or NIC of the running instance; an added disk
    is assembled here first. Answers once the guest accepted (or released) it."""
    spec = args.instance
    device = args.disk if args.target == "disk" else args.nic
    if device is None:
        raise ParameterError(f"procedure hotplug_device: target {args.target} needs the "
                             f"argument {args.target!r}")
    disk_path = None
    if args.disk is not None and args.target == "disk" and args.action != "hotremove":
        disk_path = (await _assemble(paths, [args.disk]))[0]
    await _hv(paths, spec.hypervisor).hotplug_device(spec, args.action, args.target, device,
                                                     disk_path)
    return None


# -- storage -------------------------------------------------------------------
async def blockdev_create(paths: Paths, args: BlockdevCreateArgs) -> Any:
    """Create a disk and give it its metadata (``info``); answer its node-local path.
    A disk whose metadata cannot be set is removed again before the error is raised,
    so a failed create leaves nothing behind."""
    disk = args.disk
    driver = _disks(paths, disk)
    path = await driver.create(disk)
    if args.info:
        try:
            await driver.set_info(disk, args.info)
        except BaseException:
            with contextlib.suppress(CorralError):
                await driver.remove(disk)
            raise
    return {"path": path}


async def blockdev_remove(paths: Paths, args: DiskArgs) -> Any:
    """Remove a disk (one already gone is fine)."""
    await _disks(paths, args.disk).remove(args.disk)
    return None


async def blockdev_grow(paths: Paths, args: BlockdevGrowArgs) -> Any:
    """Grow a disk by ``amount`` MiB (``dryrun`` only checks the space)."""
    await _disks(paths, args.disk).grow(args.disk, args.amount, dryrun=args.dryrun)
    return None


async def blockdev_assemble(paths: Paths, args: DisksArgs) -> Any:
    """Activate disks; answer their node-local paths in order."""
    return await _assemble(paths, args.disks)


async def blockdev_shutdown(paths: Paths, args: DisksArgs) -> Any:
    """Deactivate disks."""
    for disk in args.disks:
        await _disks(paths, disk).shutdown(disk)
    return None


async def blockdev_find(paths: Paths, args: DisksArgs) -> Any:
    """The status of each disk here (:class:`~corral.storage.DiskStatus`), in order;
    ``None`` for a disk that does not exist on this node. Disks of one device type
    are looked up together (one ``lvs`` for every LV)."""
    by_type: dict[str, list[int]] = {}
    for position, disk in enumerate(args.disks):
        by_type.setdefault(disk.dev_type, []).append(position)
    result: list[Any] = [None] * len(args.disks)
    for dev_type, positions in by_type.items():
        driver = storage.get_block_device(dev_type, paths)
        found = await driver.find_all([args.disks[p] for p in positions])
        for position, status in zip(positions, found, strict=True):
            result[position] = status
    return result


async def blockdev_rename(paths: Paths, args: BlockdevRenameArgs) -> Any:
    """Give disks new logical ids, in order; stops at the first failure."""
    for entry in args.renames:
        await _disks(paths, entry.disk).rename(entry.disk, list(entry.new_logical_id))
    return None


async def blockdev_snapshot(paths: Paths, args: BlockdevSnapshotArgs) -> Any:
    """Snapshot a disk; answer the snapshot's logical id."""
    return await _disks(paths, args.disk).snapshot(args.disk, args.name, args.size)


def stream_disk_spec(cluster_path: str, dev_type: str = "file") -> DiskSpec:
    """The disk a stream request names by its cluster-wide path."""
    return DiskSpec(uuid="", index=0, dev_type=dev_type, size=0,
                    logical_id=[storage.FILE_DRIVER, cluster_path])


async def open_disk_stream(paths: Paths,
                           query: Mapping[str, str]) -> AsyncGenerator[bytes, None]:
    """The contents of the disk a stream request names (``?path=<cluster-wide
    path>&dev_type=<type>``), confined like every disk path; refused at once when
    the disk is missing or outside this node's storage directories."""
    cluster_path = query.get("path", "")
    if not cluster_path:
        raise ParameterError("the disk stream needs ?path=<cluster-wide disk path>")
    disk = stream_disk_spec(cluster_path, query.get("dev_type", "file"))
    return await _disks(paths, disk).read(disk)


async def blockdev_copy_from(paths: Paths, args: BlockdevCopyFromArgs) -> Any:
    """Fill a local disk with the contents of a disk on another node.

    This node (the target) reads the source node daemon's disk stream over mutual
    TLS with its own certificate; zero blocks become holes.
    """
    disk, source, ip, port = args.disk, args.source_disk, args.source_ip, args.source_port
    if len(source.logical_id) != 2:
        raise ParameterError(
            f"procedure blockdev_copy_from: source disk has logical id {source.logical_id!r};"
            " expected [driver, path]")
    target = _disks(paths, disk)
    host = f"[{ip}]" if ":" in ip else ip
    url = f"https://{host}:{port}{STREAM_DISK_PATH}"
    query = {"path": source.logical_id[1], "dev_type": source.dev_type}
    where = f"source node {ip} port {port}"
    try:
        connector = aiohttp.TCPConnector(ssl=node_client_context(paths))
    except OSError as err:
        raise RpcError(f"cannot load this node's certificates to copy a disk: {err}") from None
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=COPY_READ_TIMEOUT)
    try:
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session, \
                session.get(url, params=query) as response:
            if response.status != 200:
                raise await _stream_error(where, response)
            written = await target.write(disk, response.content.iter_chunked(1 << 20))
    except (aiohttp.ClientError, TimeoutError) as err:
        raise NodeUnreachableError(
            f"copying disk/{disk.index} from {where} failed: {err or type(err).__name__}"
        ) from None
    return {"bytes": written}


async def _stream_error(where: str, response: aiohttp.ClientResponse) -> CorralError:
    try:
        await decode_answer(where, response)
    except CorralError as err:
        return type(err)(f"{where}: {err.message}")
    return RpcError(f"{where} answered HTTP {response.status} to the disk stream")


# -- OS definitions --------------------------------------------------------------
def _os_log(paths: Paths, kind: str, *names: str) -> Path:
    paths.os_log_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
    safe = "-".join(n.replace("/", "_") for n in names)
    return paths.os_log_dir / f"{kind}-{safe}-{int(time.time())}.log"


async def os_diagnose(paths: Paths, args: OsArgs) -> Any:
    """Every OS definition found along the search path, valid or not."""
    found = await asyncio.to_thread(osapi.discover, _search_path(paths, args))
    return [definition.to_dict() for definition in found]


async def os_get(paths: Paths, args: OsGetArgs) -> Any:
    """One OS definition (``name`` may carry a variant, which must exist)."""
    definition, _variant = await _find_os(paths, args, args.name)
    return definition.to_dict()


async def instance_os_add(paths: Paths, args: InstanceOsAddArgs) -> Any:
    """Install (or reinstall) the instance's OS: assemble its disks, run ``create``."""
    spec = args.instance
    definition, variant = await _find_os(paths, args, spec.os)
    disk_paths = await _assemble(paths, spec.disks)
    try:
        env = osapi.build_env(definition, variant, spec, disk_paths, debug=args.debug)
        log_file = await asyncio.to_thread(_os_log, paths, "add", definition.name, spec.name)
        await osapi.run_script(definition, "create", env, log_file)
    finally:
        await _release(paths, spec.disks)
    return None


async def instance_run_rename(paths: Paths, args: InstanceRunRenameArgs) -> Any:
    """Run the OS ``rename`` script of an instance renamed from ``old_name``."""
    spec = args.instance
    definition, variant = await _find_os(paths, args, spec.os)
    disk_paths = await _assemble(paths, spec.disks)
    try:
        env = osapi.build_env(definition, variant, spec, disk_paths, debug=args.debug)
        env["OLD_INSTANCE_NAME"] = args.old_name
        log_file = await asyncio.to_thread(_os_log, paths, "rename", definition.name,
                                           args.old_name, spec.name)
        await osapi.run_script(definition, "rename", env, log_file)
        await instance_status.rename(paths, args.old_name, spec.name)
    finally:
        await _release(paths, spec.disks)
    return None


async def os_validate(paths: Paths, args: OsValidateArgs) -> Any:
    """Check OS parameters with the definition's ``verify parameters`` script.

    The script sees only the OS core variables and the ``OSP_*`` ones (see
    :func:`corral.osapi.verify_params`); its output is logged under ``os_log_dir``.
    """
    definition, variant = await _find_os(paths, args, args.name)
    log_file = await asyncio.to_thread(_os_log, paths, "verify", definition.name)
    await osapi.verify_params(definition, variant, args.osparams, log_file)
    return None


# -- watcher ---------------------------------------------------------------------
async def set_watcher_pause(paths: Paths, args: WatcherPauseArgs) -> Any:
    """Pause this node's watcher until ``until`` or end the pause; the time kept."""
    from corral.watcher.pause import write_pause

    await asyncio.to_thread(write_pause, paths.watcher_pause_file, args.until)
    return args.until


def _typed(procedure: str, function: Callable[[Paths, A], Awaitable[Any]]) -> Procedure:
    """``function`` as a :data:`Procedure` that first decodes its arguments into the
    Struct :data:`corral.rpc.args.ARGS` names for ``procedure``, which must be the
    one ``function`` is annotated with (checked once, at import)."""
    kind = rpc_args.ARGS[procedure]
    if get_type_hints(function).get("args") is not kind:
        raise InternalError(
            f"procedure {procedure} takes {get_type_hints(function).get('args')} but the "
            f"RPC contract gives it {kind.__name__}")

    async def run(paths: Paths, args: Mapping[str, Any]) -> Any:
        decoded: Any = rpc_args.decode(procedure, kind, args)
        return await function(paths, decoded)

    run.__name__ = run.__qualname__ = function.__name__
    run.__doc__ = function.__doc__
    return run


_TYPED: dict[str, Callable[[Paths, Any], Awaitable[Any]]] = {
    "version": version,
    "node_info": node_info,
    "node_leave": node_leave,
    "instance_start": instance_start,
    "instance_shutdown": instance_shutdown,
    "instance_reboot": instance_reboot,
    "instance_list": instance_list,
    "instance_info": instance_info,
    "all_instances_info": all_instances_info,
    "instance_check_host": instance_check_host,
    "hypervisor_validate_params": hypervisor_validate_params,
    "migration_accept": migration_accept,
    "migration_send": migration_send,
    "migration_finish": migration_finish,
    "migration_finish_source": migration_finish_source,
    "migration_status": migration_status,
    "migration_info": migration_info,
    "instance_console": instance_console,
    "hotplug_supported": hotplug_supported,
    "hotplug_device": hotplug_device,
    "blockdev_create": blockdev_create,
    "blockdev_remove": blockdev_remove,
    "blockdev_grow": blockdev_grow,
    "blockdev_assemble": blockdev_assemble,
    "blockdev_shutdown": blockdev_shutdown,
    "blockdev_copy_from": blockdev_copy_from,
    "blockdev_find": blockdev_find,
    "blockdev_rename": blockdev_rename,
    "blockdev_snapshot": blockdev_snapshot,
    "blockdev_setinfo": volumes.blockdev_setinfo,
    "blockdev_open": volumes.blockdev_open,
    "blockdev_close": volumes.blockdev_close,
    "extstorage_diagnose": volumes.extstorage_diagnose,
    "storage_list": storage_procs.storage_list,
    "storage_modify": storage_procs.storage_modify,
    "storage_execute": storage_procs.storage_execute,
    "node_volumes": storage_procs.node_volumes,
    "lv_list": storage_procs.lv_list,
    "bdev_sizes": storage_procs.bdev_sizes,
    "os_diagnose": os_diagnose,
    "os_get": os_get,
    "instance_os_add": instance_os_add,
    "instance_run_rename": instance_run_rename,
    "os_validate": os_validate,
    "test_delay": debug.test_delay,
    "config_replicate": replication.config_replicate,
    "jobs_replicate": replication.jobs_replicate,
    "master_info": master_role.master_info,
    "master_demote": master_role.master_demote,
    "master_takeover": master_role.master_takeover,
    "replica_dump": master_role.replica_dump,
    "upload_files": files.upload_files,
    "set_watcher_pause": set_watcher_pause,
    "run_command": cluster_wide.run_command,
    "write_file_part": cluster_wide.write_file_part,
    "renew_crypto": crypto.renew_crypto,
    "restart_daemons": crypto.restart_daemons,
    "node_verify": verify.node_verify,
    "x509_cert_create": move_keys.x509_cert_create,
    "x509_cert_remove": move_keys.x509_cert_remove,
    "x509_cert_list": move_keys.x509_cert_list,
    "move_import": move_keys.move_import,
    "move_export": move_keys.move_export,
    "impexp_import": impexp_procs.impexp_import,
    "impexp_export": impexp_procs.impexp_export,
    "impexp_status": impexp_procs.impexp_status,
    "impexp_abort": impexp_procs.impexp_abort,
    "impexp_cleanup": impexp_procs.impexp_cleanup,
    "export_prepare": exports.export_prepare,
    "export_finalize": exports.export_finalize,
    "export_list": exports.export_list,
    "export_info": exports.export_info,
    "export_remove": exports.export_remove,
    "export_abort": exports.export_abort,
}

#: The procedures of RPC version 1, by name (``instance_check_host`` came later within
#: it: a node without it answers "unknown procedure", which refuses the move). Each
#: gets its arguments decoded into its Struct in :data:`corral.rpc.args.ARGS` first.
PROCEDURES: dict[str, Procedure] = {
    name: _typed(name, function) for name, function in _TYPED.items()}


async def dispatch(paths: Paths, procedure: str, args: Mapping[str, Any]) -> Any:
    """Run ``procedure``; an unknown name is a :class:`ParameterError` listing the known."""
    try:
        function = PROCEDURES[procedure]
    except KeyError:
        raise ParameterError(
            f"unknown procedure {procedure!r}; this node (RPC version {RPC_VERSION}) offers: "
            f"{', '.join(sorted(PROCEDURES))}"
        ) from None
    return await function(paths, args)
