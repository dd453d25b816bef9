"""Running an administrator's script (an OS definition's, an ExtStorage provider's) with
its output logged, a timeout, and its last lines at hand when it fails.

A script runs in its own process group with exactly the environment it is given, a
working directory of its own and stdin ``/dev/null``. Its standard output and error go,
interleaved, to a log file that is only ever appended to (the caller writes a header
line first), unless the caller wants the standard output back (an ExtStorage
``attach`` prints the device it made): then only the standard error goes to the log
while it runs, and the standard output is added to the log after it ended, so the
log still holds everything the run printed. Cancelling the caller, or the timeout,
kills the whole process group: a script never outlives the request that ran it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ScriptRun", "last_lines", "run_logged"]


@dataclass(frozen=True)
class ScriptRun:
    """How one run of a script ended."""

    returncode: int
    """Its exit code; negative when a signal killed it (the timeout's included)."""
    timed_out: bool
    log_offset: int
    """Where this run's output starts in the log file."""
    stdout: bytes = b""
    """Its standard output, when the caller asked for it."""

    @property
    def failure(self) -> str | None:
        """Why the run counts as failed, in a few words; None when it succeeded."""
        if self.timed_out:
            return "was killed because it ran too long"
        if self.returncode < 0:
            return f"was killed by signal {-self.returncode}"
        if self.returncode:
            return f"exited with exit code {self.returncode}"
        return None


async def run_logged(argv: Sequence[str], *, env: Mapping[str, str], cwd: Path | str,
                     log_file: Path, header: str = "", capture_stdout: bool = False,
                     # The timeout must kill the process group, not only stop waiting.
                     timeout: float = 3600) -> ScriptRun:  # noqa: ASYNC109
    """Run ``argv`` with exactly ``env`` in ``cwd``, its output appended to ``log_file``
    after ``header``; ``capture_stdout`` keeps the standard output for the caller.

    :raises OSError: the program cannot be started (missing, not executable).
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        if header:
            log.write(header.encode())
            log.flush()
        start_offset = log.tell()
        proc = await asyncio.create_subprocess_exec(
            *argv, env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if capture_stdout else log,
            stderr=log if capture_stdout else subprocess.STDOUT,
            start_new_session=True,
        )
        timed_out = False
        stdout = b""
        try:
            async with asyncio.timeout(timeout):
                if capture_stdout:
                    stdout, _ = await proc.communicate()
                returncode = await proc.wait()
        except TimeoutError:
            timed_out = True
            returncode = await _kill_group(proc)
        finally:
            if proc.returncode is None:  # cancelled: do not leave the script running
                await _kill_group(proc)
        if stdout:
            log.write(stdout if stdout.endswith(b"\n") else stdout + b"\n")
    return ScriptRun(returncode=returncode, timed_out=timed_out, log_offset=start_offset,
                     stdout=stdout)


async def _kill_group(proc: asyncio.subprocess.Process) -> int:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    return await proc.wait()


def last_lines(log_file: Path, offset: int, count: int) -> list[str]:
    """The last ``count`` non-empty lines written to ``log_file`` after ``offset``
    (blocking: a short read of the log's end)."""
    try:
        with log_file.open("rb") as log:
            size = log.seek(0, os.SEEK_END)
            # Enough for the quoted lines without reading a huge log in full.
            log.seek(max(offset, size - 64 * 1024))
            data = log.read()
    except OSError:
        return []
    lines = [line.rstrip() for line in data.decode("utf-8", "replace").splitlines()]
    return [line for line in lines if line.strip()][-count:]
