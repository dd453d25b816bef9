"""LVM on a node: physical volumes, volume groups and logical volumes via the lvm2 tools.

Every command runs as a subprocess (never on the event loop) with ``LC_ALL=C``, and
listings use LVM's machine-readable report (``--reportformat json`` with sizes in
MiB, ``--units m --nosuffix``), never its human output. A command that fails raises
:class:`~corral.errors.BlockDeviceError` quoting the last lines LVM wrote.

Which LVM configuration a node uses follows the rule for every system path
(:meth:`corral.paths.Paths.node_path`): a node whose root is not ``/`` (a testbed
node) reads ``<root>/etc/lvm/lvm.conf`` when it has one, through
``LVM_SYSTEM_DIR``, so each such node sees only the devices its own configuration
accepts and keeps its metadata backups there; a real node uses ``/etc/lvm``.

LVM itself never allocates on a physical volume marked not allocatable (``pvchange
-x n``); the free space reported for allocation (:attr:`VolumeGroup.allocatable_free`)
counts only the allocatable ones, as Ganeti does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from corral.errors import BlockDeviceError
from corral.paths import Paths

__all__ = [
    "LVM_TIMEOUT",
    "CommandResult",
    "LogicalVolume",
    "LvmTools",
    "PhysicalVolume",
    "Runner",
    "VolumeGroup",
    "check_name",
    "lvm_environment",
]

#: How long one LVM command may take, in seconds.
LVM_TIMEOUT: Final = 120.0
#: How many of a failed command's last output lines an error quotes.
QUOTED_LINES: Final = 4

_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Characters LVM allows in volume group and logical volume names (lvm(8)).
_NAME_CHARS: Final = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+_.-")
#: Name parts LVM keeps for its own volumes (lvm(8)).
_RESERVED: Final = ("_cdata", "_cmeta", "_corig", "_mimage", "_mlog", "_pmspare", "_rimage",
                    "_rmeta", "_tdata", "_tmeta", "_vorigin", "_vdata")


@dataclass(frozen=True)
class CommandResult:
    """What a command did: its exit code and its two outputs."""

    returncode: int
    stdout: str
    stderr: str


#: Runs ``argv`` with ``env`` and answers its result (the seam tests replace).
Runner = Callable[[Sequence[str], Mapping[str, str]], Awaitable[CommandResult]]


async def _run_process(argv: Sequence[str], env: Mapping[str, str]) -> CommandResult:
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=dict(env))
    except OSError as err:
        raise BlockDeviceError(
            f"cannot run {argv[0]}: {err.strerror} (is lvm2 installed on this node?)"
        ) from None
    try:
        async with asyncio.timeout(LVM_TIMEOUT):
            out, errors = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise BlockDeviceError(
            f"{' '.join(argv)} did not finish within {LVM_TIMEOUT:.0f} s") from None
    return CommandResult(proc.returncode or 0, out.decode(errors="replace"),
                         errors.decode(errors="replace"))


def lvm_environment(paths: Paths) -> dict[str, str]:
    """The environment LVM commands run with on the node of ``paths``."""
    env = {"LC_ALL": "C", "PATH": _PATH, "LVM_SUPPRESS_FD_WARNINGS": "1"}
    config_dir = paths.node_path("/etc/lvm")
    if paths.root != paths.root.parent and (config_dir / "lvm.conf").is_file():
        env["LVM_SYSTEM_DIR"] = str(config_dir)
    return env


def check_name(name: str, what: str) -> None:
    """Refuse a volume group or logical volume name LVM would refuse, saying what is
    accepted (lvm(8): letters, digits and ``+_.-``, not starting with ``-``, not ``.``
    or ``..``, none of LVM's own suffixes)."""
    if (not name or name in (".", "..") or name.startswith("-") or len(name) > 127
            or not set(name) <= _NAME_CHARS or any(part in name for part in _RESERVED)):
        raise BlockDeviceError(
            f"{what} {name!r} is not a valid LVM name: use letters, digits and '+_.-', "
            "not starting with '-' (at most 127 characters)")


def _mib(value: str) -> int:
    """A size LVM reported in MiB (``"392.00"``), rounded down; ``""`` is 0."""
    try:
        return int(float(value)) if value else 0
    except ValueError:
        raise BlockDeviceError(f"LVM reported a size that is not a number: {value!r}") from None


def _count(value: str) -> int:
    try:
        return int(value) if value else 0
    except ValueError:
        raise BlockDeviceError(f"LVM reported a count that is not a number: {value!r}") from None


@dataclass(frozen=True)
class PhysicalVolume:
    """A physical volume as ``pvs`` reports it (sizes in MiB)."""

    name: str
    """Its device (``/dev/sdb1``), or ``[unknown]`` when it is missing."""
    vg: str
    size: int
    used: int
    free: int
    attr: str

    @property
    def allocatable(self) -> bool:
        """Whether LVM may put new extents on it (``pvchange -x``)."""
        return self.attr[:1] == "a"

    @property
    def missing(self) -> bool:
        """Whether its device is gone (the ``m`` attribute)."""
        return self.attr[2:3] == "m"


@dataclass(frozen=True)
class VolumeGroup:
    """A volume group as ``vgs`` reports it, with its physical volumes."""

    name: str
    size: int
    free: int
    attr: str
    missing_pvs: int
    pvs: tuple[PhysicalVolume, ...] = ()

    @property
    def allocatable_free(self) -> int:
        """MiB free on the allocatable physical volumes that are present: what new
        and grown volumes can use."""
        return sum(pv.free for pv in self.pvs if pv.allocatable and not pv.missing)

    @property
    def writable(self) -> bool:
        """Whether the group may be changed (not read-only)."""
        return self.attr[:1] == "w"

    @property
    def partial(self) -> bool:
        """Whether a physical volume of the group is missing."""
        return self.missing_pvs > 0 or self.attr[3:4] == "p"


@dataclass(frozen=True)
class LogicalVolume:
    """A logical volume as ``lvs`` reports it (size in MiB)."""

    vg: str
    name: str
    size: int
    attr: str
    devices: tuple[str, ...] = field(default=())
    """The physical volumes it lives on (``/dev/sdb1``; ``[unknown]`` for a missing one)."""
    stripes: int = 1

    @property
    def path(self) -> str:
        """The device node it is used through once active (``/dev/VG/LV``)."""
        return f"/dev/{self.vg}/{self.name}"

    @property
    def active(self) -> bool:
        """Whether it is activated (the fifth attribute is ``a``)."""
        return self.attr[4:5] == "a"

    @property
    def open(self) -> bool:
        """Whether its device is open (in use by a running instance)."""
        return self.attr[5:6] == "o"

    @property
    def faulty(self) -> bool:
        """Whether its data is (partly) gone: a physical volume it lives on is missing
        (``p``artial health) or LVM replaced it by a ``v``irtual, backing-less volume."""
        return self.attr[:1] == "v" or self.attr[8:9] == "p"


class LvmTools:
    """The lvm2 commands of one node, with its LVM configuration."""

    def __init__(self, paths: Paths, runner: Runner | None = None) -> None:
        self.env = lvm_environment(paths)
        self._runner: Runner = runner or _run_process

    async def run_unchecked(self, argv: Sequence[str]) -> CommandResult:
        """Run an LVM command; its result whatever its exit code (for commands whose
        exit code does not tell, such as ``vgreduce --removemissing``)."""
        return await self._runner(list(argv), self.env)

    async def run(self, argv: Sequence[str], what: str) -> CommandResult:
        """Run an LVM command; its result, or a :class:`BlockDeviceError` saying
        ``what`` failed and quoting LVM's last lines."""
        result = await self._runner(list(argv), self.env)
        if result.returncode != 0:
            raise BlockDeviceError(f"{what} failed: {_quote(result)}")
        return result

    async def report(self, command: str, fields: Sequence[str], names: Sequence[str] = (),
                     *, what: str) -> list[dict[str, str]]:
        """The rows of an LVM report (``pvs``, ``vgs``, ``lvs``) with ``fields``, for
        ``names`` (all when empty), sizes in MiB. A name starting with ``-`` is refused:
        LVM would read it as an option."""
        for name in names:
            if not name or name.startswith("-"):
                raise BlockDeviceError(f"{what}: {name!r} is not a name {command} can "
                                       "report on (empty, or starting with '-')")
        argv = [command, "--reportformat", "json", "--units", "m", "--nosuffix",
                "-o", ",".join(fields), *names]
        result = await self.run(argv, what)
        kind = command[:2]
        try:
            document: Any = json.loads(result.stdout)
            rows = [row for report in document["report"] for row in report.get(kind, [])]
        except (ValueError, KeyError, TypeError) as err:
            raise BlockDeviceError(f"{what}: cannot read the report of {command} ({err}): "
                                   f"{result.stdout[:200]!r}") from None
        if not all(isinstance(row, dict) for row in rows):
            raise BlockDeviceError(f"{what}: {command} reported rows that are not objects")
        return [{key: str(value) for key, value in row.items()} for row in rows]

    # -- listings ------------------------------------------------------------------
    async def physical_volumes(self, names: Sequence[str] = ()) -> list[PhysicalVolume]:
        """The physical volumes (all, or those named)."""
        rows = await self.report(
            "pvs", ["pv_name", "vg_name", "pv_size", "pv_used", "pv_free", "pv_attr"], names,
            what="listing the physical volumes")
        return [PhysicalVolume(name=r["pv_name"], vg=r["vg_name"], size=_mib(r["pv_size"]),
                               used=_mib(r["pv_used"]), free=_mib(r["pv_free"]),
                               attr=r["pv_attr"]) for r in rows]

    async def volume_groups(self) -> list[VolumeGroup]:
        """Every volume group with its physical volumes, from one ``pvs`` (which
        reports each PV's group fields too: a group has at least one PV)."""
        rows = await self.report(
            "pvs", ["pv_name", "vg_name", "pv_size", "pv_used", "pv_free", "pv_attr",
                    "vg_size", "vg_free", "vg_attr", "vg_missing_pv_count"],
            what="listing the volume groups")
        groups: dict[str, VolumeGroup] = {}
        for r in rows:
            if not r["vg_name"]:
                continue  # a physical volume in no group
            pv = PhysicalVolume(name=r["pv_name"], vg=r["vg_name"], size=_mib(r["pv_size"]),
                                used=_mib(r["pv_used"]), free=_mib(r["pv_free"]),
                                attr=r["pv_attr"])
            known = groups.get(pv.vg)
            if known is None:
                groups[pv.vg] = VolumeGroup(
                    name=pv.vg, size=_mib(r["vg_size"]), free=_mib(r["vg_free"]),
                    attr=r["vg_attr"], missing_pvs=_count(r["vg_missing_pv_count"]),
                    pvs=(pv,))
            else:
                groups[pv.vg] = dataclasses.replace(known, pvs=(*known.pvs, pv))
        return sorted(groups.values(), key=lambda vg: vg.name)

    async def logical_volumes(self, vgs: Sequence[str] = ()) -> list[LogicalVolume]:
        """The logical volumes of ``vgs`` (all groups when empty), one per volume
        with every device it lives on."""
        for vg in vgs:
            check_name(vg, "volume group")
        rows = await self.report(
            "lvs", ["vg_name", "lv_name", "lv_size", "lv_attr", "devices", "stripes"], vgs,
            what="listing the logical volumes")
        merged: dict[tuple[str, str], LogicalVolume] = {}
        for r in rows:
            key = (r["vg_name"], r["lv_name"])
            devices = tuple(_device(part) for part in r["devices"].split(",") if part)
            known = merged.get(key)
            if known is None:
                merged[key] = LogicalVolume(vg=key[0], name=key[1], size=_mib(r["lv_size"]),
                                            attr=r["lv_attr"], devices=devices,
                                            stripes=max(1, _count(r["stripes"])))
            else:
                extra = tuple(d for d in devices if d not in known.devices)
                merged[key] = LogicalVolume(vg=known.vg, name=known.name, size=known.size,
                                            attr=known.attr, devices=known.devices + extra,
                                            stripes=max(known.stripes, _count(r["stripes"])))
        return list(merged.values())


def _device(segment: str) -> str:
    """``/dev/sdb1(0)`` -> ``/dev/sdb1``."""
    return segment.split("(", 1)[0].strip()


def _quote(result: CommandResult) -> str:
    """The last lines a failed LVM command wrote (its warnings about the lack of a
    kernel driver or disabled activation left out when something else was said)."""
    lines = [line.strip() for line in (result.stderr + "\n" + result.stdout).splitlines()
             if line.strip()]
    useful = [line for line in lines if not line.startswith("WARNING: Activation disabled")]
    chosen = (useful or lines)[-QUOTED_LINES:]
    status = f"exit code {result.returncode}"
    return f"{'; '.join(chosen)} ({status})" if chosen else status
