"""The procedures a node daemon runs for the master, one small function each.

Every procedure is ``async (paths, args) -> JSON-able result``. Arguments arrive as
a JSON object; instances and disks as :class:`~corral.objects.specs.InstanceSpec`
and :class:`~corral.objects.specs.DiskSpec` dicts. A missing or malformed argument
is a :class:`~corral.errors.ParameterError` naming the procedure and the argument.
The work itself is done by the node-side libraries: :mod:`corral.hypervisor`,
:mod:`corral.storage` and :mod:`corral.osapi`.

Every OS procedure also takes the optional arguments ``search_path`` (cluster-wide
directories; default :attr:`Paths.DEFAULT_OS_SEARCH_PATH`) and ``force_variant``
(accept a variant the OS does not declare), since a node has no configuration to
read them from.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import msgspec

from corral import __version__, hypervisor, osapi, storage
from corral.errors import CorralError, NodeUnreachableError, ParameterError, RpcError
from corral.hypervisor import Hypervisor
from corral.hypervisor.base import REBOOT_TYPES
from corral.noded import debug, files, join, master_role, replication
from corral.objects.specs import DiskSpec, InstanceSpec
from corral.paths import Paths
from corral.rpc.client import decode_answer, node_client_context
from corral.rpc.protocol import RPC_VERSION

__all__ = ["PROCEDURES", "STREAM_DISK_PATH", "Procedure", "dispatch", "stream_disk_spec"]

#: A procedure: ``await procedure(paths, args)`` gives the (JSON-able) result.
Procedure = Callable[[Paths, Mapping[str, Any]], Awaitable[Any]]

#: Where a node serves a disk's contents to another node (``?path=<cluster path>``).
STREAM_DISK_PATH = f"/stream/{RPC_VERSION}/disk"

#: How long the target of a disk copy waits for the next bytes from the source.
COPY_READ_TIMEOUT = 120.0

T = TypeVar("T")

_MISSING = object()


# -- arguments ---------------------------------------------------------------
class _Args:
    """The arguments of one call, with checks that name the procedure."""

    def __init__(self, procedure: str, args: Mapping[str, Any]) -> None:
        self.procedure = procedure
        self.args = args

    def _fail(self, name: str, expected: str, value: Any) -> ParameterError:
        if value is _MISSING:
            return ParameterError(
                f"procedure {self.procedure}: argument {name!r} is missing ({expected})")
        return ParameterError(
            f"procedure {self.procedure}: argument {name!r} is {value!r}, expected {expected}")

    def get(self, name: str, kind: type[T], expected: str, default: Any = _MISSING) -> T:
        value = self.args.get(name, default)
        if value is _MISSING or not isinstance(value, kind) or (
            kind in (int, float) and isinstance(value, bool)
        ):
            raise self._fail(name, expected, value)
        return value

    def text(self, name: str) -> str:
        return self.get(name, str, "a string")

    def flag(self, name: str, default: Any = _MISSING) -> bool:
        return self.get(name, bool, "true or false", default)

    def number(self, name: str, default: Any = _MISSING) -> float:
        value = self.args.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._fail(name, "a number", value)
        return float(value)

    def integer(self, name: str, default: Any = _MISSING) -> int:
        return self.get(name, int, "an integer", default)

    def names(self, name: str, default: Any = _MISSING) -> list[str]:
        value = self.args.get(name, default)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._fail(name, "a list of strings", value)
        return value

    def _convert(self, name: str, value: Any, kind: type[T], what: str) -> T:
        try:
            return msgspec.convert(value, kind)
        except msgspec.ValidationError as err:
            raise ParameterError(
                f"procedure {self.procedure}: argument {name!r} is not a valid {what}: {err}"
            ) from None

    def instance(self, name: str = "instance") -> InstanceSpec:
        value = self.args.get(name, _MISSING)
        if value is _MISSING:
            raise self._fail(name, "an instance specification", value)
        return self._convert(name, value, InstanceSpec, "instance specification")

    def disk(self, name: str = "disk") -> DiskSpec:
        value = self.args.get(name, _MISSING)
        if value is _MISSING:
            raise self._fail(name, "a disk specification", value)
        return self._convert(name, value, DiskSpec, "disk specification")

    def disks(self, name: str = "disks") -> list[DiskSpec]:
        value = self.args.get(name, _MISSING)
        if not isinstance(value, list):
            raise self._fail(name, "a list of disk specifications", value)
        return self._convert(name, value, list[DiskSpec], "list of disk specifications")

    def search_path(self, paths: Paths) -> list[Path]:
        value = self.names("search_path", list(Paths.DEFAULT_OS_SEARCH_PATH))
        return [paths.node_path(p) for p in value]

    def find_os(self, paths: Paths, name: str) -> tuple[osapi.OsDefinition, str]:
        """The OS ``name`` along the optional ``search_path`` argument (default: the
        built-in search path); ``force_variant`` accepts an undeclared variant."""
        return osapi.find_os(self.search_path(paths), name,
                             force_variant=self.flag("force_variant", False))


def _hv(paths: Paths, name: str) -> Hypervisor:
    return hypervisor.get_hypervisor(name, paths)


def _assemble(paths: Paths, disks: list[DiskSpec]) -> list[str]:
    return [str(storage.assemble(paths, disk)) for disk in disks]


def _hypervisor_names(a: _Args) -> list[str]:
    return a.names("hypervisors", list(hypervisor.HYPERVISOR_NAMES))


# -- node ----------------------------------------------------------------------
async def version(paths: Paths, args: Mapping[str, Any]) -> Any:
    """The RPC version and corral version of this node."""
    return {"rpc_version": RPC_VERSION, "version": __version__}


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _storage_info(path: Path) -> dict[str, int]:
    # A storage directory made on first use reports the file system it will be on.
    while not path.is_dir() and path != path.parent:
        path = path.parent
    return storage.dir_info(path)


async def node_info(paths: Paths, args: Mapping[str, Any]) -> Any:
    """Memory and CPUs (from the first hypervisor asked about), boot id, and the size
    and free space of each storage directory."""
    a = _Args("node_info", args)
    dirs = a.names("storage_dirs", [])
    hvs = _hypervisor_names(a) or list(hypervisor.HYPERVISOR_NAMES)
    hv_info = _hv(paths, hvs[0]).node_info()
    cpus = hv_info.get("cpu_count", os.cpu_count() or 1)
    sockets, numa_nodes = _cpu_topology()
    info: dict[str, Any] = {
        "memory_total": hv_info["memory_total"],
        "memory_free": hv_info["memory_free"],
        "cpu_count": cpus,
        "cpu_total": cpus,
        "cpu_dom0": cpus,  # the node OS may use every CPU (Ganeti assumes the same)
        "cpu_sockets": sockets,
        "cpu_nodes": numa_nodes,
        "bootid": _boot_id(),
        "storage": {d: _storage_info(paths.node_path(d)) for d in dirs},
    }
    if "memory_hv" in hv_info:
        info["memory_hv"] = hv_info["memory_hv"]
    return info


def _cpu_topology() -> tuple[int, int]:
    """Physical CPU sockets (``physical id`` in ``/proc/cpuinfo``) and NUMA nodes
    (``/sys/devices/system/node``), at least 1 each when the kernel does not say."""
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
    return max(1, sockets), max(1, numa)


async def node_leave(paths: Paths, args: Mapping[str, Any]) -> Any:
    """Forget the cluster; the daemon then goes back to waiting for a join."""
    join.leave(paths)
    return None


# -- what an instance needs of a node ------------------------------------------
#: Where the kernel lists network interfaces; a bridge has a ``bridge`` subdirectory
#: (the test Ganeti makes for bridges).
SYS_CLASS_NET = Path("/sys/class/net")


def _missing_bridges(spec: InstanceSpec) -> list[str]:
    links = sorted({nic.link for nic in spec.nics if nic.mode == "bridged" and nic.link})
    return [link for link in links if not (SYS_CLASS_NET / link / "bridge").is_dir()]


def _missing_disks(paths: Paths, spec: InstanceSpec) -> list[str]:
    """Shared disks (``sharedfile``) whose file this node does not see: its shared
    file storage is not there (not mounted)."""
    missing: list[str] = []
    for disk in spec.disks:
        if disk.dev_type != "sharedfile":
            continue
        path = storage.disk_path(paths, disk)
        if not path.is_file():
            missing.append(f"disk/{disk.index} ({disk.logical_id[1]}): not found in the "
                           f"shared file storage here")
    return missing


async def instance_check_host(paths: Paths, args: Mapping[str, Any]) -> Any:
    """What of what the instance needs this node lacks, before it is moved here: its
    hypervisor, the bridges of its bridged NICs, its shared disks' files.

    Answers ``{"missing": [one line per lack]}``; empty when the node has it all.
    """
    spec = _Args("instance_check_host", args).instance()
    missing: list[str] = []
    if spec.hypervisor not in hypervisor.HYPERVISOR_NAMES:
        missing.append(f"hypervisor {spec.hypervisor!r} is not available (this node has "
                       f"{', '.join(hypervisor.HYPERVISOR_NAMES)})")
    bridges = _missing_bridges(spec)
    if bridges:
        missing.append(f"missing bridges {', '.join(bridges)}")
    missing.extend(_missing_disks(paths, spec))
    return {"missing": missing}


# -- hypervisor ----------------------------------------------------------------
async def instance_start(paths: Paths, args: Mapping[str, Any]) -> Any:
    """Assemble the instance's disks, then start it."""
    a = _Args("instance_start", args)
    spec = a.instance()
    paused = a.flag("startup_paused", False)
    disk_paths = _assemble(paths, spec.disks)
    await _hv(paths, spec.hypervisor).start(spec, disk_paths, paused=paused)
    return None


async def instance_shutdown(paths: Paths, args: Mapping[str, Any]) -> Any:
    """Stop the instance; one that does not run here is already stopped."""
    a = _Args("instance_shutdown", args)
    spec = a.instance()
    timeout = a.number("timeout", 120.0)
    await _hv(paths, spec.hypervisor).stop(spec.name, timeout=timeout)
    return None


async def instance_reboot(paths: Paths, args: Mapping[str, Any]) -> Any:
    """Reboot a running instance (soft, hard or full)."""
    a = _Args("instance_reboot", args)
    spec = a.instance()
    reboot_type = a.text("reboot_type")
    if reboot_type not in REBOOT_TYPES:
        raise ParameterError(
            f"procedure instance_reboot: reboot type {reboot_type!r} is not one of "
            f"{', '.join(REBOOT_TYPES)}")
    await _hv(paths, spec.hypervisor).reboot(spec, _assemble(paths, spec.disks), reboot_type)
    return None


async def instance_list(paths: Paths, args: Mapping[str, Any]) -> Any:
    """Names of the instances running here under the given hypervisors."""
    a = _Args("instance_list", args)
    names: set[str] = set()
    for name in _hypervisor_names(a):
        names.update(_hv(paths, name).list_instances())
    return sorted(names)


async def instance_info(paths: Paths, args: Mapping[str, Any]) -> Any:
    """One instance's info dict, or ``None`` when it does not run here."""
    a = _Args("instance_info", args)
    return _hv(paths, a.text("hypervisor")).instance_info(a.text("instance"))


async def all_instances_info(paths: Paths, args: Mapping[str, Any]) -> Any:
    """Info dicts of every instance running here under the given hypervisors."""
    a = _Args("all_instances_info", args)
    result: dict[str, Any] = {}
    for name in _hypervisor_names(a):
        result.update(_hv(paths, name).all_instances_info())
    return result


async def migration_accept(paths: Paths, args: Mapping[str, Any]) -> Any:
    """On the target node: get ready to receive the instance."""
    spec = _Args("migration_accept", args).instance()
    await _hv(paths, spec.hypervisor).accept_migration(spec)
    return None


async def migration_send(paths: Paths, args: Mapping[str, Any]) -> Any:
    """On the source node: send the running instance to the target."""
    a = _Args("migration_send", args)
    spec = a.instance()
    await _hv(paths, spec.hypervisor).migrate(spec, a.text("target_ip"), live=a.flag("live", True))
    return None


async def migration_finish(paths: Paths, args: Mapping[str, Any]) -> Any:
    """On the target node: run the received instance, or drop it after a failure."""
    a = _Args("migration_finish", args)
    spec = a.instance()
    await _hv(paths, spec.hypervisor).finish_migration(spec, success=a.flag("success"))
    return None


async def instance_console(paths: Paths, args: Mapping[str, Any]) -> Any:
    """How to reach the instance's console (Ganeti's console dict)."""
    spec = _Args("instance_console", args).instance()
    return _hv(paths, spec.hypervisor).console(spec)


# -- storage -------------------------------------------------------------------
async def blockdev_create(paths: Paths, args: Mapping[str, Any]) -> Any:
    """Create a disk; answer its node-local path."""
    disk = _Args("blockdev_create", args).disk()
    return {"path": str(storage.create(paths, disk))}


async def blockdev_remove(paths: Paths, args: Mapping[str, Any]) -> Any:
    """Remove a disk (one already gone is fine)."""
    storage.remove(paths, _Args("blockdev_remove", args).disk())
    return None


async def blockdev_grow(paths: Paths, args: Mapping[str, Any]) -> Any:
    """Grow a disk by ``amount`` MiB (``dryrun`` only checks the space)."""
    a = _Args("blockdev_grow", args)
    storage.grow(paths, a.disk(), a.integer("amount"), dryrun=a.flag("dryrun", False))
    return None


async def blockdev_assemble(paths: Paths, args: Mapping[str, Any]) -> Any:
    """Activate disks; answer their node-local paths in order."""
    return _assemble(paths, _Args("blockdev_assemble", args).disks())


async def blockdev_shutdown(paths: Paths, args: Mapping[str, Any]) -> Any:
    """Deactivate disks."""
    for disk in _Args("blockdev_shutdown", args).disks():
        storage.shutdown(paths, disk)
    return None


def stream_disk_spec(cluster_path: str, dev_type: str = "file") -> DiskSpec:
    """The disk a stream request names by its cluster-wide path."""
    return DiskSpec(uuid="", index=0, dev_type=dev_type, size=0,
                    logical_id=[storage.FILE_DRIVER, cluster_path])


async def blockdev_copy_from(paths: Paths, args: Mapping[str, Any]) -> Any:
    """Fill a local disk with the contents of a disk on another node.

    This node (the target) reads the source node daemon's disk stream over mutual
    TLS with its own certificate; zero blocks become holes.
    """
    a = _Args("blockdev_copy_from", args)
    disk = a.disk()
    source = a.disk("source_disk")
    ip = a.text("source_ip")
    port = a.integer("source_port")
    if len(source.logical_id) != 2:
        raise ParameterError(
            f"procedure blockdev_copy_from: source disk has logical id {source.logical_id!r};"
            " expected [driver, path]")
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
            written = await storage.write_from(
                paths, disk, response.content.iter_chunked(1 << 20))
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


async def os_diagnose(paths: Paths, args: Mapping[str, Any]) -> Any:
    """Every OS definition found along the search path, valid or not."""
    search = _Args("os_diagnose", args).search_path(paths)
    return [definition.to_dict() for definition in osapi.discover(search)]


async def os_get(paths: Paths, args: Mapping[str, Any]) -> Any:
    """One OS definition (``name`` may carry a variant, which must exist)."""
    a = _Args("os_get", args)
    definition, _variant = a.find_os(paths, a.text("name"))
    return definition.to_dict()


async def instance_os_add(paths: Paths, args: Mapping[str, Any]) -> Any:
    """Install (or reinstall) the instance's OS: assemble its disks, run ``create``."""
    a = _Args("instance_os_add", args)
    spec = a.instance()
    debug = a.integer("debug", 0)
    a.flag("reinstall", False)
    definition, variant = a.find_os(paths, spec.os)
    disk_paths = _assemble(paths, spec.disks)
    env = osapi.build_env(definition, variant, spec, disk_paths, debug=debug)
    log_file = _os_log(paths, "add", definition.name, spec.name)
    await osapi.run_script(definition, "create", env, log_file)
    return None


async def instance_run_rename(paths: Paths, args: Mapping[str, Any]) -> Any:
    """Run the OS ``rename`` script of an instance renamed from ``old_name``."""
    a = _Args("instance_run_rename", args)
    spec = a.instance()
    old_name = a.text("old_name")
    definition, variant = a.find_os(paths, spec.os)
    disk_paths = _assemble(paths, spec.disks)
    env = osapi.build_env(definition, variant, spec, disk_paths, debug=a.integer("debug", 0))
    env["OLD_INSTANCE_NAME"] = old_name
    log_file = _os_log(paths, "rename", definition.name, old_name, spec.name)
    await osapi.run_script(definition, "rename", env, log_file)
    return None


async def os_validate(paths: Paths, args: Mapping[str, Any]) -> Any:
    """Check OS parameters with the definition's ``verify parameters`` script.

    The script sees only the OS core variables and the ``OSP_*`` ones (see
    :func:`corral.osapi.verify_params`); its output is logged under ``os_log_dir``.
    """
    a = _Args("os_validate", args)
    osparams = a.get("osparams", dict, "an object of OS parameters", {})
    definition, variant = a.find_os(paths, a.text("name"))
    log_file = _os_log(paths, "verify", definition.name)
    await osapi.verify_params(definition, variant, osparams, log_file)
    return None


#: The procedures of RPC version 1, by name (``instance_check_host`` came later within
#: it: a node without it answers "unknown procedure", which refuses the move).
PROCEDURES: dict[str, Procedure] = {
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
    "migration_accept": migration_accept,
    "migration_send": migration_send,
    "migration_finish": migration_finish,
    "instance_console": instance_console,
    "blockdev_create": blockdev_create,
    "blockdev_remove": blockdev_remove,
    "blockdev_grow": blockdev_grow,
    "blockdev_assemble": blockdev_assemble,
    "blockdev_shutdown": blockdev_shutdown,
    "blockdev_copy_from": blockdev_copy_from,
    "os_diagnose": os_diagnose,
    "os_get": os_get,
    "instance_os_add": instance_os_add,
    "instance_run_rename": instance_run_rename,
    "os_validate": os_validate,
    "config_replicate": replication.config_replicate,
    "jobs_replicate": replication.jobs_replicate,
    "master_info": master_role.master_info,
    "master_demote": master_role.master_demote,
    "master_takeover": master_role.master_takeover,
    "replica_dump": master_role.replica_dump,
    "upload_files": files.upload_files,
    "test_delay": debug.test_delay,
}


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

