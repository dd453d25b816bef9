"""The processes at each end of a transfer: where data comes from and goes to.

An end is an :class:`Endpoint`: a ``file`` (an export's disk image, created or
overwritten), a ``device`` (a disk that already exists: written in place, never
truncated) or a ``command`` (an OS definition's ``export`` script writing the disk to
its stdout, or its ``import`` script reading it from stdin). Files and devices are
read and written by ``dd`` (1 MiB blocks, zero blocks left as holes when writing), so
no disk I/O ever runs on the node daemon's event loop; a compression tool sits
between as one more process, joined to its neighbour by a plain pipe. The daemon
holds one end of the pipeline (a pipe of :data:`PIPE_SIZE`) and moves the bytes
between it and the connection in a thread (see :mod:`corral.impexp.transfer`).

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

__all__ = ["PIPE_SIZE", "Endpoint", "Stage", "kill_stages", "sink_stages", "source_stages"]

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
    return Stage(what, proc)


def _pipe() -> tuple[int, int]:
    read, write = os.pipe2(os.O_CLOEXEC)
    _grow_pipe(write)
    return read, write


async def source_stages(end: Endpoint, compress: list[str] | None,
                        log: IO[bytes]) -> tuple[list[Stage], int]:
    """Start the processes that produce the data: a file or device is read by the
    compressor itself (or by ``dd`` without compression); a command's output goes
    to the compressor through a pipe. The stages, and the read end of the last one's
    output (the caller's to close)."""
    stages: list[Stage] = []
    stdin: int | None = None
    first: tuple[str, list[str], dict[str, str] | None, str]
    try:
        if end.kind == "command":
            if compress is None:
                first = ("export script", end.argv, end.env, end.cwd)
            else:
                read, write = _pipe()
                try:
                    stages.append(await _spawn("export script", end.argv,
                                               stdin=asyncio.subprocess.DEVNULL,
                                               stdout=write, log=log, env=end.env,
                                               cwd=end.cwd))
                finally:
                    os.close(write)
                stdin = read
                first = (f"compressor {compress[0]}", compress, None, "/")
        elif compress is not None:
            stdin = os.open(end.path, os.O_RDONLY | os.O_CLOEXEC)
            first = (f"compressor {compress[0]}", compress, None, "/")
        else:
            first = ("reading " + end.path, ["dd", f"if={end.path}", "bs=1M", "status=none"],
                     None, "/")
        what, argv, env, cwd = first
        read, write = _pipe()
        try:
            stages.append(await _spawn(what, argv, stdin=stdin if stdin is not None else
                                       asyncio.subprocess.DEVNULL, stdout=write, log=log,
                                       env=env, cwd=cwd))
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
    except BaseException:
        await kill_stages(stages)
        raise
    finally:
        if stdin is not None:
            os.close(stdin)
    return stages, read


async def sink_stages(end: Endpoint, decompress: list[str] | None,
                      log: IO[bytes]) -> tuple[list[Stage], int]:
    """Start the processes that take the data in (after decompressing it when
    ``decompress`` is a command); the stages and the write end of the first one's
    input (the caller's to close, which ends the data)."""
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
    read, write = _pipe()
    try:
        if decompress is None:
            stages.append(await _spawn(what, argv, stdin=read, stdout=log, log=log,
                                       env=env, cwd=cwd))
        else:
            middle_read, middle_write = _pipe()
            try:
                stages.append(await _spawn(what, argv, stdin=middle_read, stdout=log,
                                           log=log, env=env, cwd=cwd))
                stages.append(await _spawn(f"decompressor {decompress[0]}", decompress,
                                           stdin=read, stdout=middle_write, log=log))
            finally:
                os.close(middle_read)
                os.close(middle_write)
    except BaseException:
        os.close(write)
        await kill_stages(stages)
        raise
    finally:
        os.close(read)
    return stages, write


async def kill_stages(stages: list[Stage]) -> None:
    """Kill every stage's process group and reap the processes."""
    for stage in stages:
        if stage.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(stage.proc.pid, signal.SIGKILL)
    for stage in stages:
        with contextlib.suppress(ProcessLookupError):
            await stage.proc.wait()


