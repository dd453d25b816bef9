"""What the job queue is built on: the executor that runs an opcode, the context it
gets, and the filter decision function.

They are protocols so that the queue depends on no logical unit and no filter
implementation: the master daemon passes :meth:`corral.cmdlib.Processor.execute`
and :meth:`corral.jobs.filters.FilterChain.decide`, unit tests pass small fakes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from corral.opcodes import OpCode

__all__ = ["Decider", "DecisionLike", "Executor", "OpContext"]


class OpContext(Protocol):
    """What the executor gets with each opcode."""

    job_id: int
    index: int

    @property
    def priority(self) -> int:
        """The opcode's current priority (ChangeJobPriority changes it)."""
        ...

    def feedback(self, message: Any, log_type: str = "message") -> None:
        """Append to the opcode's log (saved, then watchers are told)."""
        ...

    def running(self) -> None:
        """The opcode got its locks: waiting -> running (from then on, no cancel)."""
        ...


#: Runs ONE opcode; returns its JSON-able result or raises (CorralError -> opcode error).
Executor = Callable[[OpCode, OpContext], Awaitable[Any]]


class DecisionLike(Protocol):
    """A filter decision (:class:`corral.jobs.filters.Decision` fits)."""

    @property
    def action(self) -> str:
        """ACCEPT, PAUSE, REJECT or RATE_LIMIT."""
        ...

    @property
    def rule_uuid(self) -> str | None:
        """The deciding rule, if any."""
        ...

    @property
    def limit(self) -> int | None:
        """The RATE_LIMIT bound."""
        ...


#: ``decide(job_id, ops)`` with ops in Ganeti dict form (``FilterChain.decide`` fits).
Decider = Callable[[int, Sequence[dict[str, Any]]], DecisionLike]
