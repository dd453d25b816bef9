"""A node's Prometheus metrics (``GET /metrics`` on corral-mond), in the text
exposition format written by ``prometheus_client``.

Everything is read at scrape time, from the same sources as the collectors:

- per instance running here (labels ``instance``, ``hypervisor``): whether it runs
  and whether it should (``corral_instance_up``, ``corral_instance_admin_up``), its
  uptime, vCPUs and memory; for kvm guests also the qemu process's CPU time, disk
  bytes read and written (``/proc/<pid>/stat`` and ``io``) and the bytes through each
  of its taps (``/sys/class/net/<tap>/statistics``, counted from the guest's side).
  The fake hypervisor runs nothing: its instances have no CPU, disk or network
  counters, and their memory is what they were given;
- the node's memory and CPUs per hypervisor, and each storage unit's size and free
  space.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from corral import hypervisor
from corral.errors import CorralError
from corral.mond.collectors import storage_units
from corral.noded import instance_status
from corral.paths import Paths

__all__ = ["CONTENT_TYPE", "gather", "node_metrics"]

#: The exposition format's content type (version 0.0.4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_MIB = 1 << 20
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class _Families(Collector):
    """Hands metric families gathered beforehand to one registry's scrape."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        """The families, as gathered."""
        return self.families


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _process_counters(pid: int) -> dict[str, float]:
    """CPU seconds, resident memory and disk bytes of process ``pid`` (what /proc
    tells; nothing for a process that is gone)."""
    counters: dict[str, float] = {}
    proc = Path("/proc") / str(pid)
    try:
        fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        counters["cpu"] = (int(fields[11]) + int(fields[12])) / _CLK_TCK
        counters["rss"] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return counters
    try:
        for line in (proc / "io").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("read_bytes", "write_bytes"):
                counters[key] = int(value)
    except (OSError, ValueError):
        pass
    return counters


def _kvm_runtime(paths: Paths, name: str) -> tuple[int, list[str]]:
    """The qemu pid and tap devices of a kvm guest, from its runtime record."""
    from corral.hypervisor.kvm.runtime import InstanceRuntime

    try:
        import json

        record: dict[str, Any] = json.loads(InstanceRuntime(paths, name).record_file.read_text())
    except (OSError, ValueError, CorralError):
        return 0, []
    return int(record.get("pid") or 0), [str(t) for t in record.get("taps") or []]


async def gather(paths: Paths) -> list[Metric]:
    """Every metric family of this node, read now."""
    up = GaugeMetricFamily("corral_instance_up", "Whether the instance runs on this node "
                           "(1) or not (0)", labels=["instance", "hypervisor"])
    admin_up = GaugeMetricFamily("corral_instance_admin_up", "Whether the instance should "
                                 "run, as this node last heard", labels=["instance",
                                                                        "hypervisor"])
    uptime = GaugeMetricFamily("corral_instance_uptime_seconds", "Seconds since the "
                               "instance started", labels=["instance", "hypervisor"])
    vcpus = GaugeMetricFamily("corral_instance_vcpus", "Virtual CPUs of the instance",
                              labels=["instance", "hypervisor"])
    memory = GaugeMetricFamily("corral_instance_memory_bytes", "Memory the instance uses "
                               "(kvm: qemu's resident memory; fake: what it was given)",
                               labels=["instance", "hypervisor"])
    cpu = CounterMetricFamily("corral_instance_cpu_seconds", "CPU time the instance used",
                              labels=["instance", "hypervisor"])
    disk_read = CounterMetricFamily("corral_instance_disk_read_bytes", "Bytes the instance "
                                    "read from its disks", labels=["instance", "hypervisor"])
    disk_write = CounterMetricFamily("corral_instance_disk_written_bytes", "Bytes the "
                                     "instance wrote to its disks",
                                     labels=["instance", "hypervisor"])
    net_rx = CounterMetricFamily("corral_instance_network_receive_bytes", "Bytes the "
                                 "instance received on a NIC",
                                 labels=["instance", "hypervisor", "interface"])
    net_tx = CounterMetricFamily("corral_instance_network_transmit_bytes", "Bytes the "
                                 "instance sent on a NIC",
                                 labels=["instance", "hypervisor", "interface"])
    node_total = GaugeMetricFamily("corral_node_memory_total_bytes", "The node's memory as "
                                   "a hypervisor sees it", labels=["hypervisor"])
    node_free = GaugeMetricFamily("corral_node_memory_free_bytes", "The node's memory free "
                                  "for instances", labels=["hypervisor"])
    node_cpus = GaugeMetricFamily("corral_node_cpus", "The node's CPUs", labels=["hypervisor"])
    storage_size = GaugeMetricFamily("corral_node_storage_size_bytes", "Size of a storage "
                                     "unit of the node", labels=["type", "name"])
    storage_free = GaugeMetricFamily("corral_node_storage_free_bytes", "Free space of a "
                                     "storage unit of the node", labels=["type", "name"])

    records = await asyncio.to_thread(instance_status.read_records, paths)
    for hv_name in hypervisor.HYPERVISOR_NAMES:
        hv = hypervisor.get_hypervisor(hv_name, paths)
        try:
            running = await hv.all_instances_info()
            info = await hv.node_info()
        except CorralError:
            continue
        node_total.add_metric([hv_name], int(info.get("memory_total", 0)) * _MIB)
        node_free.add_metric([hv_name], int(info.get("memory_free", 0)) * _MIB)
        node_cpus.add_metric([hv_name], int(info.get("cpu_count", 0)))
        names = {n for n, r in records.items() if r.get("hypervisor") == hv_name}
        for name in sorted(names | set(running)):
            labels = [name, hv_name]
            state = running.get(name)
            runs = state is not None and state.get("state") not in ("shutdown", "migrating")
            up.add_metric(labels, 1 if runs else 0)
            wanted = records.get(name, {}).get("admin_state", "up" if runs else "down")
            admin_up.add_metric(labels, 1 if wanted == "up" else 0)
            if state is None:
                continue
            uptime.add_metric(labels, float(state.get("time", 0.0)))
            vcpus.add_metric(labels, int(state.get("vcpus", 0)))
            used = int(state.get("memory", 0)) * _MIB
            if hv_name == "kvm":
                pid, taps = await asyncio.to_thread(_kvm_runtime, paths, name)
                counters = await asyncio.to_thread(_process_counters, pid) if pid else {}
                used = int(counters.get("rss", used))
                if "cpu" in counters:
                    cpu.add_metric(labels, counters["cpu"])
                if "read_bytes" in counters:
                    disk_read.add_metric(labels, counters["read_bytes"])
                    disk_write.add_metric(labels, counters.get("write_bytes", 0))
                for tap in taps:
                    stats = Path("/sys/class/net") / tap / "statistics"
                    # the tap's transmit is what the guest receives, and the other way
                    received = await asyncio.to_thread(_read_int, stats / "tx_bytes")
                    sent = await asyncio.to_thread(_read_int, stats / "rx_bytes")
                    if received is not None and sent is not None:
                        net_rx.add_metric([*labels, tap], received)
                        net_tx.add_metric([*labels, tap], sent)
            memory.add_metric(labels, used)
    for unit in await asyncio.to_thread(storage_units, paths):
        storage_size.add_metric([unit["type"], unit["name"]], unit["size"] * _MIB)
        storage_free.add_metric([unit["type"], unit["name"]], unit["free"] * _MIB)
    return [up, admin_up, uptime, vcpus, memory, cpu, disk_read, disk_write, net_rx, net_tx,
            node_total, node_free, node_cpus, storage_size, storage_free]


async def node_metrics(paths: Paths) -> bytes:
    """The node's metrics in the text exposition format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(await gather(paths)))
    return generate_latest(registry)
