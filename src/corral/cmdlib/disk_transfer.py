"""The master's side of a disk transfer between two node daemons (:mod:`corral.impexp`).

:func:`transfer_disk` starts an importer on the receiving node, then an exporter on
the sending node pointed at it, with a fresh magic both must present, and follows
the two until both are done, writing the progress (bytes, rate, ETA) to the job log
every few seconds. Whatever fails, both ends are stopped (the importer removes what
it wrote) and the error says how many bytes had been sent.

The pieces (:func:`start_importer`, :func:`start_exporter`, :func:`follow`,
:func:`abort`) are public so that a transfer between clusters, whose importer the
other cluster starts, can drive its half with the same code.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from corral.cmdlib.base import MasterContext
from corral.cmdlib.instance_base import call_node
from corral.errors import CorralError, OpExecError
from corral.impexp import new_magic
from corral.objects import Node

__all__ = ["POLL_INTERVAL", "TransferEnds", "abort", "follow", "progress_text",
           "start_exporter", "start_importer", "transfer_disk"]

#: How often the master asks for progress (seconds).
POLL_INTERVAL = 2.0

_MiB = 1 << 20


@dataclass(frozen=True)
class TransferEnds:
    """What moves where: ``source``/``destination`` are
    :class:`corral.rpc.args.TransferEnd` objects as builtins, on ``source_node`` and
    ``destination_node``; ``tls`` (cert, key, ca PEM) for a transfer with its own
    certificates."""

    source_node: Node
    source: Mapping[str, Any]
    destination_node: Node
    destination: Mapping[str, Any]
    compression: str = "none"
    expected: int | None = None
    bandwidth: float = 0.0
    tls: Mapping[str, str] | None = None
    name: str = field(default_factory=lambda: f"t-{uuid.uuid4().hex[:16]}")
    magic: str = field(default_factory=new_magic)


def progress_text(label: str, status: Mapping[str, Any]) -> str:
    """One job-log line for a running transfer."""
    done = int(status.get("bytes") or 0)
    expected = status.get("expected")
    parts = [f"{done / _MiB:.1f} MiB"]
    if expected:
        parts[0] += f" of {expected / _MiB:.1f} MiB ({100 * done / expected:.0f}%)"
    rate = float(status.get("rate") or 0)
    if rate:
        parts.append(f"{rate / _MiB:.1f} MiB/s")
    if status.get("eta") is not None:
        parts.append(f"ETA {float(status['eta']):.0f} s")
    return f"{label}: sent {', '.join(parts)}"


async def start_importer(master: MasterContext, ends: TransferEnds, what: str,
                         accept_timeout: float = 300.0) -> int:
    """Start the importer; the port it listens on."""
    node = ends.destination_node
    args: dict[str, Any] = {"name": ends.name, "magic": ends.magic,
                            "compression": ends.compression,
                            "destination": dict(ends.destination), "host": node.primary_ip,
                            "accept_timeout": accept_timeout}
    if ends.tls is not None:
        args["tls"] = dict(ends.tls)
    answer = await call_node(master, node, "impexp_import", args, what)
    return int(answer["port"])


async def start_exporter(master: MasterContext, ends: TransferEnds, host: str, port: int,
                         what: str) -> None:
    """Start the exporter towards the importer at ``host``:``port``."""
    args: dict[str, Any] = {"name": ends.name, "magic": ends.magic,
                            "compression": ends.compression, "source": dict(ends.source),
                            "host": host, "port": port, "bandwidth": ends.bandwidth,
                            "expected": ends.expected}
    if ends.tls is not None:
        args["tls"] = dict(ends.tls)
    await call_node(master, ends.source_node, "impexp_export", args, what)


async def _status(master: MasterContext, node: Node, name: str, what: str) -> dict[str, Any]:
    answer = await call_node(master, node, "impexp_status", {"names": [name]}, what)
    return dict(answer[0])


async def follow(master: MasterContext, feedback: Callable[[str], None],
                 sides: list[Node], name: str, label: str) -> dict[str, Any]:
    """Poll the transfer ``name`` on ``sides`` (exporter first) until every side is
    done; the exporter's last status. A failed side raises :class:`OpExecError`."""
    last_report = time.monotonic()
    while True:
        statuses = [await _status(master, node, name, f"{label}: progress") for node in sides]
        failed = [(node, s) for node, s in zip(sides, statuses, strict=True)
                  if s.get("state") in ("failed", "aborted", "unknown", "stale")]
        if failed:
            sent = int(statuses[0].get("bytes") or 0)
            reasons = "; ".join(f"node {node.name}: {s.get('error') or s.get('state')}"
                                for node, s in failed)
            raise OpExecError(f"{label}: transfer failed after {sent} bytes: {reasons}")
        if all(s.get("state") == "done" for s in statuses):
            return statuses[0]
        if time.monotonic() - last_report >= POLL_INTERVAL * 2.5 and \
                statuses[0].get("state") == "running":
            feedback(progress_text(label, statuses[0]))
            last_report = time.monotonic()
        await asyncio.sleep(POLL_INTERVAL if statuses[0].get("state") == "running" else 0.2)


async def abort(master: MasterContext, sides: list[Node], name: str) -> None:
    """Stop the transfer ``name`` on every side (errors are ignored: a side that is
    gone has nothing left to stop, and the watcher cleans stale ones)."""
    for node in sides:
        with contextlib.suppress(CorralError):
            await call_node(master, node, "impexp_abort", {"names": [name]},
                            "stopping a transfer")


async def transfer_disk(master: MasterContext, feedback: Callable[[str], None],
                        ends: TransferEnds, label: str) -> dict[str, Any]:
    """Move one disk's data as ``ends`` says; the exporter's final status (``bytes``,
    ``wire_bytes``, ``rate``). On any failure both ends are stopped first."""
    sides = [ends.source_node, ends.destination_node]
    started = time.monotonic()
    try:
        port = await start_importer(master, ends, f"{label}: starting the importer")
        feedback(f"{label} is now listening on node {ends.destination_node.name} port "
                 f"{port}, starting export on node {ends.source_node.name}")
        await start_exporter(master, ends, ends.destination_node.primary_ip, port,
                             f"{label}: starting the exporter")
        final = await follow(master, feedback, sides, ends.name, label)
    except BaseException:
        await asyncio.shield(abort(master, sides, ends.name))
        raise
    seconds = time.monotonic() - started
    feedback(f"{label}: {int(final.get('bytes') or 0)} bytes sent "
             f"({int(final.get('wire_bytes') or 0)} on the wire, "
             f"{ends.compression}) in {seconds:.1f} s")
    return final
