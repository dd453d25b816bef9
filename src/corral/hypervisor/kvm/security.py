"""Who qemu runs as (design 2.2): ``security_model`` none, user or pool, and ``use_chroot``.

The kvm hypervisor calls :func:`prepare_security` before qemu starts and puts the
arguments it returns (``-runas``, ``-chroot`` …) on qemu's command line; it calls
:func:`release_security` once qemu is gone (a stop, a failed start, a qemu found dead),
with the runtime record that holds ``uid`` and ``extra["security"]``.

Placeholder until the security part lands: ``security_model`` ``none``, no chroot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corral.hypervisor.kvm.runtime import InstanceRuntime, RuntimeRecord
from corral.objects.specs import InstanceSpec

__all__ = ["SecuritySetup", "prepare_security", "release_security"]


@dataclass
class SecuritySetup:
    """What :func:`prepare_security` decided for one start."""

    args: list[str] = field(default_factory=list)
    """Extra qemu arguments (``-runas USER``, ``-chroot DIR``)."""
    uid: int | None = None
    """The uid qemu will run as (recorded; ``None``: root)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Anything else to keep in the runtime record's ``extra["security"]``."""


async def prepare_security(spec: InstanceSpec, runtime: InstanceRuntime) -> SecuritySetup:
    """Choose the user (and chroot) qemu runs with for ``spec``; on failure undo what it
    took and raise :class:`~corral.errors.HypervisorError`."""
    del spec, runtime
    return SecuritySetup()


async def release_security(runtime: InstanceRuntime, record: RuntimeRecord) -> None:
    """Give back what :func:`prepare_security` took (a pool uid, a chroot directory);
    never fails for what is already gone."""
    del runtime, record
