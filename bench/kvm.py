"""Benchmark: real qemu guests (the kvm hypervisor under TCG) on a 2-node testbed.

Issue 13's figures, one JSON line:

(a) ``gnt-instance add`` of the tiny guest (diskless, no NIC, 128 MiB, ``--no-install``,
    which in Ganeti means no start) and ``gnt-instance startup``, from the first command's
    start until the marker is on the guest's serial console, against
    the same guest under a bare qemu (:class:`corral.testbed.bareqemu.BareQemu`, the
    baseline of ``bench/guest_boot.py``) in the same run, the two alternating; the
    overhead is the difference of the medians (target <= 150 ms). TCG boot times vary by
    a few hundred ms from run to run, so take the overhead with that in mind.
(b) live migration (``gnt-instance migrate``) of a running 256 MiB guest, and of one with
    a 1 GiB local ``file`` disk: wall time of the command, and the figures its job log
    reports: the migration's whole time (disks and memory), qemu's own ``total-time``
    (memory) and ``downtime`` (QMP ``query-migrate`` on the source); then the diskless
    guest again with ``migration_bandwidth`` raised from Ganeti's 32 MiB/s to 1 GiB/s.
    ``null`` with a ``reason`` when the testbed cannot migrate.
(c) 10 guests (80 MiB) added concurrently (10 ``gnt-instance add`` at once): wall time
    until all 10 markers are on their consoles.
(d) ``gnt-instance list`` with those 10 guests running: the median of several runs (ms,
    target <= 50), of the command and of the luxi ``Query`` it sends (the command's own
    Python start-up is most of its time).

The guest is built (or found in its cache) and the testbed started before any clock
starts; the testbed (with every guest it started) is stopped at the end however the run
ends. Run: ``.venv/bin/python bench/kvm.py [--runs 5] [--guests 10]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import follow_job, testbed
from corral.hypervisor.kvm.runtime import InstanceRuntime
from corral.luxi import AsyncClient
from corral.paths import Paths
from corral.testbed import guest as tiny_guest
from corral.testbed import load
from corral.testbed.bareqemu import BareQemu
from corral.testbed.core import Testbed

#: Memory of the guests of (c) and (d), small so that 10 fit on a small machine. The
#: tiny guest needs about 72 MiB: with 64 its kernel never reaches the console.
SMALL_MIB = 80
#: Free memory (MiB) the run wants before it starts: 10 small guests, two 256 MiB
#: migrations (source and target), qemu's own overhead of some 60 MiB a guest.
NEEDED_MIB = 10 * (SMALL_MIB + 60) + 2 * (256 + 60) + 512
#: A boot under TCG takes seconds; a busy machine may take much longer.
BOOT_TIMEOUT = 180.0


class Bench:
    """The testbed the benchmark drives, with its guests' serial logs."""

    def __init__(self, tb: Testbed) -> None:
        self.tb = tb
        self.env = {**os.environ, **tb.env}
        self.roots = {node.name: Path(node.root) for node in tb.nodes}
        self.master_socket = Paths(Path(tb.env["CORRAL_ROOT"])).master_socket

    async def run(self, *args: str) -> str:
        """Run a gnt-* command against the testbed; its standard output (and error)."""
        proc = await asyncio.create_subprocess_exec(
            *args, env=self.env, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL)
        out, err = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited with {proc.returncode}: "
                               f"{err.decode(errors='replace').strip()}")
        return out.decode() + err.decode()

    def serial_log(self, node: str, instance: str) -> Path:
        """Where the kvm hypervisor of ``node`` logs ``instance``'s serial console."""
        return Path(InstanceRuntime(Paths(self.roots[node]), instance).serial_log)

    async def wait_marker(self, node: str, instance: str, within: float = BOOT_TIMEOUT
                          ) -> float:
        """Wait until ``instance``'s console shows the marker (polled every 20 ms, as
        BareQemu does); the monotonic time it was seen."""
        log = self.serial_log(node, instance)
        deadline = time.monotonic() + within
        marker = tiny_guest.MARKER.encode()
        while True:
            try:
                if marker in log.read_bytes():
                    return time.monotonic()
            except FileNotFoundError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"no marker from {instance} on {node} within {within} s")
            await asyncio.sleep(0.02)

    async def add(self, name: str, node: str, memory: int, disk: str | None = None) -> None:
        """``gnt-instance add`` of a NIC-less tiny guest on ``node``, diskless or with a
        ``file`` disk of size ``disk``, then ``gnt-instance startup``: ``--no-install``
        means no start, as in Ganeti."""
        disks = ["-t", "diskless"] if disk is None else ["-t", "file", "--disk",
                                                          f"0:size={disk}"]
        await self.run("gnt-instance", "add", *disks, "--no-install", "--no-nics",
                       "-H", "kvm", "-o", "corral-tiny", "-n", node, "-B",
                       f"maxmem={memory}M,minmem={memory}M", "--no-name-check",
                       "--no-ip-check", name)
        await self.run("gnt-instance", "startup", name)

    async def create_by_luxi(self, name: str, node: str, memory: int) -> None:
        """The same guest as :meth:`add`, created and started by one job of two opcodes
        sent over luxi (no command started): ``no_install`` makes the create itself not
        start the instance, as in Ganeti."""
        ops = [{"OP_ID": "OP_INSTANCE_CREATE", "instance_name": name, "mode": "create",
                "disk_template": "diskless", "pnode": node, "os_type": "corral-tiny",
                "hypervisor": "kvm", "disks": [], "nics": [], "start": False,
                "no_install": True, "name_check": False, "ip_check": False,
                "beparams": {"maxmem": memory, "minmem": memory}},
               {"OP_ID": "OP_INSTANCE_STARTUP", "instance_name": name}]
        client = AsyncClient(self.master_socket)
        try:
            job_id = await client.call("SubmitJob", ops)
            status = await follow_job(client, job_id)
            if status != "success":
                [[result]] = await client.call("QueryJobs", [job_id], ["opresult"])
                raise RuntimeError(f"creating {name} over luxi ended {status}: {result}")
        finally:
            await client.close()

    async def remove(self, *names: str) -> None:
        """Remove instances (stopping their guests), all at once."""
        await asyncio.gather(*(self.run("gnt-instance", "remove", "-f", "--shutdown-timeout",
                                        "0", name) for name in names))


def _median_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 1)


def _process_start(pid: int) -> float:
    """When process ``pid`` started, on the monotonic clock (10 ms resolution: the kernel
    counts in clock ticks since boot, which CLOCK_BOOTTIME shares)."""
    ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    since_boot = ticks / os.sysconf("SC_CLK_TCK")
    return since_boot - (time.clock_gettime(time.CLOCK_BOOTTIME) - time.monotonic())


async def _overhead(bench: Bench, guest: tiny_guest.TinyGuest, work: Path, runs: int,
                    node: str) -> dict[str, Any]:
    """(a): corral's add-to-marker against bare qemu's start-to-marker; corral's time is
    split at the start of its qemu (the daemonized process in the pid file) into the
    commands and jobs before it and the boot after it."""
    corral_s: list[float] = []
    before_s: list[float] = []
    boot_s: list[float] = []
    bare_s: list[float] = []
    luxi_s: list[float] = []
    for i in range(runs):
        async with BareQemu(guest, work / f"bare{i}", tiny_guest.kernel_args()) as vm:
            await vm.wait_for(re.escape(tiny_guest.MARKER), BOOT_TIMEOUT)
            bare_s.append(time.monotonic() - vm.started)
        name = f"boot{i}.testbed"
        started = time.monotonic()
        seen = asyncio.ensure_future(bench.wait_marker(node, name))
        try:
            await bench.add(name, node, 128)
            marker = await seen
            qemu = _process_start(InstanceRuntime(Paths(bench.roots[node]), name).read_pid())
            corral_s.append(marker - started)
            before_s.append(qemu - started)
            boot_s.append(marker - qemu)
        finally:
            seen.cancel()
            await bench.remove(name)
        name = f"luxi{i}.testbed"
        started = time.monotonic()
        seen = asyncio.ensure_future(bench.wait_marker(node, name))
        try:
            await bench.create_by_luxi(name, node, 128)
            luxi_s.append(await seen - started)
        finally:
            seen.cancel()
            await bench.remove(name)
    return {"runs": runs, "corral_add_to_marker_ms": _median_ms(corral_s),
            "bare_qemu_to_marker_ms": _median_ms(bare_s),
            "overhead_ms": round(_median_ms(corral_s) - _median_ms(bare_s), 1),
            "corral_commands_to_qemu_ms": _median_ms(before_s),
            "corral_qemu_to_marker_ms": _median_ms(boot_s),
            "luxi_create_to_marker_ms": _median_ms(luxi_s),
            "luxi_overhead_ms": round(_median_ms(luxi_s) - _median_ms(bare_s), 1),
            "corral_all_ms": [round(s * 1000) for s in corral_s],
            "bare_all_ms": [round(s * 1000) for s in bare_s]}


#: The job log line with qemu's own figures (``query-migrate`` on the source).
_FIGURES = re.compile(r"migration done in (\d+(?:\.\d+)?) ms(?: \(memory (\d+(?:\.\d+)?) "
                      r"ms\))?, guest stopped for (\d+(?:\.\d+)?) ms")


async def _migrate_once(bench: Bench, name: str, nodes: list[str], disk: str | None
                        ) -> dict[str, Any]:
    """Add ``name`` on the first node, wait for its marker, migrate it live to the second
    and report the command's wall time and qemu's figures from the job log."""
    await bench.add(name, nodes[0], 256, disk)
    try:
        await bench.wait_marker(nodes[0], name)
        started = time.monotonic()
        out = await bench.run("gnt-instance", "migrate", "-f", "-n", nodes[1], name)
        wall = time.monotonic() - started
        found = _FIGURES.search(out)
        figures: dict[str, float | None] = {} if found is None else {
            "elapsed_ms": float(found[1]),
            "qemu_total_time_ms": None if found[2] is None else float(found[2]),
            "downtime_ms": float(found[3])}
        pnode = (await bench.run("gnt-instance", "list", "--no-headers", "-o", "pnode",
                                 name)).strip()
        if pnode != nodes[1]:
            raise RuntimeError(f"{name} is on {pnode} after its migration to {nodes[1]}")
        return {"command_ms": round(wall * 1000), **figures}
    finally:
        await bench.remove(name)


#: The migration bandwidth (MiB/s) of (b)'s last case, against the default of 32
#: (Ganeti's), which alone makes the memory of a 256 MiB guest take about 3 s.
FAST_MIB_S = 1024


async def _migration(bench: Bench, nodes: list[str]) -> dict[str, Any]:
    """(b): a diskless 256 MiB guest, one with a 1 GiB local file disk, both at the
    cluster's default ``migration_bandwidth``, then the diskless one again with the
    bandwidth raised to :data:`FAST_MIB_S`."""
    result: dict[str, Any] = {}
    fast = f"diskless_256m_at_{FAST_MIB_S}mib_s"
    for key, disk in (("diskless_256m", None), ("file_disk_1g", "1G"), (fast, None)):
        try:
            if key == fast:
                await bench.run("gnt-cluster", "modify", "-H",
                                f"kvm:migration_bandwidth={FAST_MIB_S}")
            result[key] = await _migrate_once(
                bench, f"mig-{key.replace('_', '-')}.testbed", nodes, disk)
        except RuntimeError as error:
            result[key] = None
            result[f"{key}_reason"] = str(error).splitlines()[0][:300]
    return result


async def _many(bench: Bench, count: int, nodes: list[str]) -> tuple[dict[str, Any],
                                                                     list[str]]:
    """(c): ``count`` small guests added at once, spread over the nodes."""
    names = [f"many{i}.testbed" for i in range(count)]
    where = {name: nodes[i % len(nodes)] for i, name in enumerate(names)}
    started = time.monotonic()
    seen = [asyncio.ensure_future(bench.wait_marker(where[n], n)) for n in names]
    try:
        await asyncio.gather(*(bench.add(n, where[n], SMALL_MIB) for n in names))
        added = time.monotonic() - started
        last = max(await asyncio.gather(*seen))
    finally:
        for task in seen:
            task.cancel()
    return {"guests": count, "memory_mib": SMALL_MIB, "all_added_ms": round(added * 1000),
            "all_markers_ms": round((last - started) * 1000)}, names


async def _listing(bench: Bench, names: list[str], runs: int) -> dict[str, Any]:
    """(d): ``gnt-instance list`` (its default fields) with ``names`` running, as a
    command (a Python process: its start-up is most of the time) and as the luxi
    ``Query`` it sends, which asks every node for its guests' live state."""
    fields = ["name", "hypervisor", "os", "pnode", "status", "oper_ram"]
    cli: list[float] = []
    for _ in range(runs):
        started = time.monotonic()
        out = await bench.run("gnt-instance", "list", "--no-headers", "-o", ",".join(fields))
        cli.append(time.monotonic() - started)
        running = sum(1 for line in out.splitlines()
                      if line.split()[0] in names and line.split()[4] == "running")
        if running != len(names):
            raise RuntimeError(f"only {running} of {len(names)} guests listed as running:\n"
                               f"{out}")
    query: list[float] = []
    client = AsyncClient(bench.master_socket)
    try:
        for _ in range(runs):
            started = time.monotonic()
            await client.call("Query", "instance", fields, None)
            query.append(time.monotonic() - started)
    finally:
        await client.close()
    return {"guests": len(names), "runs": runs, "cli_median_ms": _median_ms(cli),
            "cli_min_ms": round(min(cli) * 1000, 1),
            "luxi_query_median_ms": _median_ms(query),
            "luxi_query_min_ms": round(min(query) * 1000, 1)}


def _available_mib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    return 0


async def _main(runs: int, count: int) -> dict[str, Any]:
    available = _available_mib()
    if available < NEEDED_MIB:
        raise SystemExit(f"bench/kvm.py needs about {NEEDED_MIB} MiB of free memory; "
                         f"{available} MiB are available")
    result: dict[str, Any] = {"bench": "kvm", "accel": "tcg", "nodes": 2}
    with tempfile.TemporaryDirectory(prefix="corral-bk-", dir="/tmp") as tmp:
        work = Path(tmp)
        guest = tiny_guest.build(work / "guest")
        testbed("up", "--nodes", "2", "--dir", str(work / "tb"), "--hypervisors", "fake,kvm",
                "--tiny-guest", str(work / "guest"))
        try:
            tb = load(work / "tb")
            assert tb is not None
            bench = Bench(tb)
            nodes = [node.name for node in tb.nodes]
            result["a_add_to_marker"] = await _overhead(bench, guest, work, runs, nodes[1])
            result["b_live_migration"] = await _migration(bench, nodes)
            many, names = await _many(bench, count, nodes)
            result["c_concurrent_start"] = many
            result["d_instance_list"] = await _listing(bench, names, max(5, runs * 3))
            await bench.remove(*names)
        finally:
            testbed("down", "--dir", str(work / "tb"))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5,
                        help="boots per side for (a); (d) lists 3 times as often")
    parser.add_argument("--guests", type=int, default=10, help="guests for (c) and (d)")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(_main(args.runs, args.guests))))


if __name__ == "__main__":
    main()
