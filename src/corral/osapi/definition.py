"""Reading OS definitions from disk: what an OS directory offers and whether it is usable.

An OS definition is a directory named after the OS, found on a node along the OS search
path. Its ``ganeti_api_version`` file says which OS API versions it follows (one a line);
corral speaks versions 10, 15 and 20, and the scripts are run with the highest version both
sides know. What else must be there depends on the highest version the OS declares:

* always: executable ``create``, ``export``, ``import`` and ``rename`` scripts;
* 15 and up: an optional ``variants.list`` (one variant a line, ``#`` comments);
* 20 and up: an executable ``verify`` script and an optional ``parameters.list``
  (``name  one-line documentation`` a line). Names are used lower-cased, as the
  command line takes them (design 2.2: ``TRACK`` is set as ``track=...``); scripts
  see them upper-cased as ``OSP_<NAME>`` either way.

An ``os_version`` file, if present, holds one line that is compared across nodes.

Discovery never raises for a broken OS: the definition is returned with ``valid=False`` and
a message saying what is wrong, so ``gnt-os diagnose`` can show it. :func:`find_os` is the
strict entry point used when an OS is about to be used.
"""

from __future__ import annotations

import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.errors import OsError, OsNotFoundError

__all__ = [
    "API_VERSION_FILE",
    "OS_VERSION_FILE",
    "PARAMETERS_FILE",
    "SUPPORTED_API_VERSIONS",
    "VARIANTS_FILE",
    "OsDefinition",
    "discover",
    "find_os",
    "read_os",
    "required_scripts",
    "split_name",
]

SUPPORTED_API_VERSIONS: tuple[int, ...] = (10, 15, 20)
"""OS API versions corral can run scripts for."""

API_VERSION_FILE = "ganeti_api_version"
VARIANTS_FILE = "variants.list"
PARAMETERS_FILE = "parameters.list"
OS_VERSION_FILE = "os_version"

_BASE_SCRIPTS = ("create", "export", "import", "rename")
_VARIANT_DELIMITER = "+"
_PARAMETER_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class OsDefinition:
    """One OS definition as found on this node.

    For an invalid definition ``message`` says what is wrong and ``variants`` and
    ``parameters`` are empty; ``api_versions`` keeps whatever could be read, for
    diagnosis.
    """

    name: str
    path: Path
    api_versions: list[int] = field(default_factory=list)
    variants: list[str] = field(default_factory=list)
    parameters: list[tuple[str, str]] = field(default_factory=list)
    os_version: str | None = None
    valid: bool = True
    message: str = ""

    @property
    def api_version(self) -> int:
        """The OS API version scripts are run with: the highest one both sides support
        (0 when there is none, which makes the definition invalid)."""
        common = set(self.api_versions).intersection(SUPPORTED_API_VERSIONS)
        return max(common, default=0)

    @property
    def parameter_names(self) -> list[str]:
        """Names declared in ``parameters.list``, lower-cased, in file order."""
        return [name for name, _doc in self.parameters]

    def script(self, name: str) -> Path:
        """Path of one of the definition's scripts (``create``, ``verify``, ...)."""
        return self.path / name

    def full_name(self, variant: str) -> str:
        """``name+variant``, or just the name when there is no variant."""
        return f"{self.name}{_VARIANT_DELIMITER}{variant}" if variant else self.name

    def to_dict(self) -> dict[str, Any]:
        """The OsInfo dictionary the ``os_diagnose`` and ``os_get`` procedures answer."""
        return {
            "name": self.name,
            "path": str(self.path),
            "valid": self.valid,
            "message": self.message,
            "api_versions": list(self.api_versions),
            "variants": list(self.variants),
            "parameters": [[name, doc] for name, doc in self.parameters],
            "os_version": self.os_version,
            "trusted": True,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OsDefinition:
        """Rebuild a definition from :meth:`to_dict` output (e.g. an RPC answer)."""
        return cls(
            name=str(data["name"]),
            path=Path(data["path"]),
            api_versions=[int(v) for v in data.get("api_versions", [])],
            variants=[str(v) for v in data.get("variants", [])],
            parameters=[(str(p[0]), str(p[1])) for p in data.get("parameters", [])],
            os_version=data.get("os_version"),
            valid=bool(data.get("valid", False)),
            message=str(data.get("message", "")),
        )


def split_name(name: str) -> tuple[str, str]:
    """``"debian+buster"`` -> ``("debian", "buster")``; without a variant the second
    item is ``""``."""
    base, _, variant = name.partition(_VARIANT_DELIMITER)
    return base, variant


def required_scripts(declared: Sequence[int]) -> tuple[str, ...]:
    """Scripts an OS declaring these API versions must provide (``verify`` from 20 on)."""
    if declared and max(declared) >= 20:
        return (*_BASE_SCRIPTS, "verify")
    return _BASE_SCRIPTS


class _Invalid(Exception):
    """Internal: why an OS directory is not a usable definition."""


def read_os(path: Path) -> OsDefinition:
    """Read the OS definition in directory ``path`` (its name is the OS name).

    Never raises for a broken definition: the result then has ``valid=False``.
    """
    name = path.name
    declared: list[int] = []
    try:
        declared = _read_api_versions(path)
        if not set(declared).intersection(SUPPORTED_API_VERSIONS):
            raise _Invalid(
                f"{API_VERSION_FILE} lists API version(s) "
                f"{', '.join(map(str, declared))}; supported: "
                f"{', '.join(map(str, SUPPORTED_API_VERSIONS))}"
            )
        _check_scripts(path, required_scripts(declared))
        highest = max(declared)
        variants = _read_variants(path) if highest >= 15 else []
        parameters = _read_parameters(path) if highest >= 20 else []
        os_version = _read_os_version(path)
    except _Invalid as err:
        return OsDefinition(name=name, path=path, api_versions=declared, valid=False,
                            message=str(err))
    return OsDefinition(name=name, path=path, api_versions=declared, variants=variants,
                        parameters=parameters, os_version=os_version)


def discover(search_path: Sequence[Path]) -> list[OsDefinition]:
    """All OS definitions along ``search_path``, valid or not, sorted by name.

    Every visible subdirectory of a search directory is an OS; when two directories
    hold an OS of the same name, the one in the earlier directory wins. Missing or
    unreadable search directories are skipped.
    """
    found: dict[str, OsDefinition] = {}
    for directory in search_path:
        for entry in _os_dirs(Path(directory)):
            if entry.name not in found:
                found[entry.name] = read_os(entry)
    return [found[name] for name in sorted(found)]


def find_os(search_path: Sequence[Path], name: str, *, require_variant: bool = False,
            force_variant: bool = False) -> tuple[OsDefinition, str]:
    """The valid OS definition for ``name`` (``os`` or ``os+variant``) and its variant.

    When the OS has variants and ``name`` gives none, the first variant of
    ``variants.list`` is used, as Ganeti does when it builds a script environment
    (the master has already refused a missing variant unless ``--force-variant`` was
    given); with ``require_variant`` that is an error here too. An OS without
    variants (or of API version 10) returns ``""``. ``force_variant`` accepts a
    variant the OS does not declare.

    Raises :class:`OsNotFoundError` naming the available OSes when ``name`` is unknown, with
    the definition's problem when it is invalid, and listing the variants when the
    variant is missing or unknown.
    """
    base, variant = split_name(name)
    os_def = _find_first(search_path, base)
    if os_def is None:
        available = [d.name for d in discover(search_path) if d.valid]
        where = ", ".join(str(p) for p in search_path) or "(empty)"
        listing = ", ".join(available) if available else "none"
        raise OsNotFoundError(f"OS '{base}' not found in the OS search path {where}; "
                      f"available OSes: {listing}")
    if not os_def.valid:
        raise OsError(f"OS '{base}' at {os_def.path} is invalid: {os_def.message}")
    if not os_def.variants:
        if variant:
            raise OsError(f"OS '{base}' has no variants, but '{name}' names variant "
                          f"'{variant}'; use '{base}'")
        return os_def, ""
    choices = ", ".join(os_def.full_name(v) for v in os_def.variants)
    if not variant:
        if require_variant:
            raise OsError(f"OS '{base}' needs a variant; use one of: {choices}")
        return os_def, os_def.variants[0]
    if variant not in os_def.variants and not force_variant:
        raise OsError(f"OS '{base}' has no variant '{variant}'; its variants: {choices}")
    return os_def, variant


def _find_first(search_path: Sequence[Path], base: str) -> OsDefinition | None:
    if not base or base.startswith(".") or "/" in base:
        return None
    for directory in search_path:
        candidate = Path(directory) / base
        if candidate.is_dir():
            return read_os(candidate)
    return None


def _os_dirs(directory: Path) -> list[Path]:
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return []
    return [e for e in entries if not e.name.startswith(".") and e.is_dir()]


def _read_text(file: Path, *, required: bool) -> str | None:
    """A definition file's text; ``None`` when it is absent and not required."""
    try:
        st = file.stat()
    except FileNotFoundError:
        if required:
            raise _Invalid(f"required file {file.name} is missing") from None
        return None
    except OSError as err:
        raise _Invalid(f"cannot read {file.name}: {err.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise _Invalid(f"{file.name} is not a regular file")
    try:
        return file.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise _Invalid(f"cannot read {file.name}: {err.strerror}") from None


def _meaningful_lines(text: str) -> list[str]:
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _read_api_versions(path: Path) -> list[int]:
    text = _read_text(path / API_VERSION_FILE, required=True)
    assert text is not None
    versions: list[int] = []
    for line in _meaningful_lines(text):
        try:
            versions.append(int(line))
        except ValueError:
            raise _Invalid(f"{API_VERSION_FILE} holds '{line}', which is not an API "
                           f"version number (expected e.g. 20)") from None
    if not versions:
        raise _Invalid(f"{API_VERSION_FILE} is empty; it must list the supported OS API "
                       f"version(s), e.g. 20")
    return versions


def _check_scripts(path: Path, scripts: Sequence[str]) -> None:
    missing: list[str] = []
    not_executable: list[str] = []
    for script in scripts:
        try:
            st = (path / script).stat()
        except OSError:
            missing.append(script)
            continue
        if not stat.S_ISREG(st.st_mode) or not st.st_mode & stat.S_IXUSR:
            not_executable.append(script)
    problems = []
    if missing:
        problems.append(f"required script(s) missing: {', '.join(missing)}")
    if not_executable:
        problems.append(f"script(s) not executable regular files: {', '.join(not_executable)}")
    if problems:
        raise _Invalid("; ".join(problems) + f" (required: {', '.join(scripts)})")


def _read_variants(path: Path) -> list[str]:
    text = _read_text(path / VARIANTS_FILE, required=False)
    if text is None:
        return []
    variants: list[str] = []
    for line in _meaningful_lines(text):
        if line not in variants:
            variants.append(line)
    return variants


def _read_parameters(path: Path) -> list[tuple[str, str]]:
    text = _read_text(path / PARAMETERS_FILE, required=False)
    if text is None:
        return []
    parameters: list[tuple[str, str]] = []
    seen: set[str] = set()
    for line in _meaningful_lines(text):
        name, *rest = line.split(None, 1)
        doc = rest[0].strip() if rest else ""
        if not _PARAMETER_NAME.match(name):
            raise _Invalid(f"{PARAMETERS_FILE} declares '{name}', which is not a valid "
                           f"parameter name (letters, digits, '_' and '-' only)")
        if name.lower() in seen:
            raise _Invalid(f"{PARAMETERS_FILE} declares '{name}' twice (names are "
                           f"compared without case)")
        seen.add(name.lower())
        parameters.append((name.lower(), doc))
    return parameters


def _read_os_version(path: Path) -> str | None:
    text = _read_text(path / OS_VERSION_FILE, required=False)
    if not text:
        return None
    first = text.splitlines()[0].strip()
    return first or None
