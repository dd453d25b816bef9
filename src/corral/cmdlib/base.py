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
6. :meth:`LogicalUnit.execute`: do it, reporting progress with :meth:`feedback`
   (with ``op.dry_run`` it stops after its checks and changes nothing).

:meth:`LogicalUnit.prepare` runs before the locks are taken (to add lock members),
:meth:`LogicalUnit.abort` after a failure in steps 5 or 6, with the locks held.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from corral.cmdlib.node_memory import NodeMemory
from corral.errors import InternalError
from corral.iallocator import PluginRunner
from corral.locking import AllSet, LockLevel, LockManager
from corral.opcodes import OpCode
from corral.rpc.protocol import RpcResult

if TYPE_CHECKING:
    from corral.config import ConfigStore
    from corral.objects import Cluster, Node
    from corral.paths import Paths

__all__ = [
    "Feedback",
    "LockRequest",
    "LogicalUnit",
    "MasterContext",
    "NodeRpc",
    "QueryResource",
    "RpcArgs",
    "SubmitJobs",
]

#: The arguments of one RPC: the same for every node, or computed per node.
RpcArgs = Mapping[str, Any] | Callable[["Node"], Mapping[str, Any]]


class NodeRpc(Protocol):
    """How logical units talk to node daemons (the master daemon supplies it)."""

    async def call(
        self, nodes: Sequence[Node], procedure: str, args: RpcArgs, *, timeout: float = 60.0,
    ) -> dict[str, RpcResult]:
        """Call ``procedure`` on every node at once; one result per node name.

        Offline nodes are not contacted: their result is a
        :class:`~corral.errors.NodeUnreachableError` saying they are offline.
        """
        ...

    async def join(self, node: Node, token: str, *, timeout: float = 30.0) -> RpcResult:
        """Hand a fresh node daemon (proved by its one-time ``token``) the cluster's
        certificates and its membership; its certificate is signed for ``node``."""
        ...


class _NoRpc:
    """The RPC of a master context built without node daemons (unit tests)."""

    async def call(
        self, nodes: Sequence[Node], procedure: str, args: RpcArgs, *, timeout: float = 60.0,
    ) -> dict[str, RpcResult]:
        raise InternalError(f"no node RPC configured (calling {procedure})")

    async def join(self, node: Node, token: str, *, timeout: float = 30.0) -> RpcResult:
        raise InternalError("no node RPC configured (joining a node)")

#: Submits jobs from a running opcode (Ganeti's ``ResultWithJobs``): each job is a list
#: of opcodes; the answer per job is ``(True, job id)`` or ``(False, why it was refused)``.
SubmitJobs = Callable[[Sequence[Sequence[OpCode]]], Awaitable[list[tuple[bool, int | str]]]]


async def _no_submit(jobs: Sequence[Sequence[OpCode]]) -> list[tuple[bool, int | str]]:
    raise InternalError("no job queue configured (submitting jobs from an opcode)")


async def _replicated(timeout: float) -> bool:
    return True


class Feedback(Protocol):
    """Writes a message to the job log of the opcode being executed.

    ``log_type`` is Ganeti's job-log entry type: ``"message"`` for text, others (such
    as ``"delay-test"``) for entries that clients read as data.
    """

    def __call__(self, message: Any, log_type: str = "message") -> None:
        """Append ``message`` to the job log."""
        ...

OpT = TypeVar("OpT", bound=OpCode)


@dataclass(frozen=True, slots=True)
class LockRequest:
    """The locks of one level an LU needs: names (or every lock) and the mode."""

    names: list[str] | AllSet
    shared: bool = False


@dataclass(slots=True)
class QueryResource:
    """A resource ``OP_QUERY`` and luxi ``Query`` can ask about."""

    #: ``await query(fields, qfilter)`` -> Ganeti's QueryResponse. Asynchronous so that
    #: resources with live fields (node memory, instance run state) can ask the nodes.
    query: Callable[[list[str], Any], Awaitable[dict[str, Any]]]
    #: ``query_fields(fields or None)`` -> Ganeti's QueryFieldsResponse.
    query_fields: Callable[[list[str] | None], dict[str, Any]]


@dataclass(slots=True)
class MasterContext:
    """What logical units may use: configuration, locks, query resources, node RPC."""

    store: ConfigStore
    locks: LockManager
    queries: dict[str, QueryResource] = field(default_factory=dict)
    rpc: NodeRpc = field(default_factory=_NoRpc)
    #: The nodes' total memory as they last told it (for checks that need a bound).
    node_memory: NodeMemory = field(default_factory=NodeMemory)
    #: Called after a committed change of the cluster object (e.g. max_running_jobs).
    cluster_changed: Callable[[Cluster], None] = lambda _cluster: None
    #: The files redistribute-config pushes besides the configuration, read on the
    #: master as ``upload_files`` entries (see :mod:`corral.noded.files`).
    ancillary_files: Callable[[], list[dict[str, Any]]] = lambda: []
    #: This (the master) node's paths, for the units that renew its secrets; ``None``
    #: where there is no node (tests).
    paths: Paths | None = None
    #: Told how long an opcode waited for its locks (``OP_ID``, seconds): the metrics.
    lock_waited: Callable[[str, float], None] = lambda _op_id, _seconds: None
    #: Submits jobs on behalf of a running opcode (``OP_CLUSTER_VERIFY``,
    #: ``OP_CLUSTER_VERIFY_DISKS``, node evacuation, multi-allocation): the job
    #: queue's ``submit_many``.
    submit_jobs: SubmitJobs = _no_submit
    #: ``await wait_replicated(timeout)``: whether every online master candidate
    #: holds the current configuration serial within ``timeout`` seconds (what
    #: ``gnt-cluster verify`` waits for before it compares the replicas).
    wait_replicated: Callable[[float], Awaitable[bool]] = _replicated
    #: Runs allocators (the built-in one or plugins on the search path).
    iallocators: PluginRunner = field(default_factory=PluginRunner)


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
        #: The lock owner of the running job (set by the processor), for LUs that add
        #: or remove lock members (a new instance, a removed node).
        self.owner: Hashable | None = None

    async def prepare(self) -> None:
        """Before any lock is taken: add lock members the LU will need (e.g. the lock
        of an instance being created, so a second create of the name waits on it)."""

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

    async def abort(self) -> None:
        """Undo what :meth:`prepare` added after a failure; the locks are still held."""
