"""Logical units for testing and debugging: ``OP_TEST_DELAY``."""

from __future__ import annotations

import asyncio

from corral.cmdlib.base import LockRequest, LogicalUnit
from corral.errors import OpPrereqError
from corral.locking import LockLevel
from corral.opcodes import OpTestDelay

__all__ = ["LUTestDelay"]


class LUTestDelay(LogicalUnit[OpTestDelay]):
    """Sleep on the master and/or on nodes, ``repeat`` times if asked.

    Without ``no_locks`` the nodes slept on are locked exclusively, which makes
    the opcode a tool for testing lock contention (``gnt-debug delay``).
    """

    OP_ID = "OP_TEST_DELAY"

    def expand_names(self) -> None:
        """Turn node names (or UUIDs) into node names; unknown nodes are an error."""
        names = []
        for key in self.op.on_nodes:
            node = self.master.store.find("node", key)
            if node is None:
                raise OpPrereqError(f"node {key!r} not found (gnt-node list shows the nodes)")
            names.append(node.name)
        self.op.on_nodes = names
        self._master_name = self.master.store.master_name

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The nodes slept on (the master too when ``on_master``), unless ``no_locks``."""
        if self.op.no_locks:
            return {}
        nodes = set(self.op.on_nodes)
        if self.op.on_master:
            nodes.add(self._master_name)
        return {LockLevel.NODE: LockRequest(sorted(nodes))} if nodes else {}

    def check_prereq(self) -> None:
        """Sleeping on nodes other than the master needs their node daemons."""
        remote = [name for name in self.op.on_nodes if name != self._master_name]
        if remote:
            raise OpPrereqError(
                f"cannot sleep on {', '.join(remote)}: delays on nodes other than the "
                f"master ({self._master_name}) run through corral-noded, which this "
                "version does not start yet"
            )

    async def execute(self) -> None:
        """Sleep ``duration`` seconds once, or ``repeat`` times when it is set (Ganeti's rule)."""
        if not self.op.repeat:
            await self._delay()
            return
        for iteration in range(self.op.repeat):
            self.feedback(f"Test delay iteration {iteration}/{self.op.repeat - 1}")
            await self._delay()

    async def _delay(self) -> None:
        if self.op.on_master or self.op.on_nodes:
            await asyncio.sleep(self.op.duration)
