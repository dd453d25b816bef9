"""Live migration of kvm instances between nodes, driven over QMP.

The target node starts the instance's qemu with the same command line plus
``-incoming defer`` (and ``-S`` when disks are mirrored, so the guest cannot run
before its disks are complete), then over QMP: loads its TLS credentials, exports
the (empty) local disks over NBD when they are mirrored, and listens with
``migrate-incoming`` on ``migration_port`` at the address the master gives (the
node's secondary or primary IP; testbed nodes share one host, each on its own IP).

The source loads its own credentials, mirrors local disks into the target's NBD
exports (``blockdev-mirror`` in ``write-blocking`` mode, so that once a mirror is
ready every guest write reaches both nodes) and waits for every mirror to be ready,
then sets the bandwidth and downtime limits and sends the RAM (``migrate``) and
polls ``query-migrate`` until it completes or fails. A migration that makes no
progress for :data:`STALL_TIMEOUT` seconds is cancelled. The progress goes to a
small file the read-only ``migration_status`` procedure reads (the master polls it
for the job log), so the QMP socket is held only for each short exchange and the
instance stays queryable while it migrates.

The stream is always encrypted: both ends get a ``tls-creds-x509`` object over a
directory holding the cluster CA and the node's own certificate and key under qemu's
names (``ca-cert.pem``, ``server-*.pem`` on the target, ``client-*.pem`` on the
source); qemu reads them when the object is made, so the directory exists only for
that moment (inside the chroot of a ``use_chroot`` qemu, readable by the uid it runs
as). Both ends verify their peer, and the source checks the target's certificate
against the target node's name (``tls-hostname``). The NBD disk stream uses the same
credentials.

Non-live migration stops the guest's CPUs first (as Ganeti does). After success
the target resumes the guest if needed (``cont``) and the source's qemu is quit;
after a failure the target's qemu is killed and the source resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import shutil
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from corral.errors import HypervisorError
from corral.hypervisor.kvm import netdev
from corral.hypervisor.kvm.monitor import ExecuteError, monitor
from corral.hypervisor.kvm.runtime import InstanceRuntime, RuntimeRecord
from corral.objects.specs import InstanceSpec
from corral.paths import Paths

if TYPE_CHECKING:
    from corral.hypervisor.kvm import KvmHypervisor

__all__ = [
    "STALL_TIMEOUT",
    "TLS_OBJECT",
    "Confinement",
    "MigrationFiles",
    "Monitor",
    "accept",
    "disk_node_names",
    "finish_incoming",
    "finish_source",
    "finish_target",
    "free_port",
    "migrate",
    "prepare_incoming",
    "read_status",
    "resume_source",
    "send",
    "started_with",
    "write_tls",
]

#: The id of the ``tls-creds-x509`` object on both ends.
TLS_OBJECT: Final = "corral-migration-tls"
#: A migration (or disk mirror) whose figures do not move for this long is cancelled (s).
STALL_TIMEOUT: Final = 60.0
#: How often the source looks at a running migration (s).
POLL_INTERVAL: Final = 0.1
#: How long the target waits for the incoming migration to settle when finishing (s).
SETTLE_TIMEOUT: Final = 30.0
#: qemu's names for the finished, failed and still-running migration states.
_DONE: Final = frozenset({"completed"})
_FAILED: Final = frozenset({"failed", "cancelled"})


class Monitor(Protocol):
    """What this module needs from a QMP connection (:class:`qemu.qmp.QMPClient`)."""

    async def execute(self, cmd: str, arguments: dict[str, Any] | None = None) -> object:
        """Run one QMP command; its ``return`` value."""


#: Opens a short QMP session with the instance's qemu (``async with factory() as qmp``).
MonitorFactory = Callable[[], AbstractAsyncContextManager[Monitor]]


@dataclass(frozen=True)
class MigrationFiles:
    """One instance's migration files on one node (``<state>/kvm/.migration/<name>``:
    a dot name, so that it is never taken for an instance)."""

    root: Path

    @classmethod
    def of(cls, paths: Paths, name: str) -> MigrationFiles:
        """The files of instance ``name`` under ``paths``' hypervisor state directory."""
        return cls(paths.hypervisor_state_dir / "kvm" / ".migration" / name)

    @property
    def tls(self) -> Path:
        """The directory qemu's ``tls-creds-x509`` object reads (while it is made)."""
        return self.root / "tls"

    @property
    def progress(self) -> Path:
        """The source's latest figures (JSON), for ``migration_status``."""
        return self.root / "progress.json"

    @property
    def incoming(self) -> Path:
        """The target's record of an accepted migration (JSON): mirrored disks, ports."""
        return self.root / "incoming.json"

    def write_json(self, path: Path, record: dict[str, Any]) -> None:
        """Write ``record`` to ``path`` whole (a reader never sees half of it)."""
        self.root.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(record))
        temporary.replace(path)

    def read_json(self, path: Path) -> dict[str, Any] | None:
        """The record at ``path``, or ``None`` when there is none (or it is unreadable)."""
        try:
            value = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def remove(self) -> None:
        """Remove every migration file of the instance here."""
        shutil.rmtree(self.root, ignore_errors=True)


def disk_node_names(spec: InstanceSpec) -> list[str]:
    """The qemu block node of each disk, in order (``disk-<uuid prefix>-drive``)."""
    return [f"disk-{d.uuid[:8] if d.uuid else d.index}-drive" for d in spec.disks]


def free_port(address: str) -> int:
    """A TCP port free on ``address`` right now (for the NBD disk export)."""
    with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as probe:
        try:
            probe.bind((address, 0))
        except OSError as err:
            raise HypervisorError(
                f"cannot listen on {address} for the migration's disks: {err.strerror}"
            ) from err
        return int(probe.getsockname()[1])


def check_port_free(address: str, port: int) -> None:
    """Refuse when ``port`` on ``address`` is taken (another incoming migration)."""
    with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError as err:
            what = ("in use (another migration to this node?)"
                    if err.errno == errno.EADDRINUSE else err.strerror)
            raise HypervisorError(
                f"cannot receive a migration on {address} port {port} (migration_port): "
                f"{what}") from err


def _uri(address: str, port: int) -> str:
    return f"tcp:[{address}]:{port}" if ":" in address else f"tcp:{address}:{port}"


@dataclass(frozen=True)
class Confinement:
    """How the instance's qemu reads files (see :mod:`.security`): as ``uid`` (``None``:
    root) and inside ``chroot`` (a host directory it is confined to, or ``None``)."""

    uid: int | None = None
    chroot: Path | None = None

    @classmethod
    def of(cls, record: RuntimeRecord | None) -> Confinement:
        """The confinement of the qemu ``record`` describes."""
        if record is None:
            return cls()
        security = record.extra.get("security")
        chroot = security.get("chroot") if isinstance(security, dict) else None
        return cls(uid=record.uid, chroot=Path(chroot) if chroot else None)


def write_tls(paths: Paths, directory: Path, endpoint: str, owner: int | None) -> None:
    """Fill ``directory`` with the cluster CA and this node's certificate and key under
    the names qemu's ``endpoint`` (``server`` or ``client``) reads; ``owner`` (the uid
    qemu runs as) may read them."""
    shutil.rmtree(directory, ignore_errors=True)
    try:
        directory.mkdir(parents=True, mode=0o700)
        shutil.copyfile(paths.ca_cert, directory / "ca-cert.pem")
        shutil.copyfile(paths.node_cert, directory / f"{endpoint}-cert.pem")
        shutil.copyfile(paths.node_key, directory / f"{endpoint}-key.pem")
        (directory / f"{endpoint}-key.pem").chmod(0o600)
    except OSError as err:
        shutil.rmtree(directory, ignore_errors=True)
        raise HypervisorError(f"cannot prepare the migration's TLS credentials from this "
                              f"node's certificates: {err}") from err
    if owner is not None:
        for entry in (directory, *directory.iterdir()):
            with contextlib.suppress(OSError):
                os.chown(entry, owner, -1)


async def _load_tls(qmp: Monitor, paths: Paths, files: MigrationFiles, endpoint: str,
                    confined: Confinement) -> None:
    """(Re)create the TLS credentials object. qemu reads the files when the object is
    made, so they exist only for that moment: inside the chroot of a confined qemu."""
    if confined.chroot is not None:
        host, seen = confined.chroot / TLS_OBJECT, Path("/") / TLS_OBJECT
    else:
        host = seen = files.tls
    write_tls(paths, host, endpoint, confined.uid)
    try:
        with contextlib.suppress(Exception):
            await qmp.execute("object-del", {"id": TLS_OBJECT})
        await qmp.execute("object-add", {"qom-type": "tls-creds-x509", "id": TLS_OBJECT,
                                         "dir": str(seen), "endpoint": endpoint,
                                         "verify-peer": True})
    finally:
        shutil.rmtree(host, ignore_errors=True)


def _capabilities(spec: InstanceSpec) -> list[dict[str, Any]]:
    """``migration_caps`` (colon-separated qemu capability names), switched on."""
    caps = str(spec.hvparams.get("migration_caps") or "")
    return [{"capability": c, "state": True} for c in caps.split(":") if c]


# -- target ---------------------------------------------------------------------------


async def prepare_incoming(qmp: Monitor, paths: Paths, spec: InstanceSpec, *, address: str,
                           mirror_disks: bool, confined: Confinement | None = None,
                           ) -> dict[str, Any]:
    """On the target, in a qemu started with ``-incoming defer``: credentials, the disk
    exports when ``mirror_disks``, then listen. Answers ``{"port", "nbd_port"}``."""
    files = MigrationFiles.of(paths, spec.name)
    port = int(spec.hvparams.get("migration_port") or 8102)
    await _load_tls(qmp, paths, files, "server", confined or Confinement())
    nbd_port: int | None = None
    nodes = disk_node_names(spec) if mirror_disks else []
    if nodes:
        nbd_port = free_port(address)
        await qmp.execute("nbd-server-start", {
            "addr": {"type": "inet", "data": {"host": address, "port": str(nbd_port)}},
            "tls-creds": TLS_OBJECT})
        for node in nodes:
            await qmp.execute("block-export-add", {
                "type": "nbd", "id": node, "node-name": node, "name": node,
                "writable": True})
    if caps := _capabilities(spec):
        await qmp.execute("migrate-set-capabilities", {"capabilities": caps})
    await qmp.execute("migrate-set-parameters", {"tls-creds": TLS_OBJECT})
    await qmp.execute("migrate-incoming", {"uri": _uri(address, port)})
    files.write_json(files.incoming, {"address": address, "port": port,
                                      "nbd_port": nbd_port, "mirrored": nodes})
    return {"port": port, "nbd_port": nbd_port}


async def _run_state(qmp: Monitor) -> str:
    status = await qmp.execute("query-status")
    return str(status.get("status")) if isinstance(status, dict) else "unknown"


async def finish_incoming(qmp: Monitor, paths: Paths, name: str) -> None:
    """On the target after the source reported success: wait for the incoming data
    to settle, stop the disk exports, resume the guest if it is not running and check
    that it runs."""
    files = MigrationFiles.of(paths, name)
    record = files.read_json(files.incoming) or {}
    deadline = time.monotonic() + SETTLE_TIMEOUT
    state = await _run_state(qmp)
    while state == "inmigrate":
        if time.monotonic() > deadline:
            raise HypervisorError(
                f"instance {name} has not received all its state after "
                f"{SETTLE_TIMEOUT:.0f} s (qemu is still 'inmigrate')")
        await asyncio.sleep(POLL_INTERVAL)
        state = await _run_state(qmp)
    if record.get("mirrored"):
        with contextlib.suppress(Exception):
            await qmp.execute("nbd-server-stop")
    if state != "running":
        await qmp.execute("cont")
        state = await _run_state(qmp)
    if state != "running":
        raise HypervisorError(f"instance {name} does not run after its migration: qemu "
                              f"says {state!r}")
    with contextlib.suppress(Exception):
        await qmp.execute("migrate-set-parameters", {"tls-creds": ""})
        await qmp.execute("object-del", {"id": TLS_OBJECT})
    files.remove()


# -- source ---------------------------------------------------------------------------


class _Progress:
    """The source's figures: written for ``migration_status``, and watched for stalls."""

    def __init__(self, files: MigrationFiles, name: str, target: str) -> None:
        self.files = files
        self.name = name
        self.target = target
        self.record: dict[str, Any] = {"status": "setup", "target": target}
        self._last: Any = None
        self._moved = time.monotonic()

    def update(self, **values: Any) -> None:
        """Record new figures; a change restarts the stall clock."""
        self.record.update(values)
        figures = (self.record.get("status"), self.record.get("disks"),
                   self.record.get("ram"))
        if figures != self._last:
            self._last = figures
            self._moved = time.monotonic()
        self.files.write_json(self.files.progress, self.record)

    def check(self, what: str) -> None:
        """Fail when nothing moved for :data:`STALL_TIMEOUT` seconds."""
        if time.monotonic() - self._moved > STALL_TIMEOUT:
            raise HypervisorError(
                f"{what} of instance {self.name} to {self.target} made no progress for "
                f"{STALL_TIMEOUT:.0f} s: cancelled")


async def _mirror(monitor: MonitorFactory, spec: InstanceSpec, progress: _Progress,
                  target_ip: str, target_name: str, nbd_port: int) -> list[str]:
    """Mirror every disk into the target's NBD exports; return the job ids once every
    job is ready (the disks are the same on both sides from then on)."""
    nodes = disk_node_names(spec)
    jobs: list[str] = []
    async with monitor() as qmp:
        for node in nodes:
            job = node.removesuffix("-drive") + "-mirror"
            await qmp.execute("blockdev-add", {
                "driver": "nbd", "node-name": job, "export": node,
                "server": {"type": "inet", "host": target_ip, "port": str(nbd_port)},
                "tls-creds": TLS_OBJECT, "tls-hostname": target_name})
            await qmp.execute("blockdev-mirror", {
                "job-id": job, "device": node, "target": job, "sync": "full",
                "copy-mode": "write-blocking"})
            jobs.append(job)
    while True:
        async with monitor() as qmp:
            found = await qmp.execute("query-block-jobs")
        listed = {j.get("device"): j for j in found if isinstance(j, dict)} \
            if isinstance(found, list) else {}
        disks = []
        for index, job in enumerate(jobs):
            info = listed.get(job)
            if info is None:
                raise HypervisorError(f"copying disk {index} of instance {spec.name} to "
                                      f"{target_ip} failed: the mirror job ended")
            if info.get("io-status", "ok") != "ok" or info.get("status") == "concluded":
                raise HypervisorError(
                    f"copying disk {index} of instance {spec.name} to {target_ip} failed: "
                    f"{info.get('error') or info.get('io-status')}")
            disks.append({"index": index, "done": info.get("offset"),
                          "total": info.get("len"), "ready": bool(info.get("ready"))})
        progress.update(status="copying disks", disks=disks)
        if all(d["ready"] for d in disks):
            return jobs
        progress.check("the disk copy")
        await asyncio.sleep(POLL_INTERVAL * 2)


async def _drop_mirrors(qmp: Monitor, jobs: list[str], *, force: bool) -> None:
    """End the mirror jobs (a ready job ends without switching over) and wait until
    they are gone; remove their NBD client nodes."""
    for job in jobs:
        with contextlib.suppress(Exception):
            await qmp.execute("block-job-cancel", {"device": job, "force": force})
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while time.monotonic() < deadline:
        found = await qmp.execute("query-block-jobs")
        if not any(isinstance(j, dict) and j.get("device") in jobs
                   for j in (found if isinstance(found, list) else [])):
            break
        await asyncio.sleep(POLL_INTERVAL)
    else:
        raise HypervisorError(f"the disk mirror jobs {', '.join(jobs)} did not end within "
                              f"{SETTLE_TIMEOUT:.0f} s")
    for job in jobs:
        with contextlib.suppress(Exception):
            await qmp.execute("blockdev-del", {"node-name": job})


async def send(monitor: MonitorFactory, paths: Paths, spec: InstanceSpec, *,
               target_ip: str, target_name: str, live: bool, nbd_port: int | None,
               confined: Confinement | None = None) -> dict[str, Any]:
    """Migrate ``spec`` from this node's qemu to ``target_ip`` and wait for the end;
    answers ``{"total_time", "downtime", "elapsed"}`` (ms: qemu's memory transfer,
    the guest's pause, and the whole of it with the disk copy). A failure cancels what was started
    (migration, disk mirrors) and is raised naming the step; the guest is resumed by
    :func:`resume_source`."""
    files = MigrationFiles.of(paths, spec.name)
    files.remove()
    progress = _Progress(files, spec.name, target_ip)
    progress.update(status="setup", stopped=False)
    port = int(spec.hvparams.get("migration_port") or 8102)
    jobs: list[str] = []
    began = time.monotonic()
    try:
        async with monitor() as qmp:
            await _load_tls(qmp, paths, files, "client", confined or Confinement())
        if nbd_port:
            jobs = await _mirror(monitor, spec, progress, target_ip, target_name, nbd_port)
        async with monitor() as qmp:
            if not live:
                await qmp.execute("stop")
                progress.update(stopped=True)
            if caps := _capabilities(spec):
                await qmp.execute("migrate-set-capabilities", {"capabilities": caps})
            bandwidth = int(spec.hvparams.get("migration_bandwidth") or 32)
            await qmp.execute("migrate-set-parameters", {
                "tls-creds": TLS_OBJECT, "tls-hostname": target_name or target_ip,
                "max-bandwidth": bandwidth * 1024 * 1024,
                "downtime-limit": int(spec.hvparams.get("migration_downtime") or 30)})
            await qmp.execute("migrate", {"uri": _uri(target_ip, port)})
        result = await _wait_migrated(monitor, spec, progress, target_ip)
        if jobs:
            async with monitor() as qmp:
                await _drop_mirrors(qmp, jobs, force=False)
            jobs = []
        progress.update(status="completed")
        result["elapsed"] = round((time.monotonic() - began) * 1000)
        return result
    except BaseException:
        with contextlib.suppress(Exception):
            async with monitor() as qmp:
                await qmp.execute("migrate_cancel")
                if jobs:
                    await _drop_mirrors(qmp, jobs, force=True)
        with contextlib.suppress(OSError):
            progress.update(status="failed")
        raise


async def _wait_migrated(monitor: MonitorFactory, spec: InstanceSpec, progress: _Progress,
                         target_ip: str) -> dict[str, Any]:
    """Poll ``query-migrate`` until the migration completes (its figures) or fails."""
    while True:
        async with monitor() as qmp:
            answer = await qmp.execute("query-migrate")
        info = answer if isinstance(answer, dict) else {}
        status = str(info.get("status", "none"))
        raw = info.get("ram")
        ram: dict[str, Any] = raw if isinstance(raw, dict) else {}
        progress.update(status=status, ram={k: ram.get(k) for k in
                                            ("transferred", "remaining", "total")},
                        expected_downtime=info.get("expected-downtime"))
        if status in _DONE:
            return {"total_time": info.get("total-time"), "downtime": info.get("downtime"),
                    "transferred": ram.get("transferred")}
        if status in _FAILED or status == "none":
            reason = info.get("error-desc") or status
            raise HypervisorError(f"sending instance {spec.name}'s memory to {target_ip} "
                                  f"failed: {reason}")
        progress.check("the migration")
        await asyncio.sleep(POLL_INTERVAL)


def started_with(runtime: InstanceRuntime) -> dict[str, Any] | None:
    """The hypervisor and backend parameters the instance's running qemu was started
    with (as Ganeti's target starts from the source's runtime), or ``None``."""
    record = runtime.read()
    if record is None or not runtime.live_pid(record):
        return None
    return {"hvparams": dict(record.spec.hvparams), "beparams": dict(record.spec.beparams),
            "devices": {"pci_slots": dict(record.pci_slots),
                        "romless": list(record.romless)}}


def read_status(paths: Paths, name: str) -> dict[str, Any]:
    """The source's latest figures for instance ``name`` (empty when none)."""
    files = MigrationFiles.of(paths, name)
    record = files.read_json(files.progress) or {}
    record.pop("stopped", None)
    return record


async def resume_source(qmp: Monitor, paths: Paths, name: str) -> None:
    """On the source after a failed migration: cancel what may still run and resume
    the guest if the migration (or a non-live migration's stop) paused it."""
    files = MigrationFiles.of(paths, name)
    record = files.read_json(files.progress) or {}
    with contextlib.suppress(Exception):
        await qmp.execute("migrate_cancel")
    found = await qmp.execute("query-block-jobs")
    jobs = [str(j.get("device")) for j in (found if isinstance(found, list) else [])
            if isinstance(j, dict) and str(j.get("device", "")).endswith("-mirror")]
    if jobs:
        await _drop_mirrors(qmp, jobs, force=True)
    state = await _run_state(qmp)
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while state in ("finish-migrate", "inmigrate") and time.monotonic() < deadline:
        await asyncio.sleep(POLL_INTERVAL)
        state = await _run_state(qmp)
    if state == "postmigrate" or (state == "paused" and record.get("stopped")):
        await qmp.execute("cont")
    with contextlib.suppress(Exception):
        await qmp.execute("migrate-set-parameters", {"tls-creds": ""})
        await qmp.execute("object-del", {"id": TLS_OBJECT})
    files.remove()


# -- the hypervisor's methods ------------------------------------------------------------


@contextlib.asynccontextmanager
async def _step(what: str) -> AsyncIterator[None]:
    """Turn qemu's refusal of a QMP command into a :class:`HypervisorError` naming the
    step (``what``) and quoting qemu."""
    try:
        yield
    except ExecuteError as err:
        raise HypervisorError(f"{what}: qemu refused {err.sent.get('execute', '?')}: "
                              f"{err.error.error.desc}") from err


def _monitor(runtime: InstanceRuntime) -> MonitorFactory:
    def factory() -> AbstractAsyncContextManager[Monitor]:
        return monitor(runtime.qmp_socket)
    return factory


async def accept(hv: KvmHypervisor, spec: InstanceSpec, disk_paths: list[str], *,
                 address: str, mirror_disks: bool,
                 devices: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The target's side of :meth:`KvmHypervisor.accept_migration`: qemu started with
    ``-incoming defer`` and the source's device layout (``devices``, from
    :func:`started_with`: qemu takes a guest only from a machine laid out as its
    own), then :func:`prepare_incoming`. A failure leaves no qemu."""
    if not address:
        raise HypervisorError(f"cannot receive instance {spec.name}: the master gave no "
                              "address to listen on")
    check_port_free(address, int(spec.hvparams.get("migration_port") or 8102))
    record = await hv.launch(spec, disk_paths, incoming="defer", devices=devices)
    runtime = hv.runtime(spec.name)
    try:
        async with _step(f"preparing to receive instance {spec.name}"), \
                monitor(runtime.qmp_socket) as qmp:
            return await prepare_incoming(qmp, hv.paths, spec, address=address,
                                          mirror_disks=mirror_disks,
                                          confined=Confinement.of(record))
    except BaseException:
        await hv.stop(spec.name, force=True)
        MigrationFiles.of(hv.paths, spec.name).remove()
        raise


async def migrate(hv: KvmHypervisor, spec: InstanceSpec, target_ip: str, *, live: bool,
                  target_name: str, nbd_port: int | None) -> dict[str, Any]:
    """The source's side of :meth:`KvmHypervisor.migrate` (see :func:`send`)."""
    runtime = hv.runtime(spec.name)
    record = runtime.read()
    if not runtime.live_pid(record):
        raise HypervisorError(f"cannot migrate instance {spec.name}: it is not running on "
                              "this node")
    async with _step(f"migrating instance {spec.name} to {target_ip}"):
        return await send(_monitor(runtime), hv.paths, spec, target_ip=target_ip,
                          target_name=target_name, live=live, nbd_port=nbd_port,
                          confined=Confinement.of(record))


async def finish_target(hv: KvmHypervisor, spec: InstanceSpec, *, success: bool) -> None:
    """The target's side of :meth:`KvmHypervisor.finish_migration`: run the guest, or
    kill the qemu that waited for it."""
    runtime = hv.runtime(spec.name)
    if not success:
        await hv.stop(spec.name, force=True)
        MigrationFiles.of(hv.paths, spec.name).remove()
        return
    record = runtime.read()
    if not runtime.live_pid(record):
        raise HypervisorError(f"instance {spec.name} did not arrive on this node: no qemu "
                              "runs it here")
    async with _step(f"starting instance {spec.name} after its migration"), \
            monitor(runtime.qmp_socket) as qmp:
        await finish_incoming(qmp, hv.paths, spec.name)
    async with runtime.alock():
        # Routed NICs get their host routes here only now that the guest runs here.
        await netdev.finish_incoming(spec, runtime)
        record = runtime.read()
        if record is not None:
            record.incoming = None
            await asyncio.to_thread(runtime.write, record)


async def finish_source(hv: KvmHypervisor, spec: InstanceSpec, *, success: bool) -> None:
    """The source's side of :meth:`KvmHypervisor.finish_migration_source`: quit the
    qemu the guest left (never one still running the guest), or resume it."""
    runtime = hv.runtime(spec.name)
    record = runtime.read()
    files = MigrationFiles.of(hv.paths, spec.name)
    if not runtime.live_pid(record):
        await hv.stop(spec.name, force=True)  # releases what a dead qemu left
        files.remove()
        return
    async with _step(f"finishing the migration of instance {spec.name} here"), \
            monitor(runtime.qmp_socket) as qmp:
        if not success:
            await resume_source(qmp, hv.paths, spec.name)
            return
        state = await _run_state(qmp)
    if state == "running":
        raise HypervisorError(f"instance {spec.name} still runs on this node: not stopping "
                              "it (the migration did not complete here)")
    await hv.stop(spec.name, force=True)
    files.remove()
