"""What a node keeps about the status of the instances it is primary for (seed 001).

Every procedure that changes an instance's status (start, shutdown, reboot, the end
of a migration) appends the node daemon's own entry, ``gnt:daemon:noded:<operation>``,
to the reason trail the master sent, and keeps it in two files under the node's run
directory, so that they outlive a restart of the node daemon:

- ``instance-reason/<name>``: the trail of the last status change, Ganeti's file and
  format (the JSON list of ``[source, reason, timestamp_ns]``, a newline, mode 0600),
  which the monitoring daemon's instance status collector reports;
- ``instance-status/<name>.json``: the instance's UUID, hypervisor, the state the
  administrator wants (``up``/``down``) and when it last changed, so that the
  collector also knows of instances that should run here and do not.

An instance removed or moved to another node is forgotten here (both files go).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from corral.errors import ParameterError
from corral.objects.specs import InstanceSpec
from corral.paths import Paths
from corral.utils.files import write_private

__all__ = ["NODED_PREFIX", "forget", "noded_entry", "read_reason", "read_records",
           "record_status_change", "rename"]

#: Prefix of the entries the node daemon appends (``gnt:daemon:noded:start``).
NODED_PREFIX = "gnt:daemon:noded:"


def noded_entry(operation: str) -> list[Any]:
    """The node daemon's own trail entry for ``operation`` (``start``, ``shutdown``,
    ``reboot``, ``migrate``): no reason of its own, only that it passed by."""
    return [NODED_PREFIX + operation, "", time.time_ns()]


def _file_name(name: str) -> str:
    """An instance name as a file name: refused when it could leave the directory."""
    if not name or "/" in name or name.startswith(".") or "\0" in name:
        raise ParameterError(f"instance name {name!r} cannot name a status file")
    return name


def _reason_file(paths: Paths, name: str) -> Path:
    return paths.instance_reason_dir / _file_name(name)


def _status_file(paths: Paths, name: str) -> Path:
    return paths.instance_status_dir / (_file_name(name) + ".json")


def _write(paths: Paths, spec: InstanceSpec, trail: list[list[Any]], admin_state: str) -> None:
    for directory in (paths.instance_reason_dir, paths.instance_status_dir):
        directory.mkdir(parents=True, exist_ok=True, mode=0o755)
    # Ganeti writes the trail as Python's json module does by default (", " between
    # items) with a final newline; a reader such as its collector parses either way.
    write_private(_reason_file(paths, spec.name), json.dumps(trail) + "\n", 0o640)
    record = {"name": spec.name, "uuid": spec.uuid, "hypervisor": spec.hypervisor,
              "admin_state": admin_state, "mtime": time.time()}
    # group-readable: with privilege separation the directory's group is the
    # monitoring daemon's (corral.daemon_users), which reads the records
    write_private(_status_file(paths, spec.name), json.dumps(record) + "\n", 0o640)


async def record_status_change(paths: Paths, spec: InstanceSpec,
                               trail: Sequence[Sequence[Any]], operation: str, *,
                               admin_state: str | None = None) -> list[list[Any]]:
    """Keep ``trail`` plus this node's entry for ``operation`` as the instance's last
    status change; ``admin_state`` (default: the spec's) is the state wanted from now
    on. Returns the trail written. The files are written with fsync, off the loop."""
    full = [list(entry) for entry in trail]
    full.append(noded_entry(operation))
    await asyncio.to_thread(_write, paths, spec, full, admin_state or spec.admin_state)
    return full


def _forget(paths: Paths, name: str) -> None:
    for path in (_reason_file(paths, name), _status_file(paths, name)):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


async def forget(paths: Paths, name: str) -> None:
    """Drop what this node keeps about instance ``name`` (removed, or moved away)."""
    await asyncio.to_thread(_forget, paths, name)


def _rename(paths: Paths, old: str, new: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        _reason_file(paths, old).rename(_reason_file(paths, new))
    try:
        record = json.loads(_status_file(paths, old).read_text())
    except (OSError, ValueError):
        return
    if isinstance(record, dict):
        record["name"] = new
        write_private(_status_file(paths, new), json.dumps(record) + "\n", 0o640)
    _status_file(paths, old).unlink()


async def rename(paths: Paths, old: str, new: str) -> None:
    """Instance ``old`` is called ``new`` now: its files follow the name."""
    await asyncio.to_thread(_rename, paths, old, new)


def read_reason(paths: Paths, name: str) -> list[Any]:
    """The trail of instance ``name``'s last status change here; ``[]`` when there is
    none or the file is unreadable (a monitoring answer never fails for it)."""
    try:
        data = json.loads(_reason_file(paths, name).read_text())
    except (OSError, ValueError, ParameterError):
        return []
    return data if isinstance(data, list) else []


def read_records(paths: Paths) -> dict[str, dict[str, Any]]:
    """The status records of every instance this node is primary for, by name; an
    unreadable record is skipped."""
    records: dict[str, dict[str, Any]] = {}
    try:
        entries = sorted(paths.instance_status_dir.glob("*.json"))
    except OSError:
        return records
    for entry in entries:
        with contextlib.suppress(OSError, ValueError):
            record = json.loads(entry.read_text())
            if isinstance(record, dict) and isinstance(record.get("name"), str):
                records[record["name"]] = record
    return records
