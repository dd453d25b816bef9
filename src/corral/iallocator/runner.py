"""Running an allocator: the built-in one, or a plugin found by name on the search path.

A plugin is an executable file named as the allocator (``hail``) in one of the
search path's directories (the cluster's ``iallocator_search_path``, else
:data:`~corral.paths.Paths.DEFAULT_IALLOCATOR_SEARCH_PATH`, which holds Ganeti's
places). It runs as Ganeti runs it: the input in a temporary file whose name is its
first argument, the cluster's default allocator parameters as ``--key=value`` (or
``--key``) arguments after it, the answer on standard output. It runs in its own
process group, never blocking the event loop, and is killed when it has not answered
within the timeout.

The built-in allocator, :data:`BUILTIN` (``corral``), is the allocator engine's
``answer`` (:mod:`corral.allocator`), called in a worker thread of the master daemon
with the options hail's command line takes from the same parameters.

Directories are cluster-wide paths seen below the node's root (``Paths.node_path``),
as the OS search path is, so every node of a testbed has its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import signal
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from corral.errors import OpExecError, ParameterError
from corral.paths import Paths

__all__ = ["BUILTIN", "DEFAULT_TIMEOUT", "PluginRunner", "plugin_arguments"]

log = logging.getLogger(__name__)

#: The name of the allocator built into the master daemon.
BUILTIN: Final = "corral"
#: Seconds a plugin may take when the cluster sets no timeout of its own.
DEFAULT_TIMEOUT: Final = 300.0
#: Ganeti's prefix of a plugin that could not be run.
_RUN_FAILURE: Final = "Failure while running the iallocator script: "
#: How much of a failing plugin's output an error quotes.
_OUTPUT_LIMIT: Final = 2000


def plugin_arguments(params: Mapping[str, Any]) -> list[str]:
    """The command-line form of allocator parameters: ``--key=value``, ``--key`` for a
    value of ``None`` (Ganeti's) or ``True`` (a flag such as hail's
    ``no-capacity-checks``); ``False`` leaves the flag out."""
    return [f"--{key}" if value is None or value is True else f"--{key}={value}"
            for key, value in params.items() if value is not False]


#: The module of the allocator engine whose ``answer`` the built-in allocator is.
_ENGINE: Final = "corral.allocator.iallocator"


def _builtin_answer(params: Mapping[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The engine's ``answer`` with the options hail's command line would set from the
    allocator parameters (``no-capacity-checks``, ``ignore-soft-errors``,
    ``restrict-allocation-to``, ``static-kvm-node-memory``), so that the built-in
    allocator honours the cluster's default parameters as a plugin does."""
    try:
        engine = importlib.import_module(_ENGINE)
        answer = engine.answer
    except (ImportError, AttributeError) as err:
        raise OpExecError(
            f"{_RUN_FAILURE}the built-in allocator '{BUILTIN}' is not available in this "
            f"installation ({err}); name a plugin with -I or set the cluster's default "
            "allocators (gnt-cluster modify -I)") from None
    options = engine.AnswerOptions()
    if "no-capacity-checks" in params and params["no-capacity-checks"] is not False:
        options.capacity = False
    if "ignore-soft-errors" in params and params["ignore-soft-errors"] is not False:
        options.force = True
    if params.get("restrict-allocation-to"):
        options.restrict_to = [n for n in str(params["restrict-allocation-to"]).split(",") if n]
    if params.get("static-kvm-node-memory") not in (None, True, False):
        try:
            options.static_kvm_memory = int(params["static-kvm-node-memory"])
        except ValueError:
            raise ParameterError("allocator parameter static-kvm-node-memory must be a whole "
                                 f"number of MiB, got {params['static-kvm-node-memory']!r}"
                                 ) from None

    def run(data: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = answer(data, options)
        return result

    return run


class PluginRunner:
    """Runs allocators by name for the master daemon's logical units."""

    def __init__(self, paths: Paths | None = None,
                 builtin: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        self._paths = paths or Paths(Path("/"))
        self._builtin = builtin

    def find(self, name: str, search_path: Sequence[str]) -> Path:
        """The plugin file for ``name``.

        :raises ParameterError: for a name that is not a plain file name.
        :raises OpExecError: when no directory of the search path has it (Ganeti's words).
        """
        if not name or "/" in name or name in (".", ".."):
            raise ParameterError(f"invalid iallocator name {name!r}: give the file name of a "
                                 "plugin on the iallocator search path, or '.' for the "
                                 "cluster's default allocators")
        directories = list(search_path or Paths.DEFAULT_IALLOCATOR_SEARCH_PATH)
        for directory in directories:
            candidate = self._paths.node_path(directory) / name
            if candidate.is_file():
                return candidate
        raise OpExecError(f"{_RUN_FAILURE}iallocator module '{name}' not found in the search "
                          f"path\nsearched: {', '.join(directories)}")

    async def run(self, name: str, data: dict[str, Any], *, search_path: Sequence[str],
                  params: Mapping[str, Any], timeout: float) -> str:  # noqa: ASYNC109
        """Run allocator ``name`` on the input ``data``; its answer's text.

        :raises OpExecError: the plugin is missing, fails, or does not answer within
            ``timeout`` seconds (it is then killed).
        """
        if name == BUILTIN:
            return await self._run_builtin(data, params, timeout)
        script = await asyncio.to_thread(self.find, name, search_path)
        input_file = await asyncio.to_thread(_write_input, data)
        try:
            return await self._run_plugin(name, script, input_file, params, timeout)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(input_file)

    async def _run_plugin(self, name: str, script: Path, input_file: str,
                          params: Mapping[str, Any], timeout: float) -> str:  # noqa: ASYNC109
        """Run the plugin in a worker thread (forking the master daemon takes a tenth of
        a second and more: not on the event loop); a cancelled job stops it."""
        started: list[subprocess.Popen[bytes]] = []
        argv = [str(script), input_file, *plugin_arguments(params)]
        try:
            code, output = await asyncio.to_thread(_run_to_end, argv, timeout, started)
        except BaseException:
            for proc in started:
                _kill(proc)
            raise
        if code is None:
            raise OpExecError(f"{_RUN_FAILURE}iallocator module '{name}' did not answer within "
                              f"{timeout:g} seconds; it was stopped")
        if code == _CANNOT_RUN:
            raise OpExecError(f"{_RUN_FAILURE}iallocator module '{name}' ({script}) cannot "
                              f"be run: {output.decode(errors='replace')}")
        if code != 0:
            text = output.decode(errors="replace").strip()
            if len(text) > _OUTPUT_LIMIT:
                text = text[:_OUTPUT_LIMIT] + "..."
            why = (f"killed by signal {-code}" if code < 0 else f"exited with exit code {code}")
            raise OpExecError(f"{_RUN_FAILURE}iallocator module '{name}' failed: {why}, "
                              f"output '{text}'")
        return output.decode(errors="replace")

    async def _run_builtin(self, data: dict[str, Any], params: Mapping[str, Any],
                           timeout: float) -> str:  # noqa: ASYNC109
        builtin = self._builtin

        def work() -> bytes:
            # the engine (and numpy) load in the worker thread too: the first import
            # takes a fifth of a second
            answer = builtin or _builtin_answer(params)
            return msgspec.json.encode(answer(data))

        try:
            async with asyncio.timeout(timeout):
                result = await asyncio.to_thread(work)
        except TimeoutError:
            raise OpExecError(f"{_RUN_FAILURE}the built-in allocator '{BUILTIN}' did not "
                              f"answer within {timeout:g} seconds") from None
        except (ValueError, TypeError, KeyError, LookupError, ArithmeticError) as err:
            log.exception("the built-in allocator failed")
            raise OpExecError(f"{_RUN_FAILURE}the built-in allocator '{BUILTIN}' failed: "
                              f"{type(err).__name__}: {err}") from None
        return result.decode()


def _write_input(data: dict[str, Any]) -> str:
    """The input as JSON in a new private temporary file; its name."""
    fd, name = tempfile.mkstemp(prefix="corral-iallocator.")
    with os.fdopen(fd, "wb") as handle:
        handle.write(msgspec.json.encode(data))
    return name


#: What :func:`_run_to_end` answers for a plugin that could not be started.
_CANNOT_RUN: Final = -1000


def _run_to_end(argv: list[str], timeout: float, started: list[subprocess.Popen[bytes]]
                ) -> tuple[int | None, bytes]:
    """Run ``argv`` in a new session; its exit code and output (stdout, or stdout and
    stderr when it failed), ``None`` when it ran out of time (it is then killed)."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except OSError as err:
        return _CANNOT_RUN, (err.strerror or str(err)).encode()
    started.append(proc)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        proc.communicate()
        return None, b""
    if proc.returncode != 0:
        return proc.returncode, stdout + stderr
    return 0, stdout


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill the plugin and whatever it started (its process group)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
