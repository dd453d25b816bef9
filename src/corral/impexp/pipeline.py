"""The processes at each end of a transfer: where data comes from and goes to.

An end is an :class:`Endpoint`: a ``file`` (an export's disk image, created or
overwritten), a ``device`` (a disk that already exists: written in place, never
truncated) or a ``command`` (an OS definition's ``export`` script writing the disk to
its stdout, or its ``import`` script reading it from stdin). Files and devices are
read and written by ``dd`` (1 MiB blocks, zero blocks left as holes when writing), so
no disk I/O ever runs on the node daemon's event loop; a compression tool sits
between as one more process, joined to its neighbour by a plain pipe.

Every process runs in its own session (process group) so that stopping a transfer
stops what its processes started too; standard error goes to the transfer's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
from collections.abc import Sequence
from typing import IO, Literal

import msgspec

from corral.errors import InternalError

__all__ = ["PIPE_SIZE", "Endpoint", "Stage", "filter_stage", "kill_stages", "sink_stages",
           "source_stages"]

#: Pipe buffer asked for between stages and towards the daemon (fewer wake-ups).
PIPE_SIZE = 1 << 20

_F_SETPIPE_SZ = 1031


class Endpoint(msgspec.Struct, kw_only=True, frozen=True):
    """One end of a transfer as this node runs it."""

    kind: Literal["file", "device", "command"]
    #: The file or device (``file``, ``device``).
    path: str = ""
    #: The command and its exact environment and directory (``command``).
    argv: list[str] = []
    env: dict[str, str] = {}
    cwd: str = "/"


class Stage:
    """One running process of a transfer's pipeline."""

    def __init__(self, what: str, proc: asyncio.subprocess.Process) -> None:
        self.what = what
        self.proc = proc

    async def wait(self) -> str | None:
        """Wait for the process; ``None`` when it exited 0, else what went wrong."""
        code = await self.proc.wait()
        if code == 0:
            return None
        if code < 0:
            return f"{self.what} was killed by signal {-code}"
        return f"{self.what} failed (exit {code})"


def _grow_pipe(fd: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, _F_SETPIPE_SZ, PIPE_SIZE)


async def _spawn(what: str, argv: Sequence[str], *, stdin: int | IO[bytes] | None,
                 stdout: int | IO[bytes] | None, log: IO[bytes],
                 env: dict[str, str] | None = None, cwd: str = "/") -> Stage:
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=stdin, stdout=stdout, stderr=log, env=env, cwd=cwd,
            start_new_session=True, limit=PIPE_SIZE)
    except OSError as err:
        raise InternalError(f"cannot start {what} ({argv[0]}): {err.strerror}") from None
    for stream in (proc.stdin, proc.stdout):
        pipe = stream.transport.get_extra_info("pipe") if stream is not None and \
            hasattr(stream, "transport") else None
        if pipe is not None:
            _grow_pipe(pipe.fileno())
    return Stage(what, proc)


def _pipe() -> tuple[int, int]:
    read, write = os.pipe2(os.O_CLOEXEC)
    _grow_pipe(write)
    return read, write


async def source_stages(end: Endpoint, log: IO[bytes]) -> tuple[Stage, asyncio.StreamReader]:
    """Start the process that produces the data; it and the stream of its output."""
    if end.kind == "command":
        stage = await _spawn("export script", end.argv, stdin=asyncio.subprocess.DEVNULL,
                             stdout=asyncio.subprocess.PIPE, log=log, env=end.env,
                             cwd=end.cwd)
    else:
        stage = await _spawn("reading " + end.path,
                             ["dd", f"if={end.path}", "bs=1M", "status=none"],
                             stdin=asyncio.subprocess.DEVNULL,
                             stdout=asyncio.subprocess.PIPE, log=log)
    out = stage.proc.stdout
    if out is None:
        raise InternalError("the source of a transfer has no output pipe")
    return stage, out


async def filter_stage(what: str, argv: list[str], log: IO[bytes]) -> Stage:
    """Start a compressor: its stdin and stdout are pipes to this process, so the
    bytes on each side can be counted."""
    return await _spawn(what, argv, stdin=asyncio.subprocess.PIPE,
                        stdout=asyncio.subprocess.PIPE, log=log)


async def sink_stages(end: Endpoint, decompress: list[str] | None,
                      log: IO[bytes]) -> tuple[list[Stage], asyncio.StreamWriter]:
    """Start the processes that take the data in (after decompressing it when
    ``decompress`` is a command); the running stages and the stream to write to."""
    last: tuple[str, list[str], dict[str, str] | None, str]
    if end.kind == "command":
        last = ("import script", end.argv, end.env, end.cwd)
    else:
        # A file is written anew (dd truncates it); a device is written in place.
        conv = "sparse,fsync" if end.kind == "file" else "sparse,notrunc,fsync"
        last = ("writing " + end.path,
                ["dd", f"of={end.path}", "bs=1M", f"conv={conv}", "status=none"],
                None, "/")
    what, argv, env, cwd = last
    stages: list[Stage] = []
    try:
        if decompress is None:
            stages.append(await _spawn(what, argv, stdin=asyncio.subprocess.PIPE,
                                       stdout=log, log=log, env=env, cwd=cwd))
        else:
            read, write = _pipe()
            try:
                stages.append(await _spawn(what, argv, stdin=read, stdout=log, log=log,
                                           env=env, cwd=cwd))
                stages.append(await _spawn(f"decompressor {decompress[0]}", decompress,
                                           stdin=asyncio.subprocess.PIPE, stdout=write,
                                           log=log))
            finally:
                os.close(read)
                os.close(write)
    except BaseException:
        await kill_stages(stages)
        raise
    sink = stages[-1].proc.stdin
    if sink is None:
        raise InternalError("the first stage of a transfer has no input pipe")
    return stages, sink


async def kill_stages(stages: list[Stage]) -> None:
    """Kill every stage's process group and reap the processes."""
    for stage in stages:
        if stage.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(stage.proc.pid, signal.SIGKILL)
    for stage in stages:
        # asyncio reports the exit only once the output pipe is drained to its end.
        if stage.proc.stdout is not None:
            with contextlib.suppress(OSError, ValueError):
                while await stage.proc.stdout.read(PIPE_SIZE):
                    pass
        if stage.proc.stdin is not None:
            stage.proc.stdin.close()
        with contextlib.suppress(ProcessLookupError):
            await stage.proc.wait()


