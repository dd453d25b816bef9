"""Group commit: durable writes on one writer thread, never on the event loop.

A store that must make each change durable before it is acknowledged, without
blocking its event loop for the fsync, hands its writes to a :class:`GroupWriter`.
A request joins the *pending batch* and gets that batch's future. The first request
of a batch starts a flush task, which runs on a later turn of the event loop, so
every request made meanwhile joins the same batch; while one batch is being written
on the writer thread, new requests form the next one. Many changes thus share one
transaction and one fsync, batches are written one after the other in request
order, and a batch's future resolves only once its write has returned. The future
is shared by the batch's requesters: await it through :func:`asyncio.shield`, or a
requester that is cancelled cancels it for all of them.

A write that fails fails the future of its batch, so every waiter sees the error
(nobody hangs). A store whose batches build on each other (each change was checked
against the ones before it) asks for ``chained``: the batch queued behind a failed
one is then failed as well, never written on top of a gap.

If the flush task itself is cancelled (its event loop is closing), nobody is left
waiting either: the batch being written and the one queued behind it fail with the
error ``stopped`` makes (without ``stopped``, their futures are cancelled). The
write under way may still reach the disk, since the writer thread finishes it; a
store reads what is on disk when it is opened again.

The store supplies these callables: ``new_payload`` (an empty batch), ``prepare``
(on the loop, when the batch's write starts: what to write, e.g. encoded rows and the
serial they will carry), ``write`` (on the writer thread) and, optionally,
``durable`` and ``failed`` (on the loop, after the write and before the waiters
wake, to adopt what ``prepare`` computed and announce the change, or to undo what
the store had assumed and say what went wrong) and ``stopped`` (the error above).
An error raised by ``prepare`` fails the batch like one raised by ``write``. A failed
future is marked as retrieved, so a requester that dropped it is not reported.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, ParamSpec, TypeVar

__all__ = ["GroupWriter"]

P = TypeVar("P")
W = TypeVar("W")
T = TypeVar("T")
A = ParamSpec("A")

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Batch(Generic[P]):
    payload: P
    future: asyncio.Future[None]


class GroupWriter(Generic[P, W]):
    """Batches of write requests, each written in one go on a dedicated thread."""

    def __init__(
        self, name: str, *,
        new_payload: Callable[[], P],
        prepare: Callable[[P], W],
        write: Callable[[W], None],
        durable: Callable[[P, W], None] | None = None,
        failed: Callable[[P, BaseException], BaseException] | None = None,
        chained: bool = False,
        stopped: Callable[[], BaseException] | None = None,
    ) -> None:
        self._new_payload = new_payload
        self._prepare = prepare
        self._write = write
        self._durable = durable
        self._failed = failed
        self._chained = chained
        self._stopped = stopped
        #: The writer thread; the store may run its own reads there too (see :meth:`run`).
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._pending: _Batch[P] | None = None
        self._inflight: _Batch[P] | None = None
        self._flusher: asyncio.Task[None] | None = None

    @property
    def busy(self) -> bool:
        """Whether some request is not durable yet."""
        return self._pending is not None or self._inflight is not None

    def request(self) -> tuple[P, asyncio.Future[None]]:
        """The pending batch's payload (to add the change to) and its future, which
        resolves once the batch is durable or fails with the write's error."""
        if self._pending is None:
            loop = asyncio.get_running_loop()
            self._pending = _Batch(self._new_payload(), loop.create_future())
            if self._flusher is None:
                self._flusher = loop.create_task(self._flush())
        return self._pending.payload, self._pending.future

    def barrier(self) -> asyncio.Future[None]:
        """A future resolving once every write requested so far is durable (or failed)."""
        batch = self._pending or self._inflight
        if batch is None:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        return batch.future

    async def run(self, func: Callable[A, T], *args: A.args, **kwargs: A.kwargs) -> T:
        """Run ``func`` on the writer thread (after the writes already started there)."""
        return await asyncio.get_running_loop().run_in_executor(
            self.executor, lambda: func(*args, **kwargs))

    async def drain(self) -> None:
        """Wait until nothing is pending or being written."""
        while self._flusher is not None:
            await asyncio.wait({self._flusher})

    def shutdown(self) -> None:
        """Stop the writer thread, letting a write under way finish first."""
        self.executor.shutdown(wait=True)

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._pending is not None:
                batch = self._inflight = self._pending
                self._pending = None
                try:
                    work = self._prepare(batch.payload)
                    await loop.run_in_executor(self.executor, self._write, work)
                except Exception as err:  # the writer's error goes to every requester
                    self._fail(batch, err)
                    if self._chained and self._pending is not None:
                        later, self._pending = self._pending, None
                        self._fail(later, err)
                else:
                    try:
                        if self._durable is not None:
                            self._durable(batch.payload, work)
                    except Exception:  # the write is durable: its waiters must hear so
                        log.exception("announcing a durable write failed")
                    if not batch.future.done():  # a waiter may have cancelled it
                        batch.future.set_result(None)
                self._inflight = None
        finally:
            # Only a cancellation leaves a batch here: nobody may wait for it for ever.
            self._flusher = None
            left = [b for b in (self._inflight, self._pending) if b is not None]
            self._inflight = self._pending = None
            for stranded in left:
                self._stop(stranded)

    def _stop(self, batch: _Batch[P]) -> None:
        if batch.future.done():
            return
        if self._stopped is None:
            batch.future.cancel()
            return
        batch.future.set_exception(self._stopped())
        batch.future.exception()  # marks it retrieved (see _fail)

    def _fail(self, batch: _Batch[P], err: BaseException) -> None:
        error = err
        try:
            if self._failed is not None:
                error = self._failed(batch.payload, err)
        except Exception:  # the waiters still get the write's own error
            log.exception("undoing a failed write failed")
        if not batch.future.done():  # a waiter may have cancelled it
            batch.future.set_exception(error)
            batch.future.exception()  # marks it retrieved: requesters may drop it
