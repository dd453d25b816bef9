"""Benchmark: queries per second and latency of one corral-confd process.

Starts a real ``corral-confd`` on 127.0.0.1 in a temporary directory (a small
configuration made with ``ConfigStore.create`` and a fresh HMAC key), then runs 64
concurrent clients spread over several sender processes. Each client is one UDP
socket in a closed loop: it sends a query, waits for its answer, sends the next.
The packets are signed before the clock starts (half ping, half cluster-master,
each with its own rsalt), so the senders spend their time sending and receiving,
not signing. A client whose answer is lost resends after 0.2 s (counted as lost).

Queries per second are the answers received during the measured window divided by
its length; p50/p99 are the send->answer latencies of those answers. The first
second is a warm-up and not counted.

Prints one JSON line. Run: ``.venv/bin/python bench/confd.py [--clients 64]
[--senders 2] [--seconds 5]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import select
import socket
import sys
import tempfile
import time
import uuid
from array import array
from pathlib import Path
from typing import Any

from _common import percentile
from corral.confd.protocol import PROTOCOL_VERSION, QueryType, Request, encode_request
from corral.config import ConfigStore
from corral.objects import NIC, Cluster, Instance, Node, NodeGroup
from corral.paths import ROOT_ENV, Paths
from corral.utils.process import start_daemon, stop_daemon
from corral.x509 import generate_hmac_key, write_private

HOST = "127.0.0.1"
RESEND_AFTER = 0.2
PACKETS_PER_CLIENT = 512


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
    return port


def _make_cluster(paths: Paths) -> None:
    paths.ensure_dirs()
    group = NodeGroup(name="default")
    nodes = [Node(name=f"node{i}", primary_ip=f"192.0.2.{i}", group=group.uuid)
             for i in range(1, 6)]
    cluster = Cluster(name="bench.example.com", master_node=nodes[0].uuid)
    store = ConfigStore.create(paths.config_db, cluster, group, nodes[0])
    with store.transaction() as txn:
        for node in nodes[1:]:
            txn.add(node)
        for i in range(50):
            txn.add(Instance(name=f"inst{i}", primary_node=nodes[i % 5].uuid,
                             nics=[NIC(ip=f"198.51.100.{i + 1}", mac=f"aa:00:00:00:00:{i:02x}")]))
    store.close()
    write_private(paths.confd_hmac_key, generate_hmac_key())


def _packets(key: bytes, count: int) -> list[bytes]:
    now = time.time()
    kinds = (QueryType.PING, QueryType.CLUSTER_MASTER)
    return [encode_request(key, Request(PROTOCOL_VERSION, kinds[i % 2], str(uuid.uuid4())), now)
            for i in range(count)]


def _sender(key: bytes, port: int, clients: int, start_at: float, warmup: float,
            seconds: float, out: Any) -> None:
    """One sender process: ``clients`` closed-loop sockets until the window ends."""
    socks = []
    for _ in range(clients):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.connect((HOST, port))
        sock.setblocking(False)
        socks.append(sock)
    packets = [_packets(key, PACKETS_PER_CLIENT) for _ in range(clients)]
    by_fd = {sock.fileno(): i for i, sock in enumerate(socks)}
    sent_at = [0.0] * clients
    next_packet = [0] * clients
    latencies = array("d")
    lost = 0
    poller = select.epoll()
    for sock in socks:
        poller.register(sock.fileno(), select.EPOLLIN)
    while time.time() < start_at:
        time.sleep(0.001)
    clock = time.perf_counter
    begin = clock()
    measure_from = begin + warmup
    end = measure_from + seconds

    def send(i: int) -> None:
        n = next_packet[i]
        next_packet[i] = (n + 1) % PACKETS_PER_CLIENT
        sent_at[i] = clock()
        with contextlib.suppress(BlockingIOError):
            socks[i].send(packets[i][n])

    for i in range(clients):
        send(i)
    last_check = begin
    while True:
        now = clock()
        if now >= end:
            break
        for fd, _ in poller.poll(0.05):
            i = by_fd[fd]
            sock = socks[i]
            try:
                while True:
                    sock.recv(65536)
            except BlockingIOError:
                pass
            now = clock()
            if measure_from <= sent_at[i] and now < end:
                latencies.append(now - sent_at[i])
            send(i)
        if now - last_check > RESEND_AFTER / 2:
            last_check = now
            for i in range(clients):
                if now - sent_at[i] > RESEND_AFTER:
                    lost += 1
                    send(i)
    out.send((latencies.tobytes(), lost))
    out.close()



def run(clients: int, senders: int, seconds: float) -> dict[str, Any]:
    """Start confd, drive it, stop it; the figures."""
    with tempfile.TemporaryDirectory(prefix="corral-bench-confd-") as tmp:
        paths = Paths(Path(tmp))
        _make_cluster(paths)
        key = paths.confd_hmac_key.read_bytes()
        port = _free_port()
        env = {**os.environ, ROOT_ENV: tmp}
        start_daemon("corral-confd", [sys.executable, "-m", "corral.confd", "--bind", HOST,
                                      "--port", str(port)],
                     log_file=paths.log_file("confd"), env=env)
        try:
            ctx = multiprocessing.get_context("fork")
            start_at = time.time() + 1.0
            warmup = 1.0
            shares = [clients // senders + (1 if i < clients % senders else 0)
                      for i in range(senders)]
            pipes = []
            procs = []
            for share in shares:
                receiver, sender = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_sender,
                                   args=(key, port, share, start_at, warmup, seconds, sender))
                proc.start()
                sender.close()
                pipes.append(receiver)
                procs.append(proc)
            latencies: list[float] = []
            lost = 0
            for receiver in pipes:
                data, lost_here = receiver.recv()
                values = array("d")
                values.frombytes(data)
                latencies.extend(values)
                lost += lost_here
            for proc in procs:
                proc.join()
        finally:
            stop_daemon(paths.pid_file("confd"))
    return {
        "bench": "confd",
        "clients": clients,
        "senders": senders,
        "seconds": seconds,
        "queries": len(latencies),
        "queries_per_s": round(len(latencies) / seconds),
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 2) if latencies else None,
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2) if latencies else None,
        "lost": lost,
        "cpus": os.cpu_count(),
        "target_queries_per_s": 20000,
        "target_p99_ms": 5,
    }


def main() -> None:
    """Parse arguments, run, print one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--senders", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    print(json.dumps(run(args.clients, args.senders, args.seconds)))


if __name__ == "__main__":
    main()
