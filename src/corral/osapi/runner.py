"""Running an OS definition's scripts and checking OS parameters with ``verify``.

A script runs in its own process group with exactly the environment it is given, its
working directory the OS directory and stdin ``/dev/null``. Its standard output and error
go, interleaved, to a log file that is only ever appended to (one header line per run),
so the log of an instance keeps the history of its installs and renames. When a script
fails, the error quotes the last lines this run wrote, because that is where OS scripts
explain themselves.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from corral.errors import OsError, OsScriptError
from corral.osapi.definition import OsDefinition
from corral.osapi.environment import core_env
from corral.utils.scripts import last_lines, run_logged

__all__ = ["QUOTED_LINES", "run_script", "verify_params"]

QUOTED_LINES = 10
"""How many of a failed script's last output lines its error quotes."""


async def run_script(
    os_def: OsDefinition,
    script: str,
    env: Mapping[str, str],
    log_file: Path,
    *,
    args: Sequence[str] = (),
    # The timeout must kill the script's process group, not just stop waiting for it.
    timeout: float = 3600,  # noqa: ASYNC109
) -> None:
    """Run ``script`` of ``os_def`` with exactly ``env``; output is appended to ``log_file``.

    Raises :class:`OsError` when the OS is invalid or the script cannot be started, and
    :class:`OsScriptError` quoting the last output lines when it exits non-zero, is
    killed by a signal or runs longer than ``timeout`` seconds (the whole process group is
    then killed). Cancelling the caller kills the process group too.
    """
    if not os_def.valid:
        raise OsError(f"OS '{os_def.name}' at {os_def.path} is invalid: {os_def.message}")
    path = os_def.script(script)
    try:
        run = await run_logged([str(path), *args], env=env, cwd=os_def.path,
                               log_file=log_file, header=_header(os_def, script, env),
                               timeout=timeout)
    except OSError as err:
        raise OsError(f"cannot run the {script} script of OS '{os_def.name}' "
                      f"({path}): {err.strerror}") from None
    if run.timed_out:
        outcome = f"was killed after running for {timeout:g} s"
    elif run.returncode < 0:
        outcome = f"was killed by signal {-run.returncode}"
    elif run.returncode:
        outcome = f"failed (exit {run.returncode})"
    else:
        return
    lines = last_lines(log_file, run.log_offset, QUOTED_LINES)
    quoted = "\n".join(f"  {line}" for line in lines) if lines else "  (no output)"
    raise OsScriptError(f"{script} script of OS {os_def.name} {outcome}; last lines of its "
                        f"output (log {log_file}):\n{quoted}")


async def verify_params(os_def: OsDefinition, variant: str, osparams: Mapping[str, Any],
                        log_file: Path) -> None:
    """Check OS parameters with the OS's ``verify parameters`` script.

    Names not declared in ``parameters.list`` (compared lower-cased) are refused
    before anything runs. The script gets only the core variables
    (``OS_API_VERSION``, ``OS_NAME``, ``OS_VARIANT``, ``DEBUG_LEVEL``, ``PATH``) and
    ``OSP_*``, no instance, so cluster defaults can be checked as well as an
    instance's. OSes older than API 20 have no parameters and no ``verify``: there,
    any parameter is refused.
    """
    if not os_def.valid:
        raise OsError(f"OS '{os_def.name}' at {os_def.path} is invalid: {os_def.message}")
    given = [name for name, value in osparams.items() if value is not None]
    if os_def.api_version < 20:
        if given:
            raise OsError(f"OS '{os_def.name}' uses OS API version {os_def.api_version}, "
                          f"which has no OS parameters; got: {', '.join(sorted(given))}")
        return
    declared = os_def.parameter_names
    unknown = sorted(name for name in given if name.lower() not in declared)
    if unknown:
        valid = ", ".join(declared) if declared else "none"
        raise OsError(f"OS '{os_def.name}' has no parameter(s) {', '.join(unknown)}; "
                      f"its parameters: {valid}")
    env = core_env(os_def, variant, osparams)
    await run_script(os_def, "verify", env, log_file, args=["parameters"], timeout=300)


def _header(os_def: OsDefinition, script: str, env: Mapping[str, str]) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S %z")
    instance = env.get("INSTANCE_NAME")
    target = f" for instance {instance}" if instance else ""
    return f"=== {stamp} {script} script of OS {os_def.name}{target} ===\n"
