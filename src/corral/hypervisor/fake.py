"""The ``fake`` hypervisor: instances that are only files, for fast tests.

Nothing runs. Each instance the hypervisor holds on this node is one JSON file in
``paths.hypervisor_state_dir / "fake"``, named after the instance and written
atomically, so the state survives a node daemon restart and every query simply
reads the files. The file records the instance spec as the master sent it, the
state (``running``, ``paused`` or ``migrating``), when it started and its disk
paths. Memory is accounted as a real hypervisor would: every instance held here
uses its ``maxmem``, and a start that does not fit in the node's free memory is
refused, so allocation and capacity logic can be exercised without virtual machines.

Its file work runs in worker threads, never on noded's event loop; a change (a
check of the current state and memory, then a write) holds a per-directory lock,
so two requests at once cannot both start the same instance.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import msgspec

from corral.errors import HypervisorError, ParameterError
from corral.hypervisor.base import REBOOT_TYPES, Hypervisor, InstanceState
from corral.objects.params import BE_PARAMS, parse_size
from corral.objects.specs import InstanceSpec
from corral.paths import Paths
from corral.serializer import dumps_pretty, loads
from corral.utils.files import write_public

__all__ = ["FakeHypervisor", "read_meminfo"]

_MIB = 1024 * 1024
_STATE_SUFFIX = ".json"

# One lock per state directory, shared by every FakeHypervisor working in it.
_LOCKS: dict[Path, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _dir_lock(directory: Path) -> threading.Lock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(directory, threading.Lock())


class FakeHypervisor(Hypervisor):
    """A hypervisor whose instances are state files.

    ``meminfo`` is the file the node's memory is read from (``/proc/meminfo``
    format); tests point it at a file of their own to control the free memory.
    """

    name: ClassVar[str] = "fake"

    def __init__(self, paths: Paths, *, meminfo: Path = Path("/proc/meminfo")) -> None:
        self._dir = paths.hypervisor_state_dir / "fake"
        self._meminfo = meminfo
        self._lock = _dir_lock(self._dir)

    # -- state files ---------------------------------------------------------------
    def _state_file(self, name: str) -> Path:
        if not name or "/" in name or "\0" in name or name.startswith("."):
            raise HypervisorError(
                f"invalid instance name {name!r}: a name must be non-empty, must not start"
                " with '.' and must not contain '/'"
            )
        return self._dir / f"{name}{_STATE_SUFFIX}"

    def _read(self, name: str) -> dict[str, Any] | None:
        path = self._state_file(name)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as err:
            raise HypervisorError(f"cannot read the state of instance {name}: {err}") from err
        try:
            record = loads(data)
        except ValueError as err:
            raise HypervisorError(
                f"the state file of instance {name} ({path}) is not valid JSON: {err}"
            ) from err
        if not isinstance(record, dict):
            raise HypervisorError(
                f"the state file of instance {name} ({path}) does not hold a JSON object"
            )
        return record

    def _write(
        self,
        spec: InstanceSpec,
        state: InstanceState,
        disk_paths: list[str],
        started: float | None = None,
    ) -> None:
        record = {
            "name": spec.name,
            "state": state,
            "started": time.time() if started is None else started,
            "memory": _memory(spec),
            "vcpus": _vcpus(spec),
            "disk_paths": list(disk_paths),
            "spec": msgspec.to_builtins(spec),
        }
        path = self._state_file(spec.name)
        try:
            self._dir.mkdir(parents=True, exist_ok=True, mode=0o750)
            write_public(path, dumps_pretty(record) + "\n")
        except OSError as err:
            raise HypervisorError(
                f"cannot record the state of instance {spec.name}: {err}"
            ) from err

    def _remove(self, name: str) -> None:
        try:
            self._state_file(name).unlink(missing_ok=True)
        except OSError as err:
            raise HypervisorError(f"cannot remove the state of instance {name}: {err}") from err

    def _records(self) -> dict[str, dict[str, Any]]:
        records: dict[str, dict[str, Any]] = {}
        for name in self._list():
            record = self._read(name)
            if record is not None:  # removed while we were listing
                records[name] = record
        return records

    # -- memory ----------------------------------------------------------------------
    def _check_memory(self, spec: InstanceSpec, what: str, *, releasing: int = 0) -> None:
        needed = _memory(spec)
        free = self._node_info()["memory_free"] + releasing
        if needed > free:
            raise HypervisorError(
                f"not enough memory to {what} instance {spec.name}: it needs {needed} MiB"
                f" (maxmem) but the node has only {free} MiB free"
            )

    # -- operations (blocking; run in a worker thread) --------------------------------
    def _start(self, spec: InstanceSpec, disk_paths: list[str], paused: bool) -> None:
        with self._lock:
            current = self._read(spec.name)
            if current is not None:
                raise HypervisorError(
                    f"cannot start instance {spec.name}: it is already {current.get('state')}"
                    " on this node"
                )
            self._check_memory(spec, "start")
            self._write(spec, "paused" if paused else "running", disk_paths)

    def _reboot(self, spec: InstanceSpec, disk_paths: list[str], reboot_type: str) -> None:
        with self._lock:
            current = self._read(spec.name)
            if current is None or current.get("state") == "migrating":
                raise HypervisorError(
                    f"cannot reboot instance {spec.name}: it is not running on this node"
                )
            if reboot_type == "soft":
                return
            self._check_memory(spec, "restart", releasing=int(current.get("memory", 0)))
            self._write(spec, "running", disk_paths)

    def _stop(self, name: str) -> None:
        with self._lock:
            self._remove(name)

    def _list(self) -> list[str]:
        try:
            entries = os.listdir(self._dir)
        except FileNotFoundError:
            return []
        except OSError as err:
            raise HypervisorError(f"cannot list the fake hypervisor's instances: {err}") from err
        return sorted(
            entry[: -len(_STATE_SUFFIX)]
            for entry in entries
            if entry.endswith(_STATE_SUFFIX) and not entry.startswith(".")
        )

    def _node_info(self) -> dict[str, Any]:
        total, available = read_meminfo(self._meminfo)
        held = sum(int(record.get("memory", 0)) for record in self._records().values())
        return {
            "memory_total": total,
            "memory_free": max(0, available - held),
            "memory_hv": held,
            "cpu_count": os.cpu_count() or 1,
        }

    def _accept(self, spec: InstanceSpec) -> None:
        with self._lock:
            current = self._read(spec.name)
            if current is not None:
                raise HypervisorError(
                    f"cannot accept instance {spec.name} by migration: it is already"
                    f" {current.get('state')} on this node"
                )
            self._check_memory(spec, "receive")
            self._write(spec, "migrating", [])

    def _migrate(self, spec: InstanceSpec, target_ip: str) -> None:
        with self._lock:
            current = self._read(spec.name)
            if current is None or current.get("state") == "migrating":
                raise HypervisorError(
                    f"cannot migrate instance {spec.name} to {target_ip}: it is not running"
                    " on this node"
                )
            self._remove(spec.name)

    def _finish(self, spec: InstanceSpec, success: bool) -> None:
        with self._lock:
            if not success:
                self._remove(spec.name)
                return
            current = self._read(spec.name)
            disk_paths = list(current.get("disk_paths", [])) if current else []
            self._write(spec, "running", disk_paths)

    # -- the interface -----------------------------------------------------------------
    async def start(
        self, spec: InstanceSpec, disk_paths: list[str], *, paused: bool = False
    ) -> None:
        """Record ``spec`` as running (or paused); refuses one already here."""
        await asyncio.to_thread(self._start, spec, disk_paths, paused)

    async def stop(
        self,
        name: str,
        *,
        force: bool = False,
        # The guest's grace period before it is killed, not a limit on the call.
        timeout: float = 120.0,  # noqa: ASYNC109
    ) -> None:
        """Forget instance ``name``; stopping one that is not here is fine."""
        await asyncio.to_thread(self._stop, name)

    async def reboot(
        self,
        spec: InstanceSpec,
        disk_paths: list[str],
        reboot_type: str,
        *,
        timeout: float = 120.0,  # noqa: ASYNC109
    ) -> None:
        """``soft`` changes nothing; ``hard`` and ``full`` restart the instance with
        ``spec`` and ``disk_paths`` (its run time starts again). The instance must run."""
        if reboot_type not in REBOOT_TYPES:
            raise ParameterError(
                f"invalid reboot type {reboot_type!r}: expected one of {', '.join(REBOOT_TYPES)}"
            )
        await asyncio.to_thread(self._reboot, spec, disk_paths, reboot_type)

    async def list_instances(self) -> list[str]:
        """Names of the instances that have a state file here, sorted."""
        return await asyncio.to_thread(self._list)

    async def instance_info(self, name: str) -> dict[str, Any] | None:
        """The info dict of ``name``, or ``None`` when it has no state file here."""
        record = await asyncio.to_thread(self._read, name)
        return None if record is None else _info(name, record)

    async def all_instances_info(self) -> dict[str, dict[str, Any]]:
        """Info dicts of every instance with a state file here."""
        records = await asyncio.to_thread(self._records)
        return {name: _info(name, record) for name, record in records.items()}

    async def node_info(self) -> dict[str, Any]:
        """Memory from ``/proc/meminfo`` (``MemTotal``, ``MemAvailable``) less what
        the instances held here use; CPUs from :func:`os.cpu_count`."""
        return await asyncio.to_thread(self._node_info)

    async def accept_migration(
        self, spec: InstanceSpec, disk_paths: Sequence[str] = (), *, address: str = "",
        mirror_disks: bool = False, devices: Mapping[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        """Reserve the instance here in state ``migrating``.

        The state file records no disk paths; there is no data to receive.
        """
        await asyncio.to_thread(self._accept, spec)
        return None

    async def migrate(
        self, spec: InstanceSpec, target_ip: str, *, live: bool, target_name: str = "",
        nbd_port: int | None = None,
    ) -> dict[str, Any] | None:
        """The fake migration always succeeds: the instance leaves this node."""
        await asyncio.to_thread(self._migrate, spec, target_ip)
        return None

    async def finish_migration(self, spec: InstanceSpec, *, success: bool) -> None:
        """Mark the received instance running, or drop it when the migration failed."""
        await asyncio.to_thread(self._finish, spec, success)

    async def verify(self, hvparams: Mapping[str, Any]) -> str | None:
        """The state directory (or, before the first instance, the nearest existing
        directory above it) must be a writable directory."""
        del hvparams
        return await asyncio.to_thread(self._verify)

    def _verify(self) -> str | None:
        place = self._dir
        while not place.exists() and place != place.parent:
            place = place.parent
        if not place.is_dir() or not os.access(place, os.W_OK | os.X_OK):
            return f"the state directory {self._dir} cannot be written ({place})"
        return None

    async def console(self, spec: InstanceSpec) -> dict[str, Any]:
        """A ``message`` console: fake instances have nothing to connect to."""
        return {
            "instance": spec.name,
            "kind": "msg",
            "message": f"instance {spec.name} runs on the fake hypervisor, which has no console",
        }


def _memory(spec: InstanceSpec) -> int:
    value = spec.beparams.get("maxmem", BE_PARAMS["maxmem"].default)
    try:
        return parse_size(value)
    except (ParameterError, TypeError) as err:
        raise HypervisorError(f"instance {spec.name} has an invalid maxmem: {err}") from err


def _vcpus(spec: InstanceSpec) -> int:
    value = spec.beparams.get("vcpus", BE_PARAMS["vcpus"].default)
    try:
        return int(value)
    except (TypeError, ValueError) as err:
        raise HypervisorError(
            f"instance {spec.name} has an invalid vcpus value {value!r}: expected an integer"
        ) from err


def _info(name: str, record: dict[str, Any]) -> dict[str, Any]:
    started = float(record.get("started", 0.0))
    return {
        "name": name,
        "state": record.get("state", "running"),
        "memory": int(record.get("memory", 0)),
        "vcpus": int(record.get("vcpus", 1)),
        "time": max(0.0, time.time() - started),
    }


def read_meminfo(meminfo: Path) -> tuple[int, int]:
    """``(total, available)`` in MiB from a ``/proc/meminfo`` style file."""
    try:
        text = meminfo.read_text()
    except OSError as err:
        raise HypervisorError(f"cannot read the node's memory from {meminfo}: {err}") from err
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            values[key.strip()] = int(fields[0])  # kB
    if "MemTotal" not in values:
        raise HypervisorError(f"{meminfo} has no MemTotal line; cannot tell the node's memory")
    available = values.get("MemAvailable")
    if available is None:  # kernels before 3.14
        available = sum(values.get(key, 0) for key in ("MemFree", "Buffers", "Cached"))
    return values["MemTotal"] // 1024, available // 1024
