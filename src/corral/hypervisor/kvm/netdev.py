"""The instance's NICs on the host: tap devices and the qemu arguments that use them.

The kvm hypervisor calls :func:`prepare_nics` before qemu starts and puts the arguments
it returns on qemu's command line; it calls :func:`release_nics` once qemu is gone (a
stop, a failed start, a qemu found dead). What :func:`prepare_nics` made is recorded in
the instance's :class:`~corral.hypervisor.kvm.runtime.RuntimeRecord` (``taps``, and
``extra["netdev"]`` for anything else), which :func:`release_nics` is given back, so it
works after a noded restart too.

qemu device ids follow the contract the hotplug part relies on: the NIC's device is
:func:`nic_device_id` and its netdev ``<id>-net``.

Placeholder until the networking part lands: instances get no NICs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corral.hypervisor.kvm.runtime import InstanceRuntime, RuntimeRecord
from corral.objects.specs import InstanceSpec, NicSpec

__all__ = ["NicSetup", "nic_device_id", "prepare_nics", "release_nics"]


@dataclass
class NicSetup:
    """What :func:`prepare_nics` made for one start."""

    args: list[str] = field(default_factory=list)
    """qemu arguments (``-netdev``/``-device`` pairs)."""
    taps: list[str] = field(default_factory=list)
    """Tap devices created, in NIC order (recorded, released at stop)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Anything else to keep in the runtime record's ``extra["netdev"]``."""


def nic_device_id(nic: NicSpec) -> str:
    """qemu's device id of ``nic``: ``nic-`` and the first 8 characters of its uuid
    (``nic-<index>`` without one)."""
    return f"nic-{nic.uuid[:8]}" if nic.uuid else f"nic-{nic.index}"


async def prepare_nics(spec: InstanceSpec, runtime: InstanceRuntime, *,
                       incoming: bool = False) -> NicSetup:
    """Create the host side of ``spec``'s NICs; the qemu arguments for them.

    ``incoming``: qemu is started to receive a migration. On failure it undoes what it
    did and raises :class:`~corral.errors.HypervisorError`.
    """
    del spec, runtime, incoming
    return NicSetup()


async def release_nics(runtime: InstanceRuntime, record: RuntimeRecord) -> None:
    """Remove what :func:`prepare_nics` made (``record.taps``, ``record.extra``); never
    fails for what is already gone."""
    del runtime, record
