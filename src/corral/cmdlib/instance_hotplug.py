"""Hot-plugging disks and NICs of a running instance for ``modify --hotplug``.

Ganeti 3.0's options: ``hotplug`` asks for it and refuses the change when the primary
node cannot hot-plug (``Hotplug is not possible: ...``, an instance that does not run
included); ``hotplug_if_possible`` falls back to a change at the next start with a
warning. Ganeti hot-adds new disks and NICs, hot-removes removed ones and replaces a
modified NIC (remove, then add with the new parameters).

Where Ganeti only warns when a device could not be hot-plugged and changes the
configuration anyway, corral changes the configuration only when the guest accepted
every device: the logical unit runs the steps (:class:`HotplugRun`) after creating the
new disks and before the commit, and a failed step undoes the steps done (a hot-added
device is removed, a hot-removed one added back) before the new disks are removed
again. The result gets Ganeti's ``["disk/1", "hotplug:done"]`` entry after each
hot-plugged change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from corral.cmdlib.base import LogicalUnit
from corral.cmdlib.instance_base import RPC_QUICK, call_node
from corral.errors import CorralError, OpPrereqError, RpcError
from corral.hypervisor.base import HotplugAction, HotplugTarget
from corral.objects import Node
from corral.objects.specs import DiskSpec, InstanceSpec, NicSpec

__all__ = ["HOTPLUG_DONE", "HotplugRun", "HotplugStep", "check_hotplug", "insert_results",
           "resolve"]

#: Ganeti's result entry for a device hot-plugged with success.
HOTPLUG_DONE = "hotplug:done"

#: The RPC timeout of one step: a guest may take its time to release a device, and
#: the node gives up on it earlier (the kvm hypervisor after 30 s).
HOTPLUG_RPC_TIMEOUT = 90.0

_UNDO: dict[HotplugAction, HotplugAction] = {
    "hotadd": "hotremove", "hotremove": "hotadd", "hotmod": "hotmod"}
_VERB: dict[HotplugAction, str] = {
    "hotadd": "adding", "hotremove": "removing", "hotmod": "replacing"}


@dataclass
class HotplugStep:
    """One device to hot-plug, and where its result entry goes.

    ``uuid`` names the disk or NIC; ``spec`` is what the node is sent (its
    :class:`~corral.objects.specs.DiskSpec` or :class:`NicSpec`, filled in by
    :func:`resolve` once the new configuration is known) and ``old`` a modified
    NIC's spec before the change (what an undo puts back). ``key`` and ``position``
    place the ``hotplug:done`` entry: after the first ``position`` entries of the
    change list, named ``key``.
    """

    action: HotplugAction
    target: HotplugTarget
    uuid: str
    key: str
    position: int
    spec: DiskSpec | NicSpec | None = None
    old: NicSpec | None = None

    @property
    def what(self) -> str:
        """The device as the job log names it (``disk/1``, ``nic/0``)."""
        index = self.spec.index if self.spec is not None else "?"
        return f"{self.target}/{index}"


def resolve(steps: list[HotplugStep], old: InstanceSpec, new: InstanceSpec) -> None:
    """Give each step the spec it sends: an added or modified device's from the
    instance after the change (``new``), a removed one's from the running instance
    (``old``); a modified NIC also keeps its old spec."""
    def find(spec: InstanceSpec, target: str, uuid: str) -> DiskSpec | NicSpec:
        devices: list[DiskSpec] | list[NicSpec] = spec.disks if target == "disk" \
            else spec.nics
        found: DiskSpec | NicSpec = next(d for d in devices if d.uuid == uuid)
        return found

    for step in steps:
        if step.action == "hotremove":
            step.spec = find(old, step.target, step.uuid)
        else:
            step.spec = find(new, step.target, step.uuid)
        if step.action == "hotmod":
            found = find(old, step.target, step.uuid)
            assert isinstance(found, NicSpec)
            step.old = found


async def check_hotplug(lu: LogicalUnit[Any], node: Node, instance: dict[str, Any], *,
                        required: bool) -> bool:
    """Whether ``node`` can hot-plug devices of the (running) instance now.

    With ``required`` (``--hotplug``) a refusal is an :class:`OpPrereqError`;
    otherwise (``--hotplug-if-possible``) it is a warning in the job log and the
    change waits for the next start.
    """
    results = await lu.master.rpc.call([node], "hotplug_supported", {"instance": instance},
                                       timeout=RPC_QUICK)
    error = results[node.name].error
    if error is not None:
        reason = error.message
        if results[node.name].unreachable:
            reason = f"node {node.name} cannot be reached: {reason}"
        if required:
            raise OpPrereqError(f"Hotplug is not possible: {reason}")
        lu.feedback(f" - WARNING: {reason}")
        lu.feedback("Modification will take place without hotplugging.")
        return False
    return True


class HotplugRun:
    """The hotplug steps of one ``modify`` on the primary node, undone on failure."""

    def __init__(self, lu: LogicalUnit[Any], node: Node, instance: dict[str, Any]) -> None:
        self.lu = lu
        self.node = node
        self.instance = instance
        self.done: list[HotplugStep] = []

    async def _call(self, action: HotplugAction, step: HotplugStep, device: Any) -> None:
        args: dict[str, Any] = {"instance": self.instance, "action": action,
                                "target": step.target, step.target: device}
        await call_node(self.lu.master, self.node, "hotplug_device", args,
                        f"hotplug of {step.what} ({_VERB[action]} it)",
                        timeout=HOTPLUG_RPC_TIMEOUT)

    async def apply(self, steps: list[HotplugStep]) -> None:
        """Run ``steps`` in order; the first failure raises (undo with :meth:`undo`)."""
        for step in steps:
            self.lu.feedback(f"Hotplug: {_VERB[step.action]} {step.what} of the running "
                             "instance")
            try:
                await self._call(step.action, step, _wire(step.spec))
            except RpcError:
                # No answer: the node may have done the step. Undoing it is safe either
                # way, as the node's steps are idempotent.
                self.done.append(step)
                raise
            self.done.append(step)
            self.lu.feedback(f"Hotplug: {step.what} done")

    async def undo(self) -> None:
        """Undo the steps done, newest first; a failure is only reported."""
        while self.done:
            step = self.done.pop()
            action = _UNDO[step.action]
            device = step.old if step.action == "hotmod" else step.spec
            try:
                await self._call(action, step, _wire(device))
            except CorralError as err:
                self.lu.feedback(f" - WARNING: could not undo the hotplug of {step.what}: "
                                 f"{err.message}; the running instance differs from its "
                                 "configuration until its next start")
            else:
                self.lu.feedback(f"Hotplug: {step.what} undone")


def _wire(spec: Any) -> Any:
    return msgspec.to_builtins(spec)


def insert_results(changes: list[list[Any]], steps: list[HotplugStep]) -> list[list[Any]]:
    """``changes`` with Ganeti's ``[key, "hotplug:done"]`` after each step's change."""
    result = list(changes)
    for step in sorted(steps, key=lambda s: s.position, reverse=True):
        result.insert(step.position, [step.key, HOTPLUG_DONE])
    return result
