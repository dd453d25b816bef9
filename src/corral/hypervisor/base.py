"""The interface every hypervisor implements on a node.

A node daemon receives an :class:`~corral.objects.specs.InstanceSpec` from the master
with every parameter already filled in, assembles the instance's disks and hands
the node-local disk paths to the hypervisor. The hypervisor therefore never looks
anything up: what it needs to start, stop, reboot or migrate an instance is in its
arguments or in its own runtime state on this node.

Every method is a coroutine, queries included: a real hypervisor asks a monitor
socket (QMP) or a process, and noded answers many requests from one event loop, so
an implementation never blocks that loop; file or process work it cannot await
runs in a worker thread.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final, Literal

from corral.errors import HypervisorError
from corral.objects.specs import DiskSpec, InstanceSpec, NicSpec

__all__ = [
    "CONSOLE_KINDS",
    "HOTPLUG_ACTIONS",
    "HOTPLUG_NOT_SUPPORTED",
    "HOTPLUG_TARGETS",
    "INSTANCE_STATES",
    "REBOOT_TYPES",
    "ConsoleKind",
    "HotplugAction",
    "HotplugTarget",
    "Hypervisor",
    "InstanceState",
    "RebootType",
]

#: How an instance may be rebooted: ``soft`` asks the guest, ``hard`` restarts the
#: virtual machine on this node, ``full`` is a stop and a fresh start.
RebootType = Literal["soft", "hard", "full"]
REBOOT_TYPES: Final[tuple[RebootType, ...]] = ("soft", "hard", "full")

#: What a hypervisor reports about an instance it holds.
InstanceState = Literal["running", "paused", "migrating"]
INSTANCE_STATES: Final[tuple[InstanceState, ...]] = ("running", "paused", "migrating")

#: Ganeti's console kinds; a console dict carries only the keys of its kind.
ConsoleKind = Literal["msg", "ssh", "vnc", "spice"]
CONSOLE_KINDS: Final[tuple[ConsoleKind, ...]] = ("msg", "ssh", "vnc", "spice")

#: Ganeti's hotplug actions: add a device, remove it, or change it (remove and add
#: again with the new parameters).
HotplugAction = Literal["hotadd", "hotremove", "hotmod"]
HOTPLUG_ACTIONS: Final[tuple[HotplugAction, ...]] = ("hotadd", "hotremove", "hotmod")

#: What can be hot-plugged.
HotplugTarget = Literal["disk", "nic"]
HOTPLUG_TARGETS: Final[tuple[HotplugTarget, ...]] = ("disk", "nic")

#: What a hypervisor without hotplug answers (Ganeti's words).
HOTPLUG_NOT_SUPPORTED: Final = "Hotplug is not supported by this hypervisor"


class Hypervisor(ABC):
    """One hypervisor on one node.

    An instance info dict is ``{"name", "state", "memory" (MiB), "vcpus", "time"
    (seconds since it started here)}``. Errors are
    :class:`~corral.errors.HypervisorError` with a message naming the instance and
    saying what was wrong.
    """

    #: The hypervisor's name as the configuration spells it (``fake``, ``kvm``).
    name: ClassVar[str]

    @abstractmethod
    async def start(
        self, spec: InstanceSpec, disk_paths: list[str], *, paused: bool = False
    ) -> None:
        """Start ``spec`` with its disks at ``disk_paths`` (node-local, in order).

        Refuses an instance that already runs here or that does not fit in the
        node's free memory. ``paused`` starts it with its CPUs stopped.
        """

    @abstractmethod
    async def stop(
        self,
        name: str,
        *,
        force: bool = False,
        # The guest's grace period before it is killed, not a limit on the call.
        timeout: float = 120.0,  # noqa: ASYNC109
    ) -> None:
        """Stop instance ``name``; an instance that does not run here is not an error.

        ``timeout`` is how long the guest may take to shut down cleanly before it
        is killed; ``force`` kills it at once.
        """

    @abstractmethod
    async def reboot(
        self,
        spec: InstanceSpec,
        disk_paths: list[str],
        reboot_type: str,
        *,
        # The guest's grace period in a full reboot's stop, not a limit on the call.
        timeout: float = 120.0,  # noqa: ASYNC109
    ) -> None:
        """Reboot a running instance (``reboot_type`` is one of :data:`REBOOT_TYPES`).

        ``timeout`` is how long the guest may take to stop cleanly when the reboot
        stops it.
        """

    @abstractmethod
    async def list_instances(self) -> list[str]:
        """Names of the instances this hypervisor holds on this node, sorted."""

    @abstractmethod
    async def instance_info(self, name: str) -> dict[str, Any] | None:
        """The info dict of instance ``name``, or ``None`` when it is not here."""

    @abstractmethod
    async def all_instances_info(self) -> dict[str, dict[str, Any]]:
        """Info dicts of every instance held here, by name."""

    @abstractmethod
    async def node_info(self) -> dict[str, Any]:
        """The node's resources: ``memory_total``, ``memory_free`` (MiB, what an
        instance start may still use), ``memory_hv`` (MiB held by instances) and
        ``cpu_count``."""

    @abstractmethod
    async def accept_migration(
        self, spec: InstanceSpec, disk_paths: Sequence[str] = (), *, address: str = "",
        mirror_disks: bool = False, devices: Mapping[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        """Prepare this node (the target) to receive ``spec`` by migration.

        ``disk_paths`` are the instance's disks here (node-local, in order),
        ``address`` the IP the incoming migration listens on. ``mirror_disks``: the
        disks are local and empty here; the source copies their data while the guest
        runs (the answer says where: ``{"nbd_port": …}``). ``devices`` is what the
        source's ``migration_info`` said of its device layout (opaque to the master:
        each hypervisor reads its own).
        """

    @abstractmethod
    async def migrate(
        self, spec: InstanceSpec, target_ip: str, *, live: bool, target_name: str = "",
        nbd_port: int | None = None,
    ) -> dict[str, Any] | None:
        """Send running instance ``spec`` from this node (the source) to ``target_ip``.

        ``target_name`` is the name the target's certificate carries; ``nbd_port`` (when
        the target accepted with ``mirror_disks``) where it takes the disks' data. The
        answer may report figures (``total_time``/``downtime`` in ms). On success the
        instance still exists here, stopped, until :meth:`finish_migration_source`.
        """

    @abstractmethod
    async def finish_migration(self, spec: InstanceSpec, *, success: bool) -> None:
        """On the target: make a received instance run (``success``) or drop it."""

    async def validate_params(self, hvparams: Mapping[str, Any]) -> None:
        """Check filled hypervisor parameters against this node (Ganeti's
        ``ValidateParameters``: a user named in them exists here, ...), before they
        are stored; a :class:`~corral.errors.CorralError` says what is wrong. Nothing
        to check by default."""
        del hvparams

    async def verify(self, hvparams: Mapping[str, Any]) -> str | None:
        """Whether this node can run instances of this hypervisor with the cluster's
        filled parameters ``hvparams`` (``gnt-cluster verify``): None, or what is
        missing, in one line. Nothing to check by default."""
        del hvparams
        return None

    async def finish_migration_source(self, spec: InstanceSpec, *, success: bool) -> None:
        """On the source: after ``success`` drop what is left of the instance here,
        else make it run here again. Nothing is left by default."""
        del spec, success

    async def migration_info(self, name: str) -> dict[str, Any] | None:
        """What the running instance ``name`` was started with, for the target to start
        the same machine: ``{"hvparams", "beparams"}``, or ``None`` when the hypervisor
        keeps nothing of the kind (the configuration's values are used)."""
        del name
        return None

    async def migration_status(self, name: str) -> dict[str, Any]:
        """The progress of an outgoing migration of ``name``: ``{"status", …}`` with
        whatever figures the hypervisor knows (empty when it has none)."""
        del name
        return {}

    @abstractmethod
    async def console(self, spec: InstanceSpec) -> dict[str, Any]:
        """How to reach the instance's console: Ganeti's console dict
        (``{"instance", "kind", ...}`` with the keys of its kind)."""

    # Hotplug is optional: a hypervisor without it keeps these two (Ganeti's base
    # hypervisor refuses the same way; its fake hypervisor does not override them).
    async def hotplug_supported(self, spec: InstanceSpec) -> None:
        """Refuse (:class:`~corral.errors.HypervisorError`) when devices of ``spec``
        cannot be hot-plugged here now: the hypervisor cannot, or the instance does
        not run here."""
        raise HypervisorError(HOTPLUG_NOT_SUPPORTED)

    async def hotplug_device(
        self,
        spec: InstanceSpec,
        action: HotplugAction,
        target: HotplugTarget,
        device: DiskSpec | NicSpec,
        disk_path: str | None = None,
    ) -> None:
        """Add, remove or change one disk or NIC of running instance ``spec``.

        ``device`` is a :class:`~corral.objects.specs.DiskSpec` for ``disk`` and a
        :class:`~corral.objects.specs.NicSpec` for ``nic``; ``disk_path`` is where an
        added disk is on this node. Returns once the guest has accepted (or released)
        the device; otherwise raises, leaving the instance as it was.
        """
        raise HypervisorError(HOTPLUG_NOT_SUPPORTED)
