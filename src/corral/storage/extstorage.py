"""ExtStorage providers on a node: finding them, their scripts' environment, running them.

A provider (Ganeti's ExtStorage interface, ``ganeti-extstorage-interface(7)``) is a
directory named after it in one of the ExtStorage search path's directories (the
first directory that has it wins, as for OS definitions). It holds the executables
``create``, ``attach``, ``detach``, ``remove``, ``grow``, ``setinfo`` and ``verify``,
optionally ``snapshot``, ``open`` and ``close``, and the text file ``parameters.list``
(one parameter per line: its name, then blanks, then a description). A provider that
lacks a required file, or whose files are not what they must be, is *invalid*, with
Ganeti's message saying which file and why.

Scripts get everything through their environment, and nothing of the node daemon's:
``VOL_NAME`` always, ``EXTP_<NAME>`` for each of the disk's parameters (its
``provider``, its ``access`` and what was given at creation), ``VOL_CNAME`` and
``VOL_UUID`` (the disk's name and UUID; not for ``snapshot``), ``VOL_SIZE``
(``create``, ``grow``), ``VOL_NEW_SIZE`` (``grow``), ``VOL_METADATA`` (``setinfo``),
``VOL_SNAPSHOT_NAME`` and ``VOL_SNAPSHOT_SIZE`` (``snapshot``) and
``VOL_OPEN_EXCLUSIVE`` (``open``: ``True``, ``False`` during a migration), plus
``PATH`` and ``LC_ALL=C``. They run with the provider's directory as working
directory and no arguments. Each run's output goes to its own log,
``<action>-<provider>-<volume>-<time>.log`` below the node's ExtStorage log directory;
a failing script's error quotes its last 20 lines, as Ganeti's does.
"""

from __future__ import annotations

import asyncio
import errno
import re
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from corral.errors import BlockDeviceError
from corral.paths import Paths
from corral.utils.scripts import last_lines, run_logged

__all__ = [
    "OPTIONAL_SCRIPTS",
    "PARAMETERS_FILE",
    "QUOTED_LINES",
    "REQUIRED_SCRIPTS",
    "Action",
    "Provider",
    "discover",
    "find_provider",
    "load_provider",
    "metadata_text",
    "node_search_path",
    "run_action",
    "volume_env",
]

Action = Literal["create", "attach", "detach", "remove", "grow", "setinfo", "verify",
                 "snapshot", "open", "close"]

#: Scripts every provider has (Ganeti's ``ES_SCRIPTS`` less the optional ones).
REQUIRED_SCRIPTS: Final[tuple[Action, ...]] = (
    "create", "attach", "detach", "remove", "grow", "setinfo", "verify")
#: Scripts a provider may leave out; their action is then skipped.
OPTIONAL_SCRIPTS: Final[tuple[Action, ...]] = ("snapshot", "open", "close")
#: The provider's declaration of its parameters.
PARAMETERS_FILE: Final = "parameters.list"
#: How many of a failed script's last output lines its error quotes (Ganeti's 20).
QUOTED_LINES: Final = 20
#: ``PATH`` of the scripts, so that they find the usual tools without setting it.
SCRIPT_PATH: Final = "/sbin:/bin:/usr/sbin:/usr/bin"


@dataclass(frozen=True)
class Provider:
    """One ExtStorage provider as this node finds it."""

    name: str
    path: Path
    valid: bool
    message: str = ""
    """Why it is not valid (Ganeti's words); empty when valid."""
    parameters: tuple[tuple[str, str], ...] = ()
    """``(name, description)`` of each declared parameter, in the file's order."""
    scripts: Mapping[str, Path] = field(default_factory=dict)
    """The scripts it has, by action."""

    def to_dict(self) -> dict[str, Any]:
        """The provider as ``extstorage_diagnose`` answers it."""
        return {"name": self.name, "path": str(self.path), "valid": self.valid,
                "message": self.message, "parameters": [list(p) for p in self.parameters]}


def _errno_name(err: OSError) -> str:
    return errno.errorcode.get(err.errno or 0, str(err.strerror or err))


def _check_file(directory: Path, filename: str, *, required: bool) -> Path | None:
    """The file's path when it is there and as it must be; None for a missing optional
    one. Raises :class:`BlockDeviceError` with Ganeti's message otherwise."""
    path = directory / filename
    try:
        st = path.stat()
    except OSError as err:
        if not required:
            return None
        raise BlockDeviceError(f"File '{filename}' under path '{directory}' is missing "
                               f"({_errno_name(err)})") from None
    if not stat.S_ISREG(st.st_mode):
        raise BlockDeviceError(f"File '{filename}' under path '{directory}' is not a "
                               "regular file")
    if filename != PARAMETERS_FILE and not st.st_mode & stat.S_IXUSR:
        raise BlockDeviceError(f"File '{filename}' under path '{directory}' is not "
                               "executable")
    return path


def load_provider(name: str, directory: Path) -> Provider:
    """The provider in ``directory`` (blocking: it reads the directory)."""
    scripts: dict[str, Path] = {}
    try:
        for script in (*REQUIRED_SCRIPTS, *OPTIONAL_SCRIPTS):
            found = _check_file(directory, script, required=script in REQUIRED_SCRIPTS)
            if found is not None:
                scripts[script] = found
        params_file = _check_file(directory, PARAMETERS_FILE, required=True)
    except BlockDeviceError as err:
        return Provider(name=name, path=directory, valid=False, message=err.message)
    assert params_file is not None
    try:
        text = params_file.read_text(errors="replace")
    except OSError as err:
        return Provider(name=name, path=directory, valid=False,
                        message=f"Error while reading the EXT parameters file at "
                                f"{params_file}: {_errno_name(err)}")
    parameters = []
    for line in text.splitlines():
        parts = line.split(None, 1)
        if parts:
            parameters.append((parts[0], parts[1].strip() if len(parts) > 1 else ""))
    return Provider(name=name, path=directory, valid=True, parameters=tuple(parameters),
                    scripts=scripts)


def find_provider(search_path: Sequence[Path], name: str) -> Provider:
    """The provider ``name`` along ``search_path``, valid or not (blocking).

    :raises BlockDeviceError: no directory of the search path has it; the message
        is Ganeti's, with the directories searched.
    """
    if not name or "/" in name or name in (".", ".."):
        raise BlockDeviceError(f"invalid ExtStorage provider name {name!r}: a provider "
                               "is a directory name")
    for base in search_path:
        directory = base / name
        if directory.is_dir():
            return load_provider(name, directory)
    searched = ", ".join(str(p) for p in search_path) or "(empty)"
    raise BlockDeviceError(f"Directory for External Storage Provider {name} not found in "
                           f"search path ({searched})")


def discover(search_path: Sequence[Path]) -> list[Provider]:
    """Every provider along ``search_path`` (blocking), sorted by name; of two with
    the same name the one in the earlier directory."""
    found: dict[str, Provider] = {}
    for base in search_path:
        try:
            entries = sorted(base.iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.name not in found and entry.is_dir():
                found[entry.name] = load_provider(entry.name, entry)
    return [found[name] for name in sorted(found)]


# -- the environment ---------------------------------------------------------------------

def volume_env(volume: str, params: Mapping[str, Any], *, size: int | None = None,
               new_size: int | None = None, metadata: str | None = None,
               cname: str | None = None, uuid: str | None = None,
               snap_name: str | None = None, snap_size: int | None = None,
               exclusive: bool | None = None) -> dict[str, str]:
    """The environment of a provider script about ``volume`` (see the module doc);
    only the variables given are set, as Ganeti sets them."""
    env = {"PATH": SCRIPT_PATH, "LC_ALL": "C", "VOL_NAME": volume}
    for name, value in params.items():
        env[f"EXTP_{name.upper()}"] = str(value)
    optional: dict[str, object | None] = {
        "VOL_SIZE": size, "VOL_NEW_SIZE": new_size, "VOL_METADATA": metadata,
        "VOL_CNAME": cname, "VOL_UUID": uuid, "VOL_SNAPSHOT_NAME": snap_name,
        "VOL_SNAPSHOT_SIZE": snap_size, "VOL_OPEN_EXCLUSIVE": exclusive,
    }
    env.update({key: str(value) for key, value in optional.items() if value is not None})
    return env


def metadata_text(text: str) -> str:
    """``text`` as a volume's metadata (``VOL_METADATA``): Ganeti's safe characters
    (letters, digits and ``_+.``, ``-`` too after the first), at most 128 of them."""
    text = re.sub(r"^[^A-Za-z0-9_+.]", "_", text)
    text = re.sub(r"[^-A-Za-z0-9_+.]", "_", text)
    return text[:128]


# -- running scripts -----------------------------------------------------------------------

def _log_file(paths: Paths, action: str, provider: str, volume: str) -> Path:
    stamp = time.strftime("%Y-%m-%d_%H_%M_%S")
    safe = volume.replace("/", "_")
    return paths.extstorage_log_dir / f"{action}-{provider}-{safe}-{stamp}.log"


async def run_action(paths: Paths, provider: Provider, action: Action,
                     env: Mapping[str, str]) -> str | None:
    """Run the ``action`` script of ``provider`` with ``env``; its standard output for
    ``attach``, else None. An optional script the provider lacks is skipped (None).

    :raises BlockDeviceError: the provider is invalid, lacks a required script, or
        the script cannot start or fails (quoting its last output lines).
    """
    volume = env.get("VOL_NAME", "")
    if not provider.valid:
        raise BlockDeviceError(f"ExtStorage provider {provider.name} is not valid on this "
                               f"node: {provider.message}")
    script = provider.scripts.get(action)
    if script is None:
        if action in OPTIONAL_SCRIPTS:
            return None
        raise BlockDeviceError(f"ExtStorage provider {provider.name} has no {action} script")
    log_file = _log_file(paths, action, provider.name, volume)
    header = (f"=== {time.strftime('%Y-%m-%d %H:%M:%S %z')} {action} script of ExtStorage "
              f"provider {provider.name} for volume {volume} ===\n")
    try:
        run = await run_logged([str(script)], env=env, cwd=provider.path, log_file=log_file,
                               header=header, capture_stdout=action == "attach")
    except OSError as err:
        raise BlockDeviceError(f"cannot run the {action} script of ExtStorage provider "
                               f"{provider.name} ({script}): {err.strerror}") from None
    failure = run.failure
    if failure is not None:
        lines = await asyncio.to_thread(last_lines, log_file, run.log_offset, QUOTED_LINES)
        quoted = "\n".join(lines) if lines else "(no output)"
        raise BlockDeviceError(
            f"External storage's {action} script failed ({failure}) for volume {volume} "
            f"of provider {provider.name}, last lines of output (log {log_file}):\n{quoted}")
    return run.stdout.decode("utf-8", "replace") if action == "attach" else None


def node_search_path(paths: Paths, search_path: Sequence[str]) -> list[Path]:
    """The cluster-wide search path as this node sees it (below its root)."""
    return [paths.node_path(entry) for entry in search_path]

