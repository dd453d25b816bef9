"""Logical units for testing and debugging: ``OP_TEST_DELAY``.

The delay runs where Ganeti runs it:

* with ``on_nodes``, on each of those nodes through its node daemon (the
  ``test_delay`` procedure, :mod:`corral.noded.debug`), all at once, while the master
  daemon sleeps too when ``on_master`` is set; a node that fails or cannot be reached
  fails the opcode, naming the node;
* otherwise in the master daemon;
* with ``interruptible``, in the master daemon only (no node is called, the locks are
  still taken): the LU opens a Unix socket in a fresh private directory, writes its
  path to the job log as a ``"delay-test"`` entry ``[path]`` and ends the delay early
  when anyone connects and sends a byte (Ganeti's contract, which its QA scripts use,
  e.g. ``echo x | socat -u stdin UNIX-CLIENT:PATH``). An interrupted delay ends the
  opcode successfully and skips the remaining repetitions. The job queue also lets
  ``CancelJob`` stop such an opcode while it runs (the job ends canceled): it has
  nothing to undo.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import time
from pathlib import Path

from corral.cmdlib.base import LockRequest, LogicalUnit
from corral.errors import OpPrereqError
from corral.locking import LockLevel
from corral.opcodes import OpTestDelay

__all__ = ["DELAY_TEST_LOG_TYPE", "RPC_MARGIN", "LUTestDelay"]

#: The job-log entry type that carries the interrupt socket's path (Ganeti's).
DELAY_TEST_LOG_TYPE = "delay-test"
#: Seconds a node's answer may take beyond the delay itself (Ganeti allows 5).
RPC_MARGIN = 5.0


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
        self.op.on_nodes = list(dict.fromkeys(names))
        self._master_name = self.master.store.master_name

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The nodes slept on (the master too when ``on_master``), unless ``no_locks``."""
        if self.op.no_locks:
            return {}
        nodes = set(self.op.on_nodes)
        if self.op.on_master:
            nodes.add(self._master_name)
        return {LockLevel.NODE: LockRequest(sorted(nodes))} if nodes else {}

    async def execute(self) -> None:
        """Sleep once, or ``repeat`` times when it is set (Ganeti's rule); an interrupted
        delay ends the repetitions."""
        if not self.op.repeat:
            await self._delay()
            return
        for iteration in range(self.op.repeat):
            self.feedback(f"Test delay iteration {iteration}/{self.op.repeat - 1}")
            if await self._delay():
                break

    async def _delay(self) -> bool:
        """One delay; whether it was interrupted."""
        if self.op.interruptible:
            return await self._interruptible_delay()
        if not self.op.on_nodes:
            await asyncio.sleep(self.op.duration)
            return False
        nodes = [self.master.store.get("node", name) for name in self.op.on_nodes]
        call = self.master.rpc.call(nodes, "test_delay", {"duration": self.op.duration},
                                    timeout=self.op.duration + RPC_MARGIN)
        if self.op.on_master:
            results, _ = await asyncio.gather(call, asyncio.sleep(self.op.duration))
        else:
            results = await call
        for name in self.op.on_nodes:
            results[name].get("the test delay")
        return False

    async def _interruptible_delay(self) -> bool:
        """Sleep until the duration passes or someone writes to the logged socket."""
        interrupted = asyncio.Event()

        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                if await reader.read(1):
                    interrupted.set()
            finally:
                writer.close()

        directory = Path(tempfile.mkdtemp(prefix="corral-delay-"))
        path = directory / "sock"
        try:
            server = await asyncio.start_unix_server(on_connect, path=str(path))
            start = time.monotonic()
            try:
                self.feedback([str(path)], DELAY_TEST_LOG_TYPE)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.op.duration):
                        await interrupted.wait()
            finally:
                server.close()
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        if interrupted.is_set():
            self.feedback(f"Interrupted, time spent waiting: {time.monotonic() - start:.1f} s")
            return True
        return False
