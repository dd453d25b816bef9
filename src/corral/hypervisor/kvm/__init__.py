"""The ``kvm`` hypervisor: instances are real qemu processes, controlled over QMP.

qemu starts daemonized (``-daemonize``: it leaves noded's session, so it outlives a
noded restart) with a QMP socket, a serial console on a unix socket logged to a file,
and a pid file; :mod:`.runtime` says where these live. What an instance *is* comes
from the running qemu: it is held here when its pid is alive and that process's
command line names the instance's QMP socket, and its state is QMP ``query-status``.
A qemu that is gone is not listed; its runtime files (and taps, and a pool uid) are
cleaned up the next time anything looks.

Parts: :mod:`.cmdline` (the command line), :mod:`.monitor` (QMP connections),
:mod:`.runtime` (files and locks), :mod:`.netdev` (taps), :mod:`.security` (run-as
user, chroot).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from corral.errors import HypervisorError, ParameterError
from corral.hypervisor.base import REBOOT_TYPES, HotplugAction, HotplugTarget, Hypervisor
from corral.hypervisor.fake import read_meminfo
from corral.hypervisor.kvm import console, hotplug, migration, netdev, security
from corral.hypervisor.kvm.cmdline import (
    assign_pci_slots,
    build_command,
    hv,
    maxmem,
    minmem,
    vcpus,
)
from corral.hypervisor.kvm.monitor import ExecuteError, monitor
from corral.hypervisor.kvm.runtime import (
    InstanceRuntime,
    RuntimeRecord,
    instance_names,
    wait_exit,
)
from corral.objects.specs import DiskSpec, InstanceSpec, NicSpec
from corral.paths import Paths

__all__ = ["KVM_DEVICE", "QEMU_STATES", "KvmHypervisor", "missing_files", "verify_node"]

_MIB = 1024 * 1024

#: qemu run states (QMP ``query-status``) and what corral reports for each; any other
#: state is ``paused`` (the guest is not executing).
QEMU_STATES: dict[str, str] = {
    "running": "running",
    "inmigrate": "migrating",
    "postmigrate": "migrating",
    "finish-migrate": "migrating",
    "shutdown": "shutdown",
}

#: How often a stop presses the ACPI power button again (an early press can be lost).
POWERDOWN_INTERVAL = 3.0
#: How long qemu may take to exit after ``quit`` before it is killed.
QUIT_GRACE = 5.0
#: How long qemu may take to start (to daemonize, after checking its command line).
START_TIMEOUT = 60.0
#: How long a status query may wait for qemu's monitor.
QUERY_TIMEOUT = 5.0


def missing_files(spec: InstanceSpec) -> list[str]:
    """What of the files ``spec`` needs this node lacks: the qemu binary
    (``kvm_path``), the kernel and the initrd; one line per lack."""
    missing = []
    binary = str(hv(spec, "kvm_path") or "")
    if not binary:
        missing.append("kvm_path is empty: it must name the qemu binary")
    elif not os.access(binary, os.X_OK) or not Path(binary).is_file():
        missing.append(f"qemu binary {binary} (kvm_path) not found or not executable")
    for key, what in (("kernel_path", "kernel"), ("initrd_path", "initrd")):
        path = str(hv(spec, key) or "")
        if path and not Path(path).is_file():
            missing.append(f"{what} {path} ({key}) not found")
    return missing


#: The device KVM acceleration needs.
KVM_DEVICE = Path("/dev/kvm")


def verify_node(hvparams: Mapping[str, Any], device: Path = KVM_DEVICE) -> str | None:
    """What this node lacks to run kvm instances with the filled cluster parameters
    ``hvparams`` (problems joined by ``; ``), or None."""
    problems = []
    binary = str(hvparams.get("kvm_path") or "")
    if not binary:
        problems.append("kvm_path is empty: it must name the qemu binary")
    elif not Path(binary).is_file() or not os.access(binary, os.X_OK):
        problems.append(f"the qemu binary {binary} (kvm_path) does not exist or is not "
                        "executable")
    if hvparams.get("kvm_flag") == "enabled" and not os.access(device, os.R_OK | os.W_OK):
        problems.append(f"kvm_flag is enabled but {device} is missing or not accessible "
                        "(no KVM on this node: set kvm_flag=disabled for software "
                        "emulation)")
    return "; ".join(problems) or None


def device_layout(record: RuntimeRecord) -> dict[str, Any]:
    """Where ``record``'s qemu has its devices: the PCI slots and the NICs without an
    option ROM, for another qemu of the same machine (:meth:`KvmHypervisor.launch`)."""
    return {"pci_slots": dict(record.pci_slots), "romless": list(record.romless)}


def _known_slots(devices: Mapping[str, Any]) -> dict[str, int]:
    slots = devices.get("pci_slots") or {}
    if not isinstance(slots, Mapping):
        return {}
    return {str(ident): slot for ident, slot in slots.items() if isinstance(slot, int)}


class KvmHypervisor(Hypervisor):
    """Instances as qemu processes on this node; see the module's docstring.

    ``meminfo`` is where the node's memory is read from (``/proc/meminfo`` format).
    """

    name: ClassVar[str] = "kvm"

    def __init__(self, paths: Paths, *, meminfo: Path = Path("/proc/meminfo")) -> None:
        self.paths = paths
        self._meminfo = meminfo

    def runtime(self, name: str) -> InstanceRuntime:
        """The runtime files of instance ``name`` on this node."""
        return InstanceRuntime(self.paths, name)

    # -- start -----------------------------------------------------------------------------
    async def start(
        self, spec: InstanceSpec, disk_paths: list[str], *, paused: bool = False
    ) -> None:
        """Start qemu for ``spec``; refuses an instance already here (a qemu whose guest
        powered itself off is ended first), missing files and too little free memory.
        A failed start leaves nothing behind."""
        await self.launch(spec, disk_paths, paused=paused)

    async def launch(
        self,
        spec: InstanceSpec,
        disk_paths: list[str],
        *,
        paused: bool = False,
        incoming: str | None = None,
        devices: Mapping[str, Any] | None = None,
    ) -> RuntimeRecord:
        """Start qemu for ``spec`` (``incoming``: to receive a migration at that URI,
        left in state ``inmigrate``); the runtime record of the running qemu.

        ``devices`` (:func:`device_layout` of another qemu of the instance: a
        migration's source, the qemu a soft reboot replaces) keeps its PCI slots and
        ROM-less NICs."""
        runtime = self.runtime(spec.name)
        async with runtime.alock():
            record = runtime.read()
            if runtime.live_pid(record):
                state = await self._state(runtime)
                if state != "shutdown":
                    raise HypervisorError(
                        f"cannot start instance {spec.name}: it is already"
                        f" {state or 'running'} on this node")
                # Powered off by its user (user_shutdown): end that qemu first, as
                # Ganeti's startup cleans up a USER_down instance.
                await self._kill(runtime, record)
            await self._cleanup(runtime, record)
            missing = missing_files(spec)
            if missing:
                raise HypervisorError(
                    f"cannot start instance {spec.name}: {'; '.join(missing)}")
            console.vnc_password(self.paths, spec)  # a missing file fails before anything
            start_memory = await self._check_memory(spec)
            return await self._launch(runtime, spec, disk_paths, paused=paused,
                                      incoming=incoming, start_memory=start_memory,
                                      devices=devices or {})

    async def _launch(self, runtime: InstanceRuntime, spec: InstanceSpec,
                      disk_paths: list[str], *, paused: bool, incoming: str | None,
                      start_memory: int, devices: Mapping[str, Any]) -> RuntimeRecord:
        await asyncio.to_thread(runtime.prepare)
        record = RuntimeRecord(name=spec.name, spec=spec, disk_paths=list(disk_paths),
                               memory=start_memory, incoming=incoming,
                               vnc_port=_vnc_port(spec))
        try:
            await asyncio.to_thread(runtime.write, record)
            secured = await security.prepare_security(spec, runtime)
            record.uid = secured.uid
            record.extra["security"] = secured.extra
            await asyncio.to_thread(runtime.write, record)
            record.pci_slots = assign_pci_slots(spec, netdev.pci_nic_ids(spec),
                                                _known_slots(devices))
            nic_ids = {netdev.nic_device_id(nic) for nic in spec.nics}
            record.romless = [str(i) for i in devices.get("romless") or () if i in nic_ids]
            nics = await netdev.prepare_nics(spec, runtime, incoming=incoming is not None,
                                             pci_slots=record.pci_slots,
                                             romless=record.romless)
            record.taps = list(nics.taps)
            record.extra["netdev"] = nics.extra
            record.command = build_command(
                spec, disk_paths, runtime, binary=str(hv(spec, "kvm_path")),
                nic_args=nics.args, security_args=secured.args, incoming=incoming,
                paused=paused, pci_slots=record.pci_slots)
            await asyncio.to_thread(runtime.write, record)
            await _run_qemu(spec.name, record.command, runtime)
            secured.started()
            await console.set_vnc_password(self.paths, spec, runtime)
            record.pid = runtime.read_pid()
            record.started = time.time()
            await asyncio.to_thread(runtime.write, record)
            if incoming is None and start_memory < maxmem(spec):
                await self._balloon(runtime, start_memory)
        except BaseException:
            await self._kill(runtime, record)
            await self._release(runtime, record)
            raise
        return record

    async def _balloon(self, runtime: InstanceRuntime, memory: int) -> None:
        """Set the balloon target to ``memory`` MiB (a start with less than ``maxmem``
        free, as Ganeti does)."""
        async with monitor(runtime.qmp_socket) as qmp:
            await qmp.execute("balloon", {"value": memory * _MIB})

    async def _check_memory(self, spec: InstanceSpec) -> int:
        """The memory ``spec`` starts with: ``maxmem`` when the node has it free, else
        what is free but at least ``minmem``; refuses when not even that fits."""
        free = (await self.node_info())["memory_free"]
        low, high = minmem(spec), maxmem(spec)
        if high > free and low > free:
            raise HypervisorError(
                f"not enough memory to start instance {spec.name}: it needs {low} MiB"
                f" (minmem; maxmem {high} MiB) but the node has only {free} MiB free")
        return int(max(low, min(high, free)))

    # -- stop ------------------------------------------------------------------------------
    async def stop(
        self,
        name: str,
        *,
        force: bool = False,
        # The guest's grace period before it is killed, not a limit on the call.
        timeout: float = 120.0,  # noqa: ASYNC109
    ) -> None:
        """Power the guest off by ACPI (pressed again every few seconds), after
        ``timeout`` ``quit`` it, then kill it; ``force`` (or ``acpi`` off) kills at once.
        Its taps, uid and runtime files are released."""
        runtime = self.runtime(name)
        async with runtime.alock(timeout + 60):
            record = runtime.read()
            if runtime.live_pid(record):
                acpi = record is None or bool(hv(record.spec, "acpi"))
                if force or not acpi:
                    await self._kill(runtime, record)
                else:
                    await self._powerdown(runtime, record, timeout)
            await self._release(runtime, record)

    async def _powerdown(self, runtime: InstanceRuntime, record: RuntimeRecord | None,
                         timeout: float) -> None:  # noqa: ASYNC109
        deadline = time.monotonic() + timeout
        pressed = 0.0
        while runtime.live_pid(record):
            now = time.monotonic()
            if now >= deadline:
                break
            if now - pressed >= POWERDOWN_INTERVAL:
                pressed = now
                state = await self._state(runtime)
                if state == "shutdown":  # -no-shutdown: the guest is off, qemu waits
                    break
                with contextlib.suppress(HypervisorError, ExecuteError):
                    async with monitor(runtime.qmp_socket, timeout=2) as qmp:
                        await qmp.execute("system_powerdown")
            await asyncio.sleep(0.1)
        await self._kill(runtime, record)

    async def _kill(self, runtime: InstanceRuntime, record: RuntimeRecord | None) -> None:
        """End qemu if it still runs: QMP ``quit``, then SIGKILL by pid."""
        pid = runtime.live_pid(record)
        if not pid:
            return
        with contextlib.suppress(HypervisorError, ExecuteError, OSError, EOFError):
            async with monitor(runtime.qmp_socket, timeout=2) as qmp:
                await qmp.execute("quit")
        if await wait_exit(pid, QUIT_GRACE):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if not await wait_exit(pid, QUIT_GRACE):
            raise HypervisorError(
                f"qemu of instance {runtime.name} (pid {pid}) did not die after SIGKILL")

    async def _release(self, runtime: InstanceRuntime, record: RuntimeRecord | None) -> None:
        """Give back the taps and uid of a qemu that is gone; remove its runtime files."""
        if record is not None:
            await netdev.release_nics(runtime, record)
            await security.release_security(runtime, record)
        await asyncio.to_thread(runtime.remove)

    async def _cleanup(self, runtime: InstanceRuntime, record: RuntimeRecord | None) -> None:
        """Release what a dead qemu left (the caller holds the instance's lock)."""
        if (record is not None or runtime.dir.exists()) and not runtime.live_pid(record):
            await self._release(runtime, record)

    async def _cleanup_if_idle(self, runtime: InstanceRuntime) -> None:
        """Clean up after a dead qemu unless another operation holds the instance or a
        start may still be under way: a record without a pid younger than
        :data:`START_TIMEOUT` is a start whose noded died while qemu was coming up, and
        that qemu is about to need its files. A reader that may not take the lock (the
        monitoring daemon as its own user) leaves the cleanup to the node daemon."""
        with contextlib.ExitStack() as stack:
            try:
                taken = stack.enter_context(runtime.locked(blocking=False))
            except HypervisorError as err:
                if isinstance(err.__cause__, PermissionError):
                    return
                raise
            if not taken:
                return
            record = runtime.read()
            if record is not None and not record.pid and _age(runtime.record_file) < START_TIMEOUT:
                return
            await self._cleanup(runtime, record)

    # -- reboot ----------------------------------------------------------------------------
    async def reboot(
        self,
        spec: InstanceSpec,
        disk_paths: list[str],
        reboot_type: str,
        *,
        timeout: float = 120.0,  # noqa: ASYNC109
    ) -> None:
        """``hard``: QMP ``system_reset``. ``soft``: as Ganeti's kvm, power the guest off
        by ACPI and start the same qemu command again (qemu's own Ctrl-Alt-Del would
        power some guests off for good). ``full``: stop, then start with ``spec``."""
        if reboot_type not in REBOOT_TYPES:
            raise ParameterError(
                f"invalid reboot type {reboot_type!r}: expected one of {', '.join(REBOOT_TYPES)}")
        runtime = self.runtime(spec.name)
        record = runtime.read()
        if not runtime.live_pid(record) or record is None:
            raise HypervisorError(
                f"cannot reboot instance {spec.name}: it is not running on this node")
        if reboot_type == "hard":
            async with monitor(runtime.qmp_socket) as qmp:
                await qmp.execute("system_reset")
            return
        if reboot_type == "soft":
            # The same machine again, its devices where they were.
            await self.stop(spec.name, timeout=timeout)
            await self.launch(record.spec, list(record.disk_paths),
                              devices=device_layout(record))
            return
        await self.stop(spec.name, timeout=timeout)
        await self.start(spec, disk_paths)

    # -- state -----------------------------------------------------------------------------
    async def _state(self, runtime: InstanceRuntime) -> str | None:
        """corral's state of the instance from ``query-status``, or ``None`` when its
        monitor does not answer."""
        try:
            async with monitor(runtime.status_socket, timeout=QUERY_TIMEOUT) as qmp:
                status = await qmp.execute("query-status")
        except (HypervisorError, ExecuteError, OSError, EOFError):
            return None
        return _corral_state(status)

    async def _info(self, name: str) -> dict[str, Any] | None:
        runtime = self.runtime(name)
        record = runtime.read()
        if not runtime.live_pid(record):
            await self._cleanup_if_idle(runtime)
            return None
        spec = record.spec if record is not None else None
        memory = record.memory if record is not None else 0
        state = "running"
        try:
            async with monitor(runtime.status_socket, timeout=QUERY_TIMEOUT) as qmp:
                state = _corral_state(await qmp.execute("query-status"))
                with contextlib.suppress(ExecuteError):
                    balloon = await qmp.execute("query-balloon")
                    if isinstance(balloon, dict) and balloon.get("actual"):
                        memory = int(balloon["actual"]) // _MIB
        except (HypervisorError, OSError, EOFError):
            if not runtime.live_pid(record):
                return None
            # Alive but its monitor is busy or not up yet (a start in progress).
            state = "paused" if record is None or not record.pid else "running"
        except ExecuteError:
            pass
        # A start whose noded died recorded no start time: qemu's pid file has it.
        if record is not None and record.started:
            started = record.started
        else:
            age = _age(runtime.pid_file)
            started = time.time() - (age if age != float("inf") else 0.0)
        return {
            "name": name,
            "state": state,
            "memory": memory,
            "vcpus": vcpus(spec) if spec is not None else 1,
            "time": max(0.0, time.time() - started),
        }

    async def list_instances(self) -> list[str]:
        """Names of the instances whose qemu runs here, sorted."""
        return sorted((await self.all_instances_info()).keys())

    async def instance_info(self, name: str) -> dict[str, Any] | None:
        """The info dict of ``name`` from its running qemu, or ``None``."""
        return await self._info(name)

    async def all_instances_info(self) -> dict[str, dict[str, Any]]:
        """Info dicts of every instance whose qemu runs here, asked concurrently."""
        names = await asyncio.to_thread(instance_names, self.paths)
        infos = await asyncio.gather(*(self._info(name) for name in names))
        return {name: info for name, info in zip(names, infos, strict=True)
                if info is not None}

    async def node_info(self) -> dict[str, Any]:
        """Memory from ``/proc/meminfo`` less what the qemus started here hold
        (what each was started with: ``maxmem``, or less with the balloon); CPUs from
        :func:`os.cpu_count`."""
        return await asyncio.to_thread(self._node_info)

    def _node_info(self) -> dict[str, Any]:
        total, available = read_meminfo(self._meminfo)
        held = 0
        for name in instance_names(self.paths):
            runtime = self.runtime(name)
            record = runtime.read()
            if record is not None and (not record.pid or runtime.live_pid(record)):
                held += record.memory
        return {
            "memory_total": total,
            "memory_free": max(0, available - held),
            "memory_hv": held,
            "cpu_count": os.cpu_count() or 1,
        }

    # -- migration (see .migration) and console: the other parts ----------------------
    async def accept_migration(
        self, spec: InstanceSpec, disk_paths: Sequence[str] = (), *, address: str = "",
        mirror_disks: bool = False, devices: Mapping[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        """Start qemu waiting for the instance's state on ``address`` (see
        :func:`.migration.accept`)."""
        return await migration.accept(self, spec, list(disk_paths), address=address,
                                      mirror_disks=mirror_disks, devices=devices)

    async def migrate(
        self, spec: InstanceSpec, target_ip: str, *, live: bool, target_name: str = "",
        nbd_port: int | None = None,
    ) -> dict[str, Any] | None:
        """Send the guest (and its mirrored disks) to the target over TLS."""
        return await migration.migrate(self, spec, target_ip, live=live,
                                       target_name=target_name, nbd_port=nbd_port)

    async def finish_migration(self, spec: InstanceSpec, *, success: bool) -> None:
        """On the target: make the received guest run, or kill the waiting qemu."""
        await migration.finish_target(self, spec, success=success)

    async def finish_migration_source(self, spec: InstanceSpec, *, success: bool) -> None:
        """On the source: quit the qemu the guest left, or resume the guest."""
        await migration.finish_source(self, spec, success=success)

    async def migration_info(self, name: str) -> dict[str, Any] | None:
        """The parameters the running qemu was started with (its runtime record)."""
        return await asyncio.to_thread(migration.started_with, self.runtime(name))

    async def migration_status(self, name: str) -> dict[str, Any]:
        """The outgoing migration's latest figures."""
        return await asyncio.to_thread(migration.read_status, self.paths, name)

    async def validate_params(self, hvparams: Mapping[str, Any]) -> None:
        """The node-side checks of kvm parameters: the ``security_domain`` user exists
        here (see :func:`.security.validate_security_params`)."""
        security.validate_security_params(hvparams)

    async def verify(self, hvparams: Mapping[str, Any]) -> str | None:
        """The qemu binary (``kvm_path``) is there and executable, and with
        ``kvm_flag=enabled`` the node has ``/dev/kvm`` readable and writable."""
        return await asyncio.to_thread(verify_node, hvparams)

    async def console(self, spec: InstanceSpec) -> dict[str, Any]:
        """Ganeti's console dict: serial (``ssh``), else VNC, else a message (see
        :mod:`.console`)."""
        return console.console_info(spec, self.runtime(spec.name))

    # -- hotplug (hotplug.py) -------------------------------------------------------------
    async def hotplug_supported(self, spec: InstanceSpec) -> None:
        """Refuse unless ``spec``'s qemu runs here and answers (see :mod:`.hotplug`)."""
        await hotplug.hotplug_supported(self.runtime(spec.name))

    async def hotplug_device(
        self,
        spec: InstanceSpec,
        action: HotplugAction,
        target: HotplugTarget,
        device: DiskSpec | NicSpec,
        disk_path: str | None = None,
    ) -> None:
        """Add, remove or change one disk or NIC of the running guest (see
        :mod:`.hotplug`)."""
        await hotplug.hotplug_device(self.runtime(spec.name), spec, action, target, device,
                                     disk_path)

    # -- the whole node --------------------------------------------------------------------
    async def stop_all(self) -> list[str]:
        """Kill every qemu of this node's kvm instances and remove their runtime files
        (for tearing down a testbed); the names of the instances that ran."""
        stopped = []
        for name in await asyncio.to_thread(instance_names, self.paths):
            runtime = self.runtime(name)
            record = runtime.read()
            if runtime.live_pid(record):
                stopped.append(name)
            await self._kill(runtime, record)
            await self._release(runtime, record)
        return stopped


def _corral_state(status: object) -> str:
    """corral's state for a ``query-status`` answer (:data:`QEMU_STATES`; any state
    not listed there counts as ``paused``)."""
    qemu_state = str(status.get("status", "")) if isinstance(status, dict) else ""
    return QEMU_STATES.get(qemu_state, "paused")


def _age(path: Path) -> float:
    """Seconds since ``path`` was last written (infinite when it is gone)."""
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return float("inf")


def _vnc_port(spec: InstanceSpec) -> int | None:
    """The TCP port qemu's VNC server listens on, if it has one."""
    bind = str(hv(spec, "vnc_bind_address") or "")
    return spec.network_port if bind and not bind.startswith("/") else None


async def _run_qemu(name: str, command: list[str], runtime: InstanceRuntime) -> None:
    """Run qemu until it has daemonized; fail quoting qemu's own error message."""
    try:
        process = await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True)
    except OSError as err:
        raise HypervisorError(f"cannot run qemu ({command[0]}) for instance {name}: {err}"
                              ) from err
    try:
        async with asyncio.timeout(START_TIMEOUT):
            out, errors = await process.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise HypervisorError(
            f"qemu for instance {name} did not start within {START_TIMEOUT:.0f} s") from None
    message = (errors or out).decode(errors="replace").strip()
    if process.returncode != 0:
        raise HypervisorError(
            f"qemu refused to start instance {name} (exit status {process.returncode}):"
            f" {message or 'no message'}")
    if not runtime.read_pid():
        raise HypervisorError(
            f"qemu for instance {name} exited without writing its pid file"
            f" {runtime.pid_file}{': ' + message if message else ''}")
