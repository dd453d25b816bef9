"""LVM's reports for the monitoring daemon, run by whoever may run LVM.

LVM's reporting tools need root (the block devices and LVM's lock directory are
root's). With privilege separation the monitoring daemon runs as a user of its own,
so the node daemon (root) runs the two reports the ``lv`` and ``storage`` collectors
need every :data:`PUBLISH_SECONDS` and keeps their rows in
:attr:`corral.paths.Paths.lvm_report` (group-readable by the monitoring group);
the monitoring daemon reads them from there when it cannot run LVM itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import subprocess
import time
from typing import Any, Final

from corral.paths import Paths
from corral.storage.lvm import lvm_environment
from corral.utils.files import write_public

__all__ = ["LV_COLUMNS", "LV_REPORT", "MAX_AGE_SECONDS", "PUBLISH_SECONDS", "VG_REPORT",
           "publish", "publish_forever", "published_rows", "run_report"]

log = logging.getLogger(__name__)

#: The ``lvs`` columns of Ganeti's ``lv`` collector, each with its name in the data.
LV_COLUMNS: Final = (
    ("uuid", "lv_uuid"), ("name", "lv_name"), ("attr", "lv_attr"), ("major", "lv_major"),
    ("minor", "lv_minor"), ("kernel_major", "lv_kernel_major"),
    ("kernel_minor", "lv_kernel_minor"), ("size", "lv_size"), ("seg_count", "seg_count"),
    ("tags", "lv_tags"), ("modules", "modules"), ("vg_uuid", "vg_uuid"),
    ("vg_name", "vg_name"), ("segtype", "segtype"), ("seg_start", "seg_start"),
    ("seg_start_pe", "seg_start_pe"), ("seg_size", "seg_size"), ("seg_tags", "seg_tags"),
    ("seg_pe_ranges", "seg_pe_ranges"), ("devices", "devices"),
)
#: The logical volumes, sizes in bytes.
LV_REPORT: Final = ("lvs", "--noheadings", "--units", "b", "--nosuffix", "--separator", "|",
                    "-o", ",".join(column for _name, column in LV_COLUMNS))
#: The volume groups: name, size and free space in MiB.
VG_REPORT: Final = ("vgs", "--noheadings", "--units", "m", "--nosuffix", "--separator", "|",
                    "-o", "vg_name,vg_size,vg_free")
#: How often the node daemon runs the reports, in seconds.
PUBLISH_SECONDS: Final = 15.0
#: Rows older than this (the node daemon stopped publishing) are not reported.
MAX_AGE_SECONDS: Final = 4 * PUBLISH_SECONDS
_REPORTS: Final = {"lvs": LV_REPORT, "vgs": VG_REPORT}


def _binary(name: str) -> str | None:
    return shutil.which(name) or next(
        (p for p in (f"/sbin/{name}", f"/usr/sbin/{name}") if os.path.exists(p)), None)


def run_report(paths: Paths, args: tuple[str, ...]) -> tuple[list[list[str]], str] | None:
    """The rows (``|``-separated fields) of an LVM report run with the node's LVM
    configuration and its error output; ``None`` when the node has no LVM or the
    command could not run at all."""
    binary = _binary(args[0])
    if binary is None:
        return None
    try:
        proc = subprocess.run([binary, *args[1:]], capture_output=True, text=True,
                              timeout=10, check=False, env=lvm_environment(paths))
    except (OSError, subprocess.TimeoutExpired):
        return None
    rows = [[field.strip() for field in line.strip().split("|")]
            for line in proc.stdout.splitlines() if line.strip()]
    return rows, proc.stderr if proc.returncode != 0 else ""


def publish(paths: Paths) -> bool:
    """Run both reports and keep their rows for the monitoring daemon; ``False``
    (nothing written) on a node without LVM."""
    report: dict[str, Any] = {"time": time.time()}
    for key, args in _REPORTS.items():
        result = run_report(paths, args)
        if result is None:
            return False
        report[key] = result[0]
    # the directory is set-group-id to the monitoring group with privilege separation
    paths.lvm_report.parent.mkdir(parents=True, exist_ok=True)
    write_public(paths.lvm_report, json.dumps(report), 0o640)
    return True


async def publish_forever(paths: Paths, interval: float = PUBLISH_SECONDS) -> None:
    """:func:`publish` every ``interval`` seconds (in a worker thread) until cancelled,
    while this node separates its daemons (a monitoring daemon run as root runs LVM
    itself; a node may join a separated cluster after its node daemon started);
    stops on a node without LVM."""
    while True:
        try:
            if paths.daemon_users.exists() and not await asyncio.to_thread(publish, paths):
                log.info("no LVM tools on this node: no LVM report for the monitoring "
                         "daemon")
                return
        except OSError as err:
            log.warning("cannot keep the LVM report for the monitoring daemon: %s", err)
        await asyncio.sleep(interval)


def published_rows(paths: Paths, key: str, now: float | None = None) -> list[list[str]] | None:
    """The rows of report ``key`` (``lvs`` or ``vgs``) the node daemon kept; ``None``
    when there are none or they are older than :data:`MAX_AGE_SECONDS`."""
    try:
        report = json.loads(paths.lvm_report.read_text())
        taken = float(report["time"])
        rows = report[key]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if (time.time() if now is None else now) - taken > MAX_AGE_SECONDS:
        return None
    if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
        return None
    return [[str(field) for field in row] for row in rows]
