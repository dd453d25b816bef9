"""The master's Prometheus metrics (``GET /metrics`` on masterd's metrics listener).

Histograms are fed as things happen: job durations (received to end) and opcode
durations (start to end, by ``OP_ID`` and final status) when a job ends; lock waits
(by ``OP_ID``) when an opcode got its locks; node RPC latencies (by procedure, until
the last node answered) and failed node calls. Gauges are read at scrape time from
what the master daemon holds in memory: live jobs by status and first opcode, the
queue length (queued and waiting), each candidate's replication lag per stream
(configuration and job queue: serials behind the master, ``-1`` when not heard from
yet) and the configuration serial.

The text is written by prometheus_client's HTTP server in a thread of its own, so a
scrape never waits for a job; the gauges are read on the master daemon's event loop
(dictionary reads, no lock), asked for by each scrape but waited for at most
:data:`GAUGE_WAIT` seconds, else the last reading (at most a second old) is served.
The listener's address and port come from ``masterd.json`` (``metrics_bind``,
``metrics_port``; default all addresses, port :data:`DEFAULT_METRICS_PORT`; port ``0``
turns it off).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from corral.errors import DaemonError
from corral.jobs import Job
from corral.paths import Paths
from corral.utils import settings as daemon_settings
from corral.utils.settings import check_bind, check_port

if TYPE_CHECKING:
    from corral.masterd.state import MasterState

__all__ = ["CONTENT_TYPE", "DEFAULT_METRICS_PORT", "MasterMetrics", "MetricsListener",
           "MetricsSettings",
           "read_metrics_settings", "settings_file", "start_listener"]

log = logging.getLogger("corral.masterd")

#: The exposition format's content type (version 0.0.4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Where the master's metrics are served unless ``masterd.json`` says otherwise.
DEFAULT_METRICS_PORT = 1816
#: How long a scrape waits for the event loop to read the gauges (seconds).
GAUGE_WAIT = 0.05

#: Buckets (seconds) for jobs and opcodes: from instant queries to long installs. Few
#: of them: every bucket is a line per label set in every scrape.
_JOB_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900)
#: Buckets for lock waits and node RPCs.
_SHORT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30)


class MetricsSettings(msgspec.Struct, kw_only=True):
    """The metrics listener's settings (keys of ``masterd.json``; others are ignored)."""

    metrics_bind: str = "0.0.0.0"
    metrics_port: int = DEFAULT_METRICS_PORT

    def __post_init__(self) -> None:
        self.metrics_bind = check_bind(self.metrics_bind)
        check_port(self.metrics_port, allow_zero=True)


def settings_file(paths: Paths) -> Path:
    """masterd's optional settings file (the testbed writes one per node)."""
    return paths.data_dir / "masterd.json"


def read_metrics_settings(paths: Paths) -> MetricsSettings:
    """The metrics listener's settings from ``masterd.json`` over the defaults."""
    return daemon_settings.read_settings(settings_file(paths), MetricsSettings, {})


def _seconds(start: tuple[int, int] | None, end: tuple[int, int] | None) -> float | None:
    if start is None or end is None:
        return None
    return max(0.0, (end[0] - start[0]) + (end[1] - start[1]) / 1e6)


class _StateGauges(Collector):
    """The gauges read from the master daemon's memory: :meth:`read` takes them on the
    event loop (plain dictionary reads, no lock), the registry's scrape hands them out
    in whichever thread renders the text."""

    def __init__(self, state: MasterState) -> None:
        self.state = state
        self.families: list[Metric] = []
        #: The master daemon's event loop, once the listener runs.
        self.loop: asyncio.AbstractEventLoop | None = None

    def read(self) -> None:
        """Read live jobs, queue length, replication lag and configuration serial now."""
        jobs = GaugeMetricFamily("corral_jobs", "Jobs in the live queue, by status and "
                                 "first opcode", labels=["status", "opcode"])
        queued = 0
        for (status, op_id), count in sorted(self.state.queue.counts().items()):
            jobs.add_metric([status, op_id], count)
            if status in ("queued", "waiting"):
                queued += count
        length = GaugeMetricFamily("corral_job_queue_length", "Jobs queued or waiting for "
                                   "locks", value=queued)
        lag = GaugeMetricFamily("corral_replication_lag", "Serials a master candidate's "
                                "replica is behind the master (-1: not heard from yet)",
                                labels=["candidate", "stream"])
        for replicator in self.state.replicators:
            current = replicator.serial()
            stream = replicator.WHAT or type(replicator).__name__
            for candidate, serial in sorted(replicator.replica_serials().items()):
                lag.add_metric([candidate, stream], -1 if serial is None else current - serial)
        config = GaugeMetricFamily("corral_config_serial", "The configuration's serial number",
                                   value=self.state.store.serial)
        self.families = [jobs, length, lag, config]

    def collect(self) -> Iterable[Metric]:
        """The gauges: read now on the event loop if it can within :data:`GAUGE_WAIT`
        seconds (this runs in the HTTP server's thread), else as last read."""
        loop = self.loop
        if loop is not None and loop.is_running():
            done: concurrent.futures.Future[None] = concurrent.futures.Future()

            def read() -> None:
                try:
                    self.read()
                finally:
                    done.set_result(None)

            loop.call_soon_threadsafe(read)
            with contextlib.suppress(concurrent.futures.TimeoutError):
                done.result(timeout=GAUGE_WAIT)
        return list(self.families)


class MasterMetrics:
    """The master daemon's metrics registry and the hooks that feed it."""

    def __init__(self, state: MasterState) -> None:
        # the *_created series would double every series for a time nobody graphs
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=False)
        self.job_duration = Histogram(
            "corral_job_duration_seconds", "Time from a job's submission to its end",
            ["status"], buckets=_JOB_BUCKETS, registry=self.registry)
        self.opcode_duration = Histogram(
            "corral_opcode_duration_seconds", "Time from an opcode's start (locks included) "
            "to its end", ["opcode"], buckets=_JOB_BUCKETS, registry=self.registry)
        self.jobs_finished = Counter(
            "corral_jobs_finished", "Jobs that ended, by status and first opcode",
            ["status", "opcode"], registry=self.registry)
        self.lock_wait = Histogram(
            "corral_lock_wait_seconds", "Time an opcode waited for its locks", ["opcode"],
            buckets=_SHORT_BUCKETS, registry=self.registry)
        self.rpc_duration = Histogram(
            "corral_rpc_duration_seconds", "Node RPC latency until the last node answered",
            ["procedure"], buckets=_SHORT_BUCKETS, registry=self.registry)
        self.rpc_failures = Counter(
            "corral_rpc_node_failures", "Node calls that failed (unreachable node or error)",
            ["procedure"], registry=self.registry)
        self.gauges = _StateGauges(state)
        self.registry.register(self.gauges)

    def job_finished(self, job: Job) -> None:
        """A job ended: its duration and its opcodes'."""
        status = job.status
        op_id = str(job.ops[0].input.get("OP_ID", "")) if job.ops else ""
        self.jobs_finished.labels(status, op_id).inc()
        total = _seconds(job.received_timestamp, job.end_timestamp)
        if total is not None:
            self.job_duration.labels(status).observe(total)
        for op in job.ops:
            spent = _seconds(op.start_timestamp, op.end_timestamp)
            if spent is not None:
                self.opcode_duration.labels(str(op.input.get("OP_ID", ""))).observe(spent)

    def lock_waited(self, op_id: str, seconds: float) -> None:
        """An opcode got its locks after ``seconds``."""
        self.lock_wait.labels(op_id).observe(seconds)

    def rpc_done(self, procedure: str, seconds: float, failed: int) -> None:
        """A node RPC ended after ``seconds`` with ``failed`` nodes failing."""
        self.rpc_duration.labels(procedure).observe(seconds)
        if failed:
            self.rpc_failures.labels(procedure).inc(failed)

    def text(self) -> bytes:
        """Every metric in the text exposition format (the gauges as last read)."""
        return generate_latest(self.registry)

    def attach(self, state: MasterState) -> None:
        """Feed the histograms from the queue, the processor and the node RPC."""
        state.queue.finished_listeners.append(self.job_finished)
        state.context.lock_waited = self.lock_waited
        rpc: Any = state.context.rpc
        if hasattr(rpc, "observe"):
            rpc.observe = self.rpc_done


#: How often the gauges are read from the master daemon's memory anyway (seconds).
GAUGE_INTERVAL = 1.0


class MetricsListener:
    """``GET /metrics`` served by prometheus_client's HTTP server in a thread of its own,
    so that a scrape never queues behind the jobs on the event loop; the gauges are
    read on the loop every :data:`GAUGE_INTERVAL` seconds."""

    def __init__(self, metrics: MasterMetrics, server: Any, refresher: asyncio.Task[None]
                 ) -> None:
        self.metrics = metrics
        self.server = server
        self.refresher = refresher

    async def stop(self) -> None:
        """Stop serving and reading."""
        self.refresher.cancel()
        await asyncio.gather(self.refresher, return_exceptions=True)
        await asyncio.to_thread(self.server.shutdown)
        self.server.server_close()


async def _refresh(metrics: MasterMetrics) -> None:
    while True:
        metrics.gauges.read()
        await asyncio.sleep(GAUGE_INTERVAL)


async def start_listener(metrics: MasterMetrics, settings: MetricsSettings
                         ) -> MetricsListener | None:
    """Serve ``GET /metrics``; ``None`` when the port is 0 (turned off)."""
    if settings.metrics_port == 0:
        return None
    metrics.gauges.read()
    metrics.gauges.loop = asyncio.get_running_loop()
    try:
        server, _thread = await asyncio.to_thread(
            start_http_server, settings.metrics_port, settings.metrics_bind, metrics.registry)
    except OSError as err:
        raise DaemonError(f"cannot serve metrics on TCP {settings.metrics_bind}:"
                          f"{settings.metrics_port}: {err.strerror or err} (masterd.json "
                          "metrics_bind/metrics_port; port 0 turns the metrics off)") from None
    log.info("serving metrics on %s port %d", settings.metrics_bind, settings.metrics_port)
    return MetricsListener(metrics, server, asyncio.create_task(_refresh(metrics)))
