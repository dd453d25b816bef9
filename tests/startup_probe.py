"""Which modules a command-line tool loads, and whether they are all client-side.

An edge of the system (DESIGN: the gnt-* tools, ``corral-daemons``,
``corral-confd-query``) talks to the master; it must not load the master's own
machinery (logical units, the job queue, the configuration store, node RPC, the
daemons) nor the libraries only those need (asyncio, aiohttp, pyparsing,
cryptography, sqlite3, and msgspec: the command line speaks luxi with the standard
library's json): every command pays for what its tool imports at start.

:func:`probe` runs a tool's entry point in a fresh interpreter, once per argument
list given (``[["--help"], ["add", "--help"]]``), and returns the modules loaded by
the end with each run's exit code; :func:`outside_client_side` says which of them an
edge may not load. Run as a script, this file is that fresh interpreter::

    python tests/startup_probe.py OUT corral.cli.gnt_instance:main ARGS_JSON
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: Every corral module an edge may load at start: its own code; errors, paths and the
#: serializer; the blocking luxi client; how to follow a job; the model layer
#: (opcodes, objects, the query language without its text grammar); the blocking confd
#: client; the constants of the node protocol. Shell patterns. (Opcodes, configuration
#: objects and the serializer are msgspec Structs or codecs, so in practice they load
#: only in the command that needs them.)
CLIENT_SIDE: tuple[str, ...] = (
    "corral", "corral.cli", "corral.cli.*",
    "corral.errors", "corral.paths", "corral.serializer",
    "corral.utils", "corral.utils.lazy", "corral.utils.nicesort", "corral.utils.settings",
    "corral.luxi", "corral.luxi.client", "corral.luxi.framing",
    "corral.jobs", "corral.jobs.follow", "corral.jobs.status",
    "corral.opcodes", "corral.opcodes.*", "corral.objects", "corral.objects.*",
    "corral.qlang", "corral.qlang.compiler", "corral.qlang.fields", "corral.qlang.parser",
    "corral.qlang.tokens",
    "corral.confd", "corral.confd.client", "corral.confd.protocol", "corral.confd.settings",
    "corral.rpc", "corral.rpc.protocol",
    "corral.uidpool",
)

#: What ``corral-daemons`` may load besides: starting and stopping processes, as the
#: daemons' own users (their accounts and file modes; writing daemon-users.json).
DAEMON_CONTROL: tuple[str, ...] = ("corral.daemons", "corral.utils.process",
                                   "corral.daemon_users", "corral.utils.files")

#: Libraries only daemons and the master's machinery need, each a heavy import.
SERVER_LIBRARIES: tuple[str, ...] = ("asyncio", "aiohttp", "pyparsing", "cryptography",
                                     "sqlite3", "msgspec")

#: What ``corral-confd-query`` may load besides: msgspec is its packets' codec.
CONFD_CODEC: tuple[str, ...] = ("msgspec",)


#: The htools (``hbal``...), edges too.
HTOOLS = ("hbal", "hspace", "hail", "hinfo", "hcheck", "hscan")


def edge_entry_points() -> dict[str, str]:
    """The console scripts that are edges: every ``gnt-*`` tool, the htools,
    ``corral-daemons`` and ``corral-confd-query`` (from pyproject.toml, so a new tool
    is covered)."""
    scripts: dict[str, str] = tomllib.loads(
        (ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    return {name: target for name, target in scripts.items()
            if name.startswith("gnt-") or name in HTOOLS
            or name in ("corral-daemons", "corral-confd-query")}


@dataclass(frozen=True)
class Probe:
    """What a tool did in one interpreter: each run's exit code and output size, and
    every module loaded by the end."""

    exits: list[Any]
    output_sizes: list[int]
    modules: list[str]


def probe(entry: str, runs: list[list[str]], env: dict[str, str] | None = None,
          timeout: float = 60) -> Probe:
    """Run ``entry`` (``module:function``) once per argument list in ``runs``, in one
    fresh interpreter with ``env``; ``[["--help"], "*"]`` adds ``COMMAND --help`` for
    every command of the tool's group."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "probe.json"
        proc = subprocess.run(
            [sys.executable, str(Path(__file__)), str(out), entry, json.dumps(runs)],
            env=env if env is not None else dict(os.environ), capture_output=True,
            text=True, timeout=timeout, cwd=ROOT)
        if proc.returncode != 0 or not out.exists():
            raise AssertionError(f"probe of {entry} failed ({proc.returncode}):\n"
                                 f"{proc.stdout}\n{proc.stderr}")
        data = json.loads(out.read_text())
    return Probe(data["exits"], data["output_sizes"], data["modules"])


def outside_client_side(modules: list[str], extra: tuple[str, ...] = (),
                        libraries: tuple[str, ...] = ()) -> list[str]:
    """The modules in ``modules`` an edge may not load: corral modules outside
    :data:`CLIENT_SIDE` (and ``extra``), and :data:`SERVER_LIBRARIES` (but
    ``libraries``) with their submodules."""
    allowed = (*CLIENT_SIDE, *extra)
    found = [m for m in modules if (m == "corral" or m.startswith("corral."))
             and not any(fnmatch.fnmatchcase(m, pattern) for pattern in allowed)]
    found += [m for m in modules
              if any(m == lib or m.startswith(lib + ".")
                     for lib in SERVER_LIBRARIES if lib not in libraries)]
    return sorted(found)


def _run_in_this_process(out: Path, entry: str, runs: list[Any]) -> None:
    import contextlib
    import importlib
    import io

    module_name, _, function = entry.partition(":")
    exits: list[Any] = []
    sizes: list[int] = []

    def run(call: Any, args: list[str]) -> None:
        sys.argv = [entry, *args]
        buffer = io.StringIO()
        code: Any = 0
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            try:
                call()
            except SystemExit as stop:
                code = stop.code
        exits.append(code)
        sizes.append(len(buffer.getvalue()))

    main = getattr(importlib.import_module(module_name), function)
    for args in runs:
        if args != "*":
            run(main, args)
            continue
        group = getattr(sys.modules[module_name], "cli", None)
        for name in sorted(getattr(group, "commands", {})):
            run(lambda g=group, n=name: g.main([n, "--help"], prog_name="probe"),
                [name, "--help"])
    out.write_text(json.dumps({"exits": exits, "output_sizes": sizes,
                               "modules": sorted(sys.modules)}))


if __name__ == "__main__":
    _run_in_this_process(Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]))
