"""Running logical units without daemons: a real store and lock manager, node daemons
in this process (:class:`LocalRpc`: the master's RPC over the real noded procedures)
and a stand-in for the job queue's context.

:class:`FakeRpc` (a scripted RPC that accepts any procedure and any argument) is
left only for ``test_replication.py``, which wires its handlers to the real
replication functions; new tests use :class:`LocalRpc`."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral import x509
from corral.cmdlib import AREAS, LOGICAL_UNITS, MasterContext, Processor
from corral.cmdlib.base import NodeRpc, RpcArgs
from corral.config import ConfigStore
from corral.errors import CorralError, NodeUnreachableError
from corral.locking import LockAttemptStrategy, LockManager
from corral.masterd.local_rpc import InProcessNodes, NodeCall
from corral.masterd.rpc import MasterRpc
from corral.objects import Node
from corral.opcodes import op_from_dict
from corral.paths import Paths
from corral.rpc.protocol import RpcResult

__all__ = ["FakeRpc", "JobCtx", "LocalRpc", "RpcCall", "make_processor", "run_op"]

#: The test OS definition every node can be given (see :meth:`LocalRpc.install_os`).
DUMPENV_OS = Path(__file__).resolve().parents[1] / "data" / "os" / "dumpenv"

#: A handler answers one call on one node: ``handler(node, args) -> payload`` (raise a
#: CorralError to make that node's result fail).
Handler = Callable[[Node, Mapping[str, Any]], Any]


@dataclass
class RpcCall:
    """One recorded call on one node."""

    node: str
    procedure: str
    args: Mapping[str, Any]


@dataclass
class FakeRpc:
    """A NodeRpc whose nodes answer through ``handlers`` (default: ``None`` payload)."""

    handlers: dict[str, Handler] = field(default_factory=dict)
    calls: list[RpcCall] = field(default_factory=list)
    down: set[str] = field(default_factory=set)
    """Names of nodes that do not answer."""
    joined: list[tuple[str, str]] = field(default_factory=list)

    def procedures(self, node: str | None = None) -> list[str]:
        """The procedures called so far (on ``node`` only, if given), in order."""
        return [c.procedure for c in self.calls if node is None or c.node == node]

    async def call(
        self, nodes: Sequence[Node], procedure: str, args: RpcArgs, *,
        timeout: float = 60.0,  # noqa: ASYNC109 - mirrors NodeRpc
    ) -> dict[str, RpcResult]:
        """Answer for every node through the handler of ``procedure``."""
        results: dict[str, RpcResult] = {}
        for node in nodes:
            node_args = args(node) if callable(args) else args
            self.calls.append(RpcCall(node.name, procedure, node_args))
            if node.offline or node.name in self.down:
                results[node.name] = RpcResult(
                    node.name, error=NodeUnreachableError(f"node {node.name} is down"))
                continue
            handler = self.handlers.get(procedure)
            try:
                payload = handler(node, node_args) if handler else None
            except CorralError as err:
                results[node.name] = RpcResult(node.name, error=err)
            else:
                results[node.name] = RpcResult(node.name, payload=payload)
        return results

    async def join(
        self, node: Node, token: str, *, timeout: float = 30.0,  # noqa: ASYNC109
    ) -> RpcResult:
        """Record the join; a token of ``"bad"`` is refused."""
        self.joined.append((node.name, token))
        if token == "bad":
            return RpcResult(node.name, error=CorralError("invalid join token"))
        return RpcResult(node.name, payload=None)


class _Overrides(MutableMapping[str, Handler]):
    """``LocalRpc.handlers``: a handler per procedure, called with the node object."""

    def __init__(self, rpc: LocalRpc) -> None:
        self._rpc = rpc
        self._handlers: dict[str, Handler] = {}

    def __getitem__(self, procedure: str) -> Handler:
        return self._handlers[procedure]

    def __setitem__(self, procedure: str, handler: Handler) -> None:
        self._handlers[procedure] = handler
        store = self._rpc.store

        def by_name(name: str, args: Mapping[str, Any]) -> Any:
            node = store.find("node", name) or Node(name=name, primary_ip="", group="")
            return handler(node, args)

        self._rpc.nodes.overrides[procedure] = by_name

    def __delitem__(self, procedure: str) -> None:
        del self._handlers[procedure]
        del self._rpc.nodes.overrides[procedure]

    def __iter__(self) -> Iterator[str]:
        return iter(self._handlers)

    def __len__(self) -> int:
        return len(self._handlers)


class LocalRpc(MasterRpc):
    """The master's RPC over node daemons in this process (the real procedures, each
    node in its own directory below ``root``).

    ``handlers[procedure] = handler(node, args)`` answers a procedure in place of the
    real one: keep that for what the real procedure cannot be made to do here (a
    failure on purpose, a memory picture), and say why where it is used.
    """

    def __init__(self, store: ConfigStore, root: Path) -> None:
        self.nodes = InProcessNodes(root / "nodes")
        super().__init__(store, _master_paths(root / "master"), self.nodes)
        self.handlers: MutableMapping[str, Handler] = _Overrides(self)

    @property
    def calls(self) -> list[NodeCall]:
        """Every call that reached a node, as the node received it."""
        return self.nodes.calls

    @property
    def down(self) -> set[str]:
        """Names of nodes that do not answer."""
        return self.nodes.down

    @property
    def joined(self) -> list[tuple[str, str]]:
        """Every join attempt: ``(node name, token)``."""
        return self.nodes.joins

    def procedures(self, node: str | None = None) -> list[str]:
        """The procedures called so far (on ``node`` only, if given), in order."""
        return [c.procedure for c in self.calls if node is None or c.node == node]

    def allow_storage(self, *dirs: str) -> None:
        """List the cluster-wide ``dirs`` in every node's ``file-storage-paths``, as
        an administrator does on each node before using a storage directory that is
        not one of the defaults."""
        for node in self.store.all("node"):
            path = self.nodes.paths(node.name).file_storage_paths
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(f"{d}\n" for d in dirs))

    def install_os(self, search_dir: str, name: str, *, variants: Sequence[str] = (),
                   parameters: Sequence[str] = (), nodes: Sequence[str] = ()) -> None:
        """Give ``nodes`` (default: every node of the store) the ``dumpenv`` test OS
        as ``name`` in the cluster-wide ``search_dir``, declaring ``variants`` and
        ``parameters`` (none: the files are left out)."""
        for node in nodes or [n.name for n in self.store.all("node")]:
            paths = self.nodes.paths(node)
            target = paths.node_path(search_dir) / name
            shutil.copytree(DUMPENV_OS, target, dirs_exist_ok=True)
            # Without a disk, dumpenv writes to $TMPDIR or /tmp, which OS scripts do
            # not get: keep that output in the node's own directory instead.
            script = target / "dump.sh"
            script.write_text(script.read_text().replace(
                "${TMPDIR:-/tmp}", str(paths.root)))
            for file, lines in (("variants.list", variants),
                                ("parameters.list", parameters)):
                if lines:
                    (target / file).write_text("".join(f"{line}\n" for line in lines))
                else:
                    (target / file).unlink(missing_ok=True)


def _master_paths(root: Path) -> Paths:
    """The master's places with the cluster secrets a join bundle carries."""
    paths = Paths(root)
    paths.ensure_dirs()
    ca_cert, ca_key = x509.create_ca("corral test cluster", 1)
    x509.write_public(paths.ca_cert, ca_cert)
    x509.write_private(paths.ca_key, ca_key)
    x509.write_private(paths.confd_hmac_key, x509.generate_hmac_key())
    return paths


class JobCtx:
    """Records what the processor tells the queue about one opcode."""

    def __init__(self, job_id: int = 1, priority: int = 0) -> None:
        self.job_id = job_id
        self.index = 0
        self.priority = priority
        self.log: list[Any] = []

    def feedback(self, message: Any, log_type: str = "message") -> None:
        """Keep a job log line."""
        self.log.append(message)

    def running(self) -> None:
        """The opcode got its locks."""


def make_processor(store: ConfigStore, rpc: NodeRpc) -> tuple[Processor, MasterContext]:
    """A processor over ``store`` with every area's units and query resources."""
    locks = LockManager(
        nodes=[n.name for n in store.all("node")],
        nodegroups=[g.name for g in store.all("nodegroup")],
        instances=[i.name for i in store.all("instance")],
        networks=[n.name for n in store.all("network")],
    )
    ctx = MasterContext(store=store, locks=locks, rpc=rpc)
    for area in AREAS:
        ctx.queries.update(area.query_resources(ctx))

    def fast() -> LockAttemptStrategy:
        return LockAttemptStrategy(first_timeout=0.01, attempts=2, max_pause=0)

    return Processor(ctx, LOGICAL_UNITS, strategy=fast), ctx


def run_op(processor: Processor, data: dict[str, Any], ctx: JobCtx | None = None) -> Any:
    """Run one opcode (Ganeti's dict form) to its result."""
    return asyncio.run(processor.execute(op_from_dict(data), ctx or JobCtx()))
