"""LVM volume groups on loop devices, for tests, benchmarks and testbed nodes.

A :class:`LoopVolumeGroup` is a volume group over one or more loop devices backed by
sparse files. Its LVM commands, and those of the testbed nodes it is installed on
(:meth:`LoopVolumeGroup.install`), run with an ``lvm.conf`` of their own (through
``LVM_SYSTEM_DIR``, see :mod:`corral.storage.lvm`) whose device filter accepts only
its loop devices: the group is invisible to every other configuration's view of
the machine's devices but the machine-wide one, and its metadata backups stay in its
directory. On a host without device-mapper (no kernel driver) that configuration
also disables activation, so LVM changes metadata only: volumes can be created,
grown, renamed and removed, not activated (their ``/dev/VG/LV`` never appears).

Everything is removed by :meth:`LoopVolumeGroup.destroy`: the group, its physical
volumes' labels, the loop devices and the files. Names carry a prefix and the pid
of the process that made them, so that groups of concurrent test runs never meet.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from corral.paths import Paths

__all__ = ["LoopVolumeGroup", "device_mapper_available", "lvm_available"]

_ENV = {"LC_ALL": "C", "LVM_SUPPRESS_FD_WARNINGS": "1",
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


def lvm_available() -> str | None:
    """Why LVM on loop devices cannot be used here, or None when it can (root, the
    lvm2 tools and ``losetup``)."""
    if os.geteuid() != 0:
        return "loop devices and LVM need root"
    for tool in ("pvcreate", "vgcreate", "losetup"):
        if shutil.which(tool, path=_ENV["PATH"]) is None:
            return f"no {tool} command (install lvm2 and util-linux: 'make sysdeps')"
    return None


def device_mapper_available() -> bool:
    """Whether the kernel's device-mapper answers (LVs can be activated)."""
    try:
        fd = os.open("/dev/mapper/control", os.O_RDWR)
    except OSError:
        return False
    os.close(fd)
    return True


@dataclass
class LoopVolumeGroup:
    """A volume group on loop devices, with its own LVM configuration directory."""

    name: str
    directory: Path
    devices: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    detached: list[str] = field(default_factory=list)
    """Devices taken away by :meth:`detach` (still members of the group)."""

    @property
    def config_dir(self) -> Path:
        """The ``LVM_SYSTEM_DIR`` of this group's commands."""
        return self.directory / "lvm"

    @classmethod
    def create(cls, directory: Path, sizes_mib: list[int], *, prefix: str = "corral",
               name: str | None = None) -> LoopVolumeGroup:
        """A group of one loop device per entry of ``sizes_mib``, its files and LVM
        configuration in ``directory``; named ``<prefix>-<pid>-<random>`` unless
        ``name`` is given. Cleans up what it made when a step fails."""
        vg = cls(name or f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:6]}", directory)
        directory.mkdir(parents=True, exist_ok=True)
        try:
            for index, size in enumerate(sizes_mib):
                vg.add_device(size, f"{vg.name}-{index}.img")
            vg._write_config()
            vg.lvm("pvcreate", "-q", *vg.devices)
            vg.lvm("vgcreate", "-q", vg.name, *vg.devices)
        except BaseException:
            vg.destroy()
            raise
        return vg

    def add_device(self, size_mib: int, file_name: str) -> str:
        """A new loop device of ``size_mib`` (not yet in the group); its path."""
        backing = self.directory / file_name
        with backing.open("wb") as handle:
            handle.truncate(size_mib * 1024 * 1024)
        self.files.append(backing)
        device = subprocess.run(["losetup", "-f", "--show", str(backing)], check=True,
                                capture_output=True, text=True).stdout.strip()
        self.devices.append(device)
        self._write_config()
        return device

    def _write_config(self) -> None:
        """The lvm.conf that sees only this group's devices (and activates nothing on
        a host without device-mapper)."""
        self.config_dir.mkdir(parents=True, exist_ok=True)
        self.config_dir.joinpath("lvm.conf").write_text(self.config_text())

    def config_text(self) -> str:
        """The contents of the group's ``lvm.conf``."""
        accept = ", ".join(f'"a|^{device}$|"' for device in self.devices)
        lines = [f"devices {{ global_filter = [ {accept}{', ' if accept else ''}\"r|.*|\" ]",
                 "          use_devicesfile = 0 }"]
        if not device_mapper_available():
            lines.append("global { activation = 0 }")
        return "\n".join(lines) + "\n"

    def environment(self) -> dict[str, str]:
        """The environment of this group's LVM commands."""
        return {**_ENV, "LVM_SYSTEM_DIR": str(self.config_dir)}

    def lvm(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run an LVM command with this group's configuration."""
        result = subprocess.run(list(argv), env=self.environment(), capture_output=True,
                                text=True, timeout=120)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): "
                               f"{result.stderr.strip()}")
        return result

    def install(self, paths: Paths) -> None:
        """Give the node of ``paths`` (a testbed node, root not ``/``) this group's LVM
        configuration, so its daemons see the group."""
        target = paths.node_path("/etc/lvm")
        target.mkdir(parents=True, exist_ok=True)
        target.joinpath("lvm.conf").write_text(self.config_text())

    def detach(self, device: str) -> None:
        """Take ``device`` away from under the group (a physical volume vanishes): the
        loop device is detached; its file stays until :meth:`destroy`."""
        subprocess.run(["losetup", "-d", device], check=True, capture_output=True)
        self.devices.remove(device)
        self.detached.append(device)

    def destroy(self) -> None:
        """Remove the group, the labels, the loop devices and their files; every step
        is tried whatever failed before."""
        if self.devices:
            self.lvm("vgremove", "-f", "-y", self.name, check=False)
            if self.detached:
                self.lvm("vgreduce", "--removemissing", "--force", self.name, check=False)
                self.lvm("vgremove", "-f", "-y", self.name, check=False)
            self.lvm("pvremove", "-y", "-ff", *self.devices, check=False)
        for device in list(self.devices):
            subprocess.run(["losetup", "-d", device], check=False, capture_output=True)
            self.devices.remove(device)
        for backing in self.files:
            with contextlib.suppress(FileNotFoundError):
                backing.unlink()
        self.files.clear()
        shutil.rmtree(self.config_dir, ignore_errors=True)
        # A process using the machine's own LVM configuration (another program's vgs)
        # may have written metadata backups of this group there: they go too.
        system = Path("/etc/lvm")
        for leftover in [system / "backup" / self.name,
                         *(system / "archive").glob(f"{self.name}_*.vg")]:
            with contextlib.suppress(OSError):
                leftover.unlink()
