"""The monitoring daemon's data collectors, each producing one report (Ganeti's format).

A report is ``{"name", "version", "format_version", "timestamp", "category", "kind",
"data"}``: ``version`` ``"B"`` for built-in collectors, ``timestamp`` in nanoseconds,
``category`` one of ``instance``, ``storage``, ``daemon``, ``hypervisor`` or ``null``
(listed and addressed as ``default``), ``kind`` 0 for performance and 1 for status
reporting collectors, whose data carries a ``status`` of ``{"code", "message"}``
(0 fine, 1 being fixed by corral, 2 unknown, 4 needs someone).

Ganeti's collectors, with its names and data fields: ``cpu-avg-load`` (the load of
each CPU over the last minute, sampled every second), ``diskstats`` (``/proc/diskstats``),
``lv`` (LVM logical volumes); the instance status collector per hypervisor,
``inst-status-kvm`` (and ``inst-status-fake`` for the fake hypervisor), with each
instance's wanted and actual state and the reason trail of its last status change
(from the files the node daemon keeps, :mod:`corral.noded.instance_status`).
corral's own: ``hypervisor`` (the node's memory and CPUs as each hypervisor sees
them, instances running) and ``storage`` (size and free space of the node's file
storage directories and LVM volume groups).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral import hypervisor
from corral.errors import CorralError
from corral.noded import instance_status
from corral.paths import Paths
from corral.storage.lvm_report import (
    LV_COLUMNS,
    LV_REPORT,
    VG_REPORT,
    published_rows,
    run_report,
)

__all__ = ["BUILTIN_VERSION", "CATEGORIES", "Collector", "CpuSampler", "collectors",
           "parse_diskstats", "report"]

#: The version of every built-in collector (Ganeti's ``"B"``).
BUILTIN_VERSION = "B"
#: The categories a report may have; a collector without one is addressed as ``default``.
log = logging.getLogger("corral.mond")

CATEGORIES = ("instance", "storage", "daemon", "hypervisor")
#: Report kinds.
PERFORMANCE, STATUS = 0, 1
#: Status codes of status reporting collectors.
OK, TEMP_BAD, UNKNOWN, BAD = 0, 1, 2, 4

#: How many CPU samples the load average covers, one a second.
CPU_WINDOW = 60


@dataclass(frozen=True)
class Collector:
    """One data collector: where it is listed and how it gathers its data."""

    name: str
    category: str | None
    kind: int
    gather: Callable[[], Awaitable[Any]]
    format_version: int = 1

    @property
    def category_name(self) -> str:
        """The category as listed and addressed (``default`` for none)."""
        return self.category or "default"


async def report(collector: Collector) -> dict[str, Any]:
    """The collector's report, timestamped now."""
    data = await collector.gather()
    return {"name": collector.name, "version": BUILTIN_VERSION,
            "format_version": collector.format_version, "timestamp": time.time_ns(),
            "category": collector.category, "kind": collector.kind, "data": data}


# -- CPU load ---------------------------------------------------------------------------

def _read_cpu_times(stat: Path) -> list[tuple[int, int]] | None:
    """``(busy, total)`` jiffies per CPU from ``/proc/stat``; ``None`` if unreadable."""
    try:
        lines = stat.read_text().splitlines()
    except OSError:
        return None
    cpus = []
    for line in lines:
        if line.startswith("cpu") and line[3:4].isdigit():
            values = [int(v) for v in line.split()[1:]]
            idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
            total = sum(values[:8])  # guest time is already counted in user
            cpus.append((total - idle, total))
    return cpus


class CpuSampler:
    """Samples ``/proc/stat`` every ``interval`` seconds in the background, keeping
    the last :data:`CPU_WINDOW` samples; the load is the busy share of each CPU over
    that window (Ganeti's stateful collector)."""

    def __init__(self, stat: Path = Path("/proc/stat"), interval: float = 1.0) -> None:
        self.stat = stat
        self.interval = interval
        self.samples: deque[list[tuple[int, int]]] = deque(maxlen=CPU_WINDOW)
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> None:
        """Take one sample now."""
        times = _read_cpu_times(self.stat)
        if times is not None:
            self.samples.append(times)

    def start(self) -> None:
        """Sample in the background until :meth:`stop`."""
        self.sample()
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Stop sampling."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.sample()

    def load(self) -> dict[str, Any]:
        """Ganeti's ``cpu-avg-load`` data: ``cpu_number``, ``cpus`` (busy share of each
        CPU over the window, 0 to 1) and ``cpu_total`` (their sum)."""
        if len(self.samples) < 2:
            self.sample()
        if len(self.samples) < 2:
            return {"error": "not enough CPU samples yet; try again in a second"}
        first, last = self.samples[0], self.samples[-1]
        loads = []
        for (busy0, total0), (busy1, total1) in zip(first, last, strict=False):
            loads.append((busy1 - busy0) / (total1 - total0) if total1 > total0 else 0.0)
        return {"cpu_number": len(loads), "cpus": loads, "cpu_total": sum(loads)}


# -- storage ----------------------------------------------------------------------------

_DISKSTATS_FIELDS = ("readsNum", "mergedReads", "secRead", "timeRead", "writes",
                     "mergedWrites", "secWritten", "timeWrite", "ios", "timeIO", "wIOmillis")


def parse_diskstats(text: str) -> list[dict[str, Any]]:
    """``/proc/diskstats`` as Ganeti's ``diskstats`` data: one item per device."""
    devices = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 14:
            continue
        item: dict[str, Any] = {"major": int(parts[0]), "minor": int(parts[1]),
                                "name": parts[2]}
        item.update(zip(_DISKSTATS_FIELDS, (int(v) for v in parts[3:14]), strict=True))
        devices.append(item)
    return devices


def _diskstats(path: Path = Path("/proc/diskstats")) -> list[dict[str, Any]]:
    try:
        return parse_diskstats(path.read_text())
    except OSError:
        return []


#: The ``lv`` data's fields that are numbers.
_LV_INTS = {"major", "minor", "kernel_major", "kernel_minor", "size", "seg_count",
            "seg_start", "seg_start_pe", "seg_size"}
_lvm_warned = False


def _warn_lvm_needs_root(stderr: str) -> None:
    """Say once why LVM reports nothing: the node daemon's copy of LVM's reports is
    missing or stale, and this daemon, run as a user of its own, cannot run LVM's
    reporting tools (they need root)."""
    global _lvm_warned
    if not _lvm_warned:
        _lvm_warned = True
        last = stderr.strip().splitlines()[-1:] or [""]
        log.warning("LVM reports nothing to uid %d (it needs root: %s) and the node "
                    "daemon has kept no recent report in %s; the lv and storage "
                    "collectors list no volumes", os.geteuid(), last[0].strip(),
                    "node-reports/lvm.json")


def _run_lvm(paths: Paths, key: str) -> list[list[str]]:
    """Rows of LVM report ``key`` (``lvs`` or ``vgs``): run here as root; otherwise
    the node daemon's recent copy (:mod:`corral.storage.lvm_report`); none without
    LVM."""
    args = LV_REPORT if key == "lvs" else VG_REPORT
    if os.geteuid() != 0:
        rows = published_rows(paths, key)
        if rows is not None:
            return rows
    result = run_report(paths, args)
    if result is None:
        return []
    rows, errors = result
    if errors and os.geteuid() != 0:
        _warn_lvm_needs_root(errors)
    return rows


def _lvs(paths: Paths, records: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Ganeti's ``lv`` data; ``instance`` is the instance whose UUID the LV's name
    carries, when this node knows it."""
    rows = _run_lvm(paths, "lvs")
    by_uuid = {record.get("uuid"): name for name, record in records.items()}
    volumes = []
    for row in rows:
        if len(row) != len(LV_COLUMNS):
            continue
        item: dict[str, Any] = {}
        for (name, _column), value in zip(LV_COLUMNS, row, strict=True):
            if name in _LV_INTS:
                try:
                    item[name] = int(float(value))
                except ValueError:
                    item[name] = -1
            else:
                item[name] = value
        item["instance"] = next((inst for uuid, inst in by_uuid.items()
                                 if uuid and uuid in item["name"]), None)
        volumes.append(item)
    return volumes


#: Seconds the volume groups' figures are reused: running LVM's tools costs tens of
#: milliseconds, and a volume group's size changes seldom.
VGS_CACHE_SECONDS = 10.0
_vgs_cache: tuple[float, list[dict[str, Any]]] | None = None


def _vgs(paths: Paths) -> list[dict[str, Any]]:
    """LVM volume groups: name, size and free space in MiB (see
    :data:`VGS_CACHE_SECONDS`)."""
    global _vgs_cache
    now = time.monotonic()
    if _vgs_cache is not None and now - _vgs_cache[0] < VGS_CACHE_SECONDS:
        return [dict(unit) for unit in _vgs_cache[1]]
    result = _read_vgs(paths)
    _vgs_cache = (now, result)
    return [dict(unit) for unit in result]


def _read_vgs(paths: Paths) -> list[dict[str, Any]]:
    result = []
    for row in _run_lvm(paths, "vgs"):
        if len(row) == 3:
            try:
                result.append({"type": "lvm-vg", "name": row[0],
                               "size": int(float(row[1])), "free": int(float(row[2]))})
            except ValueError:
                continue
    return result


def _storage_dirs(paths: Paths) -> list[str]:
    """The file storage directories this node allows (``file-storage-paths``, else
    corral's defaults), cluster-wide paths."""
    try:
        listed = [line.strip() for line in paths.file_storage_paths.read_text().splitlines()
                  if line.strip() and not line.startswith("#")]
    except OSError:
        listed = []
    return listed or [Paths.DEFAULT_FILE_STORAGE_DIR, Paths.DEFAULT_SHARED_FILE_STORAGE_DIR]


def _file_storage(paths: Paths) -> list[dict[str, Any]]:
    units = []
    for directory in _storage_dirs(paths):
        local = paths.node_path(directory)
        probe = local
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        try:
            stat = os.statvfs(probe)
        except OSError:
            continue
        units.append({"type": "file", "name": directory,
                      "size": stat.f_blocks * stat.f_frsize >> 20,
                      "free": stat.f_bavail * stat.f_frsize >> 20})
    return units


def storage_units(paths: Paths) -> list[dict[str, Any]]:
    """corral's ``storage`` data: every storage unit here with size and free MiB."""
    return _file_storage(paths) + _vgs(paths)


# -- instances and hypervisors ----------------------------------------------------------

def _actual_state(info: dict[str, Any] | None) -> str:
    """Ganeti's actual state names: ``running``, ``paused``, ``shutdown`` ..."""
    if info is None:
        return "shutdown"
    state = str(info.get("state", "running"))
    return {"migrating": "blocked"}.get(state, state)


def _instance_status(admin_state: str, actual: str) -> dict[str, Any]:
    """The status of one instance, by Ganeti's rules."""
    if admin_state == "down":
        if actual in ("shutdown", "dying"):
            return {"code": OK, "message": ""}
        return {"code": BAD, "message": "The instance is not stopped as it should be"}
    if admin_state == "up":
        if actual == "hung":
            return {"code": UNKNOWN,
                    "message": "Instance marked as running, but it appears to be hung"}
        if actual in ("running", "blocked"):
            return {"code": OK, "message": ""}
        return {"code": BAD, "message": "The instance is not running as it should be"}
    return {"code": UNKNOWN, "message": "The instance is marked as offline"}


async def instance_report_data(paths: Paths, hv_name: str) -> dict[str, Any]:
    """The ``inst-status-<hypervisor>`` data: every instance this node is primary for
    (its status record) or that runs here under the hypervisor, and an overall status
    (the worst of theirs, messages joined)."""
    hv = hypervisor.get_hypervisor(hv_name, paths)
    try:
        running = await hv.all_instances_info()
    except CorralError as err:
        return {"instances": [], "status": {
            "code": BAD, "message": f"Unable to receive the list of instances: {err.message}"}}
    records = {name: record for name, record in
               (await asyncio.to_thread(instance_status.read_records, paths)).items()
               if record.get("hypervisor") == hv_name}
    instances = []
    for name in sorted(set(records) | set(running)):
        record = records.get(name, {})
        info = running.get(name)
        admin = str(record.get("admin_state", "up" if info else "down"))
        actual = _actual_state(info)
        uptime = info.get("time") if info else None
        instances.append({
            "name": name, "uuid": record.get("uuid", ""), "adminState": admin,
            "actualState": actual,
            "uptime": None if uptime is None else str(int(uptime)),
            "mtime": float(record.get("mtime", 0.0)),
            "state_reason": await asyncio.to_thread(instance_status.read_reason, paths, name),
            "status": _instance_status(admin, actual),
        })
    worst = max((i["status"]["code"] for i in instances), default=OK)
    messages = [i["status"]["message"] for i in instances if i["status"]["message"]]
    return {"instances": instances, "status": {"code": worst, "message": "\n".join(messages)}}


async def hypervisor_data(paths: Paths) -> dict[str, Any]:
    """corral's ``hypervisor`` data: per hypervisor, the node's memory (MiB) and CPUs
    as it sees them and how many instances run under it; an error in its place when
    it cannot tell."""
    data: dict[str, Any] = {}
    for name in hypervisor.HYPERVISOR_NAMES:
        hv = hypervisor.get_hypervisor(name, paths)
        try:
            info = await hv.node_info()
            running = await hv.list_instances()
        except CorralError as err:
            data[name] = {"error": err.message}
            continue
        data[name] = {"memory_total": info.get("memory_total"),
                      "memory_free": info.get("memory_free"),
                      "cpu_count": info.get("cpu_count"),
                      "instances_running": len(running)}
    return data


def collectors(paths: Paths, cpu: CpuSampler) -> list[Collector]:
    """Every collector of this node, in listing order."""
    async def cpu_load() -> Any:
        return cpu.load()

    async def diskstats() -> Any:
        return await asyncio.to_thread(_diskstats)

    async def lvs() -> Any:
        records = await asyncio.to_thread(instance_status.read_records, paths)
        return await asyncio.to_thread(_lvs, paths, records)

    async def storage() -> Any:
        return await asyncio.to_thread(storage_units, paths)

    async def hypervisors() -> Any:
        return await hypervisor_data(paths)

    def inst_status(hv_name: str) -> Callable[[], Awaitable[Any]]:
        async def gather() -> Any:
            return await instance_report_data(paths, hv_name)
        return gather

    return [
        Collector("cpu-avg-load", None, PERFORMANCE, cpu_load),
        Collector("diskstats", "storage", PERFORMANCE, diskstats),
        Collector("lv", "storage", PERFORMANCE, lvs),
        Collector("storage", "storage", PERFORMANCE, storage),
        Collector("hypervisor", "hypervisor", PERFORMANCE, hypervisors),
        *(Collector(f"inst-status-{name}", "instance", STATUS, inst_status(name))
          for name in ("kvm", "fake")),
    ]
