"""Benchmark: the disk data transport (corral.impexp) between two node daemons.

Starts a 2-node testbed in a temporary directory and puts a 1 GiB file (half random,
half zeros, as issue 20 asks) in node 1's export directory. For each compression
(``none``, ``gzip-fast``, ``gzip``, ``zstd``) it transfers the file to node 2's
export directory through the node daemons' ``impexp_import``/``impexp_export``
procedures (as the master drives a disk of ``gnt-backup export``, polling the
status) and times it from the importer's start to both ends done. Beside it, in
the same run, the same data goes by hand through the same pipe: ``dd`` → the same
compressor → a blocking Python ``ssl`` client with node 1's certificate → a blocking
Python ``ssl`` server with node 2's (mutual TLS, 1 MiB reads) → the decompressor →
``dd conv=sparse`` into a file: the floor. The
ratio is corral's MB/s over the floor's (target ≥ 0.8).

Prints one JSON line: per compression MB/s (of the 1 GiB of data), bytes on the wire
and seconds for both, the ratio, and the load average at the start and the end.
Run: ``.venv/bin/python bench/moves.py [--size-mib N] [--compressions none,zstd]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import testbed
from corral.impexp import compress_argv, decompress_argv, new_magic
from corral.paths import Paths
from corral.rpc import RpcClient

COMPRESSIONS = ["none", "gzip-fast", "gzip", "zstd"]


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _make_source(path: Path, size_mib: int) -> None:
    half = size_mib // 2
    with path.open("wb") as f:
        for _ in range(half):
            f.write(os.urandom(1 << 20))
    with path.open("r+b") as f:
        f.truncate(size_mib << 20)  # the second half: zeros (a hole)


async def _corral(client: RpcClient, nodes: list[dict[str, Any]], port: int,
                  compression: str, size: int) -> dict[str, Any]:
    src = (nodes[0]["name"], nodes[0]["ip"], port)
    dst = (nodes[1]["name"], nodes[1]["ip"], port)

    async def call(target: tuple[str, str, int], procedure: str, args: dict[str, Any]) -> Any:
        result = (await client.call([target], procedure, args, timeout=600))[target[0]]
        return result.get(procedure)

    await call(dst, "export_prepare", {"export": "bench-dst", "size": 0})
    name, magic = f"bench-{compression}-{os.getpid()}", new_magic()
    started = time.perf_counter()
    answer = await call(dst, "impexp_import", {
        "name": name, "magic": magic, "compression": compression, "host": dst[1],
        "destination": {"kind": "export", "export": "bench-dst", "file": "disk0"}})
    await call(src, "impexp_export", {
        "name": name, "magic": magic, "compression": compression, "host": dst[1],
        "port": answer["port"], "expected": size,
        "source": {"kind": "export", "export": "bench-src", "file": "disk0"}})
    while True:
        [exp] = await call(src, "impexp_status", {"names": [name]})
        [imp] = await call(dst, "impexp_status", {"names": [name]})
        if exp["state"] == imp["state"] == "done":
            break
        if "failed" in (exp["state"], imp["state"]):
            raise SystemExit(f"transfer {compression} failed: {exp['error']} / {imp['error']}")
        await asyncio.sleep(0.25)  # the master polls every 2 s; this is for the timing
    seconds = time.perf_counter() - started
    await call(dst, "export_abort", {"export": "bench-dst"})
    for target in (src, dst):
        await call(target, "impexp_cleanup", {"older_than": 0})
    return {"mb_s": round(exp["bytes"] / seconds / 1e6, 1), "wire_bytes": exp["wire_bytes"],
            "seconds": round(seconds, 2), "bytes": exp["bytes"]}


_SERVER = """
import socket, ssl, sys
ip, port, cert, key, ca, wire = sys.argv[1:7]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
ctx.load_verify_locations(ca)
ctx.verify_mode = ssl.CERT_REQUIRED
with socket.create_server((ip, int(port))) as listener:
    conn, _ = listener.accept()
    with ctx.wrap_socket(conn, server_side=True) as tls:
        out, buf, total = sys.stdout.buffer, bytearray(1 << 20), 0
        while n := tls.recv_into(buf):
            out.write(buf[:n])
            total += n
open(wire, "w").write(str(total))
"""

_CLIENT = """
import socket, ssl, sys
ip, port, cert, key, ca = sys.argv[1:6]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.load_cert_chain(cert, key)
ctx.load_verify_locations(ca)
ctx.check_hostname = False
with ctx.wrap_socket(socket.create_connection((ip, int(port)))) as tls:
    data = sys.stdin.buffer
    while chunk := data.read1(1 << 20):
        tls.sendall(chunk)
    try:  # read what the server sent (session tickets): no reset to lose the tail
        tls.unwrap()
    except (ssl.SSLError, OSError):
        pass
"""


def _by_hand(source: Path, target: Path, node1: Paths, node2: Paths, ip: str,
             compression: str) -> dict[str, Any]:
    """The same data through dd | compressor | TLS (python ssl, blocking, the nodes'
    certificates, mutual) | decompressor | dd conv=sparse, by hand."""
    port = _free_port(ip)
    comp = "cat" if compression == "none" else " ".join(compress_argv(compression))
    decomp = "cat" if compression == "none" else " ".join(decompress_argv(compression))
    wire = target.with_suffix(".wire")
    py = sys.executable
    server = subprocess.Popen(
        f"{py} -c '{_SERVER}' {ip} {port} {node2.node_cert} {node2.node_key} "
        f"{node2.ca_cert} {wire} | {decomp} | dd of={target} bs=1M conv=sparse status=none",
        shell=True, executable="/bin/bash", stdout=None)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if _listening(ip, port):
            break
        time.sleep(0.05)
    started = time.perf_counter()
    subprocess.run(
        f"dd if={source} bs=1M status=none | {comp} | {py} -c '{_CLIENT}' {ip} {port} "
        f"{node1.node_cert} {node1.node_key} {node1.ca_cert}",
        shell=True, executable="/bin/bash", check=True, timeout=900)
    server.wait(timeout=900)
    seconds = time.perf_counter() - started
    size = source.stat().st_size
    if target.stat().st_size != size:
        raise SystemExit(f"by hand ({compression}): {target.stat().st_size} of {size} bytes "
                         "arrived")
    wire_bytes = int(wire.read_text())
    target.unlink()
    return {"mb_s": round(size / seconds / 1e6, 1), "wire_bytes": wire_bytes,
            "seconds": round(seconds, 2)}


def _listening(ip: str, port: int) -> bool:
    """Whether something listens on ``ip``:``port`` (read from /proc/net/tcp, so the
    single-connection server is not used up by the check)."""
    want = f"{socket.inet_aton(ip)[::-1].hex().upper()}:{port:04X}"
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == want and fields[3] == "0A":
            return True
    return False


async def _run_all(node1: Paths, node2: Paths, nodes: list[dict[str, Any]], port: int,
                   source: Path, tmp: Path, compressions: list[str]) -> dict[str, Any]:
    """Each compression through corral, then by hand, in turn."""
    client = RpcClient(node1)
    size = (await asyncio.to_thread(source.stat)).st_size
    figures: dict[str, Any] = {}
    try:
        for compression in compressions:
            corral = await _corral(client, nodes, port, compression, size)
            hand = await asyncio.to_thread(_by_hand, source, tmp / "by-hand", node1, node2,
                                           nodes[1]["ip"], compression)
            figures[compression] = {"corral": corral, "by_hand": hand,
                                    "ratio": round(corral["mb_s"] / hand["mb_s"], 2)}
    finally:
        await client.close()
    return figures


def main() -> None:
    """Run the benchmark and print one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="data size (MiB)")
    parser.add_argument("--compressions", default=",".join(COMPRESSIONS),
                        help="comma-separated compressions to time")
    args = parser.parse_args()
    out: dict[str, Any] = {"bench": "moves", "part": "transport", "size_mib": args.size_mib,
                           "load_start": _load()}
    if shutil.which("openssl") is None:
        raise SystemExit("openssl is needed for the by-hand figure")
    with tempfile.TemporaryDirectory(prefix="corral-bench-moves-") as tmp:
        directory = Path(tmp) / "tb"
        testbed("up", "--nodes", "2", "--dir", str(directory))
        try:
            state = json.loads((directory / "testbed.json").read_text())
            nodes = state["nodes"]
            node1, node2 = (Paths(Path(n["root"])) for n in nodes[:2])
            src_dir = node1.export_dir / "bench-src"
            src_dir.mkdir(parents=True)
            source = src_dir / "disk0"
            _make_source(source, args.size_mib)
            figures = asyncio.run(_run_all(node1, node2, nodes, state["ports"]["noded"],
                                           source, Path(tmp), args.compressions.split(",")))
            out["figures"] = figures
        finally:
            testbed("down", "--dir", str(directory))
    out["load_end"] = _load()
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
