"""Hypervisors on a node: the interface and the implementations (node-side layer).

:func:`get_hypervisor` gives the implementation for a name the configuration uses;
noded asks for one per procedure call, so an implementation keeps what must be shared
between calls per node (the fake hypervisor: its state files and a lock per state
directory). Every operation is a coroutine (see :mod:`corral.hypervisor.base`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from corral.errors import HypervisorError
from corral.hypervisor.base import Hypervisor
from corral.hypervisor.fake import FakeHypervisor
from corral.hypervisor.kvm import KvmHypervisor
from corral.paths import Paths

__all__ = ["HYPERVISOR_NAMES", "Hypervisor", "get_hypervisor"]

_IMPLEMENTATIONS: Final[dict[str, Callable[[Paths], Hypervisor]]] = {
    FakeHypervisor.name: FakeHypervisor,
    KvmHypervisor.name: KvmHypervisor,
}

#: The hypervisors this node can run, by configuration name.
HYPERVISOR_NAMES: Final[tuple[str, ...]] = tuple(_IMPLEMENTATIONS)


def get_hypervisor(name: str, paths: Paths) -> Hypervisor:
    """The hypervisor called ``name`` working in ``paths``' state directory."""
    try:
        implementation = _IMPLEMENTATIONS[name]
    except KeyError:
        raise HypervisorError(
            f"unknown hypervisor {name!r}: this node implements {', '.join(HYPERVISOR_NAMES)}"
        ) from None
    return implementation(paths)
