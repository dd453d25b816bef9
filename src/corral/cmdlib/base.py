"""The logical unit base: how one opcode becomes checks, locks and an execution.

The processor (:mod:`corral.cmdlib.processor`) drives an LU through its life cycle:

1. :meth:`LogicalUnit.check_arguments`: the opcode's parameters make sense together;
2. :meth:`LogicalUnit.expand_names`: names become the configuration's canonical
   names (a UUID or a name is accepted wherever a name is);
3. :meth:`LogicalUnit.declare_locks`: which locks, by level, shared or not;
4. the processor acquires them (the cluster-level BGL is added: exclusive when the
   LU sets ``REQ_BGL``, shared otherwise, not at all when it clears ``USES_BGL``);
5. :meth:`LogicalUnit.check_prereq`: the prerequisites hold now that the locks
   are held;
6. :meth:`LogicalUnit.execute`: do it, reporting progress with :meth:`feedback`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from corral.locking import AllSet, LockLevel, LockManager
from corral.opcodes import OpCode

if TYPE_CHECKING:
    from corral.config import ConfigStore
    from corral.objects import Cluster

__all__ = ["Feedback", "LockRequest", "LogicalUnit", "MasterContext", "QueryResource"]

#: Writes a message to the job log of the opcode being executed.
Feedback = Callable[[str], None]

OpT = TypeVar("OpT", bound=OpCode)


@dataclass(frozen=True, slots=True)
class LockRequest:
    """The locks of one level an LU needs: names (or every lock) and the mode."""

    names: list[str] | AllSet
    shared: bool = False


@dataclass(slots=True)
class QueryResource:
    """A resource ``OP_QUERY`` and luxi ``Query`` can ask about."""

    #: ``query(fields, qfilter)`` -> Ganeti's QueryResponse.
    query: Callable[[list[str], Any], dict[str, Any]]
    #: ``query_fields(fields or None)`` -> Ganeti's QueryFieldsResponse.
    query_fields: Callable[[list[str] | None], dict[str, Any]]


@dataclass(slots=True)
class MasterContext:
    """What logical units may use: the configuration, the locks and the query resources."""

    store: ConfigStore
    locks: LockManager
    queries: dict[str, QueryResource] = field(default_factory=dict)
    #: Called after a committed change of the cluster object (e.g. max_running_jobs).
    cluster_changed: Callable[[Cluster], None] = lambda _cluster: None


class LogicalUnit(Generic[OpT]):
    """One opcode's implementation; subclasses set ``OP_ID`` and override the steps."""

    #: The opcode this LU implements.
    OP_ID: ClassVar[str] = ""
    #: Whether the LU needs the cluster lock (BGL) exclusively.
    REQ_BGL: ClassVar[bool] = False
    #: Whether the LU takes the BGL at all; read-only LUs that look at one consistent
    #: configuration snapshot (queries) need no locks.
    USES_BGL: ClassVar[bool] = True

    def __init__(self, op: OpT, master: MasterContext, feedback: Feedback) -> None:
        self.op = op
        self.master = master
        self.feedback = feedback

    def check_arguments(self) -> None:
        """Check the parameters against each other; nothing is locked yet."""

    def expand_names(self) -> None:
        """Replace names in the opcode by the canonical ones the locks use."""

    def declare_locks(self) -> dict[LockLevel, LockRequest]:
        """The locks needed below the cluster level (none by default)."""
        return {}

    def check_prereq(self) -> None:
        """Check what must hold before executing; the locks are held."""

    async def execute(self) -> Any:
        """Do the work and return the opcode's (JSON-able) result."""
        raise NotImplementedError
