"""What ``gnt-cluster command`` and ``gnt-cluster copyfile`` do on each node, through
the node daemon instead of SSH.

``run_command`` runs one shell command line as the node daemon's user (root on a
real node), with the daemon's environment, standard input from ``/dev/null`` and the
node's root directory as working directory, and answers its exit code (128 plus the
signal's number when a signal ended it, as shells report it) and its output: standard
output and standard error, each cut after :data:`OUTPUT_LIMIT` bytes.

``write_file_part`` writes a file the master sends, at the same absolute path below
this node's root, in parts: each part appends to a hidden temporary file beside the
target; the last one gives it its mode and modification time and renames it over the
target, so a reader never sees half a copy. These procedures change the node: only
the master's certificate may call them (like the root SSH key Ganeti uses for them).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import signal
from pathlib import Path, PurePosixPath

from corral.errors import ParameterError, RpcError
from corral.paths import Paths
from corral.rpc.args import RunCommandArgs, WriteFilePartArgs

__all__ = ["OUTPUT_LIMIT", "run_command", "write_file_part"]

#: The most bytes of standard output (and of standard error) a command answers.
OUTPUT_LIMIT = 8 << 20

_TRANSFER_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


async def _read_capped(stream: asyncio.StreamReader) -> tuple[bytes, bool]:
    """Everything ``stream`` gives, keeping the first :data:`OUTPUT_LIMIT` bytes; and
    whether some was cut (the rest is read and dropped, so the command never blocks
    on a full pipe)."""
    kept = bytearray()
    cut = False
    while chunk := await stream.read(1 << 16):
        room = OUTPUT_LIMIT - len(kept)
        if len(chunk) > room:
            cut = True
        kept += chunk[:max(room, 0)]
    return bytes(kept), cut


def _text(data: bytes, cut: bool) -> str:
    text = data.decode("utf-8", errors="replace")
    if cut:
        text += f"\n[output cut after {OUTPUT_LIMIT} bytes]\n"
    return text


async def run_command(paths: Paths, args: RunCommandArgs) -> dict[str, object]:
    """Run ``args.command`` with ``/bin/sh -c``; its exit code and output. A command
    still running after ``args.timeout`` seconds is killed (exit code 128 + 9)."""
    cwd = paths.root if paths.root.is_dir() else Path("/")
    try:
        process = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", args.command, cwd=cwd, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True)
    except OSError as err:
        raise RpcError(f"cannot run the command: {err}") from None
    assert process.stdout is not None and process.stderr is not None
    readers = asyncio.gather(_read_capped(process.stdout), _read_capped(process.stderr))
    timed_out = False
    try:
        async with asyncio.timeout(args.timeout):
            await process.wait()
    except TimeoutError:
        timed_out = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
    (out, out_cut), (errors, err_cut) = await readers
    code = process.returncode if process.returncode is not None else 255
    if code < 0:
        code = 128 - code  # killed by a signal: what a shell reports
    stderr = _text(errors, err_cut)
    if timed_out:
        stderr += f"[killed after {args.timeout:g} s]\n"
    return {"exit_code": code, "stdout": _text(out, out_cut), "stderr": stderr}


def _target(paths: Paths, path: str) -> Path:
    pure = PurePosixPath(path)
    if not pure.is_absolute() or ".." in pure.parts or pure == PurePosixPath("/"):
        raise ParameterError(f"procedure write_file_part: {path!r} is not an absolute file "
                             "path without '..'")
    return paths.node_path(path)


def _write_part(paths: Paths, args: WriteFilePartArgs) -> int:
    target = _target(paths, args.path)
    if not _TRANSFER_ID.match(args.transfer):
        raise ParameterError(f"procedure write_file_part: transfer id {args.transfer!r} "
                             "must be 1 to 64 letters, digits, '-' or '_'")
    if target.is_dir():
        raise ParameterError(f"{args.path} is a directory on this node; copyfile copies "
                             "files only")
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.parent / f".{target.name}.corral-copy-{args.transfer}"
    data = base64.b64decode(args.data, validate=True)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if args.offset == 0 else 0)
    fd = os.open(temporary, flags, 0o600)
    try:
        if os.fstat(fd).st_size != args.offset:
            raise ParameterError(f"procedure write_file_part: part at offset {args.offset} "
                                 f"of {args.path} does not follow the parts received "
                                 f"({os.fstat(fd).st_size} bytes); send the file again")
        os.pwrite(fd, data, args.offset)
        if args.last:
            os.fchmod(fd, args.mode & 0o7777)
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
        raise
    os.close(fd)
    if args.last:
        if args.mtime is not None:
            os.utime(temporary, (args.mtime, args.mtime))
        os.replace(temporary, target)
    return args.offset + len(data)


async def write_file_part(paths: Paths, args: WriteFilePartArgs) -> int:
    """Write one part of a copied file (see the module doc); the bytes written so far."""
    try:
        return await asyncio.to_thread(_write_part, paths, args)
    except (OSError, ValueError) as err:
        if isinstance(err, ParameterError):
            raise
        raise RpcError(f"cannot write {args.path}: {err}") from None
