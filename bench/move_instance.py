"""Benchmark: an instance moved between two testbed clusters with ``move-instance``.

Starts a pair of one-node clusters sharing a domain secret (``python -m corral.testbed
pair-up``) in a temporary directory. For each compression (``none``, ``gzip``,
``zstd``) it creates an instance with a ``--disk-mib`` (default 1024) file disk on the
source (OS ``corral-ext4``), fills the disk with half random data and half zeros, and
moves it with ``move-instance --compress``. Per compression it reports:

* ``transfer_s`` / ``mb_s``: the disk's transfer alone, from the export's
  ``sending to`` job-log line to its ``bytes sent`` line, and the data rate (MB/s,
  10^6 bytes) over it;
* ``wire_bytes``: bytes of the compressed stream (the TLS payload);
* ``total_s``: the whole ``move-instance`` run (both clusters' jobs: prepare, create,
  transfer, start, removal of the source).

The moved data is checked against the source's before the next compression. The load
average at the start and at the end is reported beside the figures (the machine is
shared). The figure to compare with (the same bytes copied by hand through the same TLS
and compression pipe) is the transport benchmark's, ``bench/moves.py``.

Prints one JSON line; progress goes to stderr.
Run: ``.venv/bin/python bench/move_instance.py [--disk-mib N] [--compressions none,gzip,zstd]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import testbed
from corral.paths import Paths

BIN = Path(sys.executable).parent
_STARTED = time.perf_counter()
_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}): .*?(disk/0: (sending to|"
                   r"(\d+) bytes sent \((\d+) on the wire))")


def log(message: str) -> None:
    """Progress on stderr, after the seconds since the start."""
    print(f"[bench/move_instance {time.perf_counter() - _STARTED:6.1f}s] {message}",
          file=sys.stderr, flush=True)


def _state(directory: Path, side: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((directory / side / "testbed.json").read_text())
    return result


def _run(argv: list[str], env: dict[str, str]) -> str:
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stderr}")
    return proc.stdout


def _disk_file(state: dict[str, Any], env: dict[str, str], name: str) -> Path:
    uuid = _run([str(BIN / "gnt-instance"), "list", "--no-headers", "-o", "disk.uuids",
                 name], env).strip().split(",")[0]
    root = Paths(Path(state["nodes"][0]["root"])).root
    (found,) = root.rglob(f"*{uuid}*")
    return found


def _fill(path: Path, mib: int) -> str:
    """Half random, half zeros; the SHA-256 of the whole."""
    digest = hashlib.sha256()
    chunk = 1 << 20
    with path.open("r+b") as disk:
        for index in range(mib):
            data = os.urandom(chunk) if index < mib // 2 else bytes(chunk)
            disk.write(data)
            digest.update(data)
    return digest.hexdigest()


def _sha(path: Path, mib: int) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as disk:
        for _ in range(mib):
            digest.update(disk.read(1 << 20))
    return digest.hexdigest()


def _stamp(text: str) -> float:
    return dt.datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def move_figure(directory: Path, compression: str, mib: int) -> dict[str, Any]:
    """Move one instance with a ``mib`` MiB disk with ``compression``; its figures."""
    src, dst = _state(directory, "source"), _state(directory, "destination")
    src_env, dst_env = {**os.environ, **src["env"]}, {**os.environ, **dst["env"]}
    name = f"bench-move-{compression}"
    log(f"{compression}: creating {name} with a {mib} MiB disk")
    _run([str(BIN / "gnt-instance"), "add", "-t", "file", "--disk", f"0:size={mib}M", "-o",
          "corral-ext4+default", "-n", src["nodes"][0]["name"], "--no-ip-check",
          "--no-name-check", name], src_env)
    digest = _fill(_disk_file(src, src_env, name), mib)
    secrets = directory / "credentials"
    secrets.mkdir(mode=0o700, exist_ok=True)
    (secrets / "src").write_text(src["rapi"]["password"] + "\n")
    (secrets / "dst").write_text(dst["rapi"]["password"] + "\n")
    src_host, src_port = src["rapi"]["url"].removeprefix("https://").rsplit(":", 1)
    dst_host, dst_port = dst["rapi"]["url"].removeprefix("https://").rsplit(":", 1)
    log(f"{compression}: moving")
    started = time.perf_counter()
    proc = subprocess.run(
        [str(BIN / "move-instance"), "-v", f"--src-ca-file={src['rapi']['ca']}",
         f"--dest-ca-file={dst['rapi']['ca']}", f"--src-rapi-port={src_port}",
         f"--dest-rapi-port={dst_port}", "--src-username=admin",
         f"--src-password-file={secrets / 'src'}", f"--dest-password-file={secrets / 'dst'}",
         f"--compress={compression}", f"--dest-primary-node={dst['nodes'][0]['name']}",
         src_host, dst_host, name], capture_output=True, text=True, timeout=1800)
    total = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"move-instance failed:\n{proc.stderr}")
    sent_at = done_at = None
    data = wire = 0
    for line in proc.stderr.splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        if match.group(3) == "sending to":
            sent_at = _stamp(match.group(1))
        elif match.group(4):
            done_at = _stamp(match.group(1))
            data, wire = int(match.group(4)), int(match.group(5))
    if sent_at is None or done_at is None:
        raise SystemExit(f"no transfer lines in move-instance's log:\n{proc.stderr}")
    if _sha(_disk_file(dst, dst_env, name), mib) != digest:
        raise SystemExit(f"{compression}: the moved disk differs from the source's")
    _run([str(BIN / "gnt-instance"), "remove", "-f", name], dst_env)
    seconds = max(done_at - sent_at, 1e-3)
    return {"transfer_s": round(seconds, 2), "mb_s": round(data / seconds / 1e6, 1),
            "data_bytes": data, "wire_bytes": wire, "total_s": round(total, 2)}


def main() -> None:
    """Run the benchmark and print its JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--disk-mib", type=int, default=1024)
    parser.add_argument("--compressions", default="none,gzip,zstd")
    opts = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-move-instance-") as tmp:
        directory = Path(tmp) / "pair"
        log("starting two one-node clusters")
        testbed("pair-up", "--nodes", "1", "--dir", str(directory))
        try:
            results = {c: move_figure(directory, c, opts.disk_mib)
                       for c in opts.compressions.split(",") if c}
        finally:
            testbed("pair-down", "--dir", str(directory))
    print(json.dumps({"bench": "move_instance", "disk_mib": opts.disk_mib,
                      "data": "half random, half zeros", "moves": results,
                      "load_before": [round(x, 2) for x in load_before],
                      "load_after": [round(x, 2) for x in os.getloadavg()]}))


if __name__ == "__main__":
    main()
